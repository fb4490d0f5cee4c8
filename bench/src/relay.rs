#![forbid(unsafe_code)]
//! mcp-relay: the floor of scripts/bench.sh. A relay as bare as a relay
//! can be, on mcpgate's own front door (`mcpgate::http`: the same listener,
//! connection threads, request parsing and reply writing) and the same
//! HTTP client (ureq, kept-alive connections): each request's body goes to
//! the one server as it came, with the headers MCP routes on, and the
//! server's answer comes back unparsed. No sessions of its own, no JSON,
//! no merging, no state: what mcpgate costs beyond this is what mcpgate
//! does.
//!
//!   mcp-relay --listen ADDR --to URL
//!
//! Prints `listening on ADDR` once it accepts.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mcpgate::downstream::Lookup;
use mcpgate::http::{App, EventSink, HttpReply, HttpRequest, Httpd, Options, ReplyBody};
use mcpgate::stats::Stats;

/// The request headers the relay passes on.
const FORWARDED: &[&str] =
    &["accept", "content-type", "mcp-session-id", "mcp-protocol-version", "mcp-method", "mcp-name"];

struct Relay {
    to: String,
    agent: ureq::Agent,
}

impl App for Relay {
    fn handle(&self, req: &HttpRequest, _: &mut dyn EventSink) -> HttpReply {
        let mut request = ureq::http::Request::builder().method(req.method.as_str()).uri(&self.to);
        for name in FORWARDED {
            if let Some(value) = req.header(name) {
                request = request.header(*name, value);
            }
        }
        let request = match request.body(req.body.clone()) {
            Ok(r) => r,
            Err(e) => return HttpReply::bad(400, &format!("relay: {e}")),
        };
        let response = match self.agent.run(request) {
            Ok(r) => r,
            Err(e) => return HttpReply::bad(502, &format!("relay: {e}")),
        };
        let status = response.status().as_u16();
        let session = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
        let content_type = match response.headers().get("content-type").and_then(|v| v.to_str().ok()) {
            Some(t) if t.starts_with("text/event-stream") => "text/event-stream",
            _ => "application/json",
        };
        let mut bytes = Vec::new();
        if let Err(e) = response.into_body().into_reader().read_to_end(&mut bytes) {
            return HttpReply::bad(502, &format!("relay: reading the answer: {e}"));
        }
        let mut reply = if bytes.is_empty() {
            HttpReply::empty(status)
        } else {
            HttpReply { status, headers: Vec::new(), body: ReplyBody::Data { content_type, bytes }, held: None }
        };
        if let Some(session) = session {
            reply = reply.header("mcp-session-id", &session);
        }
        reply
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut listen, mut to) = (None, None);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--listen", Some(v)) => listen = v.parse::<SocketAddr>().ok(),
            ("--to", Some(v)) => to = Some(v),
            _ => {
                eprintln!("usage: mcp-relay --listen ADDR --to URL");
                std::process::exit(2);
            }
        }
    }
    let (Some(listen), Some(to)) = (listen, to) else {
        eprintln!("usage: mcp-relay --listen ADDR --to URL");
        std::process::exit(2);
    };
    // Configured as mcpgate's lanes are: its resolver, 16 KiB buffers, no proxy.
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(60)))
        .input_buffer_size(16 * 1024)
        .output_buffer_size(16 * 1024)
        .max_idle_connections(256)
        .max_idle_connections_per_host(256)
        .max_redirects(0)
        .build();
    let agent = ureq::Agent::with_parts(config, ureq::unversioned::transport::DefaultConnector::new(), Lookup);
    let options = Options {
        max_connections: 512,
        max_body_bytes: 4 << 20,
        max_header_count: 64,
        max_header_bytes: 16 << 10,
        idle_timeout: Duration::from_secs(15),
        header_timeout: Duration::from_secs(10),
        write_timeout: Duration::from_secs(10),
    };
    let app = Arc::new(Relay { to, agent });
    let httpd = match Httpd::start(listen, app, options, Arc::new(Stats::default())) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("mcp-relay: cannot listen on {listen}: {e}");
            std::process::exit(1);
        }
    };
    println!("listening on {}", httpd.local_addr());
    loop {
        std::thread::park();
    }
}
