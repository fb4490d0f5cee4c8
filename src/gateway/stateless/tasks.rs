//! Tasks for clients of 2026-07-28: the tasks extension (SEP-2663,
//! `io.modelcontextprotocol/tasks`), on whichever era's tasks the server
//! behind has.
//!
//! - `server/discover` offers the extension when a server offers tasks:
//!   one of 2025-11-25 whose `tasks` capability takes `tools/call`, or one
//!   of 2026-07-28 that offers the extension itself.
//! - A `tools/call` from a client that declares the extension, of a tool a
//!   session-era server runs as a task (`execution.taskSupport` optional or
//!   required), becomes a task-augmented call there; its CreateTaskResult
//!   is written as the extension's (`resultType: "task"`, flat, `ttlMs`,
//!   `pollIntervalMs`). A tool that requires a task, called by a client
//!   that does not declare the extension, is refused (-32021 naming it), as
//!   the extension asks of a server.
//! - `tasks/get` asks the server's `tasks/get`; once the task ended, its
//!   `tasks/result` too, inlined as `result` (a tool's error result is
//!   `completed`, as the extension has it) or `error` (`failed`).
//!   `tasks/cancel` is the server's `tasks/cancel`. Both, and
//!   `tasks/update`, are acknowledged with an empty result even for an
//!   unknown id, as the extension requires; `tasks/get` of one is -32602.
//! - A server of 2026-07-28 speaks the extension itself: the client's
//!   declaration reaches it in `_meta`, and its tasks pass through.
//!
//! Either way the client sees mcpgate's task ids ([`crate::tasks`]): they
//! are the pool's, so tasks are scoped to the token, as the pool is.
//!
//! Not bridged: a session-era task that needs input (`input_required`): in
//! 2025-11-25 its server asks on the `tasks/result` stream, which has no
//! counterpart here; the client sees the task `working`, with a status
//! message that says so, until it ends or is cancelled.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::downstream::Server;
use crate::http::{EventSink, HttpReply, HttpRequest};
use crate::protocol::jsonrpc::{Kind, Message, Params, RpcError};
use crate::protocol::stateless::{self, Envelope};
use crate::session::Session;
use crate::tasks::{self, Support};

use super::call::{self, NewCall, answer, error_reply};
use super::holds::Holds;
use super::watch::Watch;
use crate::catalog::List;
use crate::config::Config;
use crate::gateway::dispatch;
use crate::gateway::outcome::{CallEvents, CallSettings, Outcome};
use crate::gateway::search::ToolSearch;
use crate::stats::Stats;

/// What a status message says of a session-era task that waits for input.
const INPUT_NOT_BRIDGED: &str = "the server waits for input on its tasks/result stream (protocol 2025-11-25), \
                                 which mcpgate does not bridge to clients of 2026-07-28";

/// Whether `server/discover` offers the extension: some server of the
/// pool runs calls as tasks.
pub(super) fn offers_tasks(capabilities: &Value, opened: &[Arc<crate::downstream::Downstream>]) -> bool {
    capabilities["tasks"]["requests"]["tools"]["call"].is_object()
        || opened
            .iter()
            .any(|d| d.server.era() == Some(stateless::VERSION) && tasks::declares_extension(&d.capabilities))
}

/// What the extension reads of the gateway for one request of a pool: the
/// configuration and servers in force, the counters, the era's held and watched calls, what
/// a call needs, and the pool's merged tools, made only when a tool's task
/// support is asked.
pub(super) struct Tasks<'a> {
    pub(crate) config: &'a Config,
    pub(crate) servers: &'a [Arc<Server>],
    pub(crate) stats: &'a Stats,
    pub(crate) holds: &'a Holds,
    pub(crate) watch: &'a Watch,
    pub(crate) settings: CallSettings,
    pub(crate) tools: &'a dyn Fn() -> Result<Arc<List>, RpcError>,
}

