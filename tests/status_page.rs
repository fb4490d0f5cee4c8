//! `/status`, `/status.json` and `/healthz` are answered on the connection
//! thread, never behind calls to servers: they stay fast while hundreds of
//! client `GET` streams are open and every lane waits on a slow server, and the
//! JSON carries every field the metrics table of docs/CONFIGURATION.md
//! names, with values that match what is running.
//!
//! `/status.json`, the page and `/metrics` are drawn from one table: every
//! entry appears in all three. `/metrics` counts requests, errors by kind,
//! latency and how sessions ended as they happen; the sessions list names
//! tokens and stops at 50; `mcpgate status` prints the page's summary.

mod support;

use std::net::{SocketAddr, TcpListener};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::{Value, json};
use support::{Client, Fixture, Gate, RawReply, Stream, config, raw_request, stdio_server, wait_until};

const STREAMS: u64 = 200;
const LANES: u64 = 4;

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Times one `GET` on a fresh connection, from connect to the last byte.
fn timed_get(addr: SocketAddr, path: &str) -> (Duration, RawReply) {
    let started = Instant::now();
    let reply = raw_request(addr, "GET", path, &[], b"");
    (started.elapsed(), reply)
}

/// Opens `n` sessions, each with its GET stream, from 4 threads.
fn open_streams(url: &str, n: u64) -> Vec<Stream> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                s.spawn(move || {
                    (t..n)
                        .step_by(4)
                        .map(|_| {
                            let mut client = Client::new(url);
                            client.initialize();
                            client.open_stream()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("opening streams")).collect()
    })
}

#[track_caller]
fn number(status: &Value, section: &str, field: &str) -> u64 {
    status[section][field]
        .as_u64()
        .unwrap_or_else(|| panic!("`{section}.{field}` is not a number: {}", status[section]))
}

