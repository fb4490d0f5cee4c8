//! Routing over a child: its answers to the calls waiting for them (by the
//! wire id mcpgate gave each), the progress tokens rewritten so sessions
//! sharing a child cannot collide, and where what the child sends unasked
//! goes: a
//! response to its request, progress to the call that asked for it, a
//! request of a client to the one session with a call running, list
//! changes to every session using it.

use std::sync::{Arc, Weak};

use crossbeam_channel::Sender;
use serde_json::{Value, json};

use super::child::{Calls, Child, Incoming, Waiting};
use crate::downstream::{Inbox, Server};
use crate::limited;
use crate::protocol::jsonrpc::{self, Kind, Message};

/// Messages, and their bytes, a per-session child may send before its
/// session listens (see [`Calls::early`]); more are dropped.
const EARLY_MAX: usize = 64;
const EARLY_BYTES: usize = 1 << 20;

/// Whether a request's answer can carry the child's requests to the client
/// whose call it is: not for what mcpgate sends for itself (`initialize`,
/// `ping`, the lists it merges, `logging/setLevel`), whose messages reach
/// no client.
pub(crate) fn carries(method: &str) -> bool {
    !matches!(
        method,
        "initialize"
            | "ping"
            | "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "tasks/list"
            | "logging/setLevel"
    )
}

/// Sends a message from the child where it belongs.
pub(super) fn route(server: &Arc<Server>, child: &Arc<Child>, mut message: Message) {
    match message.kind() {
        Ok(Kind::Response) => {
            let wire = message.id.as_ref().and_then(Value::as_u64);
            let waiting = wire.and_then(|wire| child.calls.lock().waiting.remove(&wire));
            match waiting {
                Some(waiting) if waiting.start => started(server, child, message),
                Some(waiting) => {
                    if let Some((wire_token, _)) = &waiting.token {
                        child.calls.lock().tokens.remove(wire_token);
                    }
                    message.id = Some(waiting.id);
                    let _ = waiting.tx.send(Incoming::Message(message));
                }
                None => log::debug!("server `{}`: a response to no request of mcpgate's ignored", server.name()),
            }
        }
        Ok(Kind::Notification) => {
            if let Some((tx, token)) = progress_target(child, &message) {
                rewrite_token(&mut message, token);
                let _ = tx.send(Incoming::Message(message));
                return;
            }
            // Notifications about the session as a whole go to every session using the child
            // (kept for its session if it does not listen yet).
            let inboxes: Vec<Weak<dyn Inbox>> = {
                let mut calls = child.calls.lock();
                if calls.inboxes.is_empty()
                    && let Some(early) = calls.early.as_mut()
                {
                    let _ = keep_early(server, early, message);
                    return;
                }
                calls.inboxes.values().cloned().collect()
            };
            for inbox in inboxes {
                if let Some(inbox) = inbox.upgrade() {
                    inbox.deliver(server, message.clone());
                }
            }
        }
        Ok(Kind::Request) if message.method() == "ping" => {
            if let Some(id) = &message.id {
                let _ = child.write_line(&jsonrpc::result(id, &jsonrpc::raw(&json!({}))), server.limits.request);
            }
        }
        Ok(Kind::Request) => ask_a_client(server, child, message),
        Err(_) => {}
    }
}

/// A shared child answered the `initialize` mcpgate sent it when it
/// started: `notifications/initialized` goes, once for all its sessions,
/// and those whose lists left it out while it started are told it is ready.
fn started(server: &Arc<Server>, child: &Arc<Child>, answer: Message) {
    let outcome = match (&answer.error, &answer.result) {
        (Some(error), _) => Err(format!("it refused initialize: {}", error.get())),
        (None, None) => Err("its answer to initialize has no result".to_string()),
        (None, Some(_)) => {
            let initialized = jsonrpc::notification("notifications/initialized", None);
            match child.write_line(&initialized, server.limits.request) {
                Ok(()) => {
                    child.initialized.store(true, std::sync::atomic::Ordering::Release);
                    Ok(answer)
                }
                Err(e) => Err(format!("notifications/initialized could not be sent: {e}")),
            }
        }
    };
    let ready = outcome.is_ok();
    let waiting = child.settle_start(outcome);
    log::debug!("server `{}`: process {} started (ready: {ready})", server.name(), child.pid);
    if ready {
        for inbox in waiting.iter().filter_map(Weak::upgrade) {
            inbox.started(server);
        }
    }
}

