//! The protocol versions mcpgate speaks, and what differs between them, in
//! one place: a rule that depends on the version asks here.

/// Protocol versions mcpgate speaks, newest first.
pub(crate) const SUPPORTED: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// The newest: what mcpgate offers when a peer asks for one it does not speak.
pub(crate) const NEWEST: &str = SUPPORTED[0];

/// The version of the old HTTP+SSE transport. Its servers often speak
/// nothing newer: mcpgate takes it in their answer to `initialize` (the
/// client's newer version is what they were asked, and what crosses is the
/// same JSON-RPC), but offers it to no client, who would need that
/// transport to speak it.
pub(crate) const HTTP_SSE: &str = "2024-11-05";

/// The version of the 2026-07-28 era (`stateless`): no `initialize`, no
/// session, so no `initialize` negotiates it: not in `SUPPORTED`.
pub(crate) const STATELESS: &str = "2026-07-28";

/// Whether mcpgate speaks `version`.
/// The version as one of mcpgate's own constants, if it is one of the
/// versions it speaks (either era's).
pub(crate) fn known(version: &str) -> Option<&'static str> {
    SUPPORTED.iter().chain(&[HTTP_SSE, STATELESS]).find(|v| **v == version).copied()
}

pub(crate) fn supported(version: &str) -> bool {
    SUPPORTED.contains(&version)
}

/// The version to answer an `initialize` asking for `requested` with: the
/// same when mcpgate speaks it, else the newest (the peer then decides).
pub(crate) fn negotiate(requested: &str) -> &'static str {
    SUPPORTED.iter().find(|v| **v == requested).copied().unwrap_or(NEWEST)
}

/// Whether mcpgate takes `version` from a server's `initialize` answer:
/// one it speaks, or, from a server of the old HTTP+SSE transport
/// (`old_transport`), that transport's own.
pub(crate) fn server_may_answer(version: &str, old_transport: bool) -> bool {
    supported(version) || (old_transport && version == HTTP_SSE)
}

/// JSON-RPC batches: in 2025-03-26 only (2025-06-18 removed them).
pub(crate) fn has_batches(version: &str) -> bool {
    version == "2025-03-26"
}

/// SSE streams open with a priming event (an id to resume from, and a
/// retry delay): from 2025-11-25 (SEP-1699).
pub(crate) fn primes_streams(version: &str) -> bool {
    version >= "2025-11-25"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_by_version() {
        assert_eq!(negotiate("2025-06-18"), "2025-06-18");
        assert_eq!(negotiate("2024-11-05"), NEWEST);
        assert!(has_batches("2025-03-26") && !has_batches("2025-06-18"));
        assert!(primes_streams("2025-11-25") && !primes_streams("2025-06-18"));
        assert!(SUPPORTED.iter().all(|v| supported(v)) && !supported("2026-07-28"));
        assert!(!supported(HTTP_SSE), "offered to no client");
        assert!(server_may_answer(HTTP_SSE, true) && !server_may_answer(HTTP_SSE, false));
        assert!(server_may_answer(NEWEST, true) && !server_may_answer("2024-10-07", true));
        assert_eq!(
            (known("2025-06-18"), known(HTTP_SSE), known("2026-07-28")),
            (Some("2025-06-18"), Some(HTTP_SSE), Some("2026-07-28"))
        );
        assert_eq!(known("2024-10-07"), None);
    }
}
