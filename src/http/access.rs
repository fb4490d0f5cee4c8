//! Who may talk to mcpgate before any token is looked at: the `Origin`
//! check and the `Host` check, both against DNS rebinding. What a token
//! lets through is `auth`'s.

use crate::config::Config;
use crate::http::{HttpError, HttpRequest};

/// A browser page from another site must not reach mcpgate: a request with
/// an `Origin` that is not loopback and not in `allowed_origins` gets 403.
/// Requests without `Origin` (not from a browser) pass.
pub(crate) fn check_origin(req: &HttpRequest, config: &Config) -> Result<(), HttpError> {
    let Some(origin) = req.header("origin") else { return Ok(()) };
    if is_loopback_origin(origin) || config.allowed_origins.iter().any(|o| o.eq_ignore_ascii_case(origin)) {
        return Ok(());
    }
    Err(HttpError::new(403, format!("Origin `{}` is not allowed (allowed_origins)", printable(origin))))
}

/// DNS rebinding: a page on `evil.example.com` whose name now resolves to
/// 127.0.0.1 reaches mcpgate with `Host: evil.example.com` and, for a
/// plain `GET`, no `Origin`. Requests must name mcpgate: a loopback name or
/// address, the address it listens on, or one of `allowed_hosts`. A
/// gateway that listens beyond loopback with no `allowed_hosts` accepts any
/// name (it is reached by names mcpgate cannot know). `/healthz` answers
/// any `Host`: load balancers' checks send their own.
pub(crate) fn check_host(req: &HttpRequest, config: &Config) -> Result<(), HttpError> {
    let Some(host) = req.header("host") else { return Ok(()) };
    if req.path == "/healthz" || (!config.listen.ip().is_loopback() && config.allowed_hosts.is_empty()) {
        return Ok(());
    }
    let name = host_name(host);
    let ip = name.trim_matches(['[', ']']).parse::<std::net::IpAddr>().ok();
    let allowed = name.eq_ignore_ascii_case("localhost")
        || ip.is_some_and(|ip| ip.is_loopback() || ip == config.listen.ip())
        || config.allowed_hosts.iter().any(|a| a.eq_ignore_ascii_case(host) || a.eq_ignore_ascii_case(name));
    if allowed {
        return Ok(());
    }
    Err(HttpError::new(
        403,
        format!(
            "Host `{}` is not allowed (allowed_hosts); mcpgate answers requests for its own names only",
            printable(host)
        ),
    ))
}

/// The name in a `Host` value, without the port: `[::1]:80` gives `[::1]`.
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// `http(s)://localhost`, `127.0.0.1` or `[::1]`, with any port.
fn is_loopback_origin(origin: &str) -> bool {
    let Some(rest) = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")) else {
        return false;
    };
    let host = if rest.starts_with('[') {
        rest.split_inclusive(']').next().unwrap_or("")
    } else {
        rest.split(':').next().unwrap_or("")
    };
    matches!(host.to_ascii_lowercase().as_str(), "localhost" | "127.0.0.1" | "[::1]")
        && rest[host.len()..].chars().all(|c| c == ':' || c.is_ascii_digit())
}

fn printable(text: &str) -> String {
    text.chars().take(100).map(|c| if c.is_control() { '?' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_origins_with_any_port_pass_and_others_do_not() {
        for origin in ["http://localhost", "http://localhost:6274", "https://127.0.0.1:8780", "http://[::1]:3000"] {
            assert!(is_loopback_origin(origin), "{origin}");
        }
        for origin in [
            "http://evil.example.com",
            "http://localhost.evil.com",
            "http://127.0.0.1.evil.com:80",
            "null",
            "file://",
            "http://localhost@evil.com",
        ] {
            assert!(!is_loopback_origin(origin), "{origin}");
        }
    }

    fn config(extra: &str) -> Config {
        let text = format!(r#"{{ {extra} "mcpServers": {{"a": {{"url": "http://127.0.0.1:1/mcp"}}}} }}"#);
        Config::parse(&text, &|_| None).unwrap()
    }

    fn from(peer: &str, authorization: Option<&str>) -> HttpRequest {
        let mut req = HttpRequest { peer: Some(peer.parse().unwrap()), ..Default::default() };
        if let Some(value) = authorization {
            req.headers.push("authorization", value);
        }
        req
    }

    fn check_status(req: &HttpRequest, config: &Config) -> Result<(), HttpError> {
        crate::http::auth::Auth::new().check_status(req, config, &crate::stats::Stats::default())
    }

    #[test]
    fn status_pages_answer_loopback_a_valid_token_or_anyone_when_public() {
        let open = config("");
        assert!(check_status(&from("127.0.0.1:5000", None), &open).is_ok());
        assert!(check_status(&from("[::1]:5000", None), &open).is_ok());
        assert_eq!(check_status(&from("192.0.2.7:5000", None), &open).unwrap_err().status, 403);
        let public = config(r#""status_public": true,"#);
        assert!(check_status(&from("192.0.2.7:5000", None), &public).is_ok());
        let tokens = config(r#""auth": {"tokens": [{"token": "0123456789abcdef0123"}]},"#);
        assert_eq!(check_status(&from("192.0.2.7:5000", None), &tokens).unwrap_err().status, 401);
        assert!(check_status(&from("192.0.2.7:5000", Some("Bearer 0123456789abcdef0123")), &tokens).is_ok());
        assert_eq!(check_status(&from("192.0.2.7:5000", Some("Bearer wrong")), &tokens).unwrap_err().status, 401);
    }

    fn with_host(host: &str, path: &str) -> HttpRequest {
        let mut req = HttpRequest { path: path.into(), ..Default::default() };
        req.headers.push("host", host);
        req
    }

    #[test]
    fn requests_must_name_mcpgate_in_their_host() {
        let local = config(r#""allowed_hosts": ["gate.example.com"],"#);
        for host in [
            "127.0.0.1:8780",
            "localhost",
            "LOCALHOST:1",
            "[::1]:8780",
            "[::1]",
            "gate.example.com",
            "gate.example.com:443",
        ] {
            assert!(check_host(&with_host(host, "/status"), &local).is_ok(), "{host}");
        }
        for host in
            ["evil.example.com", "evil.example.com:8780", "127.0.0.1.evil.com", "localhost.evil.com", "10.0.0.1"]
        {
            assert_eq!(check_host(&with_host(host, "/status"), &local).unwrap_err().status, 403, "{host}");
        }
        assert!(check_host(&with_host("evil.example.com", "/healthz"), &local).is_ok());
        let wide = config(r#""listen": "0.0.0.0:8780","#);
        assert!(check_host(&with_host("gate.internal", "/mcp"), &wide).is_ok());
    }
}
