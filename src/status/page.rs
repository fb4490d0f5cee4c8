//! The status page for people: one self-contained HTML page (no scripts,
//! no external assets), readable on a phone, refreshing itself. On top, one
//! line says whether mcpgate is healthy and why not; then the servers, the
//! live client sessions, threads against their budget, memory and
//! descriptors in human units, and every counter of the table.

use std::fmt::Write;

use serde_json::Value;

use super::summary::{self, bytes, duration};
use crate::stats::{Reading, Sample};

/// Seconds between refreshes.
pub(crate) const REFRESH_SECS: u64 = 5;

const STYLE: &str = "\
body{font:15px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:80em;padding:.5em 1em;color:#202124}\
header{padding:.6em 1em;border-radius:6px;margin:.5em 0 1em}\
header.healthy{background:#e6f4ea;border-left:6px solid #1e8e3e}\
header.unhealthy{background:#fce8e6;border-left:6px solid #d93025}\
header.unhealthy .verdict{color:#b3261e}\
header p{margin:.3em 0}header ul{margin:.3em 0;padding-left:1.2em}\
h1{font-size:1.25em;margin:0}h2{font-size:1.1em;margin:1.4em 0 .4em}\
.verdict{font-weight:600;font-size:1.1em}\
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch}\
table{border-collapse:collapse;min-width:100%}table.pairs{min-width:0}\
th,td{padding:4px 8px;text-align:left;border-bottom:1px solid #e0e0e0;vertical-align:top;white-space:nowrap}\
td.wrap{white-space:normal;min-width:14em}td.wrap code{overflow-wrap:anywhere}\
th{background:#f1f3f4;white-space:nowrap;font-weight:600}\
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\
.ok{color:#1e8e3e}.bad{color:#d93025}.dim{color:#5f6368}\
.err{color:#d93025;font-size:.92em}.note{color:#5f6368;font-size:.92em}\
code{font-size:.92em}.ds{white-space:nowrap;margin-right:.5em}\
footer{margin:2em 0 1em;color:#5f6368;font-size:.9em}\
details summary{cursor:pointer;margin:1.4em 0 .4em;font-weight:600}\
@media (max-width:600px){body{font-size:14px;padding:.3em .5em}th,td{padding:3px 5px}header{padding:.5em .6em}\
td.wrap{min-width:11em}header,.err{overflow-wrap:anywhere}}";

/// The page, from `/status.json` and the readings it was drawn from.
pub(crate) fn render(v: &Value, readings: &[Reading]) -> String {
    let (healthy, problems) = summary::health(v);
    let mut out = String::with_capacity(32 * 1024);
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\"><link rel=\"icon\" href=\"data:,\">\
         <title>mcpgate: {}</title><style>{STYLE}</style></head><body>",
        if healthy { "healthy" } else { "NOT HEALTHY" }
    );
    header(&mut out, v, healthy, &problems);
    servers(&mut out, v);
    sessions(&mut out, v);
    threads(&mut out, v);
    memory(&mut out, v);
    names(&mut out, v);
    tool_search(&mut out, v);
    every_reading(&mut out, readings);
    let _ = writeln!(
        out,
        "<footer>Refreshes every {REFRESH_SECS} s. The same as JSON: <a href=\"/status.json\">/status.json</a>; \
         for Prometheus: <a href=\"/metrics\">/metrics</a>.</footer></body></html>"
    );
    out
}

fn header(out: &mut String, v: &Value, healthy: bool, problems: &[String]) {
    let n = |section: &str, key: &str| v[section][key].as_u64().unwrap_or(0);
    let _ = write!(
        out,
        "<header class=\"{}\"><h1>mcpgate {}</h1><p class=\"verdict\" id=\"health\">{}</p>",
        if healthy { "healthy" } else { "unhealthy" },
        escape(v["version"].as_str().unwrap_or("")),
        escape(&summary::headline(v)),
    );
    if problems.len() > 1 {
        out.push_str("<ul>");
        for problem in problems {
            let _ = write!(out, "<li>{}</li>", escape(problem));
        }
        out.push_str("</ul>");
    }
    let _ = write!(
        out,
        "<p>Up {}. Downstream sessions: {} opened = {} closed + {} live, {} leaked.",
        duration(v["uptime_secs"].as_u64().unwrap_or(0)),
        n("downstream", "opened"),
        n("downstream", "closed"),
        n("downstream", "live"),
        n("downstream", "leaked"),
    );
    if n("processes", "spawned") > 0 {
        let _ = write!(
            out,
            " Child processes: {} spawned = {} reaped + {} live.",
            n("processes", "spawned"),
            n("processes", "reaped"),
            n("processes", "live"),
        );
    }
    out.push_str("</p></header>");
}

