//! The 2026-07-28 era on the wire: no `initialize` and no session; every
//! request is one `POST` whose `params._meta` carries the protocol version
//! and the client's capabilities, repeated in routing headers. What a
//! request must carry, checked in the order the spec gives (the first
//! failure answers), and the shapes mcpgate writes in this era.

use serde_json::{Map, Value};

use super::jsonrpc::{INVALID_PARAMS, Message, Params, RpcError};
use super::member;
use super::versions;

/// The one protocol version of this era, kept with the others in `versions`.
pub(crate) use versions::STATELESS as VERSION;

/// `params._meta` keys of every request.
pub(crate) const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub(crate) const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub(crate) const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// Spelled out in `Meta`'s serde attribute, which cannot name a constant;
/// the tests write requests with it.
#[cfg(test)]
pub(crate) const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// The `_meta` key of what `subscriptions/listen` streams carry: the listen request's id.
pub(crate) const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// Routing headers: they repeat the body so an intermediary can route
/// without parsing it; they must agree with it.
pub(crate) const HEADER_METHOD: &str = "mcp-method";
pub(crate) const HEADER_NAME: &str = "mcp-name";

/// A routing header disagrees with the body (or appears twice).
pub(crate) const HEADER_MISMATCH: i64 = -32020;
/// A request needs a client capability its `_meta` does not declare.
pub(crate) const MISSING_CAPABILITY: i64 = -32021;
/// The protocol version is not one the receiver speaks.
pub(crate) const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// The methods whose request names its target in `Mcp-Name`, and the
/// params member that holds it.
pub(crate) fn name_member(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        // The tasks extension (SEP-2663): an intermediary routes a task's requests by its id.
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// Methods whose results carry cache hints (`ttlMs`, `cacheScope`).
pub(crate) fn is_cacheable(method: &str) -> bool {
    matches!(
        method,
        "server/discover"
            | "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
    )
}

/// What a request of this era says about its client.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Envelope {
    pub(crate) capabilities: Value,
    /// The least severe log level the request wants (`_meta`'s logLevel);
    /// `None`: no log messages at all.
    pub(crate) log_level: Option<String>,
}

/// The levels of `notifications/message`, least severe first (RFC 5424).
const LOG_LEVELS: [&str; 8] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

impl Envelope {
    /// Whether the client declared what a server's request `method` needs
    /// (a server's request carried in an `input_required` result).
    pub(crate) fn can_answer(&self, method: &str) -> bool {
        capability_of(method).is_some_and(|c| self.capabilities.get(c).is_some_and(|c| !c.is_null()))
    }

    /// Whether a log message at `level` goes to this request's client: only
    /// when it asked for a level, and at that level or above.
    pub(crate) fn wants_log(&self, level: &str) -> bool {
        let rank = |l: &str| LOG_LEVELS.iter().position(|x| *x == l);
        match (self.log_level.as_deref().and_then(rank), rank(level)) {
            (Some(wanted), Some(got)) => got >= wanted,
            _ => false,
        }
    }
}

/// The request headers the checks read, by lower-case name.
pub(crate) trait Headers {
    fn get(&self, name: &str) -> Option<&str>;
}

/// Checks a request of this era, rung by rung: `params._meta` with the
/// version and the client's capabilities (-32602), the routing headers
/// against the body (-32020), the version (-32022).
/// `params` are the request's, read once by the caller (`None`: they are
/// not an object).
pub(crate) fn check(message: &Message, params: &Params, headers: &dyn Headers) -> Result<Envelope, RpcError> {
    // The members as written: only what the checks need of `_meta`, and the name, are read.
    // (An object: serde would read a struct from an array too.)
    let meta = params.raw("_meta").filter(|m| m.get().starts_with('{'));
    let meta = meta.and_then(|m| serde_json::from_str::<Meta>(m.get()).ok());
    let Some(meta) = meta else {
        return Err(RpcError::new(
            INVALID_PARAMS,
            format!("params._meta must be an object carrying `{META_VERSION}` and `{META_CAPABILITIES}`"),
        ));
    };
    let missing: Vec<&str> = [(META_VERSION, &meta.version), (META_CAPABILITIES, &meta.capabilities)]
        .into_iter()
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| k)
        .collect();
    if !missing.is_empty() {
        return Err(RpcError::new(
            INVALID_PARAMS,
            format!("params._meta is missing the required key(s): {}", missing.join(", ")),
        ));
    }
    let version = meta.version.as_ref().and_then(Value::as_str);
    if version.is_none() || headers.get(super::VERSION_HEADER) != version {
        return Err(mismatch("MCP-Protocol-Version header does not match params._meta's protocol version"));
    }
    if headers.get(HEADER_METHOD) != Some(message.method()) {
        return Err(mismatch("Mcp-Method header does not match the request's method"));
    }
    if let Some(member) = name_member(message.method())
        && let Some(named) = params.text(member)
        && headers.get(HEADER_NAME).and_then(decode_header_value).as_deref() != Some(&*named)
    {
        return Err(mismatch(&format!("Mcp-Name header does not match the request's `{member}`")));
    }
    let version = version.unwrap_or_default();
    if version != VERSION {
        return Err(unsupported(version));
    }
    Ok(Envelope {
        capabilities: meta.capabilities.unwrap_or(Value::Null),
        log_level: match meta.log_level {
            Some(Value::String(level)) => Some(level),
            _ => None,
        },
    })
}

