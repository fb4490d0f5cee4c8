#![forbid(unsafe_code)]
//! mcp-load: the load generator of scripts/bench.sh. It speaks MCP over
//! Streamable HTTP to any server (a fixture directly, mcpgate, a peer
//! gateway) and prints one JSON line of results per command.
//!
//!   mcp-load calls    --url URL --tool NAME --clients N --seconds S
//!   mcp-load sessions --url URL --count N [--no-stream] [--hold-file PATH]
//!   mcp-load churn    --url URL --tool NAME --cycles N [--sample-pid PID --samples CSV]
//!
//! `calls`: N clients, each with its own session, call NAME in a loop for S
//! seconds; latency percentiles and throughput. `sessions`: opens N sessions
//! that each hold a GET stream (unless --no-stream), prints `ready`, and holds them until
//! PATH exists (or stdin closes). `churn`: N cycles of initialize, one call,
//! then DELETE (even cycles) or walk away (odd: left to idle eviction),
//! sampling RSS and threads of PID every 100 ms into CSV.

use std::io::{BufRead, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn usage() -> ! {
    eprintln!(
        "usage: mcp-load calls|sessions|churn --url URL [--tool NAME] [--clients N] [--seconds S] [--count N] [--cycles N] [--hold-file PATH] [--sample-pid PID --samples CSV]"
    );
    std::process::exit(2)
}

struct Args {
    command: String,
    url: String,
    tool: String,
    clients: usize,
    seconds: f64,
    count: usize,
    cycles: usize,
    hold_file: Option<String>,
    sample_pid: Option<u32>,
    samples: Option<String>,
    /// `sessions`: without a client GET stream of their own.
    no_stream: bool,
}

fn args() -> Args {
    let mut it = std::env::args().skip(1);
    let command = it.next().unwrap_or_else(|| usage());
    let mut a = Args {
        command,
        url: String::new(),
        tool: "echo".into(),
        clients: 1,
        seconds: 5.0,
        count: 100,
        cycles: 1000,
        hold_file: None,
        sample_pid: None,
        samples: None,
        no_stream: false,
    };
    while let Some(flag) = it.next() {
        if flag == "--no-stream" {
            a.no_stream = true;
            continue;
        }
        let value = it.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--url" => a.url = value,
            "--tool" => a.tool = value,
            "--clients" => a.clients = value.parse().unwrap_or_else(|_| usage()),
            "--seconds" => a.seconds = value.parse().unwrap_or_else(|_| usage()),
            "--count" => a.count = value.parse().unwrap_or_else(|_| usage()),
            "--cycles" => a.cycles = value.parse().unwrap_or_else(|_| usage()),
            "--hold-file" => a.hold_file = Some(value),
            "--sample-pid" => a.sample_pid = Some(value.parse().unwrap_or_else(|_| usage())),
            "--samples" => a.samples = Some(value),
            _ => usage(),
        }
    }
    if a.url.is_empty() {
        usage();
    }
    a
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(60)))
        .max_idle_connections_per_host(2)
        .build()
        .into()
}

/// One MCP client session over its own keep-alive connection.
struct Client {
    agent: ureq::Agent,
    url: String,
    session: Option<String>,
    next_id: u64,
}

