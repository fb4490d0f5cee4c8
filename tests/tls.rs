//! HTTPS both ways, with a private CA the test makes (rcgen): clients over
//! TLS to mcpgate's front door (`tls`), its handshake under the front
//! door's deadlines, plain HTTP on the HTTPS port, the certificate read
//! again on SIGHUP; and mcpgate to an `https://` server (mcpgate's own TLS
//! front door in front of the fixture) trusted through `ca_file`, with each
//! certificate it cannot trust named with its server and what is wrong.
//! scripts/interop/oauth.sh does the same with HAProxy and the Python SDK.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
use serde_json::{Value, json};
use support::{Client, Fixture, Gate, TempDir, config, https_agent, raw_request, signal, wait_until};

/// A test CA: its certificate (PEM) and what signs with it.
struct Ca {
    pem: String,
    issuer: CertifiedIssuer<'static, KeyPair>,
    key_pem: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().unwrap();
        let key_pem = key.serialize_pem();
        let issuer = CertifiedIssuer::self_signed(params, key).unwrap();
        Ca { pem: issuer.pem(), issuer, key_pem }
    }

    /// A server certificate for `names`, written as `<stem>.pem` and `<stem>.key` in `dir`.
    fn leaf(&self, names: &[&str], dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        self.leaf_with(names, dir, stem, |_| {})
    }

    fn leaf_with(
        &self,
        names: &[&str],
        dir: &Path,
        stem: &str,
        change: impl FnOnce(&mut CertificateParams),
    ) -> (PathBuf, PathBuf) {
        let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, names[0]);
        change(&mut params);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (cert_path, key_path) = (dir.join(format!("{stem}.pem")), dir.join(format!("{stem}.key")));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }

    /// Its own certificate and key, written as a server's (the mistake of CaUsedAsEndEntity).
    fn as_server(&self, dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        let (cert_path, key_path) = (dir.join(format!("{stem}.pem")), dir.join(format!("{stem}.key")));
        std::fs::write(&cert_path, &self.pem).unwrap();
        std::fs::write(&key_path, &self.key_pem).unwrap();
        (cert_path, key_path)
    }

    fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, &self.pem).unwrap();
        path
    }
}

/// mcpgate serving HTTPS with this certificate and key, in front of `fx`.
fn https_gate(fx: &Fixture, cert: &Path, key: &Path, extra: Value) -> Gate {
    let mut c = config(&[("fx", fx.url())]);
    c["tls"] = json!({"cert_file": cert, "key_file": key});
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    Gate::start_checked(&c)
}

fn get_json(agent: &ureq::Agent, url: &str) -> Value {
    let mut response = agent.get(url).call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap()
}

/// A TLS client trusting `ca` only, for what ureq hides (one connection held open).
fn connect(
    addr: std::net::SocketAddr,
    ca: &Ca,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    let mut roots = rustls::RootCertStore::empty();
    let der = rustls::pki_types::CertificateDer::from(ca.issuer.der().to_vec());
    roots.add(der).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).map_err(|e| e.to_string())?;
    }
    Ok(rustls::StreamOwned::new(conn, tcp))
}

