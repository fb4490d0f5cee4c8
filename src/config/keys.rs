//! The table of every key mcpgate reads ([`KEYS`]), with its default,
//! range and meaning: the parser's defaults and ranges come from it, and
//! the reference of docs/CONFIGURATION.md is printed from it.

/// One documented configuration key.
pub(crate) struct Key {
    /// As written in the file; `<name>` stands for a server's name, `[]` for any item of a list.
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    pub(crate) meaning: &'static str,
}

/// What a key holds: how the parser reads it, and what the reference shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A whole number from `min` to `max`; without a default, absent means none.
    Number {
        default: Option<u64>,
        min: u64,
        max: u64,
    },
    Flag(bool),
    /// A string, list or object, read by code of its own; its default as shown.
    Other(&'static str),
}

impl Kind {
    fn default_shown(&self) -> String {
        match self {
            Kind::Number { default: Some(n), .. } => n.to_string(),
            Kind::Number { default: None, .. } => "(none)".into(),
            Kind::Flag(b) => b.to_string(),
            Kind::Other(text) => text.to_string(),
        }
    }

    fn range_shown(&self) -> String {
        match self {
            Kind::Number { min, max, .. } => format!("{min} to {max}"),
            Kind::Flag(_) => "true, false".into(),
            Kind::Other(_) => String::new(),
        }
    }
}

