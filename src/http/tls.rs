//! HTTPS on the front door (`tls.cert_file`, `tls.key_file`): rustls with
//! ring, TLS 1.2 and 1.3, ALPN `http/1.1`.
//!
//! - The certificate and key are read at start and again on SIGHUP or
//!   `POST /reload`: new handshakes get the new pair, open connections keep
//!   theirs (a `ServerConnection` holds its config), and a file that does
//!   not load is refused with the old pair kept and the reason logged.
//! - The handshake runs on the connection's own thread, inside the request
//!   head's deadline (`header_timeout_secs`) and in the phase that lets a
//!   new connection take its slot: a client that trickles its handshake is
//!   cut like one that trickles its head.
//! - A client speaking plain HTTP to the TLS port is answered at once, in
//!   plain HTTP, with a 400 saying to use `https://`.
//!
//! One `ServerConnection` is both directions of a connection, so it sits
//! behind a mutex. Only the connection's thread takes it (the accept thread
//! touches the TCP socket alone, to shut it down), so it is never contended;
//! the I/O under it is that connection's own.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use rustls::ServerConfig;
use rustls::server::ServerConnection;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::{Invalid, TlsFiles, read_certs};

/// The first byte of every TLS record that opens a handshake.
const HANDSHAKE_RECORD: u8 = 0x16;

/// The front door's TLS settings, swapped whole on reload.
pub struct Acceptor {
    /// Guards the swap only; each new connection clones the Arc.
    current: RwLock<Arc<ServerConfig>>,
    /// The files the current settings came from.
    files: Mutex<TlsFiles>,
}

impl Acceptor {
    /// Loads the certificate chain and key; the error names the file and what is wrong.
    pub fn load(files: &TlsFiles) -> Result<Acceptor, Invalid> {
        let config = server_config(files)?;
        Ok(Acceptor { current: RwLock::new(Arc::new(config)), files: Mutex::new(files.clone()) })
    }

    /// Loads `files` again (their paths may have changed): new handshakes
    /// use them. On an error the settings in force stay, and it is returned.
    pub(crate) fn reload(&self, files: &TlsFiles) -> Result<(), Invalid> {
        let config = server_config(files)?;
        *self.current.write() = Arc::new(config);
        *self.files.lock() = files.clone();
        Ok(())
    }

    /// A new connection's TLS state, with the settings in force now.
    pub(super) fn stream(&self, tcp: TcpStream) -> Result<Box<TlsStream>, (TcpStream, rustls::Error)> {
        let config = self.current.read().clone();
        match ServerConnection::new(config) {
            Ok(conn) => Ok(Box::new(TlsStream { tcp, conn: Mutex::new(conn) })),
            Err(e) => Err((tcp, e)),
        }
    }
}

fn server_config(files: &TlsFiles) -> Result<ServerConfig, Invalid> {
    let certs = read_certs(&files.cert_file, "tls.cert_file")?;
    let key = read_key(&files.key_file)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| Invalid::new("tls", e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            let (key, cert) = (files.key_file.display(), files.cert_file.display());
            Invalid::new("tls.key_file", format!("`{key}` does not fit tls.cert_file `{cert}`: {e}"))
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, Invalid> {
    let file = path.display();
    let pem = std::fs::read(path).map_err(|e| Invalid::new("tls.key_file", format!("`{file}`: cannot read: {e}")))?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        Invalid::new("tls.key_file", format!("`{file}`: no private key in it (PKCS#8, PKCS#1 or SEC1 PEM): {e}"))
    })
}

/// Why a handshake did not complete.
#[derive(Debug)]
pub(super) enum HandshakeError {
    /// The client spoke plain HTTP (or anything but TLS); it was told so.
    NotTls,
    /// Not done within the deadline.
    TimedOut,
    /// The client left.
    Closed,
    Tls(rustls::Error),
    Io(io::Error),
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::NotTls => f.write_str("the client does not speak TLS (plain HTTP on the HTTPS port?)"),
            HandshakeError::TimedOut => f.write_str("the handshake was not done within header_timeout_secs"),
            HandshakeError::Closed => f.write_str("the client closed the connection during the handshake"),
            HandshakeError::Tls(e) => write!(f, "{e}"),
            HandshakeError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for HandshakeError {}

/// One client connection over TLS.
pub(crate) struct TlsStream {
    tcp: TcpStream,
    /// Guards the TLS state of both directions; only this connection's thread takes it.
    conn: Mutex<ServerConnection>,
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "deadline passed")
}

fn left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() { Err(timed_out()) } else { Ok(left) }
}

