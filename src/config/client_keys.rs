//! The keys clients' files hold that are not mcpgate's, and what mcpgate
//! does with each ([`ClientKey`]): what [`adapt`](super::clients::adapt)
//! reads or leaves aside, what "did you mean" knows beside mcpgate's own
//! keys, and the table of client keys in docs/CONFIGURATION.md.

/// A key some client writes that is not one of mcpgate's, and what mcpgate does with it.
pub(crate) struct ClientKey {
    pub(crate) key: &'static str,
    /// The clients that write it.
    pub(crate) clients: &'static str,
    /// How mcpgate reads it; `None`: it is the client's own setting, and ignored.
    pub(crate) read_as: Option<&'static str>,
}

/// Client keys at the top level of a file.
pub(crate) const TOP_LEVEL: &[ClientKey] = &[
    ClientKey {
        key: "servers",
        clients: "VS Code",
        read_as: Some("read as `mcpServers`; a file with both is refused"),
    },
    ClientKey {
        key: "inputs",
        clients: "VS Code",
        read_as: Some(
            "ignored: `${input:ID}` is read from the environment variable ID, in upper case with `_` for other characters",
        ),
    },
    ClientKey { key: "globalShortcut", clients: "Claude Desktop", read_as: None },
    ClientKey { key: "preferences", clients: "Claude Desktop", read_as: None },
    ClientKey { key: "isUsingBuiltInNodeForMcp", clients: "Claude Desktop", read_as: None },
    ClientKey { key: "isDxtAutoUpdatesEnabled", clients: "Claude Desktop", read_as: None },
];

/// Client keys in a server's entry.
pub(crate) const IN_SERVER: &[ClientKey] = &[
    ClientKey { key: "serverUrl", clients: "Windsurf", read_as: Some("read as `url`; a server with both is refused") },
    ClientKey {
        key: "transportType",
        clients: "Cline (older files)",
        read_as: Some("read as `type` when the server has none (`http`: Streamable HTTP)"),
    },
    ClientKey { key: "disabledTools", clients: "Roo Code", read_as: Some("its names are added to `tools.deny`") },
    ClientKey {
        key: "sandboxEnabled",
        clients: "VS Code",
        read_as: Some("`false` is ignored; `true` is refused: mcpgate runs no server in a sandbox"),
    },
    ClientKey { key: "autoApprove", clients: "Cline", read_as: None },
    ClientKey { key: "alwaysAllow", clients: "Roo Code", read_as: None },
    ClientKey { key: "timeout", clients: "Cline, Roo Code", read_as: None },
    ClientKey { key: "watchPaths", clients: "Roo Code", read_as: None },
    ClientKey { key: "dev", clients: "VS Code", read_as: None },
    ClientKey { key: "gallery", clients: "VS Code", read_as: None },
    ClientKey { key: "version", clients: "VS Code", read_as: None },
    ClientKey { key: "sandbox", clients: "VS Code", read_as: None },
    ClientKey {
        key: "oauth",
        clients: "VS Code, Claude Code",
        read_as: Some(
            "mcpgate's own `oauth` (each user signs in to the server through mcpgate); `clientId` and `clientSecret` are read as `client_id` and `client_secret`, Claude Code's `callbackPort` is ignored",
        ),
    },
    ClientKey { key: "auth", clients: "Cursor", read_as: None },
];

/// The table of client keys in docs/CONFIGURATION.md.
pub fn reference_markdown() -> String {
    let mut out = String::from("| key | where | written by | mcpgate |\n|---|---|---|---|\n");
    for (keys, place) in [(TOP_LEVEL, "top level"), (IN_SERVER, "a server")] {
        for key in keys {
            let does = key.read_as.unwrap_or("ignored: the client's own setting");
            out.push_str(&format!("| `{}` | {place} | {} | {does} |\n", key.key, key.clients));
        }
    }
    out
}

/// The client keys an object at `doc` may hold (for "did you mean").
pub(crate) fn known_at(doc: &str) -> impl Iterator<Item = &'static str> {
    let keys: &[ClientKey] = match doc {
        "" => TOP_LEVEL,
        "mcpServers.<name>" => IN_SERVER,
        _ => &[],
    };
    keys.iter().map(|k| k.key)
}