impl Client {
    fn connect(url: &str) -> Result<Client, String> {
        let mut client = Client { agent: agent(), url: url.to_string(), session: None, next_id: 1 };
        let params = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "mcp-load", "version": "1"}});
        client.request("initialize", params)?;
        client.notify("notifications/initialized")?;
        Ok(client)
    }

    fn post(&mut self, body: &Value) -> Result<ureq::http::Response<ureq::Body>, String> {
        let mut request = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        if let Some(session) = &self.session {
            request = request.header("Mcp-Session-Id", session).header("MCP-Protocol-Version", "2025-11-25");
        }
        request.send(body.to_string().as_bytes()).map_err(|e| e.to_string())
    }

    fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let response = self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        if response.status() != 200 {
            return Err(format!("{method}: HTTP {}", response.status()));
        }
        if let Some(session) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
            self.session = Some(session.to_string());
        }
        let sse = response.body().mime_type() == Some("text/event-stream");
        let message = if sse {
            // Read events until the response to this request, as SDK clients
            // do; what the server sends after it (or how it ends the stream)
            // is not part of the call.
            let mut reader = std::io::BufReader::new(response.into_body().into_reader());
            let mut line = String::new();
            let mut found = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                    break;
                }
                let Some(data) = line.strip_prefix("data:").map(str::trim) else { continue };
                if serde_json::from_str::<Value>(data).is_ok_and(|v| v.get("id") == Some(&json!(id))) {
                    found = data.to_string();
                    break;
                }
            }
            found
        } else {
            response.into_body().read_to_string().map_err(|e| e.to_string())?
        };
        let value: Value = serde_json::from_str(&message).map_err(|e| format!("{method}: {e}: {message}"))?;
        if let Some(error) = value.get("error") {
            return Err(format!("{method}: {error}"));
        }
        Ok(value["result"].clone())
    }

    fn notify(&mut self, method: &str) -> Result<(), String> {
        let response = self.post(&json!({"jsonrpc": "2.0", "method": method}))?;
        let _ = response.into_body().read_to_vec();
        Ok(())
    }

    fn delete(&mut self) -> Result<(), String> {
        let Some(session) = &self.session else { return Ok(()) };
        let response =
            self.agent.delete(&self.url).header("Mcp-Session-Id", session).call().map_err(|e| e.to_string())?;
        let _ = response.into_body().read_to_vec();
        Ok(())
    }

    /// Opens the GET stream on a connection of its own and reads it on a thread until it ends.
    fn hold_stream(&self, stop: Arc<AtomicBool>) -> Result<std::thread::JoinHandle<()>, String> {
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).proxy(None).build().into();
        let response = agent
            .get(&self.url)
            .header("Accept", "text/event-stream")
            .header("Mcp-Session-Id", self.session.as_deref().unwrap_or(""))
            .header("MCP-Protocol-Version", "2025-11-25")
            .call()
            .map_err(|e| e.to_string())?;
        if response.status() != 200 {
            return Err(format!("GET stream: HTTP {}", response.status()));
        }
        let mut reader = std::io::BufReader::new(response.into_body().into_reader());
        std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                let mut line = String::new();
                while !stop.load(Ordering::Relaxed) {
                    line.clear();
                    match reader.read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
            })
            .map_err(|e| e.to_string())
    }
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn calls(a: &Args) {
    let latencies = Mutex::new(Vec::new());
    let errors = AtomicU64::new(0);
    let duration = Duration::from_secs_f64(a.seconds);
    let started = Mutex::new(None::<Instant>);
    let barrier = std::sync::Barrier::new(a.clients);
    std::thread::scope(|s| {
        for i in 0..a.clients {
            let (latencies, errors, barrier, started) = (&latencies, &errors, &barrier, &started);
            s.spawn(move || {
                let mut client = match Client::connect(&a.url) {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("client {i}: {e}");
                        errors.fetch_add(1, Ordering::Relaxed);
                        barrier.wait();
                        return;
                    }
                };
                // One call first, so that lists and connections are warm.
                let _ = client.request("tools/call", json!({"name": a.tool, "arguments": {"text": "warm"}}));
                barrier.wait();
                let begin = *started.lock().unwrap().get_or_insert_with(Instant::now);
                let mut mine = Vec::with_capacity(100_000);
                while begin.elapsed() < duration {
                    let t = Instant::now();
                    match client.request("tools/call", json!({"name": a.tool, "arguments": {"text": "hello"}})) {
                        Ok(_) => mine.push(t.elapsed().as_micros() as u32),
                        Err(e) => {
                            if errors.fetch_add(1, Ordering::Relaxed) < 3 {
                                eprintln!("client {i}: {e}");
                            }
                        }
                    }
                }
                let _ = client.delete();
                latencies.lock().unwrap().extend(mine);
            });
        }
    });
    let mut all = latencies.into_inner().unwrap();
    all.sort_unstable();
    let out = json!({
        "clients": a.clients,
        "seconds": a.seconds,
        "calls": all.len(),
        "throughput": all.len() as f64 / a.seconds,
        "p50_us": percentile(&all, 0.50),
        "p99_us": percentile(&all, 0.99),
        "errors": errors.load(Ordering::Relaxed),
    });
    println!("{out}");
}

