//! What a client is told when a server wants its user to sign in (a server
//! with `oauth`), in the form its era provides (the downstream error comes
//! up as the `-32042` of `session::rpc_error`, with the sign-in's link):
//!
//! - 2025-11-25, URL elicitation declared: the `-32042` error as it is
//!   (`oauth_client.ask`: `"error"`), the session told
//!   `notifications/elicitation/complete` when the user is done; or
//!   (`"elicitation"`) `elicitation/create` with `mode: "url"` in the call's
//!   stream, the call waiting for the user and then going on by itself;
//! - 2026-07-28, URL elicitation declared: an input request in an
//!   `InputRequiredResult`, whose `requestState` names the sign-in; the
//!   retry waits for it (its user's only) and then runs the call;
//! - any other client: a tool result with `isError` and the link in its
//!   text (for another method, an error naming it), so a person sees it.
//!
//! Until its user has signed in, such a server's tools are unknown: its
//! part of `tools/list` is one tool of mcpgate's, `<prefix>__sign_in`, whose
//! call (like a call of any `<prefix>__<name>`) gets the link; the user's
//! sessions hear `list_changed` once they signed in.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::catalog::ListKind;
use crate::config::{Ask, Config};
use crate::downstream::Server;
use crate::downstream::oauth::{Authorizer, FlowView};
use crate::protocol::jsonrpc::{self, Message, Params, RpcError};
use crate::protocol::stateless::Envelope;
use crate::session::Session;

use super::current::{Current, visible};
use super::outcome::{CallEvents, Outcome};

/// What mcpgate's sign-in error carries.
pub(super) struct Link {
    pub(crate) id: String,
    pub(crate) url: String,
    pub(crate) message: String,
    pub(crate) server: String,
}

/// The `requestState` of an input request asking a 2026-07-28 client to sign in.
pub(super) const STATE_PREFIX: &str = "mcpgate-sign-in.";
/// The key of that input request.
const INPUT_KEY: &str = "mcpgate-sign-in";
/// How often a call waiting for its user looks whether the sign-in ended.
const LOOK: Duration = Duration::from_millis(200);

/// The tool that stands for a server's tools until its user signed in.
pub(super) const SIGN_IN_TOOL: &str = "sign_in";

/// A server's part of `tools/list` while its user must sign in to it: the
/// [`SIGN_IN_TOOL`], saying so.
pub(super) fn sign_in_list(server: &Server) -> Option<Arc<crate::catalog::ServerList>> {
    let url = server.config.url().unwrap_or_default();
    let tool = json!({
        "name": SIGN_IN_TOOL,
        "title": format!("Sign in to {}", server.name()),
        "description": format!(
            "Server `{}` ({url}) wants each user to sign in with OAuth before its tools can be used. Call this \
             tool for the link to open; its own tools are listed once you have signed in.",
            server.name()
        ),
        "inputSchema": { "type": "object", "properties": {} },
    });
    crate::catalog::ServerList::new(ListKind::Tools, &[jsonrpc::raw(&tool)]).ok().map(Arc::new)
}

/// The link of a sign-in error mcpgate made (`session::rpc_error`).
pub(super) fn link_of(e: &RpcError) -> Option<Link> {
    if e.code != jsonrpc::URL_ELICITATION_REQUIRED {
        return None;
    }
    let data = e.data.as_ref()?;
    let first = data.get("elicitations")?.get(0)?;
    Some(Link {
        id: first["elicitationId"].as_str()?.to_string(),
        url: first["url"].as_str()?.to_string(),
        message: first["message"].as_str().unwrap_or(&e.message).to_string(),
        server: data["server"].as_str().unwrap_or_default().to_string(),
    })
}

/// A tool's error result with `text`: what a client that cannot open links shows its user.
fn tool_error(text: String) -> Value {
    json!({ "content": [{ "type": "text", "text": text }], "isError": true })
}

/// For a client that cannot be sent a link: a tool error for a call, an error naming the server for the rest.
fn plain(method: &str, link: &Link) -> Outcome {
    let text = format!("{} (then call it again)", link.message);
    match method {
        "tools/call" => Outcome::Result(tool_error(text)),
        _ => RpcError::server(&link.server, text).into(),
    }
}

/// Waits (at most `within`) for the sign-in `id` to end: whether it
/// ended well.
fn signed_in(oauth: &Authorizer, id: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        match oauth.flow(id) {
            Some(FlowView { done: Some(done), .. }) => return done.is_ok(),
            Some(_) if Instant::now() < deadline => std::thread::sleep(LOOK),
            _ => return false,
        }
    }
}

/// How a session-era call that met a sign-in goes on.
pub(super) enum SignIn {
    /// What its client takes.
    Told(Outcome),
    /// The user signed in: the call again, once, and its outcome through [`again`].
    Signed,
}

