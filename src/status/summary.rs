//! The status in words, read from `/status.json`: whether mcpgate is
//! healthy and why not, numbers in human units, and the summary that
//! `mcpgate status` prints in a terminal. The status page says the same.

use serde_json::Value;

/// Whether the status is healthy, and each problem in words: the downstream
/// or process balance broken, a session leaked, a server down, memory
/// charges refused, the state file failing, the last reload refused.
pub(crate) fn health(v: &Value) -> (bool, Vec<String>) {
    let mut problems = Vec::new();
    let n = |section: &str, key: &str| v[section][key].as_u64().unwrap_or(0);
    if v["downstream"]["balanced"] == false {
        problems.push(format!(
            "downstream sessions do not balance: opened {} != closed {} + live {}",
            n("downstream", "opened"),
            n("downstream", "closed"),
            n("downstream", "live")
        ));
    }
    if n("downstream", "leaked") > 0 {
        problems.push(format!("{} downstream session(s) leaked (a bug: please report it)", n("downstream", "leaked")));
    }
    if v["processes"]["balanced"] == false {
        problems.push(format!(
            "child processes do not balance: spawned {} != reaped {} + live {}",
            n("processes", "spawned"),
            n("processes", "reaped"),
            n("processes", "live")
        ));
    }
    for (name, s) in servers(v) {
        if s["up"] == 0 {
            problems
                .push(format!("server `{name}` is down: {}", s["last_error"].as_str().unwrap_or("no reason known")));
        }
    }
    // Unhealthy while refusals are recent: one slow client an hour ago is not a state.
    if n("processes", "refused") > 0 && n("processes", "secs_since_refused") < 60 {
        problems.push(format!(
            "a process limit refuses work: {} start(s) of a stdio server refused since start (max_processes), the \
             last {} s ago",
            n("processes", "refused"),
            n("processes", "secs_since_refused")
        ));
    }
    if n("sessions", "refused") > 0 && n("sessions", "secs_since_refused") < 60 {
        problems.push(format!(
            "new sessions are refused: {} initialize(s) refused since start (max_sessions, max_memory_mb, threads, \
             descriptors or the state file), the last {} s ago",
            n("sessions", "refused"),
            n("sessions", "secs_since_refused")
        ));
    }
    if n("memory", "refused") > 0 && n("memory", "secs_since_refused") < 60 {
        problems.push(format!(
            "{} memory charge(s) refused since start (max_memory_mb), the last {} s ago",
            n("memory", "refused"),
            n("memory", "secs_since_refused")
        ));
    }
    if let Some(e) = v["state"]["error"].as_str() {
        problems.push(format!("the state file cannot be written: {e}"));
    }
    if let Some(e) = v["reload"]["error"].as_str() {
        problems.push(format!("the last reload was refused (the previous configuration runs): {e}"));
    }
    (problems.is_empty(), problems)
}

/// The servers in configuration order.
pub(crate) fn servers(v: &Value) -> Vec<(&str, &Value)> {
    let mut list: Vec<(&str, &Value)> =
        v["servers"].as_object().map(|m| m.iter().map(|(k, s)| (k.as_str(), s)).collect()).unwrap_or_default();
    list.sort_by_key(|(name, s)| (s["rank"].as_u64().unwrap_or(u64::MAX), name.to_string()));
    list
}

/// The one line on top: healthy or not, and why.
pub(crate) fn headline(v: &Value) -> String {
    let (healthy, problems) = health(v);
    if healthy {
        let servers = servers(v);
        let mut states: Vec<(&str, usize)> = Vec::new();
        for (_, s) in &servers {
            match states.iter_mut().find(|(state, _)| *state == self::state(s)) {
                Some((_, n)) => *n += 1,
                None => states.push((self::state(s), 1)),
            }
        }
        let states: Vec<String> = states.iter().map(|(state, n)| format!("{n} {state}")).collect();
        format!(
            "healthy: {} server(s) ({}), {} session(s), every downstream session accounted for",
            servers.len(),
            states.join(", "),
            v["sessions"]["live"].as_u64().unwrap_or(0)
        )
    } else {
        format!("NOT HEALTHY: {}", problems.join("; "))
    }
}

/// A count of bytes in B, KiB, MiB or GiB.
pub(crate) fn bytes(n: u64) -> String {
    const KIB: f64 = 1024.0;
    let x = n as f64;
    if n < 1024 {
        format!("{n} B")
    } else if x < KIB * KIB {
        format!("{:.1} KiB", x / KIB)
    } else if x < KIB * KIB * KIB {
        format!("{:.1} MiB", x / (KIB * KIB))
    } else {
        format!("{:.1} GiB", x / (KIB * KIB * KIB))
    }
}

