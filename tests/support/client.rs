//! The MCP clients over HTTP come from the test kit (`mcpgate-testkit`,
//! shared with the fixture's tests; re-exported in `support`); what is
//! mcpgate's own is here: HTTPS to its front door.

use std::time::Duration;

/// [`http_agent`](super::http_agent) for `https://` URLs, trusting only the CA of `ca_pem`.
pub fn https_agent(ca_pem: &str) -> ureq::Agent {
    let ca = ureq::tls::Certificate::from_pem(ca_pem.as_bytes()).expect("a PEM certificate");
    let tls = ureq::tls::TlsConfig::builder().root_certs(ureq::tls::RootCerts::new_with_certs(&[ca])).build();
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(30)))
        .tls_config(tls)
        .build()
        .into()
}