fn servers(out: &mut String, v: &Value) {
    let servers = summary::servers(v);
    let down = servers.iter().filter(|(_, s)| s["up"] == 0).count();
    let _ = write!(
        out,
        "<h2>Servers: {}{}</h2>",
        servers.len(),
        if down > 0 { format!(", {down} down") } else { String::new() }
    );
    out.push_str(
        "<div class=\"scroll\"><table><tr><th>Server</th><th>Transport</th><th>URL or command</th><th>State</th>\
         <th>Sessions</th><th>Requests</th><th>Errors</th><th>In flight</th><th>Mean time</th></tr>",
    );
    for (name, s) in &servers {
        let state = summary::state(s);
        let class = if state == "down" {
            "bad"
        } else if state == "up" {
            "ok"
        } else {
            "dim"
        };
        let mut state_cell = format!("<b class=\"{class}\">{state}</b>");
        if let Some(error) = s["last_error"].as_str() {
            let when = summary::ago(v, &s["last_error_at"]).unwrap_or_default();
            let _ = write!(state_cell, "<div class=\"err\">last error {}: {}</div>", escape(&when), escape(error));
        }
        let (errors, kinds) = summary::errors(s);
        let errors = if kinds.is_empty() {
            errors.to_string()
        } else {
            format!("{errors} <span class=\"dim\">({})</span>", escape(&kinds))
        };
        let processes = match s["processes"].as_object() {
            Some(p) => format!(
                "<div class=\"note\">processes: {} live ({} starting), {} spawned, {} exited on their own</div>",
                p.get("live").and_then(Value::as_u64).unwrap_or(0),
                p.get("starting").and_then(Value::as_u64).unwrap_or(0),
                p.get("spawned").and_then(Value::as_u64).unwrap_or(0),
                p.get("exited").and_then(Value::as_u64).unwrap_or(0)
            ),
            None => String::new(),
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"wrap\"><code>{}</code>{processes}</td><td class=\"wrap\">{state_cell}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{errors}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            escape(name),
            match summary::era(s) {
                Some(era) => format!(
                    "{} <span class=\"dim\">{}</span>",
                    escape(s["transport"].as_str().unwrap_or("")),
                    escape(era)
                ),
                None => escape(s["transport"].as_str().unwrap_or("")),
            },
            escape(s["url"].as_str().or(s["command"].as_str()).unwrap_or("")),
            s["live_sessions"].as_u64().unwrap_or(0),
            s["requests"].as_u64().unwrap_or(0),
            s["calls_in_flight"].as_u64().unwrap_or(0),
            summary::mean_latency(s).unwrap_or_default(),
        );
    }
    out.push_str("</table></div>");
}