/// A session-era call (`message`) whose server needs its user to sign in
/// (`e`, mcpgate's sign-in error), under `config`: what its client takes,
/// or that the user signed in while the call waited.
pub(super) fn sign_in_session_era(
    oauth: &Authorizer,
    config: &Config,
    session: &Arc<Session>,
    server: &Arc<Server>,
    message: &Message,
    events: &mut dyn CallEvents,
    e: RpcError,
) -> SignIn {
    let Some(link) = link_of(&e) else { return SignIn::Told(e.into()) };
    let url_elicitation = session.protocol_version.as_str() >= "2025-11-25" && session.takes_url_elicitation();
    if !url_elicitation {
        return SignIn::Told(plain(message.method(), &link));
    }
    if config.oauth_client.ask == Ask::Error || !events.takes_input() {
        // Told on its GET stream when the user is done.
        oauth.given_to(&link.id, &session.id);
        return SignIn::Told(e.into());
    }
    let mut request = Map::new();
    request.insert(
        INPUT_KEY.into(),
        json!({ "method": "elicitation/create", "params": {
            "mode": "url", "elicitationId": link.id, "url": link.url, "message": link.message,
        }}),
    );
    let answered = match events.input(session, &request) {
        Some(Ok(answers)) => answers.get(INPUT_KEY).and_then(|a| a["action"].as_str()).map(str::to_string),
        Some(Err(why)) => return SignIn::Told(RpcError::server(server.name(), why).into()),
        None => None,
    };
    if answered.as_deref() != Some("accept") {
        let what = answered.unwrap_or_else(|| "no answer".into());
        let e = RpcError::server(server.name(), format!("the user did not sign in ({what}); {}", link.message));
        return SignIn::Told(e.into());
    }
    if !signed_in(oauth, &link.id, config.held_call_timeout) {
        let e = RpcError::server(
            server.name(),
            format!("the sign-in did not complete within held_call_timeout_secs; {}", link.message),
        );
        return SignIn::Told(e.into());
    }
    let done = json!({ "elicitationId": link.id });
    events.notify(jsonrpc::notification("notifications/elicitation/complete", Some(&jsonrpc::raw(&done))));
    SignIn::Signed
}

/// The outcome of the call made again after its user signed in: a second
/// refusal is said as it is.
pub(super) fn again(method: &str, outcome: Outcome) -> Outcome {
    match outcome {
        Outcome::Error(e) => match link_of(&e) {
            Some(again) => plain(method, &again),
            None => e.into(),
        },
        outcome => outcome,
    }
}

/// A 2026-07-28 call whose server needs its user to sign in: an input
/// request when the client declared URL elicitation, else the plain form.
pub(super) fn sign_in_2026(method: &str, outcome: Outcome, envelope: &Envelope) -> Outcome {
    let Outcome::Error(e) = outcome else { return outcome };
    let Some(link) = link_of(&e) else { return e.into() };
    if envelope.capabilities["elicitation"].get("url").is_none_or(Value::is_null) {
        return plain(method, &link);
    }
    Outcome::Result(json!({
        "resultType": "input_required",
        "inputRequests": { INPUT_KEY: { "method": "elicitation/create", "params": {
            "mode": "url", "url": link.url, "message": link.message,
        }}},
        "requestState": format!("{STATE_PREFIX}{}", link.id),
    }))
}

/// A 2026-07-28 retry after a sign-in (`requestState` of [`STATE_PREFIX`]):
/// what was for mcpgate leaves the params; the user's answer is read,
/// and a sign-in of theirs still running is waited for. An error when
/// the user declined, or the sign-in is another user's. A sign-in waited
/// for is waited for `within` at most.
pub(super) fn sign_in_retry(
    oauth: &Authorizer,
    within: Duration,
    params: &mut Params,
    user: Option<[u8; 32]>,
) -> Result<(), RpcError> {
    let Some(state) = params.str("requestState") else { return Ok(()) };
    let Some(id) = state.strip_prefix(STATE_PREFIX) else { return Ok(()) };
    let action = params.value("inputResponses").and_then(|r| r[INPUT_KEY]["action"].as_str().map(str::to_string));
    params.remove("requestState");
    params.remove("inputResponses");
    match oauth.flow(id) {
        Some(flow) if flow.user != user => {
            Err(RpcError::invalid_params("this requestState names another user's sign-in: retry the call without it"))
        }
        Some(FlowView { server, .. }) if action.as_deref() != Some("accept") => Err(RpcError::server(
            &server,
            format!("the user did not sign in ({})", action.unwrap_or_else(|| "no answer".into())),
        )),
        Some(_) => {
            // Opened, not finished yet: a while, then the call says what it finds.
            signed_in(oauth, id, within);
            Ok(())
        }
        // Finished and gone, or expired: the call finds out which.
        None => Ok(()),
    }
}

/// The server a call of `exposed` (not in the merged list) goes to: one
/// with `oauth`, among those the session sees, whose prefix it has and
/// whose list nobody has read yet (nobody signed in): the call gets the
/// link. With the name the server knows.
pub(super) fn sign_in_owner(
    cur: &Current,
    session: &Session,
    kind: ListKind,
    exposed: &str,
) -> Option<(Arc<Server>, Option<String>)> {
    visible(cur, session).into_iter().find_map(|server| {
        let c = &server.config;
        if !c.uses_oauth() || c.prefix.is_empty() || server.lists.current(kind, session.list_view()).is_some() {
            return None;
        }
        let original = exposed.strip_prefix(&format!("{}{}", c.prefix, c.separator))?;
        Some((server.clone(), Some(original.to_string())))
    })
}
