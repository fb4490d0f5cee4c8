//! Talking to authorization servers and protected-resource metadata: one
//! agent per trust (a server's roots), no proxy from the environment, no
//! redirects, every exchange within [`TIMEOUT`] and every answer within
//! [`MAX_ANSWER`] bytes, charged to `max_memory_mb` while it is read. What
//! goes wrong comes back in words that name the URL, never a token.

use std::io::Read;
use std::time::Duration;

use serde_json::Value;
use ureq::Agent;

use crate::config::Trust;
use crate::runtime::memory::Charge;

/// The longest one exchange with an authorization server may take, whole.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read: metadata and token answers are a few KiB.
pub(crate) const MAX_ANSWER: usize = 256 * 1024;

/// An agent for `trust`'s roots, connecting within `connect`.
pub(super) fn agent(trust: &Trust, connect: Duration) -> Agent {
    let config = Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_connect(Some(connect))
        .timeout_global(Some(TIMEOUT))
        .max_redirects(0)
        .user_agent(concat!("mcpgate/", env!("CARGO_PKG_VERSION")))
        .build();
    use ureq::unversioned::transport::{Connector, TcpConnector};
    let connector = ().chain(TcpConnector::default());
    #[cfg(feature = "tls")]
    let connector = connector.chain(crate::downstream::tls::TlsConnector::new(trust));
    #[cfg(not(feature = "tls"))]
    let _ = trust;
    Agent::with_parts(config, connector, crate::downstream::resolver::Lookup)
}

/// An answer: its status and its JSON object (an error answer's too, as
/// RFC 6749 §5.2 writes them).
pub(super) struct Answer {
    pub(crate) status: u16,
    pub(crate) json: Result<Value, String>,
}

fn failed(url: &str, e: ureq::Error) -> String {
    match e {
        ureq::Error::Timeout(_) => format!("{url} did not answer within {} s", TIMEOUT.as_secs()),
        ureq::Error::Io(io) if matches!(io.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) => {
            format!("{url} did not answer within {} s", TIMEOUT.as_secs())
        }
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => format!("{url} is unreachable ({e})"),
        e => format!("{url}: {e}"),
    }
}

/// The body of `response`, at most [`MAX_ANSWER`] bytes, charged as it
/// comes; the status and the JSON object it holds.
fn read(url: &str, response: ureq::http::Response<ureq::Body>) -> Result<Answer, String> {
    let status = response.status().as_u16();
    let mut reader = response.into_body().into_reader();
    let (mut body, mut charge) = (Vec::new(), Charge::empty());
    let mut buf = [0u8; 8 * 1024];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) => {
                return Err(format!("{url} did not answer within {} s", TIMEOUT.as_secs()));
            }
            Err(e) => return Err(format!("{url}: reading the answer failed: {e}")),
        };
        if body.len() + n > MAX_ANSWER {
            return Err(format!("{url} answered more than {} KiB: refused", MAX_ANSWER / 1024));
        }
        if !charge.grow(n) {
            return Err(format!("{url}: mcpgate holds its limit of max_memory_mb; the answer could not be held"));
        }
        body.extend_from_slice(&buf[..n]);
    }
    let json = match serde_json::from_slice::<Value>(&body) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(format!("{url} answered HTTP {status} with JSON that is not an object")),
        Err(_) => {
            let text: String = String::from_utf8_lossy(&body).chars().take(120).collect();
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            Err(format!("{url} answered HTTP {status} with something that is not JSON: `{text}`"))
        }
    };
    Ok(Answer { status, json })
}

/// The JSON object of a `GET` answered 200.
pub(super) fn get_json(agent: &Agent, url: &str) -> Result<Value, String> {
    let response = agent.get(url).header("Accept", "application/json").call().map_err(|e| failed(url, e))?;
    let answer = read(url, response)?;
    match answer.status {
        200 => answer.json,
        status => Err(format!("{url} answered HTTP {status}")),
    }
}

/// A form `POST` (`form` already encoded), with HTTP Basic when `basic` is given.
pub(super) fn post_form(agent: &Agent, url: &str, form: &str, basic: Option<&str>) -> Result<Answer, String> {
    let mut request = agent
        .post(url)
        .header("Accept", "application/json")
        .header("Content-Type", "application/x-www-form-urlencoded");
    if let Some(basic) = basic {
        request = request.header("Authorization", format!("Basic {basic}"));
    }
    let response = request.send(form.as_bytes()).map_err(|e| failed(url, e))?;
    read(url, response)
}

/// A JSON `POST` (dynamic registration).
pub(super) fn post_json(agent: &Agent, url: &str, body: &Value) -> Result<Answer, String> {
    let response = agent
        .post(url)
        .header("Accept", "application/json")
        .header("Content-Type", "application/json")
        .send(body.to_string().as_bytes())
        .map_err(|e| failed(url, e))?;
    read(url, response)
}

/// `https://`, or `http://` on a loopback address; no fragment: where a
/// token or a code may be sent.
pub(crate) fn check_endpoint(url: &str) -> Result<(), String> {
    let uri: ureq::http::Uri = url.parse().map_err(|_| format!("`{url}` is not a URL"))?;
    let host = uri.host().unwrap_or("").trim_matches(['[', ']']);
    let loopback =
        host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if host.is_empty() || url.contains('#') {
        return Err(format!("`{url}` has no host, or has a fragment"));
    }
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if loopback => Ok(()),
        _ => Err(format!("`{url}` is not https:// (http:// is taken on a loopback address only)")),
    }
}

/// Visible ASCII only, at most 200 characters: what an error page may say of a server's words.
pub(crate) fn printable(text: &str) -> String {
    text.chars().take(200).map(|c| if (' '..='~').contains(&c) { c } else { '?' }).collect()
}

/// `application/x-www-form-urlencoded` of `pairs`.
pub(crate) fn form(pairs: &[(&str, &str)]) -> String {
    pairs.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect::<Vec<_>>().join("&")
}

/// Percent-encoding of everything but RFC 3986's unreserved characters.
pub(crate) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes a query value (`+` is a space, `%XX` a byte); `None` when it is not UTF-8.
pub(crate) fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b'%' => return None,
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The value of `name` in a query string (`a=1&b=2`), decoded.
pub(crate) fn query_value(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(k).as_deref() == Some(name)).then(|| decode(v)).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_encode_and_queries_decode_back() {
        let text = form(&[("redirect_uri", "http://127.0.0.1:1/oauth/callback"), ("scope", "a b+c")]);
        assert_eq!(text, "redirect_uri=http%3A%2F%2F127.0.0.1%3A1%2Foauth%2Fcallback&scope=a%20b%2Bc");
        assert_eq!(query_value(&text, "scope").as_deref(), Some("a b+c"));
        assert_eq!(query_value("code=x%2&state=1", "code"), None, "a broken escape is no value");
        assert_eq!(query_value("a=1+2", "a").as_deref(), Some("1 2"));
        assert_eq!(query_value("a=1", "b"), None);
    }
}