fn sessions(out: &mut String, v: &Value) {
    let live = v["sessions"]["live"].as_u64().unwrap_or(0);
    let listed = v["sessions"]["list"].as_array().map_or(&[][..], Vec::as_slice);
    let _ = write!(out, "<h2>Sessions: {live} live</h2>");
    if let Some(store) = v["store"]["name"].as_str() {
        let n = |section: &str, key: &str| v[section][key].as_u64().unwrap_or(0);
        let _ = write!(
            out,
            "<p>Kept in the session store {}: {} continued here from an instance that died, {} let go to another \
             after a pause, {} requests passed to the instance holding their session, {} claims lost, \
             {} store errors.</p>",
            escape(store),
            n("sessions", "continued"),
            n("sessions", "handed_over"),
            n("sessions", "forwarded"),
            n("sessions", "claims_lost"),
            n("store", "errors"),
        );
    }
    if listed.is_empty() {
        out.push_str("<p class=\"dim\">No client session is open.</p>");
        return;
    }
    out.push_str(
        "<div class=\"scroll\"><table><tr><th>Session</th><th>Token</th><th>Client</th><th>Protocol</th><th>Age</th>\
         <th>Idle</th><th>Streams</th><th>Requests</th><th>Downstream sessions</th></tr>",
    );
    for s in listed {
        let downstream = s["downstream"].as_object().map_or(String::new(), |map| {
            map.iter()
                .map(|(server, d)| {
                    let state = d["state"].as_str().unwrap_or("");
                    let what = match (state, d["session"].as_str(), d["error"].as_str()) {
                        ("open", Some(id), _) => format!("<code>{}</code>", escape(id)),
                        ("failed", _, Some(error)) => {
                            format!("<span class=\"bad\" title=\"{}\">failed</span>", escape(error))
                        }
                        _ => format!("<span class=\"dim\">{}</span>", escape(state)),
                    };
                    format!("<span class=\"ds\">{} {what}</span>", escape(server))
                })
                .collect::<Vec<_>>()
                .join(" ")
        });
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"wrap\">{downstream}</td></tr>",
            escape(s["id"].as_str().unwrap_or("")),
            s["token"].as_str().map_or("<span class=\"dim\">none</span>".to_string(), escape),
            escape(s["client"].as_str().unwrap_or("")),
            escape(s["protocol_version"].as_str().unwrap_or("")),
            duration(s["age_secs"].as_u64().unwrap_or(0)),
            s["idle_secs"].as_u64().map_or("in use".to_string(), duration),
            s["streams"].as_u64().unwrap_or(0),
            s["requests_in_flight"].as_u64().unwrap_or(0),
        );
    }
    out.push_str("</table></div>");
    let unlisted = v["sessions"]["unlisted"].as_u64().unwrap_or(0);
    if unlisted > 0 {
        let _ = write!(out, "<p>And {unlisted} more, not listed (the oldest are listed first).</p>");
    }
}

fn threads(out: &mut String, v: &Value) {
    let _ = write!(
        out,
        "<h2>Threads: {} of a budget of {}</h2><div class=\"scroll\"><table><tr><th>Group</th><th>Live</th>\
         <th>Budget</th><th>Roles</th><th>Set by</th></tr>",
        v["process"]["threads"].as_u64().unwrap_or(0),
        v["threads"]["budget"].as_u64().unwrap_or(0),
    );
    for (group, roles, live, budget, by) in summary::threads(v) {
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=\"n\">{live}</td><td class=\"n\">{budget}</td><td class=\"wrap\">{}</td><td class=\"wrap\">{}</td></tr>",
            escape(&group),
            escape(&roles),
            escape(&by),
        );
    }
    out.push_str("</table></div>");
}

fn memory(out: &mut String, v: &Value) {
    let n = |section: &str, key: &str| v[section][key].as_u64().unwrap_or(0);
    let refused = n("memory", "refused");
    let _ = write!(
        out,
        "<h2>Memory and descriptors</h2><div class=\"scroll\"><table class=\"pairs\">\
         <tr><th>Resident memory</th><td class=\"n\">{}</td></tr>\
         <tr><th>Message bytes held</th><td class=\"n\">{} of {} (max_memory_mb)</td></tr>\
         <tr><th>One session may hold</th><td class=\"n\">{}</td></tr>\
         <tr><th>Charges refused</th><td class=\"n{}\">{refused}</td></tr>\
         <tr><th>Open file descriptors</th><td class=\"n\">{}</td></tr></table></div>",
        bytes(n("process", "rss_bytes")),
        bytes(n("memory", "buffered_bytes")),
        bytes(n("memory", "limit_bytes")),
        bytes(n("memory", "session_share_bytes")),
        if refused > 0 { " bad" } else { "" },
        n("process", "open_fds"),
    );
}

/// Name collisions and renamed tools, when there are any.
fn names(out: &mut String, v: &Value) {
    if let Some(collisions) = v["collisions"].as_array().filter(|c| !c.is_empty()) {
        out.push_str("<h2>Name collisions</h2><ul>");
        for line in collisions {
            let _ = write!(out, "<li>{}</li>", escape(line.as_str().unwrap_or("")));
        }
        out.push_str("</ul>");
    }
    if let Some(renamed) = v["renamed_tools"].as_array().filter(|r| !r.is_empty()) {
        let _ = write!(
            out,
            "<details><summary>Renamed tools and prompts ({})</summary><div class=\"scroll\"><table>\
             <tr><th>Shown as</th><th>Server</th><th>Its name</th></tr>",
            renamed.len()
        );
        for r in renamed {
            let _ = write!(
                out,
                "<tr><td><code>{}</code></td><td>{}</td><td><code>{}</code></td></tr>",
                escape(r["name"].as_str().unwrap_or("")),
                escape(r["server"].as_str().unwrap_or("")),
                escape(r["original"].as_str().unwrap_or("")),
            );
        }
        out.push_str("</table></div></details>");
    }
}

