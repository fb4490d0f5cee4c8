//! JSON-RPC 2.0 messages as MCP uses them: parsing, classification and the
//! few shapes mcpgate writes. Params and results stay raw JSON text so that
//! what mcpgate only forwards is never re-serialized.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::validate;
use crate::runtime::memory::Charge;
use crate::runtime::recycle;

pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
pub(crate) const INTERNAL_ERROR: i64 = -32603;
/// mcpgate's own, in the range JSON-RPC leaves to servers: a call over a
/// `rate_limit` (its `data.retryAfterSecs` says when to try again).
pub(crate) const RATE_LIMITED: i64 = -32029;
/// A URL elicitation must complete first (2025-11-25 only): the links are in `data.elicitations`.
pub(crate) const URL_ELICITATION_REQUIRED: i64 = -32042;

/// One JSON-RPC message as received. `id` is `Some(Value::Null)` when the
/// field is present and null, `None` when absent.
/// `jsonrpc` and a `method` of MCP's are static text: reading one
/// allocates for neither.
#[derive(Debug, Clone)]
pub struct Message {
    pub(crate) jsonrpc: Option<Cow<'static, str>>,
    pub id: Option<Value>,
    pub(crate) method: Option<Cow<'static, str>>,
    pub params: Option<Box<RawValue>>,
    pub result: Option<Json>,
    pub error: Option<Box<RawValue>>,
    /// What the parts copied out of a body read under a charge (params,
    /// error, a copied result) hold against `max_memory_mb`: the body's
    /// charge, cut to their size ([`Message::hold`]). Shared by clones.
    pub(crate) held: Option<Arc<Charge>>,
}

/// JSON text as a message carried it, checked when the message was read:
/// its own, or a part of the body it came in, shared with that body rather
/// than copied out of it ([`Message::parse_owned`]: a server's 1 MB result
/// is one buffer, not two).
#[derive(Clone)]
pub struct Json(JsonText);

#[derive(Clone)]
enum JsonText {
    Own(Box<str>),
    Part(Arc<Body>, Range<usize>),
}

/// The body a message was read from, shared by the parts it keeps, and
/// what it was charged to `max_memory_mb` as it was read: the charge lasts
/// as long as the body, which a slow client may hold while its answer is
/// written. Given back, charge and all, for the next large answer when the
/// last part is dropped (`runtime/recycle.rs`).
struct Body {
    text: String,
    charge: Charge,
}

impl std::ops::Deref for Body {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        let charge = std::mem::replace(&mut self.charge, Charge::empty());
        recycle::give(std::mem::take(&mut self.text).into_bytes(), charge);
    }
}

impl Json {
    /// The text, as it came.
    pub(crate) fn get(&self) -> &str {
        match &self.0 {
            JsonText::Own(text) => text,
            JsonText::Part(body, range) => &body[range.clone()],
        }
    }
}

impl From<Box<RawValue>> for Json {
    fn from(raw: Box<RawValue>) -> Json {
        Json(JsonText::Own(raw.into()))
    }
}

impl std::fmt::Debug for Json {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

/// Answers from this size on have their result checked by
/// [`validate`], not by serde_json: below it the two cost the same. Only
/// where the result is at least half the answer: the rest is copied for
/// serde_json, and that copy stays the smaller part.
const CHECKED_APART: usize = 4096;

/// A [`Message`] as it is read, its members borrowed from the text.
#[derive(Deserialize)]
#[serde(rename = "Message")]
struct Read<'a> {
    #[serde(default, deserialize_with = "text")]
    jsonrpc: Option<Cow<'static, str>>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default, deserialize_with = "text")]
    method: Option<Cow<'static, str>>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A string member, as the static text of [`known`] when it is one; `null`
/// reads as absent.
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'static, str>>, D::Error> {
    struct Text;
    impl<'de> serde::de::Visitor<'de> for Text {
        type Value = Option<Cow<'static, str>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(known(v).map_or_else(|| Cow::Owned(v.to_owned()), Cow::Borrowed)))
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(self)
        }
    }
    d.deserialize_option(Text)
}