impl Tasks<'_> {
    /// How a new `tools/call` to a session-era server runs: as a task
    /// (true) when the client declares the extension and the server runs
    /// the tool as one; refused when the tool requires a task and the
    /// client does not declare the extension.
    pub(super) fn as_task(&self, pool: &Arc<Session>, new: &NewCall, envelope: &Envelope) -> Result<bool, RpcError> {
        if new.call.method() != "tools/call" || new.server.era() == Some(stateless::VERSION) {
            return Ok(false);
        }
        let offered = pool
            .downstream_if_open(new.server.name())
            .is_some_and(|d| d.capabilities["tasks"]["requests"]["tools"]["call"].is_object());
        if !offered {
            return Ok(false);
        }
        let support = self.task_support(&new.call);
        let declared = tasks::declares_extension(&envelope.capabilities);
        match support {
            Support::Forbidden => Ok(false),
            Support::Optional => Ok(declared),
            Support::Required if declared => Ok(true),
            Support::Required => Err(stateless::missing_extension(
                tasks::EXTENSION,
                &format!(
                    "tool `{}` runs only as a task",
                    Params::of(&new.call).ok().and_then(|p| p.str("name")).unwrap_or_default()
                ),
            )),
        }
    }

    /// The `execution.taskSupport` of the tool a call names, as its server listed it.
    fn task_support(&self, call: &Message) -> Support {
        let Ok(params) = Params::of(call) else { return Support::Forbidden };
        let Some(name) = params.str("name") else { return Support::Forbidden };
        // mcpgate's own `call_tool` (tool search) names the tool it calls in its arguments.
        let name = ToolSearch::called_tool(self.config, self.stats, name, params);
        let Ok(list) = (self.tools)() else { return Support::Forbidden };
        let tool = list.find(&name).and_then(|found| serde_json::from_str::<Value>(found.json).ok());
        tool.as_ref().map_or(Support::Forbidden, Support::of)
    }

    /// Runs a new call to a session-era server as a task, here: the server
    /// answers at once with its task, written as the extension's.
    pub(super) fn create_task(
        &self,
        req: &HttpRequest,
        pool: &Arc<Session>,
        mut new: NewCall,
        envelope: &Envelope,
        sink: &mut dyn EventSink,
        id: &Value,
    ) -> HttpReply {
        new.params.set("task", &json!({}));
        let (outcome, streaming) = call::run_here(self.watch, &self.settings, req, pool, &new, envelope, sink);
        let outcome = match outcome {
            Outcome::Forwarded(answer) => match result_of(&answer) {
                Some(mut result) => {
                    pool.tasks_from(new.server.name(), &mut result);
                    match result.get("task") {
                        Some(Value::Object(task)) => {
                            let mut created = tasks::to_extension(task);
                            created.insert("resultType".into(), Value::from("task"));
                            Outcome::Result(Value::Object(created))
                        }
                        // The server ran it at once after all: its result, as it came.
                        _ => Outcome::Forwarded(answer),
                    }
                }
                None => Outcome::Forwarded(answer),
            },
            other => other,
        };
        self.finish(id, "tools/call", outcome, streaming)
    }

    /// `tasks/get`, `tasks/update` and `tasks/cancel`, on the server of the task.
    pub(super) fn task_request(&self, pool: &Arc<Session>, message: &Message) -> HttpReply {
        let id = message.id.clone().unwrap_or(Value::Null);
        let method = message.method();
        let mut params = match Params::of(message) {
            Ok(params) => params,
            Err(e) => return error_reply(&id, &e),
        };
        let Some(exposed) = params.str("taskId") else {
            return error_reply(&id, &RpcError::invalid_params(format!("{method} needs `taskId` (a string)")));
        };
        let target = pool.task_target(&exposed);
        let server = target.as_ref().and_then(|(name, _)| self.servers.iter().find(|s| s.name() == name).cloned());
        let (Some((_, theirs)), Some(server)) = (target, server) else {
            // The extension acknowledges an update or cancel of any id.
            if method != "tasks/get" {
                return self.finish(&id, method, Outcome::Result(json!({})), None);
            }
            let e = RpcError::invalid_params(format!("unknown task `{exposed}`"));
            return error_reply(&id, &e);
        };
        params.set("taskId", &Value::String(theirs));
        if server.era() == Some(stateless::VERSION) {
            // The server speaks the extension: the request as it came, with the server's id.
            let outcome = match self.ask(pool, &server, method, params) {
                Outcome::Forwarded(answer) => Outcome::Forwarded(pool.tasks_in_answer(server.name(), answer)),
                other => other,
            };
            return self.finish(&id, method, outcome, None);
        }
        let outcome = match method {
            "tasks/get" => self.session_task(pool, &server, params),
            "tasks/cancel" => {
                if let Outcome::Error(e) = self.ask(pool, &server, "tasks/cancel", params) {
                    log::debug!("server `{}`: tasks/cancel of task {exposed}: {}", server.name(), e.message);
                }
                Outcome::Result(json!({}))
            }
            // Nothing to deliver: a session-era task's input is not bridged (see the module's doc).
            _ => Outcome::Result(json!({})),
        };
        self.finish(&id, method, outcome, None)
    }

    /// A session-era server's task as the extension's `tasks/get` writes it:
    /// its state, and once it ended its result or error.
    fn session_task(&self, pool: &Arc<Session>, server: &Arc<Server>, params: Params) -> Outcome {
        let theirs = params.str("taskId").unwrap_or_default();
        let answer = match self.ask(pool, server, "tasks/get", params.clone()) {
            Outcome::Forwarded(answer) => answer,
            other => return other,
        };
        let Some(mut task) = result_of(&answer) else { return Outcome::Forwarded(answer) };
        pool.tasks_from(server.name(), &mut task);
        let Value::Object(task) = task else {
            return RpcError::server(server.name(), "tasks/get answered with no task").into();
        };
        let mut out = tasks::to_extension(&task);
        let status = out.get("status").and_then(Value::as_str).unwrap_or_default().to_string();
        if status == "input_required" {
            out.insert("status".into(), Value::from("working"));
            out.insert("statusMessage".into(), Value::from(INPUT_NOT_BRIDGED));
        }
        if status == "completed" || status == "failed" {
            let mut ask = Params::default();
            ask.set("taskId", &Value::String(theirs));
            match self.ask(pool, server, "tasks/result", ask) {
                Outcome::Forwarded(answer) => match (result_of(&answer), error_of(&answer)) {
                    (Some(mut result), _) => {
                        pool.tasks_from(server.name(), &mut result);
                        if let Value::Object(result) = &mut result {
                            result.entry("resultType").or_insert_with(|| Value::from("complete"));
                        }
                        // A tool's error result is a completed task in the extension.
                        out.insert("status".into(), Value::from("completed"));
                        out.insert("result".into(), result);
                    }
                    (None, Some(error)) => {
                        out.insert("status".into(), Value::from("failed"));
                        out.insert("error".into(), error);
                    }
                    (None, None) => return RpcError::server(server.name(), "tasks/result answered nothing").into(),
                },
                Outcome::Error(e) => return e.into(),
                _ => return RpcError::server(server.name(), "tasks/result answered nothing").into(),
            }
        }
        Outcome::Result(Value::Object(out))
    }

    /// [`answer`] under the configuration in force.
    fn finish(&self, id: &Value, method: &str, outcome: Outcome, streaming: Option<()>) -> HttpReply {
        answer(self.config.tokens.is_some(), id, method, outcome, streaming)
    }

    /// Sends `method` with `params` to `server` on the pool, as mcpgate's
    /// own request: its answer, or why there is none.
    fn ask(&self, pool: &Arc<Session>, server: &Arc<Server>, method: &str, params: Params) -> Outcome {
        let call = Message {
            jsonrpc: Some("2.0".into()),
            id: Some(Value::String(format!("mcpgate-call-{}", self.holds.next()))),
            method: Some(method.to_string().into()),
            params: Some(params.text_as_sent().into_owned()),
            result: None,
            error: None,
            held: None,
        };
        dispatch::call(pool, server, &call, &params, &mut Quiet, &self.settings)
    }
}

/// A result's members, parsed.
fn result_of(answer: &Message) -> Option<Value> {
    answer.result.as_ref().and_then(|r| serde_json::from_str(r.get()).ok())
}

/// An error answer's error, parsed.
fn error_of(answer: &Message) -> Option<Value> {
    answer.error.as_deref().and_then(|e| serde_json::from_str(e.get()).ok())
}

/// What mcpgate's own requests of a task hear from the server on the way:
/// notifications go nowhere, and a request is refused, not left waiting.
struct Quiet;

impl CallEvents for Quiet {
    fn streaming(&mut self) {}

    fn message(&mut self, session: &Session, server: &Server, message: Message) {
        if message.kind() == Ok(Kind::Request) {
            dispatch::refuse_request(session, server, &message, "mcpgate's own request of a task takes no requests");
            return;
        }
        log::debug!("server `{}`: `{}` during a task's request; dropped", server.name(), message.method());
    }
}