/// Seconds as `42 s`, `3 min 5 s`, `2 h 10 min` or `3 d 4 h`.
pub(crate) fn duration(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min {} s", secs / 60, secs % 60),
        3600..86400 => format!("{} h {} min", secs / 3600, secs % 3600 / 60),
        _ => format!("{} d {} h", secs / 86400, secs % 86400 / 3600),
    }
}

/// Seconds (a latency) as `850 µs`, `12.3 ms` or `2.50 s`.
pub(crate) fn latency(secs: f64) -> String {
    if secs < 0.001 {
        format!("{:.0} µs", secs * 1e6)
    } else if secs < 1.0 {
        format!("{:.1} ms", secs * 1e3)
    } else {
        format!("{secs:.2} s")
    }
}

/// How long ago a unix time in `v` was, by the status' own clock.
pub(crate) fn ago(v: &Value, at: &Value) -> Option<String> {
    let (now, at) = (v["now"].as_u64()?, at.as_u64()?);
    Some(format!("{} ago", duration(now.saturating_sub(at))))
}

/// A server's state in words: `down`, `starting` (a process that has not
/// answered `initialize` yet), `not tried` (no exchange yet), or `up`.
pub(crate) fn state(s: &Value) -> &'static str {
    if s["up"] == 0 {
        "down"
    } else if s["processes"]["starting"].as_u64().unwrap_or(0) > 0 {
        "starting"
    } else if s["last_ok_at"].is_null() && s["last_error_at"].is_null() {
        "not tried"
    } else {
        "up"
    }
}

/// The protocol era of a server when it is not the sessions' one: `2026-07-28`.
pub(crate) fn era(s: &Value) -> Option<&str> {
    s["era"].as_str().filter(|era| *era != "session")
}

/// A server's transport, with its era when it is not the sessions' one: `http 2026-07-28`.
pub(crate) fn transport(s: &Value) -> String {
    let transport = s["transport"].as_str().unwrap_or("");
    match era(s) {
        Some(era) => format!("{transport} {era}"),
        None => transport.to_string(),
    }
}

/// A server's errors: the total, and each kind that happened.
pub(crate) fn errors(s: &Value) -> (u64, String) {
    let Some(kinds) = s["errors"].as_object() else { return (0, String::new()) };
    let mut happened: Vec<(&str, u64)> =
        kinds.iter().filter_map(|(k, n)| n.as_u64().filter(|n| *n > 0).map(|n| (k.as_str(), n))).collect();
    happened.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let total = happened.iter().map(|(_, n)| n).sum();
    (total, happened.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", "))
}

/// A server's mean latency, when it answered anything.
pub(crate) fn mean_latency(s: &Value) -> Option<String> {
    let h = &s["request_duration_seconds"];
    let count = h["count"].as_u64().filter(|n| *n > 0)?;
    Some(latency(h["sum"].as_f64()? / count as f64))
}