/// The JSON-RPC version and the methods of MCP's eras, as static text.
fn known(text: &str) -> Option<&'static str> {
    Some(match text {
        "2.0" => "2.0",
        "initialize" => "initialize",
        "ping" => "ping",
        "server/discover" => "server/discover",
        "tools/list" => "tools/list",
        "tools/call" => "tools/call",
        "prompts/list" => "prompts/list",
        "prompts/get" => "prompts/get",
        "resources/list" => "resources/list",
        "resources/templates/list" => "resources/templates/list",
        "resources/read" => "resources/read",
        "resources/subscribe" => "resources/subscribe",
        "resources/unsubscribe" => "resources/unsubscribe",
        "completion/complete" => "completion/complete",
        "logging/setLevel" => "logging/setLevel",
        "subscriptions/listen" => "subscriptions/listen",
        "tasks/get" => "tasks/get",
        "tasks/result" => "tasks/result",
        "tasks/list" => "tasks/list",
        "tasks/cancel" => "tasks/cancel",
        "tasks/update" => "tasks/update",
        "sampling/createMessage" => "sampling/createMessage",
        "elicitation/create" => "elicitation/create",
        "roots/list" => "roots/list",
        "notifications/initialized" => "notifications/initialized",
        "notifications/cancelled" => "notifications/cancelled",
        "notifications/progress" => "notifications/progress",
        "notifications/message" => "notifications/message",
        _ => return None,
    })
}

fn parse_error(e: serde_json::Error) -> RpcError {
    if e.is_syntax() || e.is_eof() {
        RpcError::new(PARSE_ERROR, format!("parse error: {e}"))
    } else {
        RpcError::new(INVALID_REQUEST, format!("invalid JSON-RPC message: {e}"))
    }
}

/// What a message is, by the rules of JSON-RPC 2.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notification,
    Response,
}