#[test]
fn status_pages_answer_fast_with_200_streams_open_and_every_lane_busy() {
    let fixture = Fixture::start("alpha", &[]);
    let offline = format!("http://127.0.0.1:{}/mcp", closed_port());
    let mut c = config(&[("alpha", fixture.url()), ("offline", offline)]);
    c["calls_per_server"] = json!(LANES);
    c["max_connections"] = json!(1024);
    // Keep-alive comments on every stream each second: load while measuring,
    // and how a stream learns that its client left.
    c["keepalive_secs"] = json!(1);
    let gate = Gate::start(&c);
    let addr = gate.addr;

    let opening = Instant::now();
    let streams = open_streams(&gate.url(), STREAMS);
    assert!(
        wait_until(Duration::from_secs(10), || gate.status()["threads"]["streams"] == STREAMS),
        "streams open: {}",
        gate.status()["threads"]
    );
    println!("{STREAMS} sessions with open streams in {:?}", opening.elapsed());

    // Every lane waits on a slow tool call (the tool list is fetched first,
    // so each call is exactly one request at the fixture).
    let slow_clients: Vec<Client> = (0..LANES)
        .map(|_| {
            let mut client = gate.client();
            client.initialize();
            assert!(client.tool_names().contains(&"alpha__slow".to_string()));
            client
        })
        .collect();
    let before = fixture.count("requests");
    let calls: Vec<JoinHandle<String>> = slow_clients
        .into_iter()
        .map(|mut client| std::thread::spawn(move || client.tool_text("alpha__slow", json!({"ms": 5000}))))
        .collect();
    assert!(
        wait_until(Duration::from_secs(4), || fixture.count("requests") == before + LANES),
        "the slow calls reached the server: {}",
        fixture.stats()
    );

    let mut last = Vec::new();
    for path in ["/status", "/status.json", "/healthz"] {
        let mut times = Vec::new();
        let mut reply = None;
        for i in 0..10 {
            let (took, r) = timed_get(addr, path);
            assert_eq!(r.status, 200, "{path} #{i}: {r:?}");
            times.push(took);
            reply = Some(r);
        }
        times.sort();
        let (median, max) = ((times[4] + times[5]) / 2, times[9]);
        println!("{path}: median {median:?}, max {max:?} ({STREAMS} streams open, {LANES} of {LANES} lanes busy)");
        assert!(median < Duration::from_millis(100), "{path}: median {median:?}; all: {times:?}");
        assert!(max < Duration::from_secs(1), "{path}: max {max:?}; all: {times:?}");
        last.push(reply.unwrap());
    }
    let status = gate.status();
    let os_threads = gate.threads() as u64;
    assert!(
        calls.iter().all(|call| !call.is_finished()),
        "the slow calls must still be in flight after the measurements"
    );

    // The JSON: every field of the metrics table, with values that match.
    let process = &status["process"];
    let threads = number(&status, "process", "threads");
    assert!(threads.abs_diff(os_threads) <= 20, "process.threads {threads}, /proc says {os_threads}");
    assert!(threads >= 2 * STREAMS + LANES + 2, "streams, readers, slow calls, accept, reaper: {process}");
    let by_role = &process["threads_by_role"];
    assert_eq!(by_role["reader"], STREAMS + LANES, "{by_role}");
    assert!(by_role["conn"].as_u64().unwrap() >= STREAMS + LANES, "{by_role}");
    let rss = number(&status, "process", "rss_bytes");
    assert!((1 << 20..1 << 30).contains(&rss), "process.rss_bytes {rss}");
    let fds = number(&status, "process", "open_fds");
    assert!((2 * STREAMS..5000).contains(&fds), "process.open_fds {fds}: a socket per stream and per reader");

    let t = &status["threads"];
    assert_eq!(status["calls"]["in_flight"], LANES, "every lane holds a call: {}", status["calls"]);
    assert_eq!(status["servers"]["alpha"]["calls_in_flight"], LANES, "{}", status["servers"]);
    assert_eq!(t["readers"], STREAMS + LANES, "one reader per downstream session: {t}");
    assert_eq!(t["streams"], STREAMS, "{t}");
    assert_eq!(t["reaper"], 1, "{t}");
    assert!(number(&status, "threads", "connections") >= STREAMS + LANES, "{t}");

    let s = &status["sessions"];
    assert_eq!(s["live"], STREAMS + LANES, "{s}");
    assert_eq!(s["created"], STREAMS + LANES, "{s}");
    assert_eq!(s["evicted_idle"], 0, "{s}");
    assert_eq!(s["deleted_by_client"], 0, "{s}");

    let d = &status["downstream"];
    assert_eq!(d["opened"], STREAMS + LANES, "only alpha opens: {d}");
    assert_eq!(d["closed"], 0, "{d}");
    assert_eq!(d["live"], STREAMS + LANES, "{d}");
    assert_eq!(d["balanced"], true, "{d}");
    assert_eq!(d["delete_failures"], 0, "{d}");
    assert_eq!(d["leaked"], 0, "{d}");

    let alpha = &status["servers"]["alpha"];
    assert_eq!(alpha["live_sessions"], STREAMS + LANES, "{alpha}");
    assert_eq!(alpha["last_error"], Value::Null, "{alpha}");
    let down = &status["servers"]["offline"];
    assert_eq!(down["live_sessions"], 0, "{down}");
    assert!(down["last_error"].as_str().is_some_and(|e| !e.is_empty()), "the failing server says why: {down}");

    // The HTML page names the servers; /healthz says ok.
    let html = &last[0];
    assert!(html.header("content-type").is_some_and(|t| t.starts_with("text/html")), "{:?}", html.headers);
    assert!(html.body.starts_with("<!doctype html>"), "{}", &html.body[..80.min(html.body.len())]);
    for name in ["alpha", "offline"] {
        assert!(html.body.contains(&format!("<td>{name}</td>")), "/status names `{name}`");
    }
    assert_eq!(last[1].json()["threads"]["streams"], STREAMS);
    assert_eq!(last[2].body, "ok\n");

    for call in calls {
        assert_eq!(call.join().expect("slow call"), "done");
    }
    for stream in streams {
        stream.close();
    }
    assert!(
        wait_until(Duration::from_secs(10), || gate.status()["threads"]["streams"] == 0),
        "streams end when their clients go: {}",
        gate.status()["threads"]
    );
}

/// The samples of a Prometheus text page: `name{labels}` to value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {l}"));
            (series.to_string(), value.parse().unwrap_or_else(|_| panic!("not a number: {l}")))
        })
        .collect()
}

#[track_caller]
fn sample(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    *samples.get(series).unwrap_or_else(|| panic!("no `{series}` in /metrics"))
}

fn get(gate: &Gate, path: &str) -> RawReply {
    let reply = raw_request(gate.addr, "GET", path, &[], b"");
    assert_eq!(reply.status, 200, "{path}: {reply:?}");
    reply
}