/// What the checks read of `params._meta` (the keys are `META_*`); the
/// rest, the client's info among it, is skipped unparsed.
#[derive(serde::Deserialize)]
struct Meta {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", default, deserialize_with = "present")]
    version: Option<Value>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", default, deserialize_with = "present")]
    capabilities: Option<Value>,
    #[serde(rename = "io.modelcontextprotocol/logLevel", default)]
    log_level: Option<Value>,
}

/// A key that is there, even when its value is `null`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    serde::Deserialize::deserialize(d).map(Some)
}

fn mismatch(message: &str) -> RpcError {
    RpcError::new(HEADER_MISMATCH, message)
}

/// The client capability a server's request `method` needs; `None` for a
/// method no client of this era answers.
pub(crate) fn capability_of(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// -32021: a server's request during a call needs `capability`, which the
/// client did not declare (`data.requiredCapabilities` names it).
pub(crate) fn missing_capability(capability: &str, method: &str) -> RpcError {
    let mut e = RpcError::new(
        MISSING_CAPABILITY,
        format!(
            "the call needs the client capability `{capability}` (the server sent `{method}`), which the request's _meta does not declare"
        ),
    );
    e.data = Some(serde_json::json!({ "requiredCapabilities": { capability: {} } }));
    e
}

/// -32021: the call can only be run as a task, and the request does not
/// declare the extension `extension` (`data.requiredCapabilities` names it).
pub(crate) fn missing_extension(extension: &str, why: &str) -> RpcError {
    let mut e = RpcError::new(
        MISSING_CAPABILITY,
        format!("{why}: the request's _meta must declare the client capability extensions.`{extension}`"),
    );
    e.data = Some(serde_json::json!({ "requiredCapabilities": { "extensions": { extension: {} } } }));
    e
}

/// -32022 naming every version mcpgate speaks, of both eras.
pub(crate) fn unsupported(requested: &str) -> RpcError {
    let mut supported = vec![VERSION];
    supported.extend_from_slice(versions::SUPPORTED);
    RpcError {
        code: UNSUPPORTED_PROTOCOL_VERSION,
        message: format!("unsupported protocol version `{requested}`; mcpgate speaks {}", supported.join(", ")),
        data: Some(serde_json::json!({ "supported": supported, "requested": requested })),
    }
}

/// A header value as sent: verbatim, or `=?base64?...?=` for bytes a
/// header cannot carry. `None` for a malformed sentinel, which then
/// matches nothing.
pub(crate) fn decode_header_value(value: &str) -> Option<std::borrow::Cow<'_, str>> {
    let Some(payload) = value.strip_prefix("=?base64?").and_then(|v| v.strip_suffix("?=")) else {
        return Some(std::borrow::Cow::Borrowed(value));
    };
    String::from_utf8(base64_decode(payload)?).ok().map(std::borrow::Cow::Owned)
}

/// The `Mcp-Param-*` headers a `tools/call` mirrors from its `arguments`:
/// one per property of the tool's `inputSchema` (reached through
/// `properties` only) that carries `x-mcp-header`, when the argument is
/// there and is a string, an integer or a boolean.
pub(crate) fn param_headers(input_schema: &Value, arguments: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack: Vec<(&Value, &Value)> = vec![(input_schema, arguments)];
    while let Some((schema, value)) = stack.pop() {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else { continue };
        for (name, property) in properties {
            let Some(argument) = value.get(name) else { continue };
            if let Some(token) = property.get("x-mcp-header").and_then(Value::as_str) {
                let rendered = match argument {
                    Value::String(s) => Some(s.clone()),
                    Value::Bool(b) => Some(b.to_string()),
                    Value::Number(n) if property["type"] != "number" => Some(n.to_string()),
                    _ => None,
                };
                if let Some(rendered) = rendered
                    && !token.is_empty()
                    && token.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
                {
                    out.push((format!("Mcp-Param-{token}"), encode_header_value(&rendered)));
                }
            } else if argument.is_object() {
                stack.push((property, argument));
            }
        }
    }
    out
}