/// A JSON-RPC error object: code, message, and optional data (mcpgate puts
/// the server's name there when one server caused it).
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub(crate) message: String,
    pub(crate) data: Option<Value>,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError { code, message: message.into(), data: None }
    }

    pub(crate) fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> RpcError {
        RpcError::new(INTERNAL_ERROR, message)
    }

    /// An error caused by one downstream server: the message and the data name it.
    pub(crate) fn server(server: &str, message: impl std::fmt::Display) -> RpcError {
        RpcError {
            code: INTERNAL_ERROR,
            message: format!("server `{server}`: {message}"),
            data: Some(serde_json::json!({ "server": server })),
        }
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

impl Message {
    /// Parses one message from JSON text.
    pub fn parse(bytes: &[u8]) -> Result<Message, RpcError> {
        let read: Read = serde_json::from_slice(bytes).map_err(parse_error)?;
        let result = read.result.map(|raw| Json::from(raw.to_owned()));
        Message::of(read, result)
    }

    /// [`Message::parse`] of a body that is the message's to keep: its
    /// result stays in it, uncopied (params and error are copied, being
    /// small wherever a result is large).
    pub fn parse_owned(body: Vec<u8>) -> Result<Message, RpcError> {
        Message::parse_charged(body, Charge::empty())
    }

    /// [`Message::parse_owned`] of a body read under `charge`: a result
    /// kept in the body keeps the charge until the last of it is dropped.
    /// Without a result, what the params or error hold of it goes with
    /// the message ([`Message::take_held`]), and the rest ends here.
    pub(crate) fn parse_charged(body: Vec<u8>, charge: Charge) -> Result<Message, RpcError> {
        match String::from_utf8(body) {
            Ok(text) => Message::parse_text(text, charge),
            // Not UTF-8: the same error as `parse` gives.
            Err(e) => Message::parse(e.as_bytes()),
        }
    }

    /// [`Message::parse_charged`] of text (an SSE event's data).
    pub(crate) fn parse_text(text: String, charge: Charge) -> Result<Message, RpcError> {
        if text.len() >= CHECKED_APART
            && let Some(span) = validate::result_span(&text)
            && let Some(b'{' | b'[') = text.as_bytes().get(span.start)
            && span.len() >= text.len() / 2
        {
            return Message::parse_around(text, span, charge);
        }
        let mut body = Arc::new(Body { text, charge });
        let read: Read = serde_json::from_str(&body).map_err(parse_error)?;
        // Where the result lies in the body: it was read from it.
        let result = read.result.map(|raw| {
            let start = raw.get().as_ptr() as usize - body.as_ptr() as usize;
            Json(JsonText::Part(body.clone(), start..start + raw.get().len()))
        });
        let mut message = Message::of(read, result)?;
        // No result keeps the body: what was copied out of it keeps its charge.
        if let Some(body) = Arc::get_mut(&mut body) {
            message.hold(std::mem::replace(&mut body.charge, Charge::empty()));
        }
        Ok(message)
    }

    /// Keeps as much of `charge` (what the body was charged as it was
    /// read) as the parts copied out of it hold, and gives back the rest.
    pub(crate) fn hold(&mut self, mut charge: Charge) {
        let result = match &self.result {
            Some(Json(JsonText::Own(text))) => text.len(),
            _ => 0,
        };
        let copied = [&self.params, &self.error].into_iter().flatten().map(|raw| raw.get().len()).sum::<usize>();
        charge.shrink_to(copied + result);
        if charge.bytes() > 0 {
            self.held = Some(Arc::new(charge));
        }
    }

    /// The charge of what this message holds of the body it was read
    /// from (its result in it, or what was copied out), for whatever is
    /// made of it next: the answer written to a client. None while
    /// another part or clone shares it.
    pub(crate) fn take_held(&mut self) -> Option<Charge> {
        if let Some(Json(JsonText::Part(body, _))) = &mut self.result
            && let Some(body) = Arc::get_mut(body)
        {
            return Some(std::mem::replace(&mut body.charge, Charge::empty()));
        }
        self.held.take().and_then(|held| Arc::try_unwrap(held).ok())
    }

    /// [`Message::parse_text`] of a message whose result `validate` checked
    /// at `span`: serde_json reads the rest, with `0` in the result's place,
    /// and so gives what it gives for the whole (an object or array result
    /// is a result to it as `0` is).
    fn parse_around(text: String, span: Range<usize>, charge: Charge) -> Result<Message, RpcError> {
        let mut rest = String::with_capacity(text.len() - span.len() + 1);
        rest.push_str(&text[..span.start]);
        rest.push('0');
        rest.push_str(&text[span.end..]);
        let read: Read = serde_json::from_str(&rest).map_err(parse_error)?;
        if read.result.is_none() {
            let mut message = Message::of(read, None)?;
            message.hold(charge);
            return Ok(message);
        }
        Message::of(read, Some(Json(JsonText::Part(Arc::new(Body { text, charge }), span))))
    }

    /// The message read, owning what it keeps; refused unless JSON-RPC allows its shape.
    fn of(read: Read, result: Option<Json>) -> Result<Message, RpcError> {
        let own = |raw: Option<&RawValue>| raw.map(RawValue::to_owned);
        let message = Message {
            jsonrpc: read.jsonrpc,
            id: read.id,
            method: read.method,
            params: own(read.params),
            result,
            error: own(read.error),
            held: None,
        };
        message.kind()?;
        Ok(message)
    }

    /// Classifies the message, refusing shapes JSON-RPC 2.0 does not allow.
    pub fn kind(&self) -> Result<Kind, RpcError> {
        if self.jsonrpc.as_deref() != Some("2.0") {
            return Err(RpcError::new(INVALID_REQUEST, "invalid request: `jsonrpc` must be \"2.0\""));
        }
        let id_ok = match &self.id {
            None => true,
            Some(Value::String(_)) => true,
            Some(Value::Number(n)) => n.is_i64() || n.is_u64(),
            Some(_) => false,
        };
        match (&self.method, &self.id) {
            (Some(_), _) if !id_ok => {
                Err(RpcError::new(INVALID_REQUEST, "invalid request: `id` must be a string or an integer"))
            }
            (Some(_), Some(_)) => Ok(Kind::Request),
            (Some(_), None) => Ok(Kind::Notification),
            (None, Some(_)) if self.result.is_some() != self.error.is_some() => Ok(Kind::Response),
            (None, Some(_)) => {
                Err(RpcError::new(INVALID_REQUEST, "invalid response: exactly one of `result` and `error` is required"))
            }
            (None, None) => Err(RpcError::new(INVALID_REQUEST, "invalid request: `method` is missing")),
        }
    }

    pub fn method(&self) -> &str {
        self.method.as_deref().unwrap_or("")
    }

    /// The params as a JSON object (absent params read as an empty object).
    pub fn params_object(&self) -> Result<serde_json::Map<String, Value>, RpcError> {
        match &self.params {
            None => Ok(serde_json::Map::new()),
            Some(raw) => match serde_json::from_str(raw.get()) {
                Ok(Value::Object(map)) => Ok(map),
                Ok(Value::Null) => Ok(serde_json::Map::new()),
                Ok(_) => {
                    Err(RpcError::invalid_params(format!("invalid params for `{}`: expected an object", self.method())))
                }
                Err(e) => Err(RpcError::invalid_params(format!("invalid params for `{}`: {e}", self.method()))),
            },
        }
    }
}

/// The params of a request to forward: each member kept as the client
/// wrote it, so that what mcpgate does not touch (tool arguments, with
/// their big integers and their formatting) reaches the server unchanged.
/// Members and their names are borrowed from the message they were read
/// from (a name with escapes is unescaped, and so owned); those mcpgate
/// sets are its own. Until one is set or removed, the params go on as the
/// text they were read from, not written anew ([`Params::text_as_sent`]).
/// A name given twice is refused: sent as written, the first of the two
/// might be what the server reads, where mcpgate read the last.
#[derive(Debug, Default, Clone)]
pub struct Params<'a> {
    members: std::collections::BTreeMap<Cow<'a, str>, Cow<'a, RawValue>>,
    /// The text the members were read from, while none was changed.
    read_from: Option<&'a RawValue>,
}