#[test]
fn metrics_count_requests_errors_by_kind_latency_and_how_sessions_ended() {
    let fixture = Fixture::start("alpha", &[]);
    let offline = format!("http://127.0.0.1:{}/mcp", closed_port());
    let mut c = config(&[("alpha", fixture.url()), ("offline", offline)]);
    c["request_timeout_secs"] = json!(1);
    let gate = Gate::start_checked(&c);

    let mut client = gate.open_session();
    for text in ["one", "two", "three"] {
        assert_eq!(client.tool_text("alpha__echo", json!({ "text": text })), text);
    }
    // Silent past request_timeout_secs: a timeout, timed above a second.
    let slow = client.call_tool("alpha__slow", json!({"ms": 3000}));
    assert!(slow.body.get("error").is_some() || slow.body["result"]["isError"] == true, "{:?}", slow.body);
    assert_eq!(client.delete(), 200);

    let reply = get(&gate, "/metrics");
    assert_eq!(reply.header("content-type"), Some("text/plain; version=0.0.4; charset=utf-8"));
    let m = samples(&reply.body);
    let alpha = |series: &str| sample(&m, &series.replace("SERVER", "server=\"alpha\""));
    assert_eq!(alpha("mcpgate_server_errors_total{SERVER,kind=\"timeout\"}"), 1.0);
    assert_eq!(alpha("mcpgate_server_errors_total{SERVER,kind=\"connect\"}"), 0.0);
    // Every request but `initialize` took a lane and was timed.
    let requests = alpha("mcpgate_server_requests_total{SERVER}");
    let timed = alpha("mcpgate_server_request_duration_seconds_count{SERVER}");
    assert_eq!(timed, requests - 1.0, "{}", reply.body);
    assert!(timed >= 4.0, "three echoes and the slow call: {timed}");
    assert_eq!(alpha("mcpgate_server_request_duration_seconds_bucket{SERVER,le=\"+Inf\"}"), timed);
    let within_half_a_second = alpha("mcpgate_server_request_duration_seconds_bucket{SERVER,le=\"0.5\"}");
    assert_eq!(within_half_a_second, timed - 1.0, "all but the slow call within 0.5 s");
    assert!(alpha("mcpgate_server_request_duration_seconds_sum{SERVER}") >= 1.0);
    assert_eq!(alpha("mcpgate_server_up{SERVER}"), 1.0);

    assert_eq!(sample(&m, "mcpgate_server_up{server=\"offline\"}"), 0.0);
    assert!(sample(&m, "mcpgate_server_errors_total{server=\"offline\",kind=\"connect\"}") >= 1.0);
    assert_eq!(sample(&m, "mcpgate_sessions_created_total"), 1.0);
    assert_eq!(sample(&m, "mcpgate_sessions_closed_total{reason=\"client_delete\"}"), 1.0);
    assert_eq!(sample(&m, "mcpgate_sessions_closed_total{reason=\"idle\"}"), 0.0);
    assert_eq!(sample(&m, "mcpgate_sessions_live"), 0.0);
    assert_eq!(sample(&m, "mcpgate_downstream_leaked_total"), 0.0);
    assert_eq!(sample(&m, &format!("mcpgate_build_info{{version=\"{}\"}}", env!("CARGO_PKG_VERSION"))), 1.0);
    assert!(sample(&m, "mcpgate_process_threads") >= 3.0);
    assert!(sample(&m, "mcpgate_process_resident_memory_bytes") > 1e6);
    assert!(sample(&m, "mcpgate_process_open_fds") >= 3.0);

    // The page and the JSON say the same of the server.
    let status = gate.status();
    assert_eq!(status["servers"]["alpha"]["errors"]["timeout"], 1);
    assert_eq!(status["servers"]["alpha"]["requests"], requests as u64);
    assert_eq!(status["health"]["healthy"], false, "{}", status["health"]);
    let problems = status["health"]["problems"].to_string();
    assert!(problems.contains("server `offline` is down: unreachable"), "{problems}");
    let page = get(&gate, "/status").body;
    assert!(page.contains("NOT HEALTHY: server `offline` is down: unreachable"), "{page}");
    assert!(page.contains("timeout 1"), "errors by kind on the page");
}

/// The places of the page's table of every reading: (metric, place in the JSON).
fn page_rows(page: &str) -> Vec<(String, String)> {
    page.split("<tr><td><code>")
        .skip(1)
        .filter_map(|row| {
            let (metric, rest) = row.split_once("</code></td><td><code>")?;
            let (place, _) = rest.split_once("</code>")?;
            Some((metric.replace("&quot;", "\""), place.to_string()))
        })
        .collect()
}

