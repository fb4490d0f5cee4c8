//! The `WWW-Authenticate: Bearer` challenge of a server's 401 or 403
//! (RFC 6750, with RFC 9728's `resource_metadata`), read: what an error
//! says of it, and where `oauth/` starts a sign-in from.

/// What a `WWW-Authenticate: Bearer` challenge says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Challenge {
    pub(crate) error: Option<String>,
    pub(crate) error_description: Option<String>,
    pub(crate) scope: Option<String>,
    pub(crate) resource_metadata: Option<String>,
}

impl Challenge {
    /// The scopes it names, in order.
    pub(crate) fn scopes(&self) -> Vec<String> {
        self.scope.as_deref().map(|s| s.split_whitespace().map(str::to_string).collect()).unwrap_or_default()
    }
}

/// The Bearer challenge of a `WWW-Authenticate` value (others ignored).
pub(crate) fn parse_challenge(header: &str) -> Option<Challenge> {
    let at = header.to_ascii_lowercase().find("bearer")?;
    let mut rest = header[at + "bearer".len()..].trim_start();
    let mut challenge = Challenge::default();
    // `name="quoted"` or `name=token`, comma-separated, up to another scheme.
    for _ in 0..32 {
        rest = rest.trim_start_matches([',', ' ', '\t']);
        let Some(eq) = rest.find('=') else { break };
        let name = rest[..eq].trim().to_ascii_lowercase();
        if name.contains(' ') {
            break; // the next scheme
        }
        let after = rest[eq + 1..].trim_start();
        let (value, tail) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, next)) = chars.next() {
                            value.push(next);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, &quoted[end.min(quoted.len())..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        match name.as_str() {
            "error" => challenge.error = Some(value),
            "error_description" => challenge.error_description = Some(value),
            "scope" => challenge.scope = Some(value),
            "resource_metadata" => challenge.resource_metadata = Some(value),
            _ => {}
        }
        rest = tail;
    }
    Some(challenge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_read_with_quotes_escapes_and_other_schemes() {
        let c = parse_challenge(
            r#"Bearer error="insufficient_scope", scope="files:read files:write", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", error_description="need \"write\"""#,
        )
        .unwrap();
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(c.scopes(), ["files:read", "files:write"]);
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://mcp.example.com/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(c.error_description.as_deref(), Some("need \"write\""));
        let plain = parse_challenge("Basic realm=\"x\", Bearer").unwrap();
        assert_eq!(plain, Challenge::default());
        let token = parse_challenge("Bearer error=invalid_token").unwrap();
        assert_eq!(token.error.as_deref(), Some("invalid_token"));
        assert!(parse_challenge("Basic realm=\"x\"").is_none());
    }
}