impl<'a> Params<'a> {
    pub fn of(message: &'a Message) -> Result<Params<'a>, RpcError> {
        let Some(raw) = &message.params else { return Ok(Params::default()) };
        if raw.get().trim() == "null" {
            return Ok(Params::default());
        }
        // serde_json says what was wrong: a type (`expected an object`) or a name given twice.
        Params::read(raw)
            .map_err(|e| RpcError::invalid_params(format!("invalid params for `{}`: {e}", message.method())))
    }

    /// The members of the JSON object `raw`, borrowed from it.
    pub(crate) fn read(raw: &'a RawValue) -> Result<Params<'a>, serde_json::Error> {
        let mut params: Params = serde_json::from_str(raw.get())?;
        params.read_from = Some(raw);
        Ok(params)
    }

    /// A member that is a JSON string.
    pub(crate) fn str(&self, key: &str) -> Option<String> {
        self.text(key).map(Cow::into_owned)
    }

    /// A member that is a JSON string, borrowed from the same text as
    /// this when it has no escapes.
    pub(crate) fn text(&self, key: &str) -> Option<Cow<'a, str>> {
        #[derive(Deserialize)]
        struct Text<'t>(#[serde(borrow)] Cow<'t, str>);
        match self.members.get(key)? {
            Cow::Borrowed(raw) => serde_json::from_str::<Text<'a>>(raw.get()).ok().map(|t| t.0),
            Cow::Owned(raw) => serde_json::from_str::<Text>(raw.get()).ok().map(|t| Cow::Owned(t.0.into_owned())),
        }
    }

    /// A member parsed whole (for small members: a ref, a request id).
    pub(crate) fn value(&self, key: &str) -> Option<Value> {
        serde_json::from_str(self.members.get(key)?.get()).ok()
    }

    pub(crate) fn contains(&self, key: &str) -> bool {
        self.members.contains_key(key)
    }

    pub(crate) fn remove(&mut self, key: &str) {
        if self.members.remove(key).is_some() {
            self.read_from = None;
        }
    }

    pub fn set(&mut self, key: &str, value: &Value) {
        self.set_raw(key, raw(value));
    }

    /// A member as the client wrote it.
    pub(crate) fn raw(&self, key: &str) -> Option<&RawValue> {
        self.members.get(key).map(|v| &**v)
    }

    /// Sets a member to text already JSON, kept as it is.
    pub(crate) fn set_raw(&mut self, key: &str, value: Box<RawValue>) {
        self.members.insert(Cow::Owned(key.to_string()), Cow::Owned(value));
        self.read_from = None;
    }

    /// The members of an object member, each kept as written, borrowed
    /// from the same text as this; `None` when it is absent, and serde's
    /// words when it is not an object or gives a name twice.
    pub(crate) fn object(&self, key: &str) -> Option<Result<Params<'a>, serde_json::Error>> {
        Some(match self.members.get(key)? {
            Cow::Borrowed(raw) => Params::read(raw),
            Cow::Owned(raw) => serde_json::from_str(raw.get()).map(Params::into_owned),
        })
    }

    /// The same params, owning their text (for a call that leaves this
    /// thread). What they were read from is not copied again: they are
    /// written anew when sent.
    pub(crate) fn into_owned(self) -> Params<'static> {
        let members = self.members.into_iter();
        Params {
            members: members.map(|(k, v)| (Cow::Owned(k.into_owned()), Cow::Owned(v.into_owned()))).collect(),
            read_from: None,
        }
    }

    /// The params as JSON text, written anew from the members.
    pub fn to_raw(&self) -> Box<RawValue> {
        serde_json::value::to_raw_value(&self.members).expect("raw members serialize")
    }

    /// The params as they go to a server: the text they were read from
    /// while no member was changed (one copy less, and the client's member
    /// order kept), else [`Params::to_raw`].
    pub fn text_as_sent(&self) -> Cow<'_, RawValue> {
        match self.read_from {
            Some(raw) => Cow::Borrowed(raw),
            None => Cow::Owned(self.to_raw()),
        }
    }
}

impl<'de> Deserialize<'de> for Params<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// A member's name: borrowed unless it has escapes.
        struct Name<'t>(Cow<'t, str>);
        impl<'de> Deserialize<'de> for Name<'de> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = Name<'de>;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("a member name")
                    }
                    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                        Ok(Name(Cow::Borrowed(v)))
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                        Ok(Name(Cow::Owned(v.to_owned())))
                    }
                }
                d.deserialize_str(V)
            }
        }
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = Params<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut members = std::collections::BTreeMap::new();
                while let Some(Name(name)) = map.next_key()? {
                    if members.contains_key(&name) {
                        return Err(serde::de::Error::custom(format_args!("member `{name}` given twice")));
                    }
                    let value: &'de RawValue = map.next_value()?;
                    members.insert(name, Cow::Borrowed(value));
                }
                Ok(Params { members, read_from: None })
            }
        }
        d.deserialize_map(Members)
    }
}