/// The `tool_search` mode, when it is on: its index and its most asked
/// queries, with how often their first result was called next.
fn tool_search(out: &mut String, v: &Value) {
    let s = &v["tool_search"];
    if s["enabled"] != true {
        return;
    }
    let n = |key: &str| s[key].as_u64().unwrap_or(0);
    let _ = write!(
        out,
        "<h2>Tool search</h2><p>On: <code>tools/list</code> shows <code>find_tools</code>, <code>call_tool</code>          and {} pinned pattern(s). Index: {} tools, {}. {} searches, {} calls through <code>call_tool</code>,          first result called next {} times.</p>",
        s["pinned"].as_array().map_or(0, Vec::len),
        n("index_tools"),
        bytes(n("index_bytes")),
        n("queries"),
        n("calls"),
        n("first_result_called"),
    );
    let queries = s["top_queries"].as_array().map_or(&[][..], Vec::as_slice);
    if queries.is_empty() {
        return;
    }
    out.push_str(
        "<div class=\"scroll\"><table><tr><th>Most asked queries</th><th>Asked</th><th>First result called</th></tr>",
    );
    for q in queries.iter().take(QUERIES_SHOWN) {
        let (asked, hits) = (q["asked"].as_u64().unwrap_or(0), q["first_result_called"].as_u64().unwrap_or(0));
        let _ = write!(
            out,
            "<tr><td class=\"wrap\">{}</td><td class=\"n\">{asked}</td><td class=\"n\">{hits} ({}%)</td></tr>",
            escape(q["query"].as_str().unwrap_or("")),
            hits * 100 / asked.max(1),
        );
    }
    out.push_str("</table></div>");
}

/// Queries the page's table shows, of those kept.
const QUERIES_SHOWN: usize = 10;

/// Every reading of the table, with its Prometheus name, its place in the
/// JSON and its meaning.
fn every_reading(out: &mut String, readings: &[Reading]) {
    let _ = write!(
        out,
        "<details><summary>Every counter and gauge ({})</summary><div class=\"scroll\"><table>\
         <tr><th>Metric</th><th>In /status.json</th><th>Value</th><th>Meaning</th></tr>",
        readings.len()
    );
    for r in readings {
        let labels: Vec<String> = r.labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        let metric = if labels.is_empty() {
            r.entry.name.to_string()
        } else {
            format!("{}{{{}}}", r.entry.name, labels.join(","))
        };
        let value = match &r.sample {
            Sample::Number(n) => n.to_string(),
            Sample::Info(text) => text.clone(),
            Sample::Histogram { buckets, sum } => {
                let count = buckets.last().map_or(0, |b| b.1);
                if count == 0 { "0".into() } else { format!("{count}, mean {}", summary::latency(sum / count as f64)) }
            }
        };
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td><code>{}</code></td><td class=\"n\">{}</td><td class=\"wrap\">{}</td></tr>",
            escape(&metric),
            escape(&r.path.join(".")),
            escape(&value),
            escape(r.entry.help()),
        );
    }
    out.push_str("</table></div></details>");
}

