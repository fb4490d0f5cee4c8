//! The status page (`/status`, HTML with no external assets) and its JSON
//! twin (`/status.json`), read from the counters, the servers and `/proc`.

use std::time::{SystemTime, UNIX_EPOCH};

pub mod stats;

use serde_json::{Map, Value, json};

use crate::gateway::Gateway;
use crate::runtime::threads;

/// What `/proc/self` says about the process.
pub struct Process {
    pub threads: u64,
    pub rss_bytes: u64,
    pub open_fds: u64,
}

pub fn process() -> Process {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let threads = std::fs::read_dir("/proc/self/task").map(|d| d.count() as u64).unwrap_or(0);
    let open_fds = crate::runtime::sys::open_fds().unwrap_or(0);
    Process { threads, rss_bytes: field("VmRSS:") * 1024, open_fds }
}

fn unix(t: Option<SystemTime>) -> Value {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(Value::Null, |d| Value::from(d.as_secs()))
}

/// The child processes of stdio servers, with their balance.
fn processes(children: &crate::downstream::stdio::Children) -> Value {
    let (spawned, reaped, live) = (children.spawned.get(), children.reaped.get(), children.live.get());
    json!({
        "spawned": spawned,
        "reaped": reaped,
        "live": live,
        "balanced": spawned == reaped + live,
    })
}

pub fn json(g: &Gateway) -> Value {
    let s = &g.stats;
    let p = process();
    let by_role: Map<String, Value> =
        threads::count_by_role().into_iter().map(|(role, n)| (role, Value::from(n))).collect();
    let current = g.current();
    let mut servers = Map::new();
    for server in &current.servers {
        let health = server.health();
        servers.insert(
            server.name().to_string(),
            json!({
                "transport": server.transport(),
                "era": server.era(),
                "url": server.config.url().map(|url| server.redact(url)),
                "command": server.config.url().is_none().then(|| server.redact(&server.config.target())),
                "processes": server.processes(),
                "prefix": server.config.prefix,
                "live_sessions": server.live_sessions.get(),
                "calls_in_flight": server.lanes.in_flight.get(),
                "last_error": health.last_error,
                "last_error_at": unix(health.last_error_at),
                "last_ok_at": unix(health.last_ok_at),
            }),
        );
    }
    let (opened, closed, live) = (s.downstream_opened.get(), s.downstream_closed.get(), s.downstream_live.get());
    let mut out = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_secs": g.started.elapsed().as_secs(),
        "process": {
            "threads": p.threads,
            "threads_by_role": by_role,
            "rss_bytes": p.rss_bytes,
            "open_fds": p.open_fds,
        },
        "threads": {
            "budget": current.config.thread_budget().iter().map(|b| b.threads).sum::<usize>(),
            "budget_by_group": current.config.thread_budget().into_iter().map(|b| (b.group.to_string(), Value::from(b.threads))).collect::<Map<String, Value>>(),
        },
        "memory": {
            "buffered_bytes": crate::runtime::memory::used(),
            "limit_bytes": crate::runtime::memory::limit(),
            "session_share_bytes": crate::runtime::memory::share(),
            "refused": crate::runtime::memory::refused(),
        },
        "state": {
            "file": g.journal.path().map(|p| p.display().to_string()),
            "error": g.journal.error(),
        },
        "calls": {
            "in_flight": current.servers.iter().map(|s| s.lanes.in_flight.get()).sum::<u64>(),
            "held_for_2026_clients": g.held_calls(),
        },
        "sessions": {
            "live": g.sessions.len(),
        },
        "downstream": {
            "balanced": opened == closed + live,
        },
        "processes": processes(&g.children),
        "limits": {
            "calls_per_server": current.config.calls_per_server,
            "max_connections": current.config.max_connections,
            "max_sessions": current.config.max_sessions,
            "session_idle_timeout_secs": current.config.session_idle_timeout.as_secs(),
        },
        "servers": servers,
        "collisions": *g.collisions.lock(),
        "renamed_tools": g.renamed.lock().iter().map(|r| json!({"name": r.name, "server": r.server, "original": r.original})).collect::<Vec<_>>(),
        "reload": reload(&g.last_reload.lock()),
    });
    // Every counter and gauge, in its section.
    for reading in s.readings() {
        out[reading.section][reading.key] = Value::from(reading.value);
    }
    out
}