#[derive(Serialize)]
struct Out<'a> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RawValue>,
}

impl Out<'_> {
    /// Written once into a buffer sized for it: a large result is copied
    /// once, not again each time the buffer would have grown.
    fn to_vec(&self) -> Vec<u8> {
        let raw = |r: Option<&RawValue>| r.map_or(0, |r| r.get().len());
        let size = 128 + raw(self.params) + raw(self.result) + raw(self.error);
        let mut out = Vec::with_capacity(size);
        serde_json::to_writer(&mut out, self).expect("serializing borrowed JSON cannot fail");
        out
    }
}

const fn out() -> Out<'static> {
    Out { jsonrpc: "2.0", id: None, method: None, params: None, result: None, error: None }
}

pub fn request(id: &Value, method: &str, params: Option<&RawValue>) -> Vec<u8> {
    Out { id: Some(id), method: Some(method), params, ..out() }.to_vec()
}

pub fn notification(method: &str, params: Option<&RawValue>) -> Vec<u8> {
    Out { method: Some(method), params, ..out() }.to_vec()
}

pub(crate) fn result(id: &Value, result: &RawValue) -> Vec<u8> {
    Out { id: Some(id), result: Some(result), ..out() }.to_vec()
}

/// [`result`] for a result read from a message.
pub fn result_text(id: &Value, result: &Json) -> Vec<u8> {
    let head = result_head(id);
    let mut out = Vec::with_capacity(head.len() + result.get().len() + RESULT_TAIL.len());
    out.extend_from_slice(&head);
    out.extend_from_slice(result.get().as_bytes());
    out.extend_from_slice(RESULT_TAIL);
    out
}