/// The key documented as `name`.
pub(crate) fn key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// Every key mcpgate reads, with its default, range and meaning: the one
/// source of the parser's defaults and ranges and of the reference.
pub(crate) const KEYS: &[Key] = &[
    Key {
        name: "listen",
        kind: Kind::Other("\"127.0.0.1:8780\""),
        meaning: "Address and port of the `/mcp` endpoint and the status page. `--listen` overrides it.",
    },
    Key {
        name: "calls_per_server",
        kind: Kind::Number { default: Some(64), min: 1, max: 256 },
        meaning: "Requests in flight to one server at once, each holding one of its connections (opened when first needed); more wait their turn, up to `request_timeout_secs`. A server that hangs holds only its own.",
    },
    Key {
        name: "workers",
        kind: Kind::Number { default: None, min: 1, max: 256 },
        meaning: "The former name of `calls_per_server`, still accepted.",
    },
    Key {
        name: "session_idle_timeout_secs",
        kind: Kind::Number { default: Some(300), min: 1, max: 2592000 },
        meaning: "Seconds without a request, and without a live `GET` stream, after which a client session is closed with all its downstream sessions.",
    },
    Key {
        name: "unused_session_idle_secs",
        kind: Kind::Number { default: Some(60), min: 1, max: 2592000 },
        meaning: "The same for a session that never made a call (only `initialize`, lists, `ping`), as a client that left without `DELETE` does; never longer than `session_idle_timeout_secs`.",
    },
    Key {
        name: "keepalive_secs",
        kind: Kind::Number { default: Some(15), min: 1, max: 2592000 },
        meaning: "Seconds between `: keep-alive` comments on a quiet client `GET` stream; a failed write ends the stream.",
    },
    Key {
        name: "connect_timeout_secs",
        kind: Kind::Number { default: Some(5), min: 1, max: 2592000 },
        meaning: "Seconds to connect to a downstream server.",
    },
    Key {
        name: "request_timeout_secs",
        kind: Kind::Number { default: Some(60), min: 1, max: 2592000 },
        meaning: "Seconds a server may go without sending a JSON-RPC message during one request: waiting for the response head, or between two messages of its SSE answer (keep-alive comments and partial bytes do not count). Progress notifications keep a long call alive.",
    },
    Key {
        name: "delete_timeout_secs",
        kind: Kind::Number { default: Some(2), min: 1, max: 2592000 },
        meaning: "Seconds allowed for the `DELETE` that closes one downstream session.",
    },
    Key {
        name: "shutdown_timeout_secs",
        kind: Kind::Number { default: Some(5), min: 1, max: 2592000 },
        meaning: "Seconds allowed, on SIGTERM or SIGINT, to close every session and join every thread; past it mcpgate exits all the same, saying what was cut short (with a state file, the next start sends the DELETEs that did not go).",
    },
    Key {
        name: "open_retry_secs",
        kind: Kind::Number { default: Some(5), min: 0, max: 86400 },
        meaning: "Seconds a session waits before it tries again to open a downstream server that failed.",
    },
    Key {
        name: "client_idle_timeout_secs",
        kind: Kind::Number { default: Some(15), min: 1, max: 2592000 },
        meaning: "Seconds a keep-alive client connection may be idle between requests before it is closed (answers announce one second less).",
    },
    Key {
        name: "header_timeout_secs",
        kind: Kind::Number { default: Some(10), min: 1, max: 2592000 },
        meaning: "Seconds a request head may take from its first byte (then 408 and a close); its body gets as long again plus one second per 64 KiB.",
    },
    Key {
        name: "client_write_timeout_secs",
        kind: Kind::Number { default: Some(10), min: 1, max: 2592000 },
        meaning: "Seconds a client may take to accept each 64 KiB of its answer; a client that reads slower is cut off (and loses its stream).",
    },
    Key {
        name: "max_connections",
        kind: Kind::Number { default: Some(512), min: 4, max: 65536 },
        meaning: "Open client connections (one thread each); further connections are closed at once.",
    },
    Key {
        name: "max_body_bytes",
        kind: Kind::Number { default: Some(4194304), min: 1024, max: 1073741824 },
        meaning: "Largest request body in bytes; larger ones get 413 before the body is read.",
    },
    Key {
        name: "max_header_count",
        kind: Kind::Number { default: Some(64), min: 8, max: 4096 },
        meaning: "Request headers allowed in one request; more get 431.",
    },
    Key {
        name: "max_header_bytes",
        kind: Kind::Number { default: Some(16384), min: 1024, max: 1048576 },
        meaning: "Bytes of request headers allowed in one request; more get 431 (see docs/SECURITY.md for what this cannot prevent).",
    },
    Key {
        name: "max_message_bytes",
        kind: Kind::Number { default: Some(16777216), min: 1024, max: 1073741824 },
        meaning: "Largest JSON message or SSE event in bytes accepted from a downstream server.",
    },
    Key {
        name: "max_memory_mb",
        kind: Kind::Number { default: Some(128), min: 8, max: 1048576 },
        meaning: "MiB of message bytes mcpgate may hold in all: request bodies, events queued for clients and kept for their replay, events arriving from servers, servers' answers until written to their clients. Each session may hold its share (half of this divided by the live sessions, at least 1 MiB); a client that falls further behind loses its stream, a server event that does not fit is refused. Keep it below the unit's `MemoryMax`.",
    },
    Key {
        name: "max_processes",
        kind: Kind::Number { default: Some(32), min: 1, max: 4096 },
        meaning: "Child processes of stdio servers running at once, all servers together; a session that would start one more gets that server left out, with an error naming the limit. Each child costs two threads.",
    },
    Key {
        name: "stdio_grace_ms",
        kind: Kind::Number { default: Some(2000), min: 10, max: 60000 },
        meaning: "Milliseconds a stdio server's process has to exit after its stdin is closed, and again after SIGTERM, before SIGKILL. It is always reaped.",
    },
    Key {
        name: "shared_idle_secs",
        kind: Kind::Number { default: Some(300), min: 1, max: 2592000 },
        meaning: "Seconds a stdio server's process shared by sessions (`\"sharing\": \"user\"` or `\"shared\"`) runs with no session using it before it is stopped (not one started with `\"start\": \"eager\"`).",
    },
    Key {
        name: "start_timeout_secs",
        kind: Kind::Number { default: Some(60), min: 1, max: 86400 },
        meaning: "Seconds a stdio server's process has to start and answer `initialize`; past it, it is stopped and the server is left out with an error saying so. A package runner fetching its packages (`npx -y`, `uvx`) took 12 s on a first run.",
    },
    Key {
        name: "list_wait_ms",
        kind: Kind::Number { default: Some(2000), min: 0, max: 600000 },
        meaning: "Milliseconds a list request (`tools/list`, ...) waits for stdio servers whose process is still starting; past it, the list holds what is ready, and the session gets `list_changed` once the others are.",
    },
    Key {
        name: "max_held_calls",
        kind: Kind::Number { default: Some(64), min: 1, max: 4096 },
        meaning: "Calls of 2026-07-28 clients held at once while mcpgate waits for the client to retry with answers to the server's requests (sampling, elicitation, roots); one more is refused with an error saying so. Each holds a thread.",
    },
    Key {
        name: "held_call_timeout_secs",
        kind: Kind::Number { default: Some(300), min: 1, max: 86400 },
        meaning: "Seconds a held call waits for its client's retry before it is cancelled at its server.",
    },
    Key {
        name: "max_sessions",
        kind: Kind::Number { default: Some(1024), min: 1, max: 1000000 },
        meaning: "Live client sessions; an `initialize` beyond it gets 503 with `Retry-After`.",
    },
    Key {
        name: "tool_name_max",
        kind: Kind::Number { default: Some(64), min: 16, max: 128 },
        meaning: "Longest tool or prompt name shown to clients. Exposed names match `^[a-zA-Z0-9_-]{1,N}$` (Claude, OpenAI and Gemini accept it): other characters become `_`, and a longer name keeps its start and ends in `-` and 8 hex digits of a hash of the full name, the same at every start. The status page lists each renamed tool with its original.",
    },
    Key {
        name: "page_size",
        kind: Kind::Number { default: Some(100), min: 1, max: 100000 },
        meaning: "Items per page of the merged `tools/list`, `prompts/list`, `resources/list` and `resources/templates/list`.",
    },
    Key {
        name: "max_batch_entries",
        kind: Kind::Number { default: Some(32), min: 1, max: 4096 },
        meaning: "Entries of one JSON-RPC batch (protocol 2025-03-26, the only one with batches); a larger batch gets 400 before any of it runs. Its requests also count against `max_requests_per_session` (the default is the same 32), and its answer against the session's share of `max_memory_mb`: an entry whose answer does not fit gets -32603 naming it.",
    },
    Key {
        name: "max_list_items",
        kind: Kind::Number { default: Some(10000), min: 1, max: 1000000 },
        meaning: "Items mcpgate reads of one server's list (tools, prompts, resources, templates); the rest is left out, and logged. Paging also ends at a cursor seen before.",
    },
    Key {
        name: "max_list_bytes",
        kind: Kind::Number { default: Some(16777216), min: 1024, max: 1073741824 },
        meaning: "Bytes mcpgate reads of one server's list while paging; past it the rest is left out, and logged. A list is held once per server and client view, shared by the sessions, and charged to `max_memory_mb`.",
    },
    Key {
        name: "max_streams_per_session",
        kind: Kind::Number { default: Some(4), min: 1, max: 64 },
        meaning: "`GET` streams one client session may hold open; one more ends the oldest (a client that reconnects after a network drop leaves streams that may linger without a FIN).",
    },
    Key {
        name: "max_requests_per_session",
        kind: Kind::Number { default: Some(32), min: 1, max: 4096 },
        meaning: "Requests of one client session in flight at once; one more gets 429 with `Retry-After`.",
    },
    Key {
        name: "allowed_origins",
        kind: Kind::Other("[]"),
        meaning: "Browser origins allowed besides `http(s)://localhost`, `127.0.0.1` and `[::1]` (any port), e.g. `\"https://app.example.com\"`. A request with any other `Origin` gets 403.",
    },
    Key {
        name: "allowed_hosts",
        kind: Kind::Other("[]"),
        meaning: "Names besides loopback ones and the listen address that requests may carry in `Host`, e.g. `\"gate.example.com\"`; any other gets 403 (DNS rebinding). Listening beyond loopback with none listed accepts any `Host`.",
    },
    Key {
        name: "auth",
        kind: Kind::Other("none"),
        meaning: "Without it no token is needed. With it every `/mcp` request needs `Authorization: Bearer <token>`: one of `tokens`, or one `oauth` accepts (401 otherwise). The client's token never goes to a server.",
    },
    Key {
        name: "auth.tokens",
        kind: Kind::Other("[]"),
        meaning: "Tokens clients may present, e.g. `[{\"token\": \"${MCPGATE_TOKEN}\", \"servers\": [\"files\"]}]`.",
    },
    Key {
        name: "auth.tokens[].token",
        kind: Kind::Other("(required)"),
        meaning: "The bearer token: at least 16 visible ASCII characters; compared in constant time.",
    },
    Key {
        name: "auth.tokens[].servers",
        kind: Kind::Other("all"),
        meaning: "The only servers this token reaches; the others are invisible in its lists and refused for its calls.",
    },
    Key {
        name: "auth.tokens[].name",
        kind: Kind::Other("none"),
        meaning: "A name for the token (1 to 64 characters), shown on the status page beside the sessions it opened; the token itself is never shown.",
    },
    Key {
        name: "auth.tokens_file",
        kind: Kind::Other("none"),
        meaning: "A JSON file holding more tokens in the same form as `auth.tokens`, to keep secrets out of the main file. Its `${VAR}`s expand too.",
    },
    Key {
        name: "auth.oauth",
        kind: Kind::Other("none"),
        meaning: "mcpgate as an OAuth 2.1 resource server (see docs/OAUTH.md): `/mcp` also takes access tokens of this issuer, checked against its JWKS (or by introspection), and serves the protected-resource metadata (RFC 9728) clients discover it by. Static `tokens` still work beside it.",
    },
    Key {
        name: "auth.oauth.issuer",
        kind: Kind::Other("(required)"),
        meaning: "The authorization server's issuer URL, exactly as its tokens' `iss` says it, e.g. `\"https://idp.example.com/realms/x\"`; `http://` only for a loopback address.",
    },
    Key {
        name: "auth.oauth.jwks_uri",
        kind: Kind::Other("from the issuer"),
        meaning: "Where the issuer publishes its signing keys. Without it, the `jwks_uri` of the issuer's metadata (`/.well-known/oauth-authorization-server`, then `openid-configuration`). Fetched when first needed, again when a token names a key not in it (at most every 10 s), and every hour.",
    },
    Key {
        name: "auth.oauth.resource",
        kind: Kind::Other("(required)"),
        meaning: "The public URL of `/mcp`, e.g. `\"https://gate.example.com/mcp\"`: the audience tokens must be for (RFC 8707), and what the metadata and every 401 name.",
    },
    Key {
        name: "auth.oauth.audiences",
        kind: Kind::Other("[resource]"),
        meaning: "The `aud` values a token may carry, at least one of them; for an issuer that puts a client id there.",
    },
    Key {
        name: "auth.oauth.scopes_supported",
        kind: Kind::Other("required and server scopes"),
        meaning: "The scopes the metadata offers clients; every scope named below must be one of them.",
    },
    Key {
        name: "auth.oauth.required_scopes",
        kind: Kind::Other("[]"),
        meaning: "Scopes every token needs, e.g. `[\"mcp\"]`; a token without one gets 403 `insufficient_scope`, naming it.",
    },
    Key {
        name: "auth.oauth.server_scopes",
        kind: Kind::Other("{}"),
        meaning: "Servers reachable only with a scope, e.g. `{\"files\": \"files\"}`: invisible in the lists of a token without it, and a call to one of its tools or prompts gets 403 `insufficient_scope` (clients can step up). A session keeps the servers of the token that opened it.",
    },
    Key {
        name: "auth.oauth.leeway_secs",
        kind: Kind::Number { default: Some(30), min: 0, max: 600 },
        meaning: "Seconds of clock difference allowed when checking a token's `exp` and `nbf`.",
    },
    Key {
        name: "auth.oauth.introspection",
        kind: Kind::Other("none"),
        meaning: "For tokens that are not JWTs: asked of the issuer's introspection endpoint (RFC 7662); an answer is kept for at most 60 s (never past the token's `exp`).",
    },
    Key {
        name: "auth.oauth.introspection.url",
        kind: Kind::Other("(required)"),
        meaning: "The introspection endpoint; `http://` only for a loopback address.",
    },
    Key {
        name: "auth.oauth.introspection.client_id",
        kind: Kind::Other("(required)"),
        meaning: "mcpgate's client id at the issuer (HTTP Basic authentication).",
    },
    Key {
        name: "auth.oauth.introspection.client_secret",
        kind: Kind::Other("(required)"),
        meaning: "Its secret, e.g. `\"${MCPGATE_INTROSPECTION_SECRET}\"`; never logged or shown.",
    },
    Key {
        name: "tls",
        kind: Kind::Other("none"),
        meaning: "Serve HTTPS on `listen` (TLS 1.2 and 1.3, ALPN `http/1.1`), e.g. `{\"cert_file\": \"/etc/mcpgate/cert.pem\", \"key_file\": \"/etc/mcpgate/key.pem\"}`. SIGHUP reads both files again: new connections get them, open ones keep theirs, and files that do not load leave the old ones in force. Plain HTTP on this port gets 400 saying to use `https://`.",
    },
    Key {
        name: "tls.cert_file",
        kind: Kind::Other("(required)"),
        meaning: "PEM: the certificate, then the intermediates.",
    },
    Key {
        name: "tls.key_file",
        kind: Kind::Other("(required)"),
        meaning: "PEM: its private key (PKCS#8, PKCS#1 or SEC1).",
    },
    Key {
        name: "ca_file",
        kind: Kind::Other("none"),
        meaning: "PEM certificates trusted besides the roots of `trust_store`, for every `https://` server and the OAuth issuer: a private CA.",
    },
    Key {
        name: "trust_store",
        kind: Kind::Other("\"bundled\""),
        meaning: "The roots `https://` servers and the OAuth issuer are checked against: `\"bundled\"`, the Mozilla roots built into mcpgate (webpki-roots); `\"system\"`, the system's store (`/etc/ssl/certs/ca-certificates.crt`, or the PEM files in `/etc/ssl/certs`), read at start and on reload.",
    },
    Key {
        name: "status_public",
        kind: Kind::Flag(false),
        meaning: "`/status`, `/status.json`, `/metrics` and `/reload` answer other hosts too. By default they answer only loopback clients and clients with a valid token.",
    },
    Key {
        name: "watch_config",
        kind: Kind::Flag(true),
        meaning: "Reload when the configuration file, or a server's `envFile`, changes on disk, as SIGHUP does: mcpgate looks every second (size, modification time, inode) and reloads once a change has held for a second. A file that does not load leaves the running configuration in force, with the reason in the log and on the status page.",
    },
    Key {
        name: "oauth_client",
        kind: Kind::Other("(defaults)"),
        meaning: "mcpgate as each user's OAuth client toward servers with `oauth` (see docs/OAUTH.md: Servers that need OAuth): where users are sent back to, where their tokens are kept, and how a client is asked to sign in.",
    },
    Key {
        name: "oauth_client.public_url",
        kind: Kind::Other("`http://` and `listen`"),
        meaning: "mcpgate's origin as a user's browser reaches it, e.g. `https://gate.example.com`: sign-in links (`/oauth/connect`), the callback (`/oauth/callback`, the redirect URI) and the client ID metadata document (`/oauth/client.json`) are under it. `https://`, or `http://` on a loopback address.",
    },
    Key {
        name: "oauth_client.key_file",
        kind: Kind::Other("the credential, else `oauth.key` beside the store"),
        meaning: "A file of mode 0600 holding the key (32 bytes, or 64 hex digits) tokens are encrypted with (AES-256-GCM). Without it: systemd's credential `mcpgate-oauth-key` (`LoadCredential=`, read from `$CREDENTIALS_DIRECTORY`), else `oauth.key` beside the store, made at first start. Never in the configuration.",
    },
    Key {
        name: "oauth_client.store_file",
        kind: Kind::Other("beside the state file"),
        meaning: "Where users' tokens and mcpgate's registrations are kept, encrypted, mode 0600: by default `<state_file>.oauth`; without a state file they are kept in memory only and a restart asks users again.",
    },
    Key {
        name: "oauth_client.ask",
        kind: Kind::Other("\"error\""),
        meaning: "How a client of 2025-11-25 that declared URL elicitation is sent to sign in: `\"error\"`, the `-32042` error with the link (the call ends; the client retries it, once `notifications/elicitation/complete` came); `\"elicitation\"`, `elicitation/create` in the call's stream (the call waits for the user, at most `held_call_timeout_secs`, and goes on by itself). Other clients: a 2026-07-28 client gets an input request, one that declared neither a tool result with `isError` and the link.",
    },
    Key {
        name: "oauth_client.link_timeout_secs",
        kind: Kind::Number { default: Some(600), min: 30, max: 86400 },
        meaning: "Seconds a sign-in link stays good; then a call gives a new one.",
    },
    Key {
        name: "oauth_client.client_id",
        kind: Kind::Other("registered"),
        meaning: "mcpgate's own client at `auth.oauth.issuer`, with which it learns who opens a sign-in link (a user must be the one the link was made for). Without it mcpgate registers itself there (client ID metadata document, else dynamic registration).",
    },
    Key {
        name: "oauth_client.client_secret",
        kind: Kind::Other("none"),
        meaning: "Its secret, for a confidential client; `${VAR}` expands.",
    },
    Key {
        name: "state_file",
        kind: Kind::Other("none"),
        meaning: "Path of the file that keeps live sessions across restarts (see docs/OPERATIONS.md: Restarts). Without it a restart ends every session.",
    },
    Key {
        name: "instance_id",
        kind: Kind::Other("none"),
        meaning: "This instance's name among several behind one load balancer: 1 to 32 of `A-Z a-z 0-9 -`. Every session id it mints is then `<instance_id>.<32 hex digits>`, which a balancer can route on (see docs/SCALING.md).",
    },
    Key {
        name: "state_dir",
        kind: Kind::Other("none"),
        meaning: "A directory shared by the instances on one host, instead of `state_file`: each keeps its state in `<instance_id>.state.json` there, under a lock; a session of an instance that died is continued by the peer its client reaches next (see docs/SCALING.md), and a peer closes the downstream sessions of one that stayed down longer than the idle timeout. Needs `instance_id`.",
    },
    Key {
        name: "store",
        kind: Kind::Other("none"),
        meaning: "Where the sessions are kept for instances on several hosts, instead of `state_file` and `state_dir`: a Redis URL, `redis://[:password@]host:port/db`, or `rediss://` for TLS (checked against the bundled roots and the system's). Every session is recorded there before its client learns its id, and any instance continues a session whose instance died (see docs/SCALING.md). Needs `instance_id`.",
    },
    Key {
        name: "store_lease_ms",
        kind: Kind::Number { default: Some(5000), min: 500, max: 600000 },
        meaning: "With `store`: milliseconds an instance's hold on its sessions lasts without a renewal (it renews every third of it). Past it, a peer may take over the sessions of an instance that stopped renewing (dead, or paused), and the paused one refuses them when it wakes.",
    },
    Key {
        name: "peer_url",
        kind: Kind::Other("http://<listen>"),
        meaning: "With `state_dir` or `store`: where the other instances reach this one, to pass it a request of a session it holds (`https://` with `tls`). Needed when `listen` is an unspecified address (0.0.0.0).",
    },
    Key {
        name: "tool_search",
        kind: Kind::Other("off"),
        meaning: "Search-and-call instead of one long `tools/list`, for clients that choke on hundreds of tools (see docs/TOOL_SEARCH.md). With it on, `tools/list` shows the pinned tools and mcpgate's `find_tools` and `call_tool`; every tool stays callable by its name.",
    },
    Key { name: "tool_search.enabled", kind: Kind::Flag(false), meaning: "Turns the mode on." },
    Key {
        name: "tool_search.pinned",
        kind: Kind::Other("[]"),
        meaning: "Globs (`*`, `?`) over exposed names, e.g. `[\"files__read_file\", \"search__*\"]`: these tools are still listed as themselves.",
    },
    Key {
        name: "tool_search.max_results",
        kind: Kind::Number { default: Some(8), min: 1, max: 50 },
        meaning: "Tools one `find_tools` answers with at most, best first, each with its full definition.",
    },
    Key {
        name: "audit",
        kind: Kind::Other("off"),
        meaning: "An audit log: one JSON line per call and per session opened or closed (time, principal, session, server, tool or method, outcome, duration, bytes in and out, trace id), written off the request's thread. A line it cannot write (a full disk, a writer behind) is dropped and counted, never waited for. See docs/OPERATIONS.md.",
    },
    Key {
        name: "audit.file",
        kind: Kind::Other("none"),
        meaning: "The file (created 0600; its directory must exist); rotated to `FILE.1`, `FILE.2`... before a line would take it past `max_bytes`.",
    },
    Key {
        name: "audit.max_bytes",
        kind: Kind::Number { default: Some(10485760), min: 131072, max: 1099511627776 },
        meaning: "Bytes one file may hold at most.",
    },
    Key {
        name: "audit.files",
        kind: Kind::Number { default: Some(3), min: 1, max: 1000 },
        meaning: "Rotated files kept besides the current one; the oldest is removed.",
    },
    Key {
        name: "audit.journal",
        kind: Kind::Flag(false),
        meaning: "Also send each record to the systemd journal with fields of its own (`MCP_TOOL=`, `MCP_PRINCIPAL=`, `MCP_SERVER=`, `MCP_SESSION=`, `MCP_OUTCOME=`): `journalctl MCP_TOOL=github__create_issue` finds them.",
    },
    Key {
        name: "audit.arguments",
        kind: Kind::Flag(false),
        meaning: "Keep each call's arguments in its record, with the values of keys that look secret (`redact`) replaced by `***`, cut to 16 KiB.",
    },
    Key {
        name: "audit.redact",
        kind: Kind::Other(
            "[\"password\", \"passwd\", \"secret\", \"token\", \"key\", \"authorization\", \"cookie\", \"credential\"]",
        ),
        meaning: "Parts of argument names whose values are never kept (any case): `api_key`, `GITHUB_TOKEN` and `userPassword` are redacted by the default.",
    },
    Key {
        name: "rate_limit",
        kind: Kind::Other("none"),
        meaning: "Token buckets for calls (`tools/call`, `prompts/get`, `resources/read`, `completion/complete`), kept per user (a token or OAuth subject; one for all without `auth`), never per session: a new `initialize` does not refill them. Over a limit, a request gets HTTP 429 with `Retry-After`, or inside a batch or a stream a JSON-RPC error naming the limit and when to retry.",
    },
    Key {
        name: "rate_limit.per_user",
        kind: Kind::Other("none"),
        meaning: "Every call of one user, whatever the tool.",
    },
    Key {
        name: "rate_limit.per_user.per_minute",
        kind: Kind::Number { default: None, min: 1, max: 6000000 },
        meaning: "Calls a minute the bucket refills by.",
    },
    Key {
        name: "rate_limit.per_user.burst",
        kind: Kind::Number { default: None, min: 1, max: 1000000 },
        meaning: "Calls at once before the rate applies: the bucket's size. Defaults to a tenth of `per_minute` (at least 1).",
    },
    Key {
        name: "rate_limit.per_tool",
        kind: Kind::Other("none"),
        meaning: "The calls of one user to one tool (a prompt, a resource's server), for every tool without a limit of its own.",
    },
    Key {
        name: "rate_limit.per_tool.per_minute",
        kind: Kind::Number { default: None, min: 1, max: 6000000 },
        meaning: "As `per_user.per_minute`.",
    },
    Key {
        name: "rate_limit.per_tool.burst",
        kind: Kind::Number { default: None, min: 1, max: 1000000 },
        meaning: "As `per_user.burst`.",
    },
    Key {
        name: "rate_limit.tools",
        kind: Kind::Other("{}"),
        meaning: "Limits of single tools by their exposed name, e.g. `{\"github__create_issue\": {\"per_minute\": 5, \"burst\": 1}}`, over `per_tool` and the server's.",
    },
    Key {
        name: "rate_limit.tools.<tool>.per_minute",
        kind: Kind::Number { default: None, min: 1, max: 6000000 },
        meaning: "As `per_user.per_minute`.",
    },
    Key {
        name: "rate_limit.tools.<tool>.burst",
        kind: Kind::Number { default: None, min: 1, max: 1000000 },
        meaning: "As `per_user.burst`.",
    },
    Key {
        name: "rate_limit.max_buckets",
        kind: Kind::Number { default: Some(10000), min: 16, max: 10000000 },
        meaning: "Buckets kept at most (about 100 bytes each, charged to `max_memory_mb`); past it the least recently used goes, which forgets what its user spent.",
    },
    Key {
        name: "tracing",
        kind: Kind::Other("off"),
        meaning: "OpenTelemetry traces in the MCP conventions: a SERVER span for each request mcpgate receives and a CLIENT span for each it sends to a server, the trace context taken from the client's `traceparent` header or `params._meta` and passed on in `params._meta` to every server (and as the header to HTTP servers). Sent as OTLP over HTTP (protobuf) in batches by a thread of its own; spans the receiver cannot take now (down, slow, a full queue) are dropped and counted, never waited for. See docs/OPERATIONS.md.",
    },
    Key {
        name: "tracing.endpoint",
        kind: Kind::Other("(required)"),
        meaning: "The OTLP/HTTP receiver, e.g. `http://127.0.0.1:4318`: spans go to `POST {endpoint}/v1/traces` (to the endpoint itself when it ends in `/v1/traces`). No proxy; `https://` trusts the bundled roots.",
    },
    Key {
        name: "tracing.sample_ratio",
        kind: Kind::Other("1.0"),
        meaning: "The share of traces started here that are recorded, from 0 to 1 (to 6 decimals). A request whose context says it is sampled (or not) is recorded (or not) whatever the ratio; a trace not recorded passes no context on.",
    },
    Key {
        name: "tracing.service_name",
        kind: Kind::Other("\"mcpgate\""),
        meaning: "`service.name` of the spans' resource; `service.instance.id` is `instance_id`, or an id drawn at each start.",
    },
    Key {
        name: "tracing.capture_arguments",
        kind: Kind::Flag(false),
        meaning: "Put a tool call's arguments on its spans (`gen_ai.tool.call.arguments`), with the values of keys that look secret (`audit.redact`'s default list) replaced by `***`, cut to 4 KiB.",
    },
    Key {
        name: "tracing.capture_results",
        kind: Kind::Flag(false),
        meaning: "Put a tool call's result on its spans (`gen_ai.tool.call.result`), redacted the same way, cut to 4 KiB.",
    },
    Key {
        name: "tracing.max_queue",
        kind: Kind::Number { default: Some(2048), min: 16, max: 1000000 },
        meaning: "Spans waiting for the exporter at most (each charged to `max_memory_mb`); past it a span is dropped.",
    },
    Key {
        name: "tracing.export_timeout_ms",
        kind: Kind::Number { default: Some(5000), min: 100, max: 60000 },
        meaning: "The most one export (a batch of up to 512 spans, sent at least every second) may take; a batch that fails or takes longer is dropped.",
    },
    Key {
        name: "env_passthrough",
        kind: Kind::Other("the CA, proxy, npm and uv variables (see the text)"),
        meaning: "Variables of mcpgate's own environment every stdio server's process gets, besides the base (`PATH HOME USER LOGNAME LANG LC_ALL LC_CTYPE TZ TMPDIR`) and before its own `env`: names, or a prefix and `*`. The default is what package runners need behind a proxy or a private CA: `SSL_CERT_FILE SSL_CERT_DIR NODE_EXTRA_CA_CERTS REQUESTS_CA_BUNDLE CURL_CA_BUNDLE HTTP_PROXY HTTPS_PROXY NO_PROXY ALL_PROXY` (and their lower-case forms), `npm_config_* NPM_CONFIG_* UV_* PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_CERT XDG_CACHE_HOME`.",
    },
    Key {
        name: "mcpServers",
        kind: Kind::Other("(required)"),
        meaning: "Map of server name to server (VS Code's `servers` is read as this). Names are 1 to 64 of `A-Z a-z 0-9 _ . -`; a client's name that is not (`github.com/org/repo`, `My Server`) is shortened to one that is (`repo`, `My-Server`), and logged.",
    },
    Key {
        name: "mcpServers.<name>.url",
        kind: Kind::Other("(required)"),
        meaning: "The server's Streamable HTTP endpoint (with `\"type\": \"sse\"`, its HTTP+SSE stream, e.g. `https://host/sse`), `http://` or `https://`. A server has `url` or `command`, not both.",
    },
    Key {
        name: "mcpServers.<name>.headers",
        kind: Kind::Other("{}"),
        meaning: "HTTP headers sent with every request to the server, e.g. `Authorization`.",
    },
    Key {
        name: "mcpServers.<name>.ca_file",
        kind: Kind::Other("none"),
        meaning: "PEM certificates trusted for this server only, besides `ca_file` and `trust_store`.",
    },
    Key {
        name: "mcpServers.<name>.oauth",
        kind: Kind::Other("off"),
        meaning: "Each user signs in to this server (OAuth 2.1: discovery from its 401, PKCE, `resource`) and mcpgate keeps their tokens; `{}` discovers everything. A Streamable HTTP server only. See docs/OAUTH.md.",
    },
    Key {
        name: "mcpServers.<name>.oauth.client_id",
        kind: Kind::Other("registered"),
        meaning: "A client made for mcpgate at the server's authorization server; without it mcpgate uses its client ID metadata document where the server supports it, else registers itself (RFC 7591), once.",
    },
    Key {
        name: "mcpServers.<name>.oauth.client_secret",
        kind: Kind::Other("none"),
        meaning: "Its secret, for a confidential client; `${VAR}` expands.",
    },
    Key {
        name: "mcpServers.<name>.oauth.client_metadata_url",
        kind: Kind::Other("mcpgate's own"),
        meaning: "The URL of a client ID metadata document of your own, used as the client id.",
    },
    Key {
        name: "mcpServers.<name>.oauth.scopes",
        kind: Kind::Other("what the server names"),
        meaning: "Scopes asked for; by default those of the server's challenge, else of its metadata.",
    },
    Key {
        name: "mcpServers.<name>.oauth.authorization_server",
        kind: Kind::Other("from the metadata"),
        meaning: "The issuer, for a server whose protected-resource metadata does not name one (RFC 8414 or OpenID metadata is read from it).",
    },
    Key {
        name: "mcpServers.<name>.oauth.resource",
        kind: Kind::Other("from the metadata"),
        meaning: "The resource indicator (RFC 8707) sent with every authorization and token request.",
    },
    Key {
        name: "mcpServers.<name>.oauth.token_exchange",
        kind: Kind::Flag(false),
        meaning: "Instead of consent, exchange the user's own token (of `auth.oauth`) for one of this server's audience (RFC 8693) at the issuer (`authorization_server`, else `auth.oauth.issuer`), as `client_id`; kept until it expires.",
    },
    Key {
        name: "mcpServers.<name>.oauth.audience",
        kind: Kind::Other("none"),
        meaning: "With `token_exchange`: the `audience` asked for, besides the resource.",
    },
    Key {
        name: "mcpServers.<name>.command",
        kind: Kind::Other("(required)"),
        meaning: "A stdio server: the program mcpgate starts, found on `PATH` like a shell would, e.g. `\"npx\"`. It speaks MCP on its stdin and stdout; its stderr goes to mcpgate's log.",
    },
    Key {
        name: "mcpServers.<name>.args",
        kind: Kind::Other("[]"),
        meaning: "The program's arguments; `${VAR}`s expand.",
    },
    Key {
        name: "mcpServers.<name>.env",
        kind: Kind::Other("{}"),
        meaning: "Environment variables of the program, e.g. API keys. It gets these, and of mcpgate's own environment only `PATH HOME USER LOGNAME LANG LC_ALL LC_CTYPE TZ TMPDIR` and what `env_passthrough` names.",
    },
    Key {
        name: "mcpServers.<name>.envFile",
        kind: Kind::Other("none"),
        meaning: "A dotenv file (`NAME=value` lines, `#` comments), as Cursor and VS Code write it: its variables go to the program's environment beneath `env`, which wins. A relative path is from the folder that holds the file's `.vscode/`, `.cursor/` or `.roo/`, else from the config file's folder. Values of 8 characters or more are masked as secrets. With `watch_config`, saving it reloads.",
    },
    Key { name: "mcpServers.<name>.cwd", kind: Kind::Other("mcpgate's"), meaning: "The program's working directory." },
    Key {
        name: "mcpServers.<name>.sharing",
        kind: Kind::Other("\"user\""),
        meaning: "`\"user\"`: one process serves the sessions of one user (one token or OAuth subject; without `auth`, every session), as a desktop client runs one per server. `\"session\"`: each client session gets a process of its own, stopped when the session ends. `\"shared\"`: one process serves every session of every user (for stateless servers). Requests of a shared process to a client go to the session with a call running.",
    },
    Key {
        name: "mcpServers.<name>.start",
        kind: Kind::Other("\"lazy\""),
        meaning: "`\"lazy\"`: the process starts when a session first needs it (a list or a call), never at `initialize`. `\"eager\"` (with `\"sharing\": \"user\"` or `\"shared\"`): it starts with mcpgate and at each reload, is started again when it ends, and is not stopped when idle; with `auth` and `\"user\"`, a user's starts at that user's first `initialize` and stops when unused.",
    },
    Key {
        name: "mcpServers.<name>.max_processes",
        kind: Kind::Number { default: None, min: 1, max: 65536 },
        meaning: "Processes of this server at once, within the global `max_processes`.",
    },
    Key {
        name: "mcpServers.<name>.rate_limit",
        kind: Kind::Other("none"),
        meaning: "The limit of each of this server's tools per user, over `rate_limit.per_tool`: `{\"per_minute\": 30, \"burst\": 5}`.",
    },
    Key {
        name: "mcpServers.<name>.rate_limit.per_minute",
        kind: Kind::Number { default: None, min: 1, max: 6000000 },
        meaning: "As `rate_limit.per_user.per_minute`.",
    },
    Key {
        name: "mcpServers.<name>.rate_limit.burst",
        kind: Kind::Number { default: None, min: 1, max: 1000000 },
        meaning: "As `rate_limit.per_user.burst`.",
    },
    Key {
        name: "mcpServers.<name>.prefix",
        kind: Kind::Other("the name"),
        meaning: "Tools and prompts appear as `<prefix>__<name>`; `\"\"` keeps the server's names unchanged.",
    },
    Key {
        name: "mcpServers.<name>.separator",
        kind: Kind::Other("\"__\""),
        meaning: "What joins the prefix and a tool's or prompt's own name.",
    },
    Key {
        name: "mcpServers.<name>.tools",
        kind: Kind::Other("all"),
        meaning: "Which of the server's tools are listed and callable, e.g. `{\"allow\": [\"read_*\"], \"deny\": [\"*_secret\"]}`. Calling a hidden tool is an error naming it.",
    },
    Key {
        name: "mcpServers.<name>.tools.allow",
        kind: Kind::Other("all"),
        meaning: "Globs (`*`, `?`) over the server's own names: only these are exposed. Empty or absent: all.",
    },
    Key {
        name: "mcpServers.<name>.tools.deny",
        kind: Kind::Other("[]"),
        meaning: "Globs of names hidden even when `allow` lets them in.",
    },
    Key { name: "mcpServers.<name>.prompts", kind: Kind::Other("all"), meaning: "The same filter for its prompts." },
    Key {
        name: "mcpServers.<name>.resources",
        kind: Kind::Other("all"),
        meaning: "The same filter for its resources and resource templates, over their URIs.",
    },
    Key {
        name: "mcpServers.<name>.type",
        kind: Kind::Other("\"http\""),
        meaning: "How the server is reached: `http`, `streamable-http` or `streamableHttp` with `url` (Streamable HTTP); `sse` with `url`, the old HTTP+SSE transport of protocol 2024-11-05 (a `GET` stream, requests `POST`ed to the URL its `endpoint` event names); `stdio` with `command`.",
    },
    Key {
        name: "mcpServers.<name>.disabled",
        kind: Kind::Flag(false),
        meaning: "Leaves the server out, as Cline, Roo Code and Windsurf do; mcpgate logs that it did.",
    },
];

/// The configuration table of docs/CONFIGURATION.md.
pub fn reference_markdown() -> String {
    let mut out = String::from("| key | default | range | meaning |\n|---|---|---|---|\n");
    for key in KEYS {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            key.name,
            key.kind.default_shown(),
            key.kind.range_shown(),
            key.meaning
        ));
    }
    out
}

/// Whether `name` can name a server: it prefixes the server's tools
/// (`name__tool`), so it is short and plain.
pub(super) fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}