#[test]
fn every_entry_of_the_table_is_in_the_json_the_page_and_the_metrics() {
    let fixture = Fixture::start("alpha", &[]);
    let mut c = config(&[("alpha", fixture.url())]);
    c["mcpServers"]["local"] = stdio_server("local", &[]);
    // A server users sign in to: its sign-ins' counts are read for it.
    c["mcpServers"]["signin"] = json!({ "url": "http://127.0.0.1:9/mcp", "oauth": {} });
    let gate = Gate::start_checked(&c);
    let mut client = gate.open_session();
    assert_eq!(client.tool_text("local__echo", json!({"text": "starts it"})), "starts it");

    let metrics = get(&gate, "/metrics").body;
    let status = gate.status();
    let page = get(&gate, "/status").body;
    let rows = page_rows(&page);
    for entry in mcpgate::stats::table() {
        let name = entry.name;
        assert!(metrics.contains(&format!("\n# TYPE {name} {}\n", entry.kind.prometheus())), "{name} in /metrics");
        assert!(metrics.contains(&format!("# HELP {name} ")), "{name}'s help");
        let row = rows.iter().find(|(metric, _)| metric.split('{').next() == Some(name));
        let (_, place) = row.unwrap_or_else(|| panic!("{name} on the page"));
        let value = place.split('.').fold(&status, |v, key| &v[key]);
        assert!(!value.is_null(), "{name}: nothing at `{place}` in /status.json");
    }
    // And nothing else: each family of /metrics is an entry of the table.
    let entries: Vec<&str> = mcpgate::stats::table().map(|e| e.name).collect();
    for line in metrics.lines().filter(|l| l.starts_with("# TYPE ")) {
        let name = line.split(' ').nth(2).unwrap();
        assert!(entries.contains(&name), "{name} is not in the table");
    }
    assert_eq!(status["servers"]["local"]["processes"]["live"], 1, "{}", status["servers"]["local"]);
    assert!(metrics.contains("mcpgate_server_processes_live{server=\"local\"} 1\n"));
}

#[test]
fn the_sessions_list_names_tokens_shows_each_downstream_and_stops_at_50() {
    const NAMED: &str = "0123456789abcdef-laptop";
    const UNNAMED: &str = "0123456789abcdef-other";
    let fixture = Fixture::start("alpha", &[]);
    let offline = format!("http://127.0.0.1:{}/mcp", closed_port());
    let mut c = config(&[("alpha", fixture.url()), ("offline", offline)]);
    c["auth"] = json!({"tokens": [{"token": NAMED, "name": "<laptop>"}, {"token": UNNAMED}]});
    let gate = Gate::start_checked(&c);

    let mut first = gate.client_with_token(NAMED);
    first.initialize();
    let stream = first.open_stream();
    let mut clients: Vec<Client> = (0..51)
        .map(|i| {
            let mut client = gate.client_with_token(if i == 0 { UNNAMED } else { NAMED });
            client.initialize();
            client
        })
        .collect();
    assert!(wait_until(Duration::from_secs(5), || gate.status()["threads"]["streams"] == 1));

    let status = gate.status();
    let sessions = &status["sessions"];
    assert_eq!(sessions["live"], 52);
    assert_eq!(sessions["unlisted"], 2, "{sessions}");
    let list = sessions["list"].as_array().unwrap();
    assert_eq!(list.len(), 50);
    // The oldest first: the first session, with its stream open.
    let oldest = &list[0];
    let id = first.session.as_deref().unwrap();
    assert_eq!(oldest["id"].as_str(), Some(&id[..8]), "{oldest}");
    assert_eq!((oldest["token"].as_str(), oldest["streams"].as_u64()), (Some("<laptop>"), Some(1)), "{oldest}");
    assert_eq!(oldest["idle_secs"], Value::Null, "a session with a stream is in use: {oldest}");
    assert_eq!(oldest["protocol_version"], support::PROTOCOL);
    assert_eq!(oldest["downstream"]["alpha"]["state"], "open");
    assert_eq!(oldest["downstream"]["alpha"]["session"].as_str().map(str::len), Some(8));
    assert_eq!(oldest["downstream"]["offline"]["state"], "failed");
    assert_eq!(list[1]["token"], "token #2", "an unnamed token by its place");
    assert!(list.iter().all(|s| s["id"].as_str().is_some_and(|id| id.len() == 8)));
    assert!(!status.to_string().contains(NAMED) && !status.to_string().contains(id), "no token, no whole session id");

    let page = get(&gate, "/status").body;
    assert!(page.contains("<h2>Sessions: 52 live</h2>"));
    assert!(page.contains("&lt;laptop&gt;") && !page.contains("<laptop>"), "the name is escaped");
    assert!(page.contains("And 2 more, not listed"));
    assert!(!page.contains(NAMED) && !page.contains(id));

    stream.close();
    for client in clients.iter_mut().chain([&mut first]) {
        client.delete();
    }
}

