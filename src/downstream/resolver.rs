//! Name resolution for the HTTP client, without threads where none is
//! needed. ureq's own resolver starts an unnamed thread with a 2 MiB stack
//! for every lookup that has a timeout, and panics (aborting mcpgate) when
//! that thread cannot start: measured as two threads per session opened
//! and closed, even for `127.0.0.1`. Here an IP literal or `localhost` is
//! resolved on the spot; other names get a named thread with a small
//! stack, and are looked up inline if that thread cannot start.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

use crate::runtime::threads;

/// Addresses ureq keeps from a lookup (`ResolvedSocketAddrs` holds 16).
const MAX_ADDRS: usize = 16;

#[derive(Debug, Default)]
pub struct Lookup;

impl Resolver for Lookup {
    fn resolve(&self, uri: &Uri, _: &Config, timeout: NextTimeout) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let host = uri.host().ok_or(ureq::Error::HostNotFound)?;
        let default_port = if uri.scheme_str() == Some("https") { 443 } else { 80 };
        let port = uri.port_u16().unwrap_or(default_port);
        let mut out = self.empty();
        for addr in addresses(host, port, *timeout.after)?.into_iter().take(MAX_ADDRS) {
            out.push(addr);
        }
        if out.is_empty() { Err(ureq::Error::HostNotFound) } else { Ok(out) }
    }
}

fn addresses(host: &str, port: u16, timeout: Duration) -> Result<Vec<SocketAddr>, ureq::Error> {
    if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(vec![
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port),
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), port),
        ]);
    }
    let name = format!("{host}:{port}");
    let (tx, rx) = crossbeam_channel::bounded(1);
    let lookup = {
        let name = name.clone();
        move || {
            let _ = tx.send(name.to_socket_addrs().map(Vec::from_iter));
        }
    };
    let found = match threads::spawn("resolve", "", lookup) {
        Ok(handle) => match rx.recv_timeout(timeout) {
            Ok(found) => {
                let _ = handle.join();
                found
            }
            Err(_) => {
                // It ends when the system resolver gives up; joined then.
                threads::join_later(handle);
                return Err(ureq::Error::Timeout(ureq::Timeout::Resolve));
            }
        },
        Err(_) => name.to_socket_addrs().map(Vec::from_iter),
    };
    found.map_err(ureq::Error::Io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_localhost_need_no_lookup_and_no_thread() {
        let before = threads::count_by_role().into_iter().find(|(r, _)| r == "resolve").map(|(_, n)| n);
        let at = |host| addresses(host, 9, Duration::from_secs(1)).unwrap();
        assert_eq!(at("127.0.0.1"), vec!["127.0.0.1:9".parse().unwrap()]);
        assert_eq!(at("[::1]"), vec!["[::1]:9".parse().unwrap()]);
        assert_eq!(at("LOCALHOST").len(), 2);
        let after = threads::count_by_role().into_iter().find(|(r, _)| r == "resolve").map(|(_, n)| n);
        assert_eq!(before, after);
    }
}