fn sessions(a: &Args) {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut clients = Vec::with_capacity(a.count);
    let mut readers = Vec::with_capacity(a.count);
    for i in 0..a.count {
        let client = Client::connect(&a.url).unwrap_or_else(|e| panic!("session {i}: {e}"));
        if a.no_stream {
            // The session stays open at the server; its connection does not.
            drop(client);
            continue;
        }
        readers.push(client.hold_stream(stop.clone()).unwrap_or_else(|e| panic!("session {i}: {e}")));
        clients.push(client);
    }
    println!("{}", json!({"ready": a.count, "open_seconds": started.elapsed().as_secs_f64()}));
    if a.no_stream {
        // Nothing is held open here: the sessions live on at the server.
        return;
    }
    match &a.hold_file {
        Some(path) => {
            for _ in 0..36_000 {
                if std::path::Path::new(path).exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        None => {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        }
    }
    stop.store(true, Ordering::Relaxed);
    // Streams end when the server closes them (shutdown) or when we drop the agents.
    drop(clients);
    for reader in readers {
        let _ = reader.join();
    }
}

/// RSS in bytes and thread count of a process, from /proc.
fn sample(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    Some((field("VmRSS:")? * 1024, field("Threads:")?))
}

fn churn(a: &Args) {
    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::<(f64, u64, u64, usize)>::new()));
    let done = Arc::new(AtomicU64::new(0));
    let begin = Instant::now();
    let sampler = a.sample_pid.map(|pid| {
        let (stop, samples, done) = (stop.clone(), samples.clone(), done.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some((rss, threads)) = sample(pid) {
                    samples.lock().unwrap().push((
                        begin.elapsed().as_secs_f64(),
                        rss,
                        threads,
                        done.load(Ordering::Relaxed) as usize,
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    });
    let errors = AtomicU64::new(0);
    let workers = 4;
    // After the first tenth (at most 1,000 cycles), everything pauses until
    // the idle sessions are evicted: RSS there and at the end are taken at
    // the same quiet point, so the two compare.
    let first = (a.cycles / 10).clamp(1, 1000);
    let quiet = Duration::from_secs(3);
    let mut rss_first = 0;
    let run = |range: std::ops::Range<usize>| {
        std::thread::scope(|s| {
            for w in 0..workers {
                let (errors, done, range) = (&errors, &done, range.clone());
                s.spawn(move || {
                    for cycle in range.skip(w).step_by(workers) {
                        let result = Client::connect(&a.url).and_then(|mut client| {
                            client.request("tools/call", json!({"name": a.tool, "arguments": {"text": "churn"}}))?;
                            if cycle % 2 == 0 { client.delete() } else { Ok(()) }
                        });
                        if let Err(e) = result
                            && errors.fetch_add(1, Ordering::Relaxed) < 3
                        {
                            eprintln!("cycle {cycle}: {e}");
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
    };
    let mut working = Duration::ZERO;
    let t = Instant::now();
    run(0..first);
    working += t.elapsed();
    std::thread::sleep(quiet);
    if let Some(pid) = a.sample_pid {
        rss_first = sample(pid).map_or(0, |(rss, _)| rss);
    }
    let t = Instant::now();
    run(first..a.cycles);
    working += t.elapsed();
    std::thread::sleep(quiet);
    let rss_end = a.sample_pid.and_then(sample).map_or(0, |(rss, _)| rss);
    let elapsed = working;
    stop.store(true, Ordering::Relaxed);
    if let Some(sampler) = sampler {
        let _ = sampler.join();
    }
    if let Some(path) = &a.samples {
        let mut csv = String::from("seconds,rss_bytes,threads,cycles_done\n");
        for (t, rss, threads, cycles) in samples.lock().unwrap().iter() {
            csv.push_str(&format!("{t:.2},{rss},{threads},{cycles}\n"));
        }
        std::fs::write(path, csv).expect("write samples");
    }
    println!(
        "{}",
        json!({
            "cycles": a.cycles,
            "seconds": elapsed.as_secs_f64(),
            "ms_per_cycle": elapsed.as_secs_f64() * 1000.0 / a.cycles as f64,
            "errors": errors.load(Ordering::Relaxed),
            "quiet_rss_after_first": rss_first,
            "first_cycles": first,
            "quiet_rss_at_end": rss_end,
        })
    );
}

fn main() {
    let a = args();
    match a.command.as_str() {
        "calls" => calls(&a),
        "sessions" => sessions(&a),
        "churn" => churn(&a),
        _ => usage(),
    }
}
