//! What mcpgate shows of itself, all drawn from one table of counters and
//! gauges ([`crate::stats`]): `/status.json`, the status page for people
//! (`/status`, [`page`]), Prometheus metrics (`/metrics`, [`prometheus`]),
//! and the summary `mcpgate status` prints ([`summary`]).
//!
//! [`readings`] reads the table; [`json`] lays the readings out by their
//! places and adds what is not a number (servers' errors, the sessions
//! list, the health verdict). The page and the summary read that JSON, so
//! a terminal far away says what the page says.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub(crate) mod page;
pub(crate) mod prometheus;
pub mod summary;

use serde_json::{Map, Value, json};

use crate::gateway::stateless::Stateless;
use crate::gateway::{Current, Gateway};
use crate::runtime::threads;
use crate::session::{SlotView, View};
use crate::stats::{Family, Info, Now, OAuthNow, Reading, Sample, ServerNow, StdioNow};

/// Sessions listed on the status page and in `/status.json`; the rest are counted.
pub(crate) const SESSIONS_LISTED: usize = 50;

/// Times the balances are read again before an imbalance is reported: see [`settled`].
const BALANCE_READS: usize = 5;

/// What `/proc/self` says about the process.
pub(crate) struct Process {
    pub(crate) threads: u64,
    pub(crate) rss_bytes: u64,
    pub(crate) open_fds: u64,
}