/// Writes every TLS record `conn` has queued, within `deadline`.
fn flush(conn: &mut ServerConnection, tcp: &TcpStream, deadline: Instant) -> io::Result<()> {
    while conn.wants_write() {
        tcp.set_write_timeout(Some(left(deadline)?))?;
        match conn.write_tls(&mut &*tcp) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl TlsStream {
    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Runs the handshake to its end, within `deadline`.
    pub(super) fn handshake(&self, deadline: Instant) -> Result<(), HandshakeError> {
        let io_error = |e: io::Error| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => HandshakeError::TimedOut,
            _ => HandshakeError::Io(e),
        };
        // What the client sends first tells TLS from plain HTTP.
        let mut first = [0u8; 1];
        self.tcp.set_read_timeout(Some(left(deadline).map_err(io_error)?)).map_err(HandshakeError::Io)?;
        match self.tcp.peek(&mut first) {
            Ok(0) => return Err(HandshakeError::Closed),
            Ok(_) if first[0] != HANDSHAKE_RECORD => {
                self.refuse_plain_http();
                return Err(HandshakeError::NotTls);
            }
            Ok(_) => {}
            Err(e) => return Err(io_error(e)),
        }
        let mut conn = self.conn.lock();
        // Each turn reads or writes, or ends: bounded by the deadline.
        while conn.is_handshaking() {
            flush(&mut conn, &self.tcp, deadline).map_err(io_error)?;
            if !conn.is_handshaking() {
                break;
            }
            self.tcp.set_read_timeout(Some(left(deadline).map_err(io_error)?)).map_err(HandshakeError::Io)?;
            match conn.read_tls(&mut &self.tcp) {
                Ok(0) => return Err(HandshakeError::Closed),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_error(e)),
            }
            if let Err(e) = conn.process_new_packets() {
                // The alert that says why, if the client still listens.
                let _ = flush(&mut conn, &self.tcp, deadline);
                return Err(HandshakeError::Tls(e));
            }
        }
        flush(&mut conn, &self.tcp, deadline).map_err(io_error)
    }

    /// A plain-HTTP answer for a client that does not speak TLS here.
    fn refuse_plain_http(&self) {
        let body = "this port speaks HTTPS: use https:// in the URL\n";
        let answer = format!(
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = self.tcp.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = (&self.tcp).write_all(answer.as_bytes());
    }

    pub(super) fn read_within(&self, buf: &mut [u8], timeout: Duration) -> io::Result<usize> {
        let deadline = Instant::now() + timeout;
        let mut conn = self.conn.lock();
        loop {
            match conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // Closed without close_notify: the end, as with plain TCP.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            // Whatever the last records asked for (a key update's answer).
            flush(&mut conn, &self.tcp, deadline)?;
            self.tcp.set_read_timeout(Some(left(deadline)?))?;
            match conn.read_tls(&mut &self.tcp) {
                Ok(0) => return Ok(0),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if let Err(e) = conn.process_new_packets() {
                let _ = flush(&mut conn, &self.tcp, deadline);
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
    }

    pub(super) fn write_within(&self, bufs: &[IoSlice<'_>], timeout: Duration) -> io::Result<usize> {
        let deadline = Instant::now() + timeout;
        let mut conn = self.conn.lock();
        // Plaintext in (rustls takes up to its buffer limit), records out.
        let taken = conn.writer().write_vectored(bufs)?;
        flush(&mut conn, &self.tcp, deadline)?;
        Ok(taken)
    }

    /// Whether the client is gone: its TCP side closed, or it sent
    /// close_notify. What it sent instead (a pipelined request) stays in
    /// the TLS state for the next read.
    pub(super) fn peer_closed(&self) -> bool {
        // Only this connection's thread asks; a held lock means it is reading.
        let Some(mut conn) = self.conn.try_lock() else { return false };
        if self.tcp.set_nonblocking(true).is_err() {
            return false;
        }
        let read = conn.read_tls(&mut &self.tcp);
        let _ = self.tcp.set_nonblocking(false);
        match read {
            Ok(0) => true,
            Ok(_) => conn.process_new_packets().map_or(true, |state| state.peer_has_closed()),
            // `Other`: rustls' buffer of plaintext not read yet is full: not gone.
            Err(e) => {
                !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::Other)
            }
        }
    }
}

/// `GET /healthz` over TLS on `tcp`, a connection to mcpgate's own HTTPS
/// port (the watchdog's check that the front door answers); whether it
/// answered 200. Its certificate is not checked: this is mcpgate talking
/// to itself on loopback, and a check would fail for a certificate made for
/// the public name only.
pub(crate) fn healthz_on_own_port(tcp: TcpStream, timeout: Duration) -> bool {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let Ok(builder) =
        rustls::ClientConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()
    else {
        return false;
    };
    let config =
        builder.dangerous().with_custom_certificate_verifier(Arc::new(OwnPort(provider))).with_no_client_auth();
    let Ok(name) = rustls_pki_types::ServerName::try_from("localhost") else { return false };
    let Ok(conn) = rustls::ClientConnection::new(Arc::new(config), name) else { return false };
    let _ = tcp.set_read_timeout(Some(timeout));
    let _ = tcp.set_write_timeout(Some(timeout));
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    if stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// Takes the certificate of mcpgate's own port, whatever it is; checks
/// the handshake's signatures as usual.
#[derive(Debug)]
struct OwnPort(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for OwnPort {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
