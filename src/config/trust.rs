//! The TLS keys: `tls` (HTTPS on the front door), `ca_file` and
//! `trust_store` (whom `https://` servers and the OAuth issuer must be
//! vouched for by), and each server's own `ca_file`. Files are read here,
//! at start and at every reload, so that a missing or broken one is
//! refused with its key before anything runs.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use super::invalid::{Invalid, kind};
use super::reader::Keys;

/// The certificate and key the front door serves HTTPS with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub(crate) cert_file: PathBuf,
    pub(crate) key_file: PathBuf,
}

/// The roots a TLS connection to a server is checked against; shared by
/// every server that has no `ca_file` of its own (one pointer each).
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Trust(Arc<Roots>);

#[derive(Default, PartialEq, Eq)]
pub(crate) struct Roots {
    /// The system's store instead of the roots built in (webpki-roots).
    pub(crate) system: bool,
    /// DER certificates: the system's store (when `system`), then `ca_file`'s.
    pub(crate) roots: Vec<Vec<u8>>,
    /// Where the roots besides the built-in ones came from, for error messages.
    pub(crate) sources: Vec<String>,
}

impl std::ops::Deref for Trust {
    type Target = Roots;

    fn deref(&self) -> &Roots {
        &self.0
    }
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Trust(system: {}, {} roots from {:?})", self.system, self.roots.len(), self.sources)
    }
}

impl Trust {
    /// This trust, plus the certificates of `path` (a server's own `ca_file`).
    pub(crate) fn with_ca_file(&self, path: &str, key: &str) -> Result<Trust, Invalid> {
        let mut roots = self.roots.clone();
        roots.extend(pem_certs(path, key)?);
        let mut sources = self.sources.clone();
        sources.push(format!("{key} ({path})"));
        Ok(Trust(Arc::new(Roots { system: self.system, roots, sources })))
    }

    /// What the roots are, in words: "the bundled roots and ca_file (/x.pem)".
    #[cfg(any(feature = "tls", test))]
    pub(crate) fn describe(&self) -> String {
        let base = if self.system { "the system's store" } else { "the bundled roots" };
        let extra: Vec<&str> =
            self.sources.iter().map(String::as_str).filter(|s| !s.starts_with("trust_store")).collect();
        if extra.is_empty() { base.to_string() } else { format!("{base} and {}", extra.join(", ")) }
    }
}

/// Where a system keeps its trusted roots as one file, most common first.
const SYSTEM_BUNDLES: &[&str] =
    &["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];
/// Where they are one file each, when there is no bundle.
const SYSTEM_DIR: &str = "/etc/ssl/certs";

/// `trust_store` and `ca_file`, the trust every `https://` server starts from.
pub(super) fn trust(keys: &mut Keys<'_>) -> Result<Trust, Invalid> {
    let system = match keys.string("trust_store")?.as_deref() {
        None | Some("bundled") => false,
        Some("system") => true,
        Some(other) => {
            return Err(Invalid::new("trust_store", format!("`{other}` is not `bundled` or `system`")));
        }
    };
    let mut trust = Trust(Arc::new(Roots { system, ..Roots::default() }));
    if system {
        let (roots, from) = system_roots()?;
        trust = Trust(Arc::new(Roots { system, roots, sources: vec![format!("trust_store ({from})")] }));
    }
    if let Some(path) = keys.string("ca_file")? {
        trust = trust.with_ca_file(&path, "ca_file")?;
    }
    Ok(trust)
}

/// The system's roots, and the file or directory they came from.
fn system_roots() -> Result<(Vec<Vec<u8>>, String), Invalid> {
    if !cfg!(feature = "tls") {
        return Err(Invalid::new("trust_store", "needs mcpgate built with the `tls` feature"));
    }
    for bundle in SYSTEM_BUNDLES {
        if std::path::Path::new(bundle).is_file() {
            return Ok((pem_certs(bundle, "trust_store")?, bundle.to_string()));
        }
    }
    let mut roots = Vec::new();
    let entries = std::fs::read_dir(SYSTEM_DIR)
        .map_err(|e| Invalid::new("trust_store", format!("no system store: cannot read {SYSTEM_DIR}: {e}")))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pem" || x == "crt"))
        .collect();
    paths.sort();
    for path in paths {
        // A file that is not a certificate (or no longer there) is skipped, as OpenSSL does.
        if let Ok(certs) = pem_certs(&path.to_string_lossy(), "trust_store") {
            roots.extend(certs);
        }
    }
    if roots.is_empty() {
        return Err(Invalid::new(
            "trust_store",
            format!("no system store: neither {} nor a certificate in {SYSTEM_DIR}", SYSTEM_BUNDLES.join(", ")),
        ));
    }
    Ok((roots, SYSTEM_DIR.to_string()))
}

/// The certificates of a PEM file, in order; `key` names it in errors.
#[cfg(feature = "tls")]
pub(crate) fn read_certs(
    path: &std::path::Path,
    key: &str,
) -> Result<Vec<rustls_pki_types::CertificateDer<'static>>, Invalid> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;

    let file = path.display();
    let pem = std::fs::read(path).map_err(|e| Invalid::new(key, format!("`{file}`: cannot read: {e}")))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Invalid::new(key, format!("`{file}`: not valid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(Invalid::new(key, format!("`{file}`: no `BEGIN CERTIFICATE` block in it")));
    }
    Ok(certs)
}

/// The certificates (DER) of a PEM file; `key` names it in errors.
#[cfg(feature = "tls")]
fn pem_certs(path: &str, key: &str) -> Result<Vec<Vec<u8>>, Invalid> {
    let certs = read_certs(std::path::Path::new(path), key)?;
    Ok(certs.into_iter().map(|c| c.as_ref().to_vec()).collect())
}

#[cfg(not(feature = "tls"))]
fn pem_certs(_path: &str, key: &str) -> Result<Vec<Vec<u8>>, Invalid> {
    Err(Invalid::new(key, "needs mcpgate built with the `tls` feature"))
}

/// `tls`: the certificate and key of HTTPS on the front door.
pub(super) fn tls_files(value: &Value) -> Result<TlsFiles, Invalid> {
    let Value::Object(map) = value else {
        return Err(Invalid::new(
            "tls",
            format!("expected an object with cert_file and key_file, found {}", kind(value)),
        ));
    };
    if !cfg!(feature = "tls") {
        return Err(Invalid::new("tls", "needs mcpgate built with the `tls` feature"));
    }
    let mut keys = Keys::new(map, "tls", "tls");
    let cert_file = keys.string("cert_file")?.ok_or_else(|| Invalid::new("tls.cert_file", "missing"))?;
    let key_file = keys.string("key_file")?.ok_or_else(|| Invalid::new("tls.key_file", "missing"))?;
    keys.refuse_unknown()?;
    Ok(TlsFiles { cert_file: cert_file.into(), key_file: key_file.into() })
}
