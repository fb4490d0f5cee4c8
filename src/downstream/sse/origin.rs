//! Where an HTTP+SSE server wants its messages: the `endpoint` event's data,
//! a URL relative to the stream's (as RFC 3986 resolves it, and as the
//! official SDK clients do: `new URL(data, streamUrl)`), which must stay on
//! the stream's origin. A server that names another origin would have
//! mcpgate send its client's messages, and the configured headers with
//! their tokens, to a host nobody configured: it is refused, as the
//! TypeScript SDK's client refuses it.

use ureq::http::Uri;

/// The longest `endpoint` mcpgate takes: a path and a session id.
const MAX_ENDPOINT: usize = 4096;

/// The URL to `POST` to: `endpoint` resolved against `stream`, on the same
/// origin (scheme, host and port). The error says what was wrong with it.
pub(crate) fn resolve(stream: &str, endpoint: &str) -> Result<String, String> {
    let endpoint = endpoint.trim();
    if endpoint.is_empty() {
        return Err("its `endpoint` event is empty".into());
    }
    if endpoint.len() > MAX_ENDPOINT || endpoint.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
        return Err(format!(
            "its `endpoint` event is not a URL (visible ASCII, at most {MAX_ENDPOINT} bytes): {:?}",
            cut(endpoint)
        ));
    }
    let base: Uri = stream.parse().map_err(|_| format!("`{stream}` is not a URL"))?;
    let (scheme, authority) = match (base.scheme_str(), base.authority()) {
        (Some(scheme), Some(authority)) => (scheme.to_ascii_lowercase(), authority.as_str().to_string()),
        _ => return Err(format!("`{stream}` is not an absolute URL")),
    };
    // A fragment is never sent.
    let endpoint = endpoint.split('#').next().unwrap_or_default();
    let resolved = if has_scheme(endpoint) {
        endpoint.to_string()
    } else if let Some(rest) = endpoint.strip_prefix("//") {
        format!("{scheme}://{rest}")
    } else {
        let (path, query) = match endpoint.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (endpoint, None),
        };
        let merged = if path.starts_with('/') {
            path.to_string()
        } else if path.is_empty() {
            base.path().to_string()
        } else {
            // RFC 3986 5.2.3: the base path up to its last `/`, then the reference.
            let dir = base.path().rfind('/').map_or("/", |at| &base.path()[..=at]);
            format!("{dir}{path}")
        };
        let query = match (query, path.is_empty()) {
            (Some(query), _) => format!("?{query}"),
            (None, true) => base.query().map(|q| format!("?{q}")).unwrap_or_default(),
            (None, false) => String::new(),
        };
        format!("{scheme}://{authority}{}{query}", remove_dot_segments(&merged))
    };
    let target: Uri =
        resolved.parse().map_err(|_| format!("its `endpoint` event is not a URL: {:?}", cut(endpoint)))?;
    if origin(&target) != origin(&base) {
        return Err(format!(
            "its `endpoint` event names another origin ({}), not the stream's ({}): refused",
            shown_origin(&target),
            shown_origin(&base)
        ));
    }
    Ok(resolved)
}

fn has_scheme(reference: &str) -> bool {
    match reference.find(':') {
        Some(at) => {
            let scheme = &reference[..at];
            !scheme.is_empty()
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
        }
        None => false,
    }
}

/// Scheme, host (lower case) and port (the scheme's default when absent).
fn origin(uri: &Uri) -> Option<(String, String, u16)> {
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let port = uri.port_u16().or(match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    })?;
    Some((scheme, uri.host()?.to_ascii_lowercase(), port))
}

fn shown_origin(uri: &Uri) -> String {
    match origin(uri) {
        Some((scheme, host, port)) => format!("{scheme}://{host}:{port}"),
        None => "no origin".into(),
    }
}

/// RFC 3986 5.2.4: `.` and `..` segments taken out of a path.
fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').collect();
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *segment {
            "." => {
                if last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            other => out.push(other),
        }
    }
    let joined = out.join("/");
    if joined.starts_with('/') { joined } else { format!("/{joined}") }
}

/// The start of a refused endpoint, for the error.
fn cut(text: &str) -> String {
    text.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_resolve_against_the_stream_as_the_sdk_clients_do() {
        let stream = "http://127.0.0.1:3001/sse";
        let cases = [
            // server-everything (TypeScript SDK) and the Python SDK.
            ("/message?sessionId=abc", "http://127.0.0.1:3001/message?sessionId=abc"),
            ("/messages/?session_id=0f1e", "http://127.0.0.1:3001/messages/?session_id=0f1e"),
            ("messages?x=1", "http://127.0.0.1:3001/messages?x=1"),
            ("http://127.0.0.1:3001/m?s=1", "http://127.0.0.1:3001/m?s=1"),
            ("//127.0.0.1:3001/m", "http://127.0.0.1:3001/m"),
            ("/a/../b/./c?q#frag", "http://127.0.0.1:3001/b/c?q"),
            (" /padded \n", "http://127.0.0.1:3001/padded"),
        ];
        for (endpoint, want) in cases {
            assert_eq!(resolve(stream, endpoint).as_deref(), Ok(want), "{endpoint}");
        }
        assert_eq!(
            resolve("https://Host.example/mcp/sse", "msg?id=1").as_deref(),
            Ok("https://Host.example/mcp/msg?id=1")
        );
        assert_eq!(
            resolve("https://host.example/sse", "HTTPS://HOST.EXAMPLE:443/m").as_deref(),
            Ok("HTTPS://HOST.EXAMPLE:443/m"),
            "the same origin, spelled otherwise"
        );
    }

    #[test]
    fn another_origin_or_no_url_is_refused_with_why() {
        let stream = "http://127.0.0.1:3001/sse";
        for (endpoint, why) in [
            ("http://evil.example/m", "another origin (http://evil.example:80)"),
            ("https://127.0.0.1:3001/m", "another origin (https://127.0.0.1:3001)"),
            ("http://127.0.0.1:3002/m", "another origin"),
            ("//evil.example/m", "another origin"),
            ("", "empty"),
            ("/with space", "not a URL"),
            ("/caf\u{e9}", "not a URL"),
        ] {
            let e = resolve(stream, endpoint).expect_err(endpoint);
            assert!(e.contains(why), "{endpoint}: {e}");
        }
        assert!(resolve(stream, &"/a".repeat(3000)).is_err(), "too long");
    }
}