/// A value for a header: verbatim when it is printable ASCII without
/// surrounding spaces, else in the `=?base64?...?=` form.
pub(crate) fn encode_header_value(value: &str) -> String {
    let plain = value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && value.trim() == value
        && !(value.starts_with("=?base64?") && value.ends_with("?="));
    if plain { value.to_string() } else { format!("=?base64?{}?=", base64_encode(value.as_bytes())) }
}

fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Standard base64 with padding, canonical only.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for (i, chunk) in bytes.chunks(4).enumerate() {
        let last = i == bytes.len() / 4 - 1;
        let pad = chunk.iter().rev().take_while(|&&b| b == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n: u32 = 0;
        for &b in &chunk[..4 - pad] {
            let v = ALPHABET.iter().position(|&a| a == b)? as u32;
            n = (n << 6) | v;
        }
        n <<= 6 * pad as u32;
        let three = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        // Non-canonical: bits beyond the last byte must be zero.
        if (pad == 1 && three[2] != 0) || (pad == 2 && (three[1] != 0 || three[2] != 0)) {
            return None;
        }
        out.extend_from_slice(&three[..3 - pad]);
    }
    Some(out)
}

/// Whether a result (its JSON text) already says its `resultType` (a
/// server of this era's does), a string: read from its top level alone,
/// without parsing it again.
pub(crate) fn has_result_type(result: &str) -> bool {
    member::top_level(result, "resultType").is_some_and(|t| t.starts_with('"'))
}

/// Whether a result is a task (`resultType: "task"`, the tasks extension):
/// read from its top level alone.
pub(crate) fn is_task(result: &str) -> bool {
    member::top_level(result, "resultType")
        .is_some_and(|t| serde_json::from_str::<std::borrow::Cow<'_, str>>(t).is_ok_and(|t| t == "task"))
}

/// A result's cache hints (`ttlMs`, `cacheScope`): how long its client
/// may keep it, and whether a cache shared between users may serve it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheHints {
    pub(crate) ttl_ms: u64,
    pub(crate) private: bool,
}

impl CacheHints {
    /// What a result whose server said nothing gets: what the SDKs write on
    /// a result whose handler set none, stale at once and private. Never
    /// public: a cache shared between users could serve one user's answer
    /// to another (a server of both eras, spoken to in the session era,
    /// says nothing; directly it says private).
    pub(crate) const UNKNOWN: CacheHints = CacheHints { ttl_ms: 0, private: true };

    /// The hints at the top level of a result (its JSON text) as the server
    /// wrote them; `None` when it has neither. A `cacheScope` other than
    /// `"public"` (or none beside a `ttlMs`) is private, a missing `ttlMs`
    /// stale at once.
    pub(crate) fn of(result: &str) -> Option<CacheHints> {
        #[derive(serde::Deserialize)]
        struct Hints<'a> {
            #[serde(rename = "ttlMs")]
            ttl_ms: Option<Value>,
            #[serde(rename = "cacheScope", borrow)]
            cache_scope: Option<std::borrow::Cow<'a, str>>,
        }
        let hints = serde_json::from_str::<Hints>(result).ok()?;
        if hints.ttl_ms.is_none() && hints.cache_scope.is_none() {
            return None;
        }
        Some(CacheHints {
            ttl_ms: hints.ttl_ms.as_ref().and_then(Value::as_u64).unwrap_or(0),
            private: hints.cache_scope.as_deref() != Some("public"),
        })
    }

    /// Two answers merged into one: the shorter life, and private if
    /// either is.
    pub(crate) fn and(self, other: CacheHints) -> CacheHints {
        CacheHints { ttl_ms: self.ttl_ms.min(other.ttl_ms), private: self.private || other.private }
    }

    pub(crate) fn scope(&self) -> &'static str {
        if self.private { "private" } else { "public" }
    }
}