/// `GET /healthz` on an open TLS connection, kept alive; the status.
fn healthz_on(stream: &mut rustls::StreamOwned<rustls::ClientConnection, TcpStream>) -> u16 {
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.ends_with(b"ok\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&answer).split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[test]
fn https_on_the_front_door_serves_mcp_to_a_client_that_trusts_its_ca() {
    let dir = TempDir::new();
    let ca = Ca::new("mcpgate test CA");
    let (cert, key) = ca.leaf(&["localhost", "127.0.0.1"], &dir.0, "gate");
    let fx = Fixture::start("fx", &[]);
    let gate = https_gate(&fx, &cert, &key, json!({}));
    let agent = https_agent(&ca.pem);
    let mut client = Client::with_agent(&format!("https://localhost:{}/mcp", gate.addr.port()), agent.clone());
    client.initialize();
    assert_eq!(client.tool_text("fx__echo", json!({"text": "over TLS"})), "over TLS");
    let progress = client.request(
        "tools/call",
        json!({"name": "fx__slow", "arguments": {"steps": 3, "ms": 30}, "_meta": {"progressToken": "p"}}),
    );
    assert_eq!(progress.events.len(), 3, "progress as SSE over TLS: {progress:?}");
    assert_eq!(client.delete(), 200);
    let status = get_json(&agent, &format!("https://127.0.0.1:{}/status.json", gate.addr.port()));
    assert!(status["tls"]["handshakes"].as_u64().unwrap() >= 1, "{}", status["tls"]);
    assert_eq!(status["tls"]["handshake_failures"], 0, "{}", status["tls"]);
    // A client that does not trust the CA gets no answer at all.
    let untrusting = https_agent(&Ca::new("another CA").pem);
    assert!(untrusting.get(&format!("https://localhost:{}/healthz", gate.addr.port())).call().is_err());
}

#[test]
fn plain_http_on_the_https_port_gets_400_at_once_saying_to_use_https() {
    let dir = TempDir::new();
    let ca = Ca::new("mcpgate test CA");
    let (cert, key) = ca.leaf(&["localhost"], &dir.0, "gate");
    let fx = Fixture::start("fx", &[]);
    let gate = https_gate(&fx, &cert, &key, json!({"header_timeout_secs": 30}));
    let started = Instant::now();
    let reply = raw_request(gate.addr, "GET", "/healthz", &[], b"");
    assert_eq!(reply.status, 400, "{reply:?}");
    assert!(reply.body.contains("this port speaks HTTPS: use https://"), "{reply:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "at once, not at a timeout: {:?}", started.elapsed());
}

#[test]
fn a_trickled_handshake_is_cut_at_header_timeout_and_locks_nobody_out() {
    let dir = TempDir::new();
    let ca = Ca::new("mcpgate test CA");
    let (cert, key) = ca.leaf(&["localhost"], &dir.0, "gate");
    let fx = Fixture::start("fx", &[]);
    let gate = https_gate(&fx, &cert, &key, json!({"header_timeout_secs": 2, "max_connections": 4}));
    // Twice the slots, each with the first bytes of a ClientHello and then nothing.
    let started = Instant::now();
    let mut slow: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut s = TcpStream::connect(gate.addr).unwrap();
            s.write_all(&[0x16, 0x03, 0x01]).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // A real client still gets in: the slowest give their slots up.
    let mut ok = connect(gate.addr, &ca).expect("a handshake while the slots are held");
    assert_eq!(healthz_on(&mut ok), 200);
    for s in &mut slow {
        let mut buf = [0u8; 64];
        let read = s.read(&mut buf);
        assert!(matches!(read, Ok(0) | Err(_)), "closed, not answered: {read:?}");
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(8), "every trickled handshake cut within about 2 s: {took:?}");
}

#[test]
fn sighup_gives_new_connections_the_new_certificate_and_a_broken_file_leaves_the_old_one() {
    let dir = TempDir::new();
    let (first, second) = (Ca::new("first CA"), Ca::new("second CA"));
    let (cert, key) = first.leaf(&["localhost"], &dir.0, "gate");
    let fx = Fixture::start("fx", &[]);
    let gate = https_gate(&fx, &cert, &key, json!({}));
    let mut open = connect(gate.addr, &first).expect("the first certificate");
    assert_eq!(healthz_on(&mut open), 200);
    second.leaf(&["localhost"], &dir.0, "gate");
    signal(gate.pid(), "HUP");
    assert!(
        wait_until(Duration::from_secs(10), || connect(gate.addr, &second).is_ok()),
        "new connections get the new certificate: {}",
        gate.stderr()
    );
    let refused = connect(gate.addr, &first).err().unwrap_or_default();
    assert!(refused.contains("UnknownIssuer") || refused.contains("unknown"), "the old CA no longer fits: {refused}");
    assert_eq!(healthz_on(&mut open), 200, "a connection open before keeps its certificate");
    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n").unwrap();
    signal(gate.pid(), "HUP");
    assert!(
        wait_until(Duration::from_secs(10), || gate.stderr().contains("the certificate and key in force stay")),
        "{}",
        gate.stderr()
    );
    let mut after = connect(gate.addr, &second).expect("the certificate in force stayed");
    assert_eq!(healthz_on(&mut after), 200);
}

/// The message of a call to `sec__fx__echo` through a gate in front of `url`.
fn call_through(url: &str, extra: Value, server_extra: Value) -> (String, Gate) {
    let mut c = config(&[("sec", url.to_string())]);
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    for (k, v) in server_extra.as_object().unwrap() {
        c["mcpServers"]["sec"][k] = v.clone();
    }
    let gate = Gate::start_checked(&c);
    let mut client = gate.client();
    client.initialize();
    let reply = client.call_tool("sec__fx__echo", json!({"text": "through"}));
    let text = match reply.body["result"]["content"][0]["text"].as_str() {
        Some(text) => text.to_string(),
        None => reply.error_message(),
    };
    (text, gate)
}

#[test]
fn mcpgate_reaches_an_https_server_of_a_private_ca_given_in_ca_file() {
    let dir = TempDir::new();
    let ca = Ca::new("private CA");
    let (cert, key) = ca.leaf(&["localhost", "127.0.0.1"], &dir.0, "backend");
    let fx = Fixture::start("fx", &[]);
    let backend = https_gate(&fx, &cert, &key, json!({}));
    let url = format!("https://localhost:{}/mcp", backend.addr.port());
    let ca_file = ca.write(&dir.0, "ca.pem");
    let (own, _g1) = call_through(&url, json!({}), json!({"ca_file": ca_file}));
    assert_eq!(own, "through", "the server's own ca_file");
    let (top, _g2) = call_through(&url, json!({"ca_file": ca_file}), json!({}));
    assert_eq!(top, "through", "the top-level ca_file");
}

#[test]
fn a_certificate_mcpgate_cannot_trust_is_named_with_its_server_and_what_is_wrong() {
    let dir = TempDir::new();
    let ca = Ca::new("private CA");
    let ca_file = ca.write(&dir.0, "ca.pem");
    let fx = Fixture::start("fx", &[]);
    let good = ca.leaf(&["localhost"], &dir.0, "good");
    let expired = ca.leaf_with(&["localhost"], &dir.0, "expired", |p| {
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
    });
    let ca_as_server = ca.as_server(&dir.0, "ca-as-server");
    let backends: Vec<(Gate, &str, Value, &str)> = vec![
        (
            https_gate(&fx, &good.0, &good.1, json!({})),
            "localhost",
            json!({}),
            "is signed by a CA not in the bundled roots",
        ),
        (
            https_gate(&fx, &good.0, &good.1, json!({})),
            "127.0.0.1",
            json!({"ca_file": ca_file}),
            "is for localhost and not for",
        ),
        (https_gate(&fx, &expired.0, &expired.1, json!({})), "localhost", json!({"ca_file": ca_file}), "expired"),
        (
            https_gate(&fx, &ca_as_server.0, &ca_as_server.1, json!({})),
            "localhost",
            json!({"ca_file": ca_file}),
            "is a CA certificate, not a server's (CaUsedAsEndEntity)",
        ),
    ];
    for (backend, host, server_extra, words) in &backends {
        let url = format!("https://{host}:{}/mcp", backend.addr.port());
        let (message, gate) = call_through(&url, json!({}), server_extra.clone());
        eprintln!("{url}: {message}");
        assert!(message.starts_with("server `sec`: unreachable: "), "the server is named: {message}");
        assert!(message.contains(&format!("TLS: the server's certificate {words}")), "`{words}` not in: {message}");
        let status = gate.status();
        let last = status["servers"]["sec"]["last_error"].as_str().unwrap_or_default().to_string();
        assert!(last.contains(words), "the status page says it too: {last}");
    }
}

#[test]
fn the_systemd_watchdog_checks_healthz_over_https() {
    let dir = TempDir::new();
    let ca = Ca::new("mcpgate test CA");
    // A certificate for the public name only: mcpgate checks itself on loopback all the same.
    let (cert, key) = ca.leaf(&["gate.example.com"], &dir.0, "gate");
    let fx = Fixture::start("fx", &[]);
    let mut c = config(&[("fx", fx.url())]);
    c["tls"] = json!({"cert_file": cert, "key_file": key});
    let path = dir.0.join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let gate = Gate::start_with(&c, |mut command| {
        command.env("NOTIFY_SOCKET", &path).env("WATCHDOG_USEC", "200000").env_remove("WATCHDOG_PID");
        command
    });
    let mut pings = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = [0u8; 4096];
    while pings < 3 && Instant::now() < deadline {
        if let Ok(n) = socket.recv(&mut buf) {
            pings += usize::from(String::from_utf8_lossy(&buf[..n]).lines().any(|l| l == "WATCHDOG=1"));
        }
    }
    assert!(pings >= 3, "the watchdog is pinged: {}", gate.stderr());
    assert!(!gate.stderr().contains("did not answer its own /healthz"), "{}", gate.stderr());
}