/// A server's request of a client (sampling, elicitation, roots): to the
/// one session with a call running that can carry it (on that call's answer
/// stream when it is the only one, else on the session's `GET` stream), to
/// the one session listening when no such call runs, or kept for a
/// per-session child's session until it listens; with no session or several
/// to choose from, refused.
fn ask_a_client(server: &Arc<Server>, child: &Arc<Child>, message: Message) {
    let (target, message) = {
        let mut calls = child.calls.lock();
        match pick(&calls) {
            Some(target) => (Some(target), message),
            // A per-session child whose session does not listen yet: kept for it.
            None if calls.inboxes.is_empty() && calls.early.is_some() => {
                match calls.early.as_mut().and_then(|early| keep_early(server, early, message)) {
                    None => return,
                    Some(message) => (None, message),
                }
            }
            None => (None, message),
        }
    };
    match target {
        Some(Target::Call(tx)) => {
            let _ = tx.send(Incoming::Message(message));
        }
        Some(Target::Inbox(inbox)) => {
            if let Some(inbox) = inbox.upgrade() {
                inbox.deliver(server, message);
            }
        }
        None => {
            let Some(id) = &message.id else { return };
            let why = if child.shared {
                "this server is shared and no single client session has a request running on it"
            } else {
                "its client session is closing, or sent too much before it listened"
            };
            let error = crate::protocol::jsonrpc::RpcError::internal(format!(
                "mcpgate cannot tell which client `{}` is for: {why}",
                message.method()
            ));
            let _ = child.write_line(&jsonrpc::error(id, &error), server.limits.request);
            limited!(
                warn,
                "server `{}`: a `{}` request refused: no single client it could be for",
                server.name(),
                message.method()
            );
        }
    }
}

/// Where a child's request goes: the one call of a view running that can
/// carry it, or else the view's inbox.
fn pick(calls: &Calls) -> Option<Target> {
    let mut views: Vec<usize> = calls.waiting.values().filter(|w| w.carries).map(|w| w.view).collect();
    views.sort_unstable();
    views.dedup();
    let view = match (views.as_slice(), calls.inboxes.len()) {
        ([view], _) => *view,
        ([], 1) => *calls.inboxes.keys().next()?,
        _ => return None,
    };
    let one_call: Vec<&Waiting> = calls.waiting.values().filter(|w| w.view == view && w.carries).collect();
    let target = match one_call.as_slice() {
        [only] => Target::Call(only.tx.clone()),
        _ => Target::Inbox(calls.inboxes.get(&view)?.clone()),
    };
    Some(target)
}

/// Keeps what a per-session child sent before its session listened, up to
/// [`EARLY_MAX`] messages of [`EARLY_BYTES`] in all; gives back one that
/// does not fit.
pub(crate) fn keep_early(server: &Server, early: &mut Vec<Message>, message: Message) -> Option<Message> {
    let size = |m: &Message| {
        [&m.params, &m.error].iter().filter_map(|p| p.as_ref()).map(|p| p.get().len()).sum::<usize>()
            + m.result.as_ref().map_or(0, |r| r.get().len())
    };
    if early.len() < EARLY_MAX && early.iter().map(size).sum::<usize>() + size(&message) <= EARLY_BYTES {
        early.push(message);
        return None;
    }
    limited!(
        warn,
        "server `{}`: more than mcpgate keeps ({EARLY_MAX} messages, {EARLY_BYTES} bytes) sent before its session \
         listened; `{}` not kept",
        server.name(),
        message.method()
    );
    Some(message)
}

enum Target {
    Call(Sender<Incoming>),
    Inbox(Weak<dyn Inbox>),
}

/// The call a progress notification belongs to, by its (wire) token.
fn progress_target(child: &Child, message: &Message) -> Option<(Sender<Incoming>, Option<Value>)> {
    if message.method() != "notifications/progress" {
        return None;
    }
    let params = message.params_object().ok()?;
    let token = params.get("progressToken")?;
    let calls = child.calls.lock();
    let key = token_key(token);
    let wire = calls.tokens.get(&key)?;
    let waiting = calls.waiting.get(wire)?;
    Some((waiting.tx.clone(), waiting.token.as_ref().map(|(_, theirs)| theirs.clone())))
}

pub(crate) fn token_key(token: &Value) -> String {
    match token {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Puts the caller's own progress token back into a progress notification.
fn rewrite_token(message: &mut Message, token: Option<Value>) {
    let Some(token) = token else { return };
    let Ok(mut params) = message.params_object() else { return };
    params.insert("progressToken".into(), token);
    message.params = Some(jsonrpc::raw(&Value::Object(params)));
}
