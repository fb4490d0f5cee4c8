//! Plain HTTP: the agent the clients speak through, GETs, the bytes of a
//! raw request, and polling.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The protocol version the session-era client speaks.
pub const PROTOCOL: &str = "2025-11-25";

/// What a client of either era accepts.
pub const ACCEPT: &str = "application/json, text/event-stream";

/// An HTTP client that hands back error statuses as answers, ignores proxy
/// settings, and gives up on a request after `timeout` (never when `None`).
pub fn http_agent(timeout: Option<Duration>) -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).proxy(None).timeout_global(timeout).build().into()
}

/// [`http_agent`] with a 30 s timeout.
pub(crate) fn agent() -> ureq::Agent {
    http_agent(Some(Duration::from_secs(30)))
}

/// The body of a GET, as JSON; panics when there is none or it is not JSON.
pub fn get_json(url: &str) -> Value {
    let mut response = agent().get(url).call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let text = response.body_mut().read_to_string().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {url}: not JSON ({e}): {text}"))
}

/// The body of a GET, as text.
pub fn get_text(url: &str) -> String {
    agent().get(url).call().unwrap_or_else(|e| panic!("GET {url}: {e}")).body_mut().read_to_string().unwrap_or_default()
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The socket address of an endpoint URL (`http(s)://<addr>/mcp`).
pub fn addr_of_url(url: &str) -> SocketAddr {
    url.trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches("/mcp")
        .parse()
        .expect("a socket address")
}

/// The bytes of one HTTP/1.1 request: its line, `headers` as given and in
/// that order (`Host` and `Connection` too: the test names them), a
/// `Content-Length` when there is a body and `headers` set no framing of
/// their own (`Content-Length` or `Transfer-Encoding`), then the body.
pub fn http_request(method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut head = format!("{method} {target} HTTP/1.1\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let framed = headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("transfer-encoding"));
    if !body.is_empty() && !framed {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}