pub(crate) fn process() -> Process {
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

/// The table now: the gateway's readings, then each server's (labelled `server`).
pub(crate) fn readings(g: &Gateway, st: &Stateless) -> Vec<Reading> {
    let current = g.current();
    let mut out = Vec::with_capacity(256);
    let (stats, (spawned, reaped, live)) = settled(g);
    let p = process();
    let audit = g.govern.audit_counts();
    let traced = crate::runtime::trace::counts();
    let now = Now {
        build_info: Info::new(env!("CARGO_PKG_VERSION")),
        uptime: g.life.started().elapsed().as_secs().into(),
        threads: p.threads.into(),
        threads_by_role: Family::new(threads::count_by_role()),
        rss_bytes: p.rss_bytes.into(),
        open_fds: p.open_fds.into(),
        thread_budget: Family::new(
            current.config.thread_budget().iter().map(|b| (b.group.to_string(), b.threads as u64)).collect(),
        ),
        memory_buffered: (crate::runtime::memory::used() as u64).into(),
        memory_limit: (crate::runtime::memory::limit() as u64).into(),
        memory_share: (crate::runtime::memory::share() as u64).into(),
        memory_sessionless_calls: (st.call_bytes() as u64).into(),
        memory_list_cache: (g.offered.lists.cache_bytes(&g.current()) as u64).into(),
        memory_answer_buffers: (crate::runtime::recycle::kept().1 as u64).into(),
        memory_refused: crate::runtime::memory::refused().into(),
        memory_since_refused: crate::runtime::memory::secs_since_refused()
            .unwrap_or_else(|| g.life.started().elapsed().as_secs())
            .into(),
        tool_search_index_tools: (g.offered.search.seen.index_size().0 as u64).into(),
        tool_search_index_bytes: (g.offered.search.seen.index_size().1 as u64).into(),
        sessions_live: (g.sessions.len() as u64).into(),
        rate_buckets: (g.govern.rate_buckets() as u64).into(),
        audit_written: audit.0.into(),
        audit_dropped: audit.1.into(),
        audit_rotations: audit.2.into(),
        trace_exported: traced.0.into(),
        trace_dropped: traced.1.into(),
        trace_export_failures: traced.2.into(),
        sessions_since_refused: g
            .life
            .secs_since_session_refused()
            .unwrap_or_else(|| g.life.started().elapsed().as_secs())
            .into(),
        calls_held: (st.held_calls() as u64).into(),
        processes_spawned: spawned.into(),
        processes_reaped: reaped.into(),
        processes_live: live.into(),
        processes_refused: g.downstreams.children.refusals.get().into(),
        processes_since_refused: g
            .downstreams
            .children
            .secs_since_refused()
            .unwrap_or_else(|| g.life.started().elapsed().as_secs())
            .into(),
    };
    now.read(None, &mut out);
    out.extend(stats);
    for server in &current.servers {
        let scope = Some(server.name());
        let (tool_calls, tool_errors) = server.tools.read();
        ServerNow {
            up: u64::from(!server.health().down).into(),
            live_sessions: server.live_sessions.get().into(),
            calls_in_flight: server.lanes.in_flight.get().into(),
            tool_calls,
            tool_errors,
        }
        .read(scope, &mut out);
        server.metrics.read(scope, &mut out);
        if let Some(p) = server.processes() {
            StdioNow {
                starting: p.starting.into(),
                live: p.live.into(),
                spawned: p.spawned.into(),
                // Each is reaped as it stops being live.
                reaped: p.spawned.saturating_sub(p.live).into(),
                exited: p.exited.into(),
                killed: p.killed.into(),
                restarts: p.restarts.into(),
            }
            .read(scope, &mut out);
        }
        if server.config.uses_oauth() {
            let view = g.downstreams.oauth.view(server.name());
            OAuthNow {
                users: view.users.into(),
                signins: view.signins.into(),
                waiting: view.waiting.into(),
                refreshes: view.refreshes.into(),
                failures: view.failures.into(),
            }
            .read(scope, &mut out);
        }
    }
    out
}

/// The gateway's counters and the child processes' (spawned, reaped,
/// live). Each balance (`opened == closed + live`, `spawned == reaped +
/// live`) holds at every moment but the instant between two of its
/// additions: when a read falls there, it is read again, a millisecond
/// later, a few times, so that a transient is not reported as a leak.
fn settled(g: &Gateway) -> (Vec<Reading>, (u64, u64, u64)) {
    let c = &g.downstreams.children;
    let mut attempt = 1;
    loop {
        let mut stats = Vec::with_capacity(crate::stats::Stats::TABLE.len());
        g.stats.read(None, &mut stats);
        let children = (c.spawned.get(), c.reaped.get(), c.live.get());
        let at = |section: &str, key: &str| number(&stats, section, key);
        let downstream = at("downstream", "opened") == at("downstream", "closed") + at("downstream", "live");
        if (downstream && children.0 == children.1 + children.2) || attempt == BALANCE_READS {
            return (stats, children);
        }
        attempt += 1;
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The number at `section.key` among unlabelled readings (0 when absent).
fn number(readings: &[Reading], section: &str, key: &str) -> u64 {
    readings
        .iter()
        .find(|r| r.path.len() == 2 && r.path[0] == section && r.path[1] == key)
        .and_then(Reading::number)
        .unwrap_or(0)
}

/// `/status.json`.
pub(crate) fn json(g: &Gateway, st: &Stateless) -> Value {
    json_from(g, &readings(g, st))
}

/// `/status.json` from readings already taken.
pub(crate) fn json_from(g: &Gateway, readings: &[Reading]) -> Value {
    let current = g.current();
    let mut out = json!({
        "state": {
            "file": g.store.journal.path().map(|p| p.display().to_string()),
            "error": g.store.journal.error(),
        },
        "limits": {
            "calls_per_server": current.config.calls_per_server,
            "max_connections": current.config.max_connections,
            "max_sessions": current.config.max_sessions,
            "max_processes": current.config.max_processes,
            "session_idle_timeout_secs": current.config.session_idle_timeout.as_secs(),
        },
        "collisions": g.offered.lists.collisions(),
        "renamed_tools": g.offered.lists.renamed().iter().map(|r| json!({"name": r.name, "server": r.server, "original": r.original})).collect::<Vec<_>>(),
        "reload": reload(&g.life.last_reload()),
        "tool_search": {
            "enabled": current.config.tool_search.enabled,
            "pinned": current.config.tool_search.pinned,
            "max_results": current.config.tool_search.max_results,
            "top_queries": g.offered.search.seen.top().iter().map(|q| json!({"query": q.query, "asked": q.asked, "first_result_called": q.hits})).collect::<Vec<_>>(),
        },
    });
    // Every counter and gauge, in its place.
    for reading in readings {
        let value = match &reading.sample {
            Sample::Number(n) => Value::from(*n),
            Sample::Info(text) => Value::from(text.as_str()),
            Sample::Histogram { buckets, sum } => json!({
                "count": buckets.last().map_or(0, |b| b.1),
                "sum": sum,
                "buckets": buckets.iter().filter(|b| b.0.is_finite()).map(|(le, n)| json!([le, n])).collect::<Vec<_>>(),
            }),
        };
        place(&mut out, &reading.path, value);
    }
    // What follows from the readings.
    let d = &out["downstream"];
    let balanced = d["opened"].as_u64() == Some(d["closed"].as_u64().unwrap_or(0) + d["live"].as_u64().unwrap_or(0));
    out["downstream"]["balanced"] = Value::from(balanced);
    let p = &out["processes"];
    let balanced = p["spawned"].as_u64() == Some(p["reaped"].as_u64().unwrap_or(0) + p["live"].as_u64().unwrap_or(0));
    out["processes"]["balanced"] = Value::from(balanced);
    let budget: u64 =
        out["threads"]["budget_by_group"].as_object().map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
    out["threads"]["budget"] = Value::from(budget);
    out["threads"]["budget_roles"] = current
        .config
        .thread_budget()
        .iter()
        .enumerate()
        .map(|(rank, b)| (b.group.to_string(), json!({"roles": b.roles, "by": b.by, "rank": rank})))
        .collect::<Map<String, Value>>()
        .into();
    let in_flight: u64 = current.servers.iter().map(|s| s.lanes.in_flight.get()).sum();
    out["calls"]["in_flight"] = Value::from(in_flight);
    // The servers in words.
    for (rank, server) in current.servers.iter().enumerate() {
        let health = server.health();
        let entry = &mut out["servers"][server.name()];
        entry["rank"] = Value::from(rank);
        entry["transport"] = Value::from(server.transport());
        entry["era"] = server.era().into();
        entry["url"] = server.config.url().map(|url| server.redact(url)).into();
        entry["command"] = server.config.url().is_none().then(|| server.redact(&server.config.target())).into();
        entry["prefix"] = Value::from(server.config.prefix.as_str());
        entry["last_error"] = health.last_error.into();
        entry["last_error_at"] = unix(health.last_error_at);
        entry["last_ok_at"] = unix(health.last_ok_at);
        // Did not answer a session: new ones skip it until it answers a probe.
        entry["silent_since"] = unix(health.silent.map(|(since, _)| since));
        if entry.get("processes").is_none() {
            entry["processes"] = Value::Null;
        }
        entry["state"] = Value::from(summary::state(entry));
    }
    // Where the sessions are kept for the other instances, if anywhere (never a password).
    out["store"]["name"] = g.store.shared.as_ref().map(|store| store.name().to_string()).into();
    let (listed, unlisted) = sessions(g, &current);
    out["sessions"]["list"] = listed.into();
    out["sessions"]["unlisted"] = Value::from(unlisted);
    out["now"] = unix(Some(SystemTime::now()));
    let (healthy, problems) = summary::health(&out);
    out["health"] = json!({"healthy": healthy, "problems": problems});
    out
}

/// Sets `value` at `path` in `out`, making objects on the way.
fn place(out: &mut Value, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut at = out;
    for key in parents {
        if !at[key.as_str()].is_object() {
            at[key.as_str()] = Value::Object(Map::new());
        }
        at = &mut at[key.as_str()];
    }
    at[last.as_str()] = value;
}

fn reload(r: &crate::gateway::ReloadOutcome) -> Value {
    json!({
        "at": unix(r.at),
        "error": r.error,
        "changed_servers": r.changed,
        "restart_needed": r.restart_needed,
    })
}

/// The live sessions, oldest first, at most [`SESSIONS_LISTED`]; and how
/// many more there are. Each session's lock is held only to copy it.
fn sessions(g: &Gateway, current: &Current) -> (Vec<Value>, usize) {
    let now = Instant::now();
    let mut views: Vec<View> = g.sessions.snapshot().iter().map(|s| s.view(now)).collect();
    views.sort_by(|a, b| b.age.cmp(&a.age).then_with(|| a.id.cmp(&b.id)));
    let unlisted = views.len().saturating_sub(SESSIONS_LISTED);
    views.truncate(SESSIONS_LISTED);
    // Tokens are known by their digest; their names by their place in the configuration.
    let tokens: Vec<([u8; 32], String)> = current
        .config
        .tokens
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| {
            let name = t.name.clone().unwrap_or_else(|| format!("token #{}", i + 1));
            (crate::runtime::sha256::digest(t.token.as_bytes()), name)
        })
        .collect();
    let list = views
        .iter()
        .map(|v| {
            // Not a static token's digest: an OAuth subject's (or a token since removed).
            let other = if current.config.oauth.is_some() { "OAuth" } else { "a token no longer configured" };
            let token = v
                .principal_sha256
                .map(|digest| tokens.iter().find(|(d, _)| *d == digest).map_or(other, |(_, n)| n.as_str()));
            let downstream: Map<String, Value> = v
                .downstreams
                .iter()
                .map(|(server, slot)| {
                    let slot = match slot {
                        SlotView::Open(id) => {
                            json!({"state": "open", "session": id.as_deref().map(crate::session::short)})
                        }
                        SlotView::Opening => json!({"state": "opening"}),
                        SlotView::Failed(error) => json!({"state": "failed", "error": error}),
                    };
                    (server.clone(), slot)
                })
                .collect();
            json!({
                "id": crate::session::short(&v.id),
                "token": token,
                "client": v.client_name,
                "protocol_version": v.protocol_version,
                "age_secs": v.age.as_secs(),
                "idle_secs": v.idle.map(|d| d.as_secs()),
                "requests_in_flight": v.requests_in_flight,
                "streams": v.streams,
                "downstream": downstream,
            })
        })
        .collect();
    (list, unlisted)
}

/// The status page.
pub(crate) fn html(g: &Gateway, st: &Stateless) -> String {
    let readings = readings(g, st);
    page::render(&json_from(g, &readings), &readings)
}

/// `/metrics`, in Prometheus' text format.
pub(crate) fn metrics(g: &Gateway, st: &Stateless) -> String {
    prometheus::render(&readings(g, st))
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
    fn readings_are_placed_by_their_path() {
        let mut out = json!({"servers": {"a": {"url": "x"}}});
        place(&mut out, &["servers".into(), "a".into(), "errors".into(), "timeout".into()], json!(2));
        place(&mut out, &["version".into()], json!("1"));
        assert_eq!(out, json!({"servers": {"a": {"url": "x", "errors": {"timeout": 2}}}, "version": "1"}));
    }
}