/// Text made safe for HTML, in an element or an attribute.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn html_escapes_what_servers_say() {
        assert_eq!(escape("<b>\"x\" & 'y'</b>"), "&lt;b&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/b&gt;");
    }

    fn status() -> Value {
        json!({
            "version": "0.1.0", "uptime_secs": 125, "now": 1000,
            "downstream": {"opened": 3, "closed": 1, "live": 2, "leaked": 0, "balanced": true},
            "processes": {"spawned": 0, "reaped": 0, "live": 0, "balanced": true},
            "memory": {"refused": 0, "buffered_bytes": 2048, "limit_bytes": 134217728, "session_share_bytes": 1048576},
            "process": {"threads": 12, "rss_bytes": 5242880, "open_fds": 20, "threads_by_role": {"conn": 3, "other": 1}},
            "threads": {"budget": 618, "budget_by_group": {"close": 40, "connections": 512, "fixed": 6, "hold": 60},
                        "budget_roles": {"close": {"roles": ["close"], "by": "closing", "rank": 3},
                                         "connections": {"roles": ["conn"], "by": "max_connections", "rank": 1},
                                         "fixed": {"roles": ["other"], "by": "main", "rank": 0},
                                         "hold": {"roles": ["hold"], "by": "max_held_calls", "rank": 2}}},
            "state": {"error": null}, "reload": {"error": null},
            "sessions": {"live": 1, "unlisted": 0, "list": [{
                "id": "1a2b3c4d", "token": "<laptop>", "client": "claude-code", "protocol_version": "2025-11-25",
                "age_secs": 61, "idle_secs": null, "streams": 1, "requests_in_flight": 0,
                "downstream": {"alpha": {"state": "open", "session": "abcdef01"}, "down": {"state": "failed", "error": "unreachable: <refused>"}}
            }]},
            "servers": {
                "alpha": {"rank": 0, "up": 1, "transport": "http", "era": "2026-07-28", "url": "http://127.0.0.1:9/mcp", "live_sessions": 2,
                          "requests": 7, "errors": {"timeout": 1}, "calls_in_flight": 0, "last_ok_at": 990,
                          "request_duration_seconds": {"count": 2, "sum": 0.05}},
                "down": {"rank": 1, "up": 0, "transport": "http", "url": "http://127.0.0.1:1/mcp", "live_sessions": 0,
                         "last_error": "unreachable: <refused>", "last_error_at": 988, "errors": {"connect": 2}},
            },
        })
    }

    #[test]
    fn the_page_puts_the_verdict_first_then_servers_sessions_threads_and_memory() {
        let page = render(&status(), &[]);
        assert!(page.starts_with("<!doctype html>"));
        assert!(page.contains("<meta name=\"viewport\""));
        assert!(page.contains("<meta http-equiv=\"refresh\" content=\"5\">"));
        assert!(
            !page.contains("<script") && !page.contains("src=") && !page.contains("http-equiv=\"refresh\" content=\"0")
        );
        let order: Vec<usize> = [
            "id=\"health\"",
            "<h2>Servers: 2, 1 down",
            "<h2>Sessions: 1 live",
            "<h2>Threads: 12 of a budget of 618",
            "<h2>Memory",
        ]
        .iter()
        .map(|s| page.find(s).unwrap_or_else(|| panic!("{s} in {page}")))
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        assert!(page.contains("NOT HEALTHY: server `down` is down: unreachable: &lt;refused&gt;"), "{page}");
        assert!(page.contains("<td>alpha</td>") && page.contains("<td>down</td>"));
        assert!(page.contains("last error 12 s ago"), "{page}");
        assert!(page.contains("25.0 ms"), "mean time: {page}");
        assert!(page.contains("&lt;laptop&gt;") && !page.contains("<laptop>"), "escaped token name");
        assert!(page.contains("<span class=\"ds\">alpha <code>abcdef01</code></span>"), "{page}");
        assert!(page.contains("5.0 MiB") && page.contains("128.0 MiB") && page.contains("2.0 KiB"), "human units");
        assert!(page.contains("<td>connections</td><td class=\"n\">3</td><td class=\"n\">512</td>"), "{page}");
        let groups: Vec<usize> = ["<td>fixed</td>", "<td>connections</td>", "<td>hold</td>", "<td>close</td>"]
            .iter()
            .map(|g| page.find(g).unwrap_or_else(|| panic!("{g}")))
            .collect();
        assert!(groups.windows(2).all(|w| w[0] < w[1]), "the budget's groups in its order: {groups:?}");
        assert!(page.contains("<td>alpha</td><td>http <span class=\"dim\">2026-07-28</span></td><td class=\"wrap\"><code>http://127.0.0.1:9/mcp</code>"), "{page}");
        assert!(page.contains("<td>down</td><td>http</td>"), "no era known, none shown");
        assert!(page.contains("Up 2 min 5 s."));
    }
}