/// Fills in what a result of this era must carry: `resultType` (complete,
/// unless the server set it), and for `method`s with cache hints `ttlMs`
/// and `cacheScope` from `hints` where the result has none: what it has
/// stays as the server wrote it.
pub(crate) fn complete_result(method: &str, result: &mut Map<String, Value>, hints: CacheHints) {
    result.entry("resultType").or_insert_with(|| Value::from("complete"));
    if is_cacheable(method) {
        result.entry("ttlMs").or_insert_with(|| Value::from(hints.ttl_ms));
        result.entry("cacheScope").or_insert_with(|| Value::from(hints.scope()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct H(Vec<(&'static str, &'static str)>);

    impl Headers for H {
        fn get(&self, name: &str) -> Option<&str> {
            self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
        }
    }

    fn message(method: &str, params: Value) -> Message {
        Message::parse(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string().as_bytes())
            .unwrap()
    }

    fn meta(version: &str) -> Value {
        json!({ META_VERSION: version, META_CAPABILITIES: {"sampling": {}} })
    }

    fn checked(message: &Message, headers: &H) -> Result<Envelope, RpcError> {
        check(message, &Params::of(message)?, headers)
    }

    #[test]
    fn the_ladder_answers_with_the_first_rung_that_fails() {
        let ok = H(vec![("mcp-protocol-version", VERSION), ("mcp-method", "tools/call"), ("mcp-name", "echo")]);
        let call = message("tools/call", json!({"name": "echo", "_meta": meta(VERSION)}));
        let envelope = checked(&call, &ok).unwrap();
        assert!(envelope.can_answer("sampling/createMessage") && !envelope.can_answer("roots/list"));
        let no_meta = message("tools/call", json!({"name": "echo"}));
        assert_eq!(checked(&no_meta, &ok).unwrap_err().code, INVALID_PARAMS);
        let other_name = H(vec![("mcp-protocol-version", VERSION), ("mcp-method", "tools/call"), ("mcp-name", "add")]);
        assert_eq!(checked(&call, &other_name).unwrap_err().code, HEADER_MISMATCH);
        let old = message("tools/call", json!({"name": "echo", "_meta": meta("2099-01-01")}));
        let old_headers =
            H(vec![("mcp-protocol-version", "2099-01-01"), ("mcp-method", "tools/call"), ("mcp-name", "echo")]);
        let e = checked(&old, &old_headers).unwrap_err();
        assert_eq!(e.code, UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(e.data.unwrap()["supported"][0], VERSION);
    }

    #[test]
    fn meta_is_read_by_the_keys_of_the_era_and_a_null_key_is_there() {
        let h = H(vec![("mcp-protocol-version", VERSION), ("mcp-method", "tools/list")]);
        let full =
            json!({ META_VERSION: VERSION, META_CAPABILITIES: {}, META_LOG_LEVEL: "info", META_CLIENT_INFO: {} });
        let envelope = checked(&message("tools/list", json!({ "_meta": full })), &h).unwrap();
        assert_eq!((envelope.capabilities, envelope.log_level.as_deref()), (json!({}), Some("info")));
        let null_version = message("tools/list", json!({"_meta": { META_VERSION: null, META_CAPABILITIES: {} }}));
        assert_eq!(checked(&null_version, &h).unwrap_err().code, HEADER_MISMATCH);
        let e = checked(&message("tools/list", json!({"_meta": { META_VERSION: VERSION }})), &h).unwrap_err();
        assert_eq!(e.code, INVALID_PARAMS);
        assert!(e.message.ends_with(META_CAPABILITIES), "{}", e.message);
        let e = checked(&message("tools/list", json!({"_meta": [1]})), &h).unwrap_err();
        assert!(e.message.starts_with("params._meta must be an object"), "{}", e.message);
    }

    #[test]
    fn header_values_in_base64_are_decoded_and_malformed_ones_match_nothing() {
        assert_eq!(decode_header_value("plain").as_deref(), Some("plain"));
        assert_eq!(decode_header_value("=?base64?w6lsw6h2ZQ==?=").as_deref(), Some("élève"));
        assert_eq!(decode_header_value("=?base64?w6lsw6h2ZR==?="), None, "non-canonical");
        assert_eq!(decode_header_value("=?base64?!!!?="), None);
        for value in ["élève", " padded", "a", "ab", "abc", "abcd"] {
            assert_eq!(decode_header_value(&encode_header_value(value)).as_deref(), Some(value));
        }
        assert_eq!(encode_header_value("plain"), "plain");
    }

    #[test]
    fn arguments_marked_for_a_header_are_mirrored() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "shard": {"type": "integer", "x-mcp-header": "Shard"},
            "nested": {"type": "object", "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}}},
            "text": {"type": "string"},
        }});
        let mut headers =
            param_headers(&schema, &json!({"region": "eu", "shard": 3, "nested": {"zone": "é"}, "text": "x"}));
        headers.sort();
        assert_eq!(
            headers,
            [
                ("Mcp-Param-Region".to_string(), "eu".to_string()),
                ("Mcp-Param-Shard".into(), "3".into()),
                ("Mcp-Param-Zone".into(), "=?base64?w6k=?=".into()),
            ]
        );
        assert!(param_headers(&schema, &json!({})).is_empty());
    }

    #[test]
    fn a_result_that_names_its_type_is_seen_without_building_it() {
        let raw = |v: Value| v.to_string();
        assert!(has_result_type(&raw(
            json!({"content": [{"type": "text", "text": "resultType"}], "resultType": "complete"})
        )));
        assert!(!has_result_type(&raw(json!({"content": [{"type": "text", "text": "\"resultType\": \"complete\""}]}))));
        assert!(!has_result_type(&raw(json!({"nested": {"resultType": "complete"}}))));
        assert!(is_task(&raw(json!({"resultType": "task", "taskId": "t", "status": "working"}))));
        assert!(!is_task(&raw(json!({"resultType": "complete", "content": [{"type": "text", "text": "task"}]}))));
        assert!(!is_task(&raw(json!({"task": {"taskId": "t"}}))), "2025-11-25's CreateTaskResult is not one");
        assert!(is_task(r#"{"content": [], "resultType": "t\u0061sk"}"#), "the value as JSON reads it");
        assert!(!has_result_type(r#"{"resultType": null}"#) && !has_result_type(r#"{"resultType": 7}"#));
    }

    #[test]
    fn a_missing_extension_is_named_in_the_error() {
        let e = missing_extension("io.modelcontextprotocol/tasks", "tool `t` runs only as a task");
        assert_eq!(e.code, MISSING_CAPABILITY);
        assert_eq!(
            e.data,
            Some(json!({"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}))
        );
        assert!(e.message.starts_with("tool `t` runs only as a task"), "{}", e.message);
    }

    #[test]
    fn tasks_requests_name_their_task_in_mcp_name() {
        for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
            assert_eq!(name_member(method), Some("taskId"), "{method}");
        }
    }

    #[test]
    fn results_get_their_type_and_cache_hints() {
        let mut result = Map::new();
        complete_result("tools/list", &mut result, CacheHints { ttl_ms: 5000, private: true });
        assert_eq!(Value::Object(result), json!({"resultType": "complete", "ttlMs": 5000, "cacheScope": "private"}));
        let mut asked = json!({"resultType": "input_required"}).as_object().unwrap().clone();
        complete_result("tools/call", &mut asked, CacheHints { ttl_ms: 5000, private: false });
        assert_eq!(Value::Object(asked), json!({"resultType": "input_required"}));
        // A server's own hints stay as it wrote them, even one mcpgate would not write.
        let mut read = json!({"contents": [], "cacheScope": "", "ttlMs": 7}).as_object().unwrap().clone();
        complete_result("resources/read", &mut read, CacheHints::UNKNOWN);
        assert_eq!((&read["cacheScope"], &read["ttlMs"]), (&json!(""), &json!(7)));
    }

    #[test]
    fn cache_hints_are_private_unless_said_public_and_merge_to_the_shorter_and_narrower() {
        let of = |v: Value| CacheHints::of(&v.to_string());
        assert_eq!(of(json!({"tools": []})), None);
        assert_eq!(of(json!({"ttlMs": 10, "cacheScope": "public"})), Some(CacheHints { ttl_ms: 10, private: false }));
        for scope in [json!("private"), json!(""), json!("PUBLIC"), json!(null)] {
            assert_eq!(of(json!({"ttlMs": 10, "cacheScope": scope})), Some(CacheHints { ttl_ms: 10, private: true }));
        }
        assert_eq!(of(json!({"cacheScope": "public"})), Some(CacheHints { ttl_ms: 0, private: false }));
        let open = CacheHints { ttl_ms: 9000, private: false };
        let kept = CacheHints { ttl_ms: 2500, private: true };
        assert_eq!(open.and(kept), CacheHints { ttl_ms: 2500, private: true });
        assert_eq!(open.and(open), open);
        assert_eq!(CacheHints::UNKNOWN.scope(), "private");
    }
}
