//! What is left to a child's transport of what it sends: its correlator
//! (`downstream/correlate.rs`) sends each message where it belongs; here, a
//! `ping` is answered, a request no session can take refused, and the
//! answer to a shared child's own `initialize` settles its start.

use std::sync::{Arc, Weak};

use super::child::Child;
use crate::downstream::Server;
use crate::downstream::correlate::Routed;
use crate::limited;
use crate::protocol::jsonrpc::{self, Message, RpcError};

/// Sends a message from the child where it belongs (its correlator
/// decides), and does what is left: answers its `ping`, refuses a request
/// no session can take, settles its start.
pub(super) fn hand_over(server: &Arc<Server>, child: &Arc<Child>, message: Message) {
    match child.calls.route(server, message) {
        Routed::Done | Routed::Ignored => {}
        Routed::Reply(body) => {
            let _ = child.write_line(&body, server.limits.request);
        }
        Routed::Refuse(message) => refuse(server, child, &message),
        Routed::Own(answer) => started(server, child, answer),
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

/// Refuses a request of the child's that no session can take (none, or
/// several to choose from), saying why.
fn refuse(server: &Server, child: &Child, message: &Message) {
    let Some(id) = &message.id else { return };
    let why = if child.shared {
        "this server is shared and no single client session has a request running on it"
    } else {
        "its client session is closing, or sent too much before it listened"
    };
    let error = RpcError::internal(format!("mcpgate cannot tell which client `{}` is for: {why}", message.method()));
    let _ = child.write_line(&jsonrpc::error(id, &error), server.limits.request);
    limited!(
        warn,
        "server `{}`: a `{}` request refused: no single client it could be for",
        server.name(),
        message.method()
    );
}