/// `mcpgate` with `args`: its exit code, stdout and stderr.
fn mcpgate(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mcpgate")).args(args).output().expect("run mcpgate");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn mcpgate_status(url: &str) -> (Option<i32>, String, String) {
    mcpgate(&["status", "--url", url])
}

#[test]
fn mcpgate_status_prints_the_summary_and_says_healthy_or_not_in_its_exit_code() {
    let fixture = Fixture::start("alpha", &[]);
    let healthy = Gate::start_checked(&config(&[("alpha", fixture.url())]));
    let mut client = healthy.open_session();
    client.tool_text("alpha__echo", json!({"text": "hi"}));
    let (code, out, err) = mcpgate_status(&format!("http://{}", healthy.addr));
    assert_eq!(code, Some(0), "{out}{err}");
    let first = out.lines().next().unwrap();
    assert!(first.starts_with(&format!("mcpgate {}, up ", env!("CARGO_PKG_VERSION"))), "{out}");
    assert!(
        first.ends_with(": healthy: 1 server(s) (1 up), 1 session(s), every downstream session accounted for"),
        "{out}"
    );
    for expected in [
        "downstream sessions: 1 opened = 0 closed + 1 live; leaked 0",
        "servers (1)",
        "sessions: 1 live",
        "threads: ",
        "memory: ",
        " MiB",
    ] {
        assert!(out.contains(expected), "{expected:?} in\n{out}");
    }
    let alpha = out.lines().find(|l| l.trim_start().starts_with("alpha ")).unwrap_or_else(|| panic!("{out}"));
    assert!(alpha.contains(" http ") && alpha.contains(" up ") && alpha.contains(&fixture.url()), "{alpha}");
    // The endpoint's URL works as well as the base.
    assert_eq!(mcpgate_status(&healthy.url()).0, Some(0));

    let offline = format!("http://127.0.0.1:{}/mcp", closed_port());
    let down = Gate::start_checked(&config(&[("alpha", fixture.url()), ("offline", offline)]));
    down.open_session();
    let (code, out, _) = mcpgate_status(&format!("http://{}/", down.addr));
    assert_eq!(code, Some(1), "{out}");
    assert!(out.lines().next().unwrap().contains(": NOT HEALTHY: server `offline` is down: unreachable"), "{out}");
    assert!(out.contains("offline: last error "), "{out}");

    let (code, out, err) = mcpgate_status(&format!("http://127.0.0.1:{}", closed_port()));
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(err.contains("cannot read http://127.0.0.1:"), "{err}");
    let (code, _, err) = mcpgate(&["status", "--bogus"]);
    assert_eq!(code, Some(2), "{err}");
}

/// A limit that refuses work is a problem the health names, while it lasts: here `max_sessions`.
#[test]
fn the_health_says_when_a_limit_refuses_new_sessions() {
    let fixture = Fixture::start("alpha", &[]);
    let mut c = config(&[("alpha", fixture.url())]);
    c["max_sessions"] = json!(1);
    let gate = Gate::start_checked(&c);
    let _one = gate.open_session();
    assert_eq!(gate.status()["health"]["healthy"], true, "{}", gate.status()["health"]);
    let mut two = gate.client();
    let refused = two.request("initialize", support::initialize_params());
    assert_eq!(refused.status, 503, "{refused:?}");
    let health = gate.status()["health"].clone();
    assert_eq!(health["healthy"], false, "{health}");
    assert!(health["problems"].to_string().contains("new sessions are refused: 1 initialize(s) refused"), "{health}");
}

/// With nothing running where it looks, `mcpgate status` said only
/// `Connection refused (os error 111)`; it now asks whether mcpgate runs
/// there, and still gives the cause.
#[test]
fn mcpgate_status_with_nothing_listening_asks_whether_mcpgate_runs_there() {
    let base = format!("http://127.0.0.1:{}", closed_port());
    let (code, out, err) = mcpgate_status(&format!("{base}/mcp"));
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(err.contains(&format!("is mcpgate running at {base}?")), "{err}");
    assert!(err.contains("Connection refused"), "the cause: {err}");
    assert!(err.contains("--url"), "what to do: {err}");
}
