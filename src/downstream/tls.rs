//! TLS to `https://` servers (and to the OAuth issuer): one rustls client
//! config per server, built from its [`Trust`] (the bundled roots or the
//! system's, plus `ca_file`s), shared by every agent of that server.
//!
//! Why not ureq's own TLS connector: it accepts a list of certificates
//! *instead of* the bundled roots, not beside them (a `ca_file` would then
//! need a second copy of the Mozilla roots in the binary), and it builds
//! its rustls config again for every agent, one per downstream session's
//! stream. This connector is ureq's, with the config handed in, and with
//! certificate errors said in words that name the fix.

use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{CertificateError, ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use ureq::Error;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport, TransportAdapter,
};

use crate::config::Trust;

/// The client TLS settings checking servers against `trust`.
fn client_config(trust: &Trust) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    if !trust.system {
        roots.roots = webpki_roots::TLS_SERVER_ROOTS.to_vec();
    }
    let (added, ignored) =
        roots.add_parsable_certificates(trust.roots.iter().map(|der| CertificateDer::from(&der[..])));
    if ignored > 0 {
        log::warn!(
            "{ignored} of {} certificates of {} are not usable as roots; left out",
            added + ignored,
            trust.describe()
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Wraps `https://` connections in TLS with a given config; `http://` ones pass as they are.
#[derive(Clone)]
pub(crate) struct TlsConnector(Arc<Settings>);

struct Settings {
    /// Or why there is none (each `https://` connection then fails saying so).
    /// Built at the first `https://` connection: most servers are `http://`
    /// ones, and the config (the provider, a copy of the bundled roots) was
    /// 16 KiB of heap at rest per server, of 88 KiB with two. With roots of
    /// `ca_file` or the system's, it is built at once, so that a certificate
    /// that is not usable is said at start.
    config: OnceLock<Result<Arc<ClientConfig>, String>>,
    roots: Trust,
    /// What the roots are, for errors: "the bundled roots and ca_file (...)".
    trust: String,
}

impl std::fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsConnector({})", self.0.trust)
    }
}

impl TlsConnector {
    pub(crate) fn new(trust: &Trust) -> TlsConnector {
        let settings = Settings { config: OnceLock::new(), roots: trust.clone(), trust: trust.describe() };
        if !trust.roots.is_empty() {
            settings.config();
        }
        TlsConnector(Arc::new(settings))
    }
}

impl Settings {
    fn config(&self) -> &Result<Arc<ClientConfig>, String> {
        self.config.get_or_init(|| client_config(&self.roots))
    }
}

impl<In: Transport> Connector<In> for TlsConnector {
    type Out = Either<In, TlsTransport>;

    fn connect(&self, details: &ConnectionDetails, chained: Option<In>) -> Result<Option<Self::Out>, Error> {
        let Some(transport) = chained else {
            return Err(Error::ConnectionFailed);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let host = details.uri.host().unwrap_or_default().trim_matches(['[', ']']);
        let name = ServerName::try_from(host.to_string()).map_err(|_| Error::Tls("not a DNS name or an IP address"))?;
        let config = self.0.config().clone().map_err(|why| Error::Io(std::io::Error::other(why)))?;
        let mut conn = ClientConnection::new(config, name)?;
        let mut sock = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        sock.set_timeout(details.timeout);
        conn.complete_io(&mut sock).map_err(|e| self.explain(e))?;
        let buffers = LazyBuffers::new(details.config.input_buffer_size(), details.config.output_buffer_size());
        Ok(Some(Either::B(TlsTransport { buffers, stream: StreamOwned { conn, sock } })))
    }
}

impl TlsConnector {
    /// A handshake error, in words when it is about the certificate.
    fn explain(&self, e: std::io::Error) -> Error {
        let Some(tls) = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) else {
            return Error::Io(e);
        };
        let words = match tls {
            rustls::Error::InvalidCertificate(cert) => certificate_problem(cert, &self.0.trust),
            other => format!("TLS handshake failed: {other}"),
        };
        Error::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, words))
    }
}

/// What is wrong with a server's certificate, and what to do about it.
pub(crate) fn certificate_problem(e: &CertificateError, trust: &str) -> String {
    let what = match e {
        CertificateError::UnknownIssuer => format!(
            "is signed by a CA not in {trust}: add that CA's certificate to `ca_file` (or the server's own `ca_file`), \
             or set `trust_store` to `system` if the system trusts it"
        ),
        CertificateError::NotValidForNameContext { expected, presented } => {
            let expected = match expected {
                ServerName::DnsName(name) => name.as_ref().to_string(),
                ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
                other => format!("{other:?}"),
            };
            // rustls shows them as `DnsName("x")`.
            let presented: Vec<&str> = presented
                .iter()
                .map(|p| p.strip_prefix("DnsName(\"").and_then(|p| p.strip_suffix("\")")).unwrap_or(p))
                .collect();
            format!("is for {} and not for {expected}: connect by one of those names", presented.join(", "))
        }
        CertificateError::NotValidForName => "is not for the host name in the URL".into(),
        CertificateError::Expired => "has expired".into(),
        CertificateError::ExpiredContext { time, not_after } => {
            let until = std::time::UNIX_EPOCH + std::time::Duration::from_secs(not_after.as_secs());
            let days = time.as_secs().saturating_sub(not_after.as_secs()) / 86_400;
            format!("expired {days} day(s) ago: it was valid until {}", crate::runtime::clock::http_date(until))
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "is not valid yet (is this host's clock right?)".into()
        }
        CertificateError::Revoked => "was revoked".into(),
        CertificateError::BadSignature => "has a signature that does not verify".into(),
        CertificateError::BadEncoding => "is not a valid certificate (bad DER)".into(),
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            "is not for TLS servers (its extended key usage says otherwise)".into()
        }
        CertificateError::Other(other) if other.to_string().contains("CaUsedAsEndEntity") => {
            "is a CA certificate, not a server's (CaUsedAsEndEntity): give the server a certificate issued by that CA, \
             and put the CA in `ca_file`"
                .into()
        }
        other => format!("was refused: {other}"),
    };
    format!("TLS: the server's certificate {what}")
}

/// An `https://` connection: ureq's buffers over a rustls stream.
pub(crate) struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl std::fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsTransport")
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let amount = self.stream.read(input)?;
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}