/// What [`result`] writes before the result: with the result and
/// [`RESULT_TAIL`] after it, the same bytes, for a writer that sends a large
/// result as the server wrote it without copying it into one buffer first.
pub(crate) fn result_head(id: &Value) -> Vec<u8> {
    let mut head = br#"{"jsonrpc":"2.0","id":"#.to_vec();
    serde_json::to_writer(&mut head, id).expect("a JSON value serializes");
    head.extend_from_slice(br#","result":"#);
    head
}

/// What ends a response that [`result_head`] began.
pub(crate) const RESULT_TAIL: &[u8] = b"}";

/// A response carrying an error exactly as another peer wrote it. Where no
/// id applies (`null`: a parse error, a request refused before it was
/// read) the member is left out, as MCP's schema has it (`id?: RequestId`).
pub fn raw_error(id: &Value, error: &RawValue) -> Vec<u8> {
    Out { id: (!id.is_null()).then_some(id), error: Some(error), ..out() }.to_vec()
}

pub(crate) fn error(id: &Value, error: &RpcError) -> Vec<u8> {
    let mut body = serde_json::json!({ "code": error.code, "message": error.message });
    if let Some(data) = &error.data {
        body["data"] = data.clone();
    }
    let raw = RawValue::from_string(body.to_string()).expect("json! output is valid JSON");
    raw_error(id, &raw)
}

/// JSON text for a value built in code.
pub fn raw(value: &Value) -> Box<RawValue> {
    RawValue::from_string(value.to_string()).expect("a Value serializes to valid JSON")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::memory;

    /// A charge no other test's comes near, so that the budget's count
    /// tells it apart while tests run side by side.
    const GIB: usize = 1 << 30;

    /// The charge a server's answer was read under lasts as long as any
    /// part of it: a result handed on (to a slow client's write, say)
    /// holds it, and it ends with the last part.
    #[test]
    fn a_body_read_under_a_charge_keeps_it_while_a_part_of_it_lives() {
        let _budget = memory::TEST_BUDGET.lock();
        // Under recycle::MIN_BYTES (not kept for the next answer), and past
        // CHECKED_APART (the result read apart); then a small one.
        for size in [8_000, 100] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"text":"{}"}}}}"#, "x".repeat(size));
            let before = memory::used();
            let message = Message::parse_charged(body.into_bytes(), Charge::new(GIB).expect("room")).unwrap();
            let result = message.result.clone().expect("a result");
            drop(message);
            assert!(memory::used().abs_diff(before + GIB) < GIB / 4, "{size}: held while its result lives");
            assert_eq!(result.get().len(), size + 11);
            drop(result);
            assert!(memory::used().abs_diff(before) < GIB / 4, "{size}: given back with the last part");
        }
        // Without a result the body is not kept: what was copied out of it
        // (an error, a server's request) keeps that much of its charge.
        let before = memory::used();
        let error = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no"}}"#.to_vec();
        let mut message = Message::parse_charged(error, Charge::new(GIB).expect("room")).unwrap();
        assert!(memory::used().abs_diff(before) < GIB / 4);
        let copied = r#"{"code":-1,"message":"no"}"#.len();
        assert_eq!(message.held.as_ref().map(|c| c.bytes()), Some(copied));
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"sampling/createMessage","params":{{"t":"{}"}}}}"#,
            "y".repeat(8_000)
        );
        let asked = Message::parse_charged(request.into_bytes(), Charge::new(GIB).expect("room")).unwrap();
        assert_eq!(asked.held.as_ref().map(|c| c.bytes()), Some(8_008));
        // Taken for the answer written from it, the charge leaves the message.
        let held = message.take_held().expect("the error's charge");
        assert_eq!((held.bytes(), message.held.is_none()), (copied, true));
        // A result's body gives up its charge likewise, unless a part of it is shared.
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"text":"{}"}}}}"#, "x".repeat(8_000));
        let mut answer = Message::parse_charged(body.into_bytes(), Charge::new(GIB).expect("room")).unwrap();
        let shared = answer.result.clone();
        assert!(answer.take_held().is_none(), "shared with a clone of its result");
        drop(shared);
        let taken = answer.take_held();
        assert_eq!(taken.as_ref().map(Charge::bytes), Some(GIB));
        assert!(memory::used().abs_diff(before + GIB + copied + 8_008) < GIB / 4);
        drop((held, taken, answer, asked, message));
        assert!(memory::used().abs_diff(before) < GIB / 4);
    }

    #[test]
    fn classifies_requests_notifications_and_responses() {
        let cases: [(&str, Result<Kind, i64>); 10] = [
            (r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, Ok(Kind::Request)),
            (r#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#, Ok(Kind::Request)),
            (r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, Ok(Kind::Notification)),
            (r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, Ok(Kind::Response)),
            (r#"{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"x"}}"#, Ok(Kind::Response)),
            (r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#, Err(INVALID_REQUEST)),
            (r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, Err(INVALID_REQUEST)),
            (r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#, Err(INVALID_REQUEST)),
            (r#"{"jsonrpc":"2.0","id":1}"#, Err(INVALID_REQUEST)),
            (r#"{"jsonrpc":"2.0","id":1,"method":"x""#, Err(PARSE_ERROR)),
        ];
        for (text, want) in cases {
            let got = Message::parse(text.as_bytes()).map(|m| m.kind().unwrap()).map_err(|e| e.code);
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn known_text_is_static_and_other_text_is_kept() {
        let m = Message::parse(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#).unwrap();
        assert!(matches!(m.jsonrpc, Some(Cow::Borrowed("2.0"))));
        assert!(matches!(m.method, Some(Cow::Borrowed("tools/call"))));
        let m = Message::parse(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call\u0021"}"#).unwrap();
        assert!(matches!(&m.method, Some(Cow::Owned(t)) if t == "tools/call!"));
        let m = Message::parse(br#"{"jsonrpc":"2.0","id":1,"method":null,"result":{}}"#).unwrap();
        assert_eq!((m.method.as_deref(), m.kind()), (None, Ok(Kind::Response)));
        assert_eq!(Message::parse(br#"{"jsonrpc":"2.0","id":1,"method":5}"#).unwrap_err().code, INVALID_REQUEST);
        assert_eq!(Message::parse(br#"{"jsonrpc":2,"id":1,"method":"ping"}"#).unwrap_err().code, INVALID_REQUEST);
    }

    #[test]
    fn non_object_json_is_an_invalid_request_not_a_parse_error() {
        assert_eq!(Message::parse(b"[1]").unwrap_err().code, INVALID_REQUEST);
        assert_eq!(Message::parse(b"42").unwrap_err().code, INVALID_REQUEST);
        assert_eq!(Message::parse(b"{nope").unwrap_err().code, PARSE_ERROR);
    }

    #[test]
    fn forwarded_results_keep_their_bytes() {
        let m = Message::parse(br#"{"jsonrpc":"2.0","id":7,"result":{"b": 1,  "a":[1.50]}}"#).unwrap();
        let out = result_text(&Value::from("c-1"), m.result.as_ref().unwrap());
        assert_eq!(out, br#"{"jsonrpc":"2.0","id":"c-1","result":{"b": 1,  "a":[1.50]}}"#);
    }

    /// A body read whole and kept ([`Message::parse_owned`]) reads as the
    /// same message as one parsed from borrowed bytes, its result's text
    /// exactly as written, and fails the same way.
    #[test]
    fn a_message_read_from_its_own_body_is_the_same_message() {
        let bodies: [&[u8]; 4] = [
            br#"{"jsonrpc":"2.0","id":7,"result":{"b": 1,  "a":[1.50], "t": "\u00e9 \" \\ x"}}"#,
            "{\"id\":\"s\",\"result\":[\"é\"] ,\"jsonrpc\":\"2.0\"}".as_bytes(),
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#,
            br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}"#,
        ];
        for body in bodies {
            let (a, b) = (Message::parse(body).unwrap(), Message::parse_owned(body.to_vec()).unwrap());
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{}", String::from_utf8_lossy(body));
            assert_eq!(a.kind(), b.kind());
        }
        let m = Message::parse_owned(bodies[0].to_vec()).unwrap();
        let result = m.result.unwrap();
        assert!(matches!(result.0, JsonText::Part(..)), "the result is copied out of its body");
        assert_eq!(result.get(), r#"{"b": 1,  "a":[1.50], "t": "\u00e9 \" \\ x"}"#);
        let bad: [&[u8]; 5] =
            [b"{nope", b"[1]", b"\xff\xfe", br#"{"jsonrpc":"2.0","id":1}"#, b"{\"id\":1,\"result\":\"\x01\"}"];
        for body in bad {
            let (a, b) = (Message::parse(body).unwrap_err(), Message::parse_owned(body.to_vec()).unwrap_err());
            assert_eq!(a.code, b.code, "{}", String::from_utf8_lossy(body));
        }
    }

    /// From [`CHECKED_APART`] bytes on, the result is checked by
    /// `validate` and the rest by serde_json: the message is the same as
    /// serde_json's reading of the whole, and so is every refusal.
    #[test]
    fn a_large_answer_checked_apart_is_the_message_serde_json_reads() {
        let text = "x".repeat(CHECKED_APART);
        let good = [
            format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"content":[{{"type":"text","text":"{text}"}}]}}}}"#),
            format!(r#" {{ "result" : ["{text}", 1.5e3, null] , "id" : "s", "jsonrpc" : "2.0" }} "#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{}},"extra":"{text}"}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":null,"error":{{"code":1,"message":"{text}"}}}}"#),
        ];
        for body in &good {
            let span = validate::result_span(body);
            let (a, b) =
                (Message::parse(body.as_bytes()).unwrap(), Message::parse_owned(body.clone().into_bytes()).unwrap());
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{body:.80}");
            assert_eq!(a.kind(), b.kind());
            if let Some(span) = span.filter(|s| body.as_bytes()[s.start] != b'n') {
                assert_eq!(b.result.as_ref().map(Json::get), Some(&body[span]));
            }
        }
        let bad = [
            format!(r#"{{"jsonrpc":"2.0","id":1.5,"result":{{"t":"{text}"}}}}"#),
            format!(r#"{{"jsonrpc":"1.0","id":1,"result":{{"t":"{text}"}}}}"#),
            format!(r#"{{"id":1,"result":{{"t":"{text}"}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"t":"{text}"}},"error":{{"code":1,"message":"m"}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"t":"{text}"}},"result":{{}}}}"#),
            format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{\"t\":\"{text}\u{1}\"}}}}"),
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"t":"{text}"}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"t":"{text}"}},}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":{{}},"result":{{"t":"{text}"}}}}"#),
        ];
        for body in &bad {
            let a = Message::parse(body.as_bytes()).map(|m| m.kind());
            let b = Message::parse_owned(body.clone().into_bytes()).map(|m| m.kind());
            match (a, b) {
                (Err(a), Err(b)) => assert_eq!(a.code, b.code, "{body:.80}"),
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{body:.80}"),
                (a, b) => panic!("{body:.80}: serde_json {a:?}, checked apart {b:?}"),
            }
        }
    }

    #[test]
    fn forwarded_params_keep_what_mcpgate_does_not_touch() {
        let m = Message::parse(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__b","arguments":{"n":123456789012345678901234567890, "x": 1.50}}}"#,
        )
        .unwrap();
        let mut params = Params::of(&m).unwrap();
        assert_eq!(params.str("name").as_deref(), Some("a__b"));
        params.set("name", &Value::from("b"));
        assert_eq!(
            params.to_raw().get(),
            r#"{"arguments":{"n":123456789012345678901234567890, "x": 1.50},"name":"b"}"#
        );
        let m = Message::parse(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#).unwrap();
        assert_eq!(Params::of(&m).unwrap_err().code, INVALID_PARAMS);
    }

    /// Untouched, the params go as the client wrote them (its member order,
    /// its spaces): the same text, not a copy. Any change writes them anew.
    #[test]
    fn params_no_member_of_which_changed_are_sent_as_written() {
        let body =
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{ "name": "b", "arguments": {"x": 1.50} }}"#;
        let m = Message::parse(body).unwrap();
        let written = m.params.as_deref().unwrap().get();
        let mut params = Params::of(&m).unwrap();
        assert!(matches!(params.text_as_sent(), Cow::Borrowed(raw) if std::ptr::eq(raw.get(), written)));
        // Removing what is not there changes nothing.
        params.remove("task");
        assert!(matches!(params.text_as_sent(), Cow::Borrowed(_)));
        let mut removed = params.clone();
        removed.remove("arguments");
        assert_eq!(removed.text_as_sent().get(), r#"{"name":"b"}"#);
        params.set("name", &Value::from("b"));
        assert_eq!(params.text_as_sent().get(), r#"{"arguments":{"x": 1.50},"name":"b"}"#);
        // Owned, for a call on another thread: written anew too.
        let owned = Params::of(&m).unwrap().into_owned();
        assert_eq!(owned.text_as_sent().get(), r#"{"arguments":{"x": 1.50},"name":"b"}"#);
        // An object member read as params is its own text, as written.
        let params = Params::of(&m).unwrap();
        assert_eq!(params.object("arguments").unwrap().unwrap().text_as_sent().get(), r#"{"x": 1.50}"#);
    }

    /// Sent as written, params with a name twice could be read one way by
    /// mcpgate (the last) and another by the server (the first): refused,
    /// an escaped name included, and named.
    #[test]
    fn params_that_give_a_name_twice_are_refused() {
        for body in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{},"name":"b"}}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","n\u0061me":"b"}}"#,
        ] {
            let m = Message::parse(body).unwrap();
            let e = Params::of(&m).unwrap_err();
            assert_eq!(e.code, INVALID_PARAMS);
            assert!(e.message.contains("member `name` given twice"), "{}", e.message);
            assert!(e.message.starts_with("invalid params for `tools/call`"), "{}", e.message);
        }
        // Within a member, names are the server's business: kept as written.
        let m = Message::parse(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":{"k":1,"k":2}}}"#).unwrap();
        assert_eq!(Params::of(&m).unwrap().text_as_sent().get(), r#"{"a":{"k":1,"k":2}}"#);
    }

    #[test]
    fn params_are_borrowed_from_the_message_unless_they_have_escapes() {
        let m = Message::parse(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","t\u0061sk":{},"arguments":{"text":"a\"b","inner":{"k":1}}}}"#,
        )
        .unwrap();
        let params = Params::of(&m).unwrap();
        let text = m.params.as_deref().unwrap().get();
        let inside = |s: &str| text.as_bytes().as_ptr_range().contains(&s.as_ptr());
        assert!(matches!(params.text("name"), Some(Cow::Borrowed("echo"))));
        // Names too, but for the one with an escape.
        assert!(params.members.keys().all(|k| matches!(k, Cow::Borrowed(_)) != (k == "task")));
        assert!(params.members.values().all(|v| matches!(v, Cow::Borrowed(raw) if inside(raw.get()))));
        // An object member's members come from the same text; an escaped string is unescaped.
        let arguments = params.object("arguments").unwrap().unwrap();
        assert!(inside(arguments.raw("inner").unwrap().get()));
        assert!(matches!(arguments.text("text"), Some(Cow::Owned(t)) if t == "a\"b"));
        // Owned, they say the same.
        let owned = params.clone().into_owned();
        assert_eq!(owned.to_raw().get(), params.to_raw().get());
        assert!(matches!(owned.text("name"), Some(Cow::Owned(t)) if t == "echo"));
        assert_eq!(owned.object("arguments").unwrap().unwrap().raw("inner").unwrap().get(), r#"{"k":1}"#);
    }

    #[test]
    fn a_result_written_around_is_the_result_written_whole() {
        let result = raw(&serde_json::json!({"content": [{"type": "text", "text": "é \" \u{1}"}], "n": 1.50}));
        for id in [Value::from(7), Value::from("a\"b"), Value::from(u64::MAX)] {
            let mut around = result_head(&id);
            around.extend_from_slice(result.get().as_bytes());
            around.extend_from_slice(RESULT_TAIL);
            assert_eq!(String::from_utf8(around).unwrap(), String::from_utf8(super::result(&id, &result)).unwrap());
        }
    }

    #[test]
    fn errors_carry_code_message_and_data() {
        let out = error(&Value::from(3), &RpcError::server("files", "connection refused"));
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["error"]["code"], INTERNAL_ERROR);
        assert_eq!(v["error"]["message"], "server `files`: connection refused");
        assert_eq!(v["error"]["data"]["server"], "files");
    }
}