/// A session's downstream sessions in a line: `alpha 1a2b3c4d, beta failed`.
pub(crate) fn downstreams(session: &Value) -> String {
    let Some(map) = session["downstream"].as_object() else { return String::new() };
    map.iter()
        .map(|(server, d)| match d["state"].as_str() {
            Some("open") => format!("{server} {}", d["session"].as_str().unwrap_or("open")),
            Some(other) => format!("{server} {other}"),
            None => server.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The thread budget by group: (group, roles, live threads of them, budget, set by).
pub(crate) fn threads(v: &Value) -> Vec<(String, String, u64, u64, String)> {
    let by_role = &v["process"]["threads_by_role"];
    let Some(groups) = v["threads"]["budget_by_group"].as_object() else { return Vec::new() };
    let mut rows: Vec<(String, String, u64, u64, String)> = Vec::new();
    let mut covered: Vec<String> = Vec::new();
    for (group, budget) in groups {
        let meta = &v["threads"]["budget_roles"][group];
        let roles: Vec<String> =
            meta["roles"].as_array().into_iter().flatten().filter_map(|r| r.as_str().map(str::to_string)).collect();
        let live = roles.iter().map(|r| by_role[r.as_str()].as_u64().unwrap_or(0)).sum();
        let by = meta["by"].as_str().unwrap_or("").to_string();
        rows.push((group.clone(), roles.join(", "), live, budget.as_u64().unwrap_or(0), by));
        covered.extend(roles);
    }
    // Threads of roles no group budgets (short-lived name lookups).
    for (role, n) in by_role.as_object().into_iter().flatten() {
        let n = n.as_u64().unwrap_or(0);
        if n > 0 && !covered.contains(role) {
            rows.push((role.clone(), role.clone(), n, 0, "not budgeted".into()));
        }
    }
    // In the budget's order; roles no group budgets last.
    let rank = |group: &str| v["threads"]["budget_roles"][group]["rank"].as_u64().unwrap_or(u64::MAX);
    rows.sort_by_key(|r| rank(&r.0));
    rows
}

/// Columns padded to their widest cell, two spaces apart.
fn columns(rows: &[Vec<String>]) -> String {
    let mut widths = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if widths.len() <= i {
                widths.push(0);
            }
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::from("  ");
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn cells(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// What `mcpgate status` prints: the page's summary, as plain text.
pub fn text(v: &Value) -> String {
    let n = |section: &str, key: &str| v[section][key].as_u64().unwrap_or(0);
    let mut out = format!(
        "mcpgate {}, up {}: {}\n",
        v["version"].as_str().unwrap_or("?"),
        duration(v["uptime_secs"].as_u64().unwrap_or(0)),
        headline(v)
    );
    out.push_str(&format!(
        "  downstream sessions: {} opened = {} closed + {} live; leaked {}\n",
        n("downstream", "opened"),
        n("downstream", "closed"),
        n("downstream", "live"),
        n("downstream", "leaked")
    ));
    if n("processes", "spawned") > 0 {
        out.push_str(&format!(
            "  child processes: {} spawned = {} reaped + {} live\n",
            n("processes", "spawned"),
            n("processes", "reaped"),
            n("processes", "live")
        ));
    }

    let servers = servers(v);
    out.push_str(&format!("\nservers ({})\n", servers.len()));
    let mut rows = vec![cells(&[
        "name",
        "transport",
        "state",
        "sessions",
        "requests",
        "errors",
        "in flight",
        "mean",
        "url or command",
    ])];
    let mut notes = Vec::new();
    for (name, s) in &servers {
        let (errors, kinds) = errors(s);
        rows.push(vec![
            name.to_string(),
            transport(s),
            state(s).into(),
            s["live_sessions"].as_u64().unwrap_or(0).to_string(),
            s["requests"].as_u64().unwrap_or(0).to_string(),
            if kinds.is_empty() { errors.to_string() } else { format!("{errors} ({kinds})") },
            s["calls_in_flight"].as_u64().unwrap_or(0).to_string(),
            mean_latency(s).unwrap_or_default(),
            s["url"].as_str().or(s["command"].as_str()).unwrap_or("").into(),
        ]);
        if let Some(error) = s["last_error"].as_str() {
            let when = ago(v, &s["last_error_at"]).unwrap_or_default();
            notes.push(format!("  {name}: last error {when}: {error}\n"));
        }
    }
    out.push_str(&columns(&rows));
    notes.iter().for_each(|note| out.push_str(note));

    let listed = v["sessions"]["list"].as_array().map_or(&[][..], Vec::as_slice);
    out.push_str(&format!(
        "\nsessions: {} live (created {}, closed idle {}, by the client {}, at shutdown {}; refused {})\n",
        n("sessions", "live"),
        n("sessions", "created"),
        n("sessions", "evicted_idle"),
        n("sessions", "deleted_by_client"),
        n("sessions", "closed_at_shutdown"),
        n("sessions", "refused")
    ));
    if !listed.is_empty() {
        let mut rows = vec![cells(&["id", "token", "client", "protocol", "age", "idle", "streams", "downstream"])];
        for s in listed {
            rows.push(vec![
                s["id"].as_str().unwrap_or("").into(),
                s["token"].as_str().unwrap_or("-").into(),
                s["client"].as_str().unwrap_or("").into(),
                s["protocol_version"].as_str().unwrap_or("").into(),
                duration(s["age_secs"].as_u64().unwrap_or(0)),
                s["idle_secs"].as_u64().map_or("in use".into(), duration),
                s["streams"].as_u64().unwrap_or(0).to_string(),
                downstreams(s),
            ]);
        }
        out.push_str(&columns(&rows));
        let unlisted = n("sessions", "unlisted");
        if unlisted > 0 {
            out.push_str(&format!("  and {unlisted} more, not listed\n"));
        }
    }

    out.push_str(&format!("\nthreads: {} of a budget of {}\n", n("process", "threads"), n("threads", "budget")));
    let mut rows = vec![cells(&["group", "live", "budget", "roles", "set by"])];
    for (group, roles, live, budget, by) in threads(v) {
        rows.push(vec![group, live.to_string(), budget.to_string(), roles, by]);
    }
    out.push_str(&columns(&rows));
    out.push_str(&format!(
        "\nmemory: {} held of {} (a session may hold {}), {} charge(s) refused; resident {}; {} open descriptors\n",
        bytes(n("memory", "buffered_bytes")),
        bytes(n("memory", "limit_bytes")),
        bytes(n("memory", "session_share_bytes")),
        n("memory", "refused"),
        bytes(n("process", "rss_bytes")),
        n("process", "open_fds")
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn human_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(128 << 20), "128.0 MiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(duration(59), "59 s");
        assert_eq!(duration(61), "1 min 1 s");
        assert_eq!(duration(7322), "2 h 2 min");
        assert_eq!(duration(90000), "1 d 1 h");
        assert_eq!(latency(0.0004), "400 µs");
        assert_eq!(latency(0.0123), "12.3 ms");
        assert_eq!(latency(2.5), "2.50 s");
    }

    fn healthy() -> Value {
        json!({
            "downstream": {"opened": 5, "closed": 3, "live": 2, "leaked": 0, "balanced": true},
            "processes": {"spawned": 0, "reaped": 0, "live": 0, "balanced": true},
            "memory": {"refused": 0},
            "state": {"error": null},
            "reload": {"error": null},
            "sessions": {"live": 2},
            "servers": {"b": {"rank": 0, "up": 1}, "a": {"rank": 1, "up": 1}},
        })
    }

    #[test]
    fn healthy_says_so_and_each_problem_is_named() {
        let v = healthy();
        assert_eq!(health(&v), (true, vec![]));
        assert!(headline(&v).starts_with("healthy: 2 server(s) (2 not tried), 2 session(s)"), "{}", headline(&v));
        let mut v = healthy();
        v["servers"]["a"]["last_ok_at"] = json!(1);
        v["servers"]["b"]["processes"] = json!({"starting": 1});
        assert!(headline(&v).starts_with("healthy: 2 server(s) (1 starting, 1 up)"), "{}", headline(&v));
        let v = healthy();
        assert_eq!(servers(&v).iter().map(|s| s.0).collect::<Vec<_>>(), ["b", "a"], "configuration order");

        let mut v = healthy();
        v["downstream"]["balanced"] = json!(false);
        v["downstream"]["leaked"] = json!(1);
        v["processes"]["balanced"] = json!(false);
        v["servers"]["a"]["up"] = json!(0);
        v["servers"]["a"]["last_error"] = json!("unreachable: connection refused");
        v["memory"]["refused"] = json!(3);
        v["memory"]["secs_since_refused"] = json!(5);
        v["processes"]["refused"] = json!(4);
        v["processes"]["secs_since_refused"] = json!(2);
        v["sessions"]["refused"] = json!(7);
        v["sessions"]["secs_since_refused"] = json!(1);
        v["state"]["error"] = json!("disk full");
        v["reload"]["error"] = json!("bad key");
        let (ok, problems) = health(&v);
        assert!(!ok);
        let said = problems.join("\n");
        for expected in [
            "downstream sessions do not balance: opened 5 != closed 3 + live 2",
            "1 downstream session(s) leaked",
            "child processes do not balance",
            "server `a` is down: unreachable: connection refused",
            "3 memory charge(s) refused",
            "a process limit refuses work: 4 start(s) of a stdio server refused",
            "new sessions are refused: 7 initialize(s) refused",
            "state file cannot be written: disk full",
            "last reload was refused",
        ] {
            assert!(said.contains(expected), "{expected:?} in {said}");
        }
        assert!(headline(&v).starts_with("NOT HEALTHY: downstream sessions do not balance"));

        // A refusal long past (a slow client, once) is history, not a state.
        let mut v = healthy();
        v["memory"]["refused"] = json!(3);
        v["memory"]["secs_since_refused"] = json!(61);
        assert_eq!(health(&v), (true, vec![]));
    }

    #[test]
    fn errors_list_the_kinds_that_happened_most_first() {
        let s = json!({"errors": {"connect": 2, "timeout": 5, "busy": 0}});
        assert_eq!(errors(&s), (7, "timeout 5, connect 2".to_string()));
        assert_eq!(errors(&json!({})), (0, String::new()));
    }

    #[test]
    fn a_server_of_the_2026_07_28_era_says_so_beside_its_transport() {
        assert_eq!(transport(&json!({"transport": "http", "era": "2026-07-28"})), "http 2026-07-28");
        assert_eq!(transport(&json!({"transport": "http", "era": "session"})), "http");
        assert_eq!(transport(&json!({"transport": "stdio", "era": null})), "stdio");
    }

    #[test]
    fn columns_line_up() {
        let rows = vec![cells(&["a", "bb", "c"]), cells(&["ccc", "d", ""])];
        assert_eq!(columns(&rows), "  a    bb  c\n  ccc  d\n");
    }
}