fn reload(r: &crate::gateway::ReloadOutcome) -> Value {
    json!({
        "at": unix(r.at),
        "error": r.error,
        "changed_servers": r.changed,
        "restart_needed": r.restart_needed,
    })
}

/// The page a person reads: the same numbers, in tables.
pub fn html(g: &Gateway) -> String {
    let v = json(g);
    let mut out = String::from(concat!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"5\">",
        "<title>mcpgate status</title><style>body{font:14px sans-serif;margin:1em}table{border-collapse:collapse;margin:0 0 1em}",
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}th{background:#eee}.bad{color:#b00}</style></head><body>",
    ));
    out.push_str(&format!(
        "<h1>mcpgate {}</h1><p>up {} s; downstream.opened == downstream.closed + downstream.live: <b class=\"{}\">{}</b></p>",
        escape(v["version"].as_str().unwrap_or("")),
        v["uptime_secs"],
        if v["downstream"]["balanced"] == true { "" } else { "bad" },
        v["downstream"]["balanced"],
    ));
    if v["processes"]["spawned"] != 0 {
        out.push_str(&format!(
            "<p>processes.spawned == processes.reaped + processes.live: <b class=\"{}\">{}</b></p>",
            if v["processes"]["balanced"] == true { "" } else { "bad" },
            v["processes"]["balanced"],
        ));
    }
    for section in
        ["process", "threads", "sessions", "downstream", "processes", "connections", "requests", "limits", "reload"]
    {
        out.push_str(&format!("<h2>{section}</h2><table>"));
        if let Some(map) = v[section].as_object() {
            for (key, value) in map {
                out.push_str(&format!("<tr><th>{}</th><td>{}</td></tr>", escape(key), escape(&plain(value))));
            }
        }
        out.push_str("</table>");
    }
    out.push_str(concat!(
        "<h2>servers</h2><table><tr><th>name</th><th>url or command</th><th>prefix</th><th>live sessions</th>",
        "<th>processes</th><th>last error</th></tr>"
    ));
    if let Some(servers) = v["servers"].as_object() {
        for (name, s) in servers {
            let processes = if s["processes"].is_null() { String::new() } else { plain(&s["processes"]) };
            out.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"bad\">{}</td></tr>",
                escape(name),
                escape(s["url"].as_str().or(s["command"].as_str()).unwrap_or("")),
                escape(s["prefix"].as_str().unwrap_or("")),
                s["live_sessions"],
                escape(&processes),
                escape(s["last_error"].as_str().unwrap_or("")),
            ));
        }
    }
    out.push_str("</table>");
    if let Some(collisions) = v["collisions"].as_array().filter(|c| !c.is_empty()) {
        out.push_str("<h2>name collisions</h2><ul>");
        for line in collisions {
            out.push_str(&format!("<li>{}</li>", escape(line.as_str().unwrap_or(""))));
        }
        out.push_str("</ul>");
    }
    out.push_str("</body></html>\n");
    out
}

fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Object(map) => map.iter().map(|(k, v)| format!("{k}: {}", plain(v))).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_readings_are_plausible() {
        let p = process();
        assert!(p.threads >= 1);
        assert!(p.rss_bytes > 100 * 1024);
        assert!(p.open_fds >= 3);
    }

    #[test]
    fn html_escapes_what_servers_say() {
        assert_eq!(escape("<b>\"x\" & y</b>"), "&lt;b&gt;&quot;x&quot; &amp; y&lt;/b&gt;");
    }
}
