//! What each MCP method does once its session is known: answered here
//! (`ping`, lists, `logging/setLevel`), or forwarded to the server that owns
//! the tool, prompt, resource or task, on that session's downstream session
//! with that server; and what the client sends that is not a request
//! (notifications, answers to a server's requests).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use crate::downstream::{Arrival, Downstream, DownstreamError, Server};
use crate::protocol::jsonrpc::{self, Message, Params, RpcError};
use crate::protocol::spans::is_tool_error;
use crate::runtime::threads;
use crate::session::{self, Session};

use super::authorize::{self, SignIn};
use super::lists::{Paging, fetch_pages, filter_for, naming};
use super::merged::Lists;
use super::outcome::{CallEvents, CallSettings, Outcome};
use super::reopen::cut_short;
use super::reopen::run_with_reopen;
use super::search::{Route, ToolSearch};
use super::{Gateway, visible};
use crate::catalog::ListKind;

/// Rounds of `input_required` one call may take before mcpgate gives up.
const MAX_INPUT_ROUNDS: usize = 8;

/// The one member of a result that says whether it is final.
#[derive(serde::Deserialize)]
struct ResultType<'a> {
    #[serde(rename = "resultType", borrow)]
    result_type: Option<std::borrow::Cow<'a, str>>,
}

/// Whether an answer is an `input_required` result (2026-07-28). Only the
/// top-level `resultType` is read first: a large result is scanned once,
/// not searched as text nor built into a tree.
fn input_required(answer: &Message) -> Option<Map<String, Value>> {
    let result = answer.result.as_ref()?;
    let kind: ResultType = serde_json::from_str(result.get()).ok()?;
    if kind.result_type.as_deref() != Some("input_required") {
        return None;
    }
    match serde_json::from_str::<Value>(result.get()).ok()? {
        Value::Object(result) if result.get("resultType").and_then(Value::as_str) == Some("input_required") => {
            Some(result)
        }
        _ => None,
    }
}

/// Sends `message` (with `params` rewritten for it) to `server` on the
/// session's downstream session; what the server sends before its answer
/// goes to `events`. Needs no gateway: a held call (2026-07-28) runs it on
/// a thread of its own.
pub(super) fn call(
    session: &Arc<Session>,
    server: &Arc<Server>,
    message: &Message,
    params: &Params,
    events: &mut dyn CallEvents,
    settings: &CallSettings,
) -> Outcome {
    let open_retry = settings.open_retry;
    let client_id = message.id.clone().unwrap_or(Value::Null);
    let started = std::time::Instant::now();
    session.mark_used();
    // Copied only when a round of input changes them.
    let mut params = std::borrow::Cow::Borrowed(params);
    let mut cancelled = false;
    let result = run_with_reopen(session, server, open_retry, |downstream| {
        send(session, server, downstream, message, &mut params, events, &mut cancelled)
    });
    session.end_call(&client_id);
    let outcome = match result {
        Ok(response) => Outcome::Forwarded(response),
        Err(_) if cancelled => Outcome::Cancelled,
        Err(e) => e.into(),
    };
    let took = started.elapsed();
    log_call(session, server, message.method(), &params, &outcome, took);
    if let Some(audit) = &settings.audit {
        let finished = super::audit::Finished {
            session,
            server,
            method: message.method(),
            params: &params,
            outcome: &outcome,
            took,
        };
        audit.write(super::audit::call_record(&audit.config, settings.issuer.as_deref(), &finished));
    }
    outcome
}

/// Sends `message` on `downstream`, and again with the client's answers
/// while a server of the 2026-07-28 era asks for input in its result (at
/// most `MAX_INPUT_ROUNDS` rounds). `cancelled` tells whether it ended
/// without a response because its client cancelled it or ended its session.
fn send(
    session: &Arc<Session>,
    server: &Arc<Server>,
    downstream: &Downstream,
    message: &Message,
    params: &mut std::borrow::Cow<Params>,
    events: &mut dyn CallEvents,
    cancelled: &mut bool,
) -> Result<Message, DownstreamError> {
    let client_id = message.id.clone().unwrap_or(Value::Null);
    // Only a server of the 2026-07-28 era answers `input_required`, and only
    // a client mcpgate asks for it needs it read.
    let asks_in_results = server.era() == Some(crate::protocol::stateless::VERSION) && events.takes_input();
    let mut round = 0;
    loop {
        let id = downstream.next_id();
        let flight = downstream.flight();
        session.start_call(&client_id, server.name(), &id, &flight);
        let mut on_message = |arrival| match arrival {
            Arrival::Streaming => events.streaming(),
            Arrival::Message(m) => events.message(session, server, m),
        };
        let result = downstream.call(&id, message.method(), Some(params), &mut on_message, &flight);
        // Cancelled, or its client ended the session: over, without a response.
        *cancelled = match &result {
            Err(DownstreamError::Cancelled) => true,
            Err(DownstreamError::Closed) => session.deleted_by_client(),
            _ => false,
        };
        // A server of the 2026-07-28 era asks through its result: the
        // client is asked, and the call retried with its answers.
        let Some(asked) = result.as_ref().ok().filter(|_| asks_in_results).and_then(input_required) else {
            return result;
        };
        if round == MAX_INPUT_ROUNDS {
            return Err(DownstreamError::Protocol(format!(
                "the server still asked for input after {MAX_INPUT_ROUNDS} rounds"
            )));
        }
        let requests = asked.get("inputRequests").and_then(Value::as_object).cloned().unwrap_or_default();
        match events.input(session, &requests) {
            None => return result,
            Some(Err(why)) => return Err(DownstreamError::Protocol(why)),
            Some(Ok(answers)) => {
                let params = params.to_mut();
                params.set("inputResponses", &Value::Object(answers));
                match asked.get("requestState") {
                    Some(state) => params.set("requestState", state),
                    None => params.remove("requestState"),
                }
            }
        }
        round += 1;
    }
}

/// One line per finished call, at `info`: what, where, for whom, how it
/// ended and how long it took; an error says why.
fn log_call(session: &Session, server: &Server, method: &str, params: &Params, outcome: &Outcome, took: Duration) {
    let failed = match outcome {
        Outcome::Forwarded(answer) => {
            answer.error.is_some()
                || method == "tools/call" && answer.result.as_ref().is_some_and(|r| is_tool_error(r.get()))
        }
        Outcome::Error(_) => true,
        Outcome::Result(_) | Outcome::Cancelled => false,
    };
    if method == "tools/call" {
        server.tools.note(&params.text("name").unwrap_or_default(), failed);
    }
    if !log::log_enabled!(log::Level::Info) {
        return;
    }
    let what = match method {
        "tools/call" => format!("tool `{}`", params.text("name").unwrap_or_default()),
        "prompts/get" => format!("prompt `{}`", params.text("name").unwrap_or_default()),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            format!("{method} `{}`", crate::catalog::shortened(&params.str("uri").unwrap_or_default()))
        }
        other => other.to_string(),
    };
    let ended = match outcome {
        Outcome::Forwarded(answer) => match &answer.error {
            Some(error) => format!("error {}", crate::catalog::shortened(error.get())),
            None if failed => "tool error".into(),
            None => "ok".into(),
        },
        Outcome::Result(_) => "ok".into(),
        Outcome::Error(e) => format!("error {}: {}", e.code, e.message),
        Outcome::Cancelled => "cancelled".into(),
    };
    log::info!(
        "call: {what} on `{}` for {} (`{}`, session {}): {ended} in {} ms",
        server.name(),
        session.who,
        session.client_name,
        session::short(&session.id),
        took.as_millis()
    );
}

/// A client's `notifications/cancelled` (its `params`): sent on to the
/// server of the request it names, with the server's id for it.
pub(super) fn cancel(session: &Session, mut params: Map<String, Value>) {
    let Some(request_id) = params.get("requestId") else { return };
    let Some((downstream, id)) = session.cancel(request_id) else {
        log::debug!("session {}: a cancel of a request no server works on (yet)", session::short(&session.id));
        return;
    };
    params.insert("requestId".into(), id);
    if let Err(e) = downstream.notify("notifications/cancelled", Some(&jsonrpc::raw(&Value::Object(params)))) {
        crate::limited!(warn, "server `{}`: forwarding a cancel failed: {e}", downstream.server.name());
    }
}

/// Cancels the call `call_id` of `session`, as a client's cancel would.
pub(super) fn cancel_call(session: &Session, call_id: &Value, reason: &str) {
    let mut params = Map::new();
    params.insert("requestId".into(), call_id.clone());
    params.insert("reason".into(), Value::from(reason));
    cancel(session, params);
}

/// Answers a request `server` sent mid-call that nobody will take with an
/// error, at once, so the server is not left waiting for it.
pub(super) fn refuse_request(session: &Session, server: &Server, request: &Message, why: &str) {
    let Some(id) = &request.id else { return };
    log::debug!("server `{}`: `{}` mid-call refused: {why}", server.name(), request.method());
    let Some(downstream) = session.downstream_if_open(server.name()) else { return };
    let answer = jsonrpc::error(id, &RpcError::internal(why));
    if let Err(e) = downstream.send(&answer) {
        crate::limited!(warn, "server `{}`: refusing its `{}`: {e}", server.name(), request.method());
    }
}

/// The servers' instructions, each under its name: of those open, and of
/// the others as each said when it last answered `initialize`, in the
/// configuration's order.
pub(super) fn instructions(servers: &[Arc<Server>], opened: &[Arc<Downstream>]) -> Option<String> {
    let parts: Vec<String> = servers
        .iter()
        .filter_map(|server| {
            let text = match opened.iter().find(|d| Arc::ptr_eq(&d.server, server)) {
                Some(d) => d.instructions.clone(),
                None => server.known().and_then(|k| k.instructions),
            }?;
            (!text.trim().is_empty()).then(|| format!("## {}\n{}", server.name(), text.trim()))
        })
        .collect();
    if parts.is_empty() { None } else { Some(parts.join("\n\n")) }
}

/// Why a new session must wait: too few file descriptors or threads
/// left. A session takes about two descriptors and one thread (its
/// reader) per server; what is kept back serves the sessions that are
/// open (their requests need connection threads), closes them (a DELETE
/// each) and answers the status page. Without the margin, descriptors
/// ran out and the DELETEs that keep mcpgate's promise failed, and
/// sessions got no reader.
pub(super) fn resources_short(g: &Gateway) -> Option<String> {
    let servers = g.current().servers.len() as u64;
    let reserve = 64 + 4 * servers;
    let limit = crate::runtime::sys::fd_limit();
    let open = crate::runtime::sys::open_fds().unwrap_or(limit);
    if open + reserve + 2 * servers > limit {
        return Some(format!(
            "mcpgate is near its limit of open files ({open} of {limit} open, {reserve} kept for the sessions \
             that are open); try again later"
        ));
    }
    let left = crate::runtime::sys::thread_headroom()?;
    let reserve = 8 + servers;
    (left < reserve + servers).then(|| {
        format!(
            "mcpgate is near its limit of threads ({left} more may start, {reserve} kept for the sessions that \
             are open); try again later"
        )
    })
}

/// Opens (or reuses) the session's downstream session with every server
/// that opens at `initialize` (not a process: it starts when first
/// needed, or ahead, `"start": "eager"`), in parallel; returns those
/// that are open.
pub(super) fn open_all(g: &Gateway, session: &Session) -> Vec<Arc<Downstream>> {
    let cur = g.current();
    g.start_eager(Some(session));
    let servers: Vec<Arc<Server>> = visible(&cur, session).into_iter().filter(|s| s.opens_at_initialize()).collect();
    let opened = Mutex::new(Vec::new());
    threads::for_each_parallel("fanout", &servers, servers.len(), |server| {
        if let Ok(d) = session.downstream(server, cur.config.open_retry) {
            opened.lock().push(d);
        }
    });
    let mut opened = opened.into_inner();
    opened.sort_by_key(|d| cur.rank(d.server.name()));
    opened
}

/// What mcpgate offers a client: the union of what its servers offer,
/// open now or as each said when it last answered `initialize` (a
/// process not started yet). A server never heard counts as offering
/// tools, prompts and resources, so the client asks again once it is
/// there: the answer is the same whether a process runs or not.
pub(super) fn capabilities(g: &Gateway, session: &Session, opened: &[Arc<Downstream>]) -> Value {
    let servers = visible(&g.current(), session);
    let known: Vec<Value> = servers
        .iter()
        .filter(|s| !opened.iter().any(|d| Arc::ptr_eq(&d.server, s)))
        .filter_map(|s| s.known().map(|k| k.capabilities))
        .collect();
    let all: Vec<&Value> = opened.iter().map(|d| &d.capabilities).chain(&known).collect();
    let all_known = all.len() == servers.len();
    let offers = |kind: &str| all.iter().any(|c| c.get(kind).is_some_and(|v| !v.is_null()));
    let mut caps = Map::new();
    for kind in ["tools", "prompts", "resources"] {
        let offering: Vec<&Value> = all.iter().filter_map(|c| c.get(kind)).filter(|v| v.is_object()).collect();
        if offering.is_empty() && all_known {
            continue;
        }
        let list_changed = !all_known || offering.iter().any(|v| v["listChanged"] == true);
        let mut cap = json!({ "listChanged": list_changed });
        if kind == "resources" {
            cap["subscribe"] = Value::Bool(offering.iter().any(|v| v["subscribe"] == true));
        }
        caps.insert(kind.into(), cap);
    }
    if ToolSearch::enabled(&g.current().config) && !caps.contains_key("tools") {
        // find_tools and call_tool are there whatever the servers offer.
        caps.insert("tools".into(), json!({ "listChanged": true }));
    }
    for kind in ["logging", "completions"] {
        if offers(kind) {
            caps.insert(kind.into(), json!({}));
        }
    }
    if let Some(tasks) = crate::tasks::merge_capabilities(all.iter().filter_map(|c| c.get("tasks"))) {
        caps.insert("tasks".into(), tasks);
    }
    Value::Object(caps)
}

pub(super) fn request(g: &Gateway, session: &Arc<Session>, message: &Message, events: &mut dyn CallEvents) -> Outcome {
    let method = message.method();
    if let Some(kind) = ListKind::from_method(method) {
        return g.offered.lists.page(&g.in_force(), session, kind, message);
    }
    let params = match Params::of(message) {
        Ok(p) => p,
        Err(e) => return e.into(),
    };
    let params = match method {
        "tools/call" => match g.tool_search(session, params, true) {
            Ok(Route::Answer(outcome)) => return outcome,
            Ok(Route::Call(params)) => params,
            Err(e) => return e.into(),
        },
        _ => params,
    };
    // A task-augmented call answers with the server's task id: the client gets one of its session's.
    let task_ids = (method == "tools/call" && params.contains("task")) || method.starts_with("tasks/");
    let result = match method {
        "ping" => return Outcome::Result(json!({})),
        "initialize" => {
            return RpcError::new(jsonrpc::INVALID_REQUEST, "this session is already initialized").into();
        }
        "tasks/get" | "tasks/result" | "tasks/cancel" => by_task(g, session, message, params),
        "tasks/list" => return list_tasks(g, session, message),
        "tools/call" => by_name(g, session, ListKind::Tools, message, params),
        "prompts/get" => by_name(g, session, ListKind::Prompts, message, params),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => by_uri(g, session, message, params),
        "completion/complete" => completion(g, session, message, params),
        "logging/setLevel" => return set_level(session, message, &params),
        _ => return RpcError::new(jsonrpc::METHOD_NOT_FOUND, format!("method not found: `{method}`")).into(),
    };
    match result {
        Ok((server, params)) => match forward(g, session, &server, message, &params, events) {
            Outcome::Forwarded(answer) if task_ids => {
                Outcome::Forwarded(session.tasks_in_answer(server.name(), answer))
            }
            outcome => outcome,
        },
        Err(e) => e.into(),
    }
}

/// `tasks/get`, `tasks/result` and `tasks/cancel`: the server of the
/// client's task id, and the params with the server's own id.
fn by_task<'p>(
    g: &Gateway,
    session: &Arc<Session>,
    message: &Message,
    mut params: Params<'p>,
) -> Result<(Arc<Server>, Params<'p>), RpcError> {
    let Some(id) = params.str("taskId") else {
        return Err(RpcError::invalid_params(format!("{} needs `taskId` (a string)", message.method())));
    };
    let (name, theirs) =
        session.task_target(&id).ok_or_else(|| RpcError::invalid_params(format!("unknown task `{id}`")))?;
    let server = g.current().server(&name).cloned().ok_or_else(|| RpcError::server(&name, "no longer configured"))?;
    params.set("taskId", &Value::String(theirs));
    Ok((server, params))
}

/// `tasks/list`: every server's tasks of this session, with the
/// client's ids, in one page.
fn list_tasks(g: &Gateway, session: &Arc<Session>, message: &Message) -> Outcome {
    let params = match message.params_object() {
        Ok(p) => p,
        Err(e) => return e.into(),
    };
    if let Some(cursor) = params.get("cursor").filter(|c| !c.is_null()) {
        return RpcError::invalid_params(format!("invalid cursor {cursor}: mcpgate lists every task in one page"))
            .into();
    }
    let cur = g.current();
    let servers: Vec<Arc<Server>> = visible(&cur, session)
        .into_iter()
        .filter(|s| session.downstream_if_open(s.name()).is_some_and(|d| d.capabilities["tasks"].get("list").is_some()))
        .collect();
    let found: Mutex<Vec<(usize, Vec<Value>)>> = Mutex::new(Vec::new());
    threads::for_each_parallel("fanout", &servers, servers.len(), |server| {
        match run_on_server(g, session, server, |d| fetch_pages(d, "tasks/list", "tasks", Paging::of(&cur.config))) {
            Ok(raw) => {
                let mut tasks: Vec<Value> =
                    raw.iter().filter_map(|task| serde_json::from_str(task.get()).ok()).collect();
                for task in &mut tasks {
                    session.tasks_from(server.name(), task);
                }
                found.lock().push((cur.rank(server.name()), tasks));
            }
            Err(e) => crate::limited!(warn, "server `{}`: tasks/list failed: {}", server.name(), e.message),
        }
    });
    let mut found = found.into_inner();
    found.sort_by_key(|(rank, _)| *rank);
    Outcome::Result(json!({ "tasks": found.into_iter().flat_map(|(_, tasks)| tasks).collect::<Vec<_>>() }))
}

/// `tools/call` and `prompts/get`: the owner of `params.name`, and the
/// params with the server's own name.
pub(super) fn by_name<'p>(
    g: &Gateway,
    session: &Arc<Session>,
    kind: ListKind,
    message: &Message,
    mut params: Params<'p>,
) -> Result<(Arc<Server>, Params<'p>), RpcError> {
    let Some(name) = params.text("name") else {
        return Err(RpcError::invalid_params(format!("{} needs `name` (a string)", message.method())));
    };
    let (server, renamed) = owner(g, session, kind, &name)?;
    // Written again only when the server knows it by another name (a prefix).
    if let Some(original) = renamed {
        params.set("name", &Value::String(original));
    }
    Ok((server, params))
}

pub(super) fn by_uri<'p>(
    g: &Gateway,
    session: &Arc<Session>,
    message: &Message,
    params: Params<'p>,
) -> Result<(Arc<Server>, Params<'p>), RpcError> {
    let Some(uri) = params.str("uri") else {
        return Err(RpcError::invalid_params(format!("{} needs `uri` (a string)", message.method())));
    };
    let server = resource_owner(g, session, &uri)?;
    Ok((server, params))
}

pub(super) fn completion<'p>(
    g: &Gateway,
    session: &Arc<Session>,
    message: &Message,
    mut params: Params<'p>,
) -> Result<(Arc<Server>, Params<'p>), RpcError> {
    let reference = params.value("ref").unwrap_or(Value::Null);
    match (reference["type"].as_str(), reference["name"].as_str(), reference["uri"].as_str()) {
        (Some("ref/prompt"), Some(name), _) => {
            let (server, renamed) = owner(g, session, ListKind::Prompts, name)?;
            params.set("ref", &json!({ "type": "ref/prompt", "name": renamed.as_deref().unwrap_or(name) }));
            Ok((server, params))
        }
        (Some("ref/resource"), _, Some(uri)) => Ok((resource_owner(g, session, uri)?, params)),
        _ => Err(RpcError::invalid_params(format!(
            "{} needs `ref` with type ref/prompt and a name, or ref/resource and a uri",
            message.method()
        ))),
    }
}

/// The server that lists `exposed` in the merged list of `kind`, and the
/// name it knows it by when that is another (a prefix). The list is current (each server's part is
/// fetched anew once the server says it changed): a name not in it is
/// unknown, without asking every server again (each unknown name did,
/// which made every call of a wrong name a fetch of every list), once
/// the servers still starting are ready.
fn owner(
    g: &Gateway,
    session: &Arc<Session>,
    kind: ListKind,
    exposed: &str,
) -> Result<(Arc<Server>, Option<String>), RpcError> {
    let found = g.offered.lists.find_in_list(&g.in_force(), session, kind, |list| {
        list.find(exposed).map(|found| (found.server.to_string(), found.original.to_string()))
    })?;
    if let Some((name, original)) = found {
        let server =
            g.current().server(&name).cloned().ok_or_else(|| RpcError::server(&name, "no longer configured"))?;
        return Ok((server, (original != exposed).then_some(original)));
    }
    let what = match kind {
        ListKind::Tools => "tool",
        _ => "prompt",
    };
    if let Some(hidden) = hidden_by_filter(g, session, kind, exposed) {
        return Err(RpcError::invalid_params(hidden));
    }
    if let Some(signing_in) = authorize::sign_in_owner(&g.current(), session, kind, exposed) {
        return Ok(signing_in);
    }
    let shown = crate::catalog::shortened(exposed);
    let list = g.offered.lists.merged(&g.in_force(), session, kind)?;
    // A server still starting is said as such, below, not as unavailable.
    let starting = Lists::starting(&g.in_force(), session, kind);
    let unavailable: Vec<(Arc<Server>, String)> = left_out(g, session, &list)
        .into_iter()
        .filter(|(server, _)| !starting.iter().any(|s| Arc::ptr_eq(s, server)))
        .collect();
    // Its prefix names a server that is down: that server is unavailable,
    // and whether it has the name cannot be known (before, a failed fetch
    // of its list made the name unknown).
    let cur = g.current();
    let owner = unavailable.iter().find(|(server, _)| {
        let c = &server.config;
        !c.prefix.is_empty() && exposed.starts_with(&naming(c, &cur.config).raw(""))
    });
    if let Some((server, why)) = owner {
        return Err(RpcError::server(server.name(), format!("{why} (`{shown}` cannot be reached until it answers)")));
    }
    let mut message = format!("unknown {what} `{shown}`");
    if !unavailable.is_empty() {
        let names: Vec<String> = unavailable.iter().map(|(s, e)| format!("`{}` ({e})", s.name())).collect();
        message.push_str(&format!("; unavailable servers: {}", names.join(", ")));
    }
    if !starting.is_empty() {
        let names: Vec<String> = starting.iter().map(|s| format!("`{}`", s.name())).collect();
        message.push_str(&format!("; servers still starting: {}", names.join(", ")));
    }
    Err(RpcError::invalid_params(message))
}

/// The servers this session sees that `list` was merged without (their
/// session failed to open, or their list could not be fetched), each
/// with why, as far as it is known.
fn left_out(g: &Gateway, session: &Session, list: &crate::catalog::List) -> Vec<(Arc<Server>, String)> {
    let failed = session.failed_servers();
    visible(&g.current(), session)
        .into_iter()
        .filter(|server| !list.sources().any(|(name, _)| name == server.name()))
        .map(|server| {
            let why = failed
                .iter()
                .find(|(name, _)| name == server.name())
                .map(|(_, e)| e.clone())
                .or_else(|| server.health().last_error)
                .unwrap_or_else(|| "its list could not be fetched".into());
            (server, why)
        })
        .collect()
}

/// Why `exposed` names nothing: a server whose `tools`/`prompts` filter
/// hides the name it would stand for, if any.
fn hidden_by_filter(g: &Gateway, session: &Session, kind: ListKind, exposed: &str) -> Option<String> {
    let cur = g.current();
    let key = if kind == ListKind::Tools { "tools" } else { "prompts" };
    visible(&cur, session).iter().find_map(|server| {
        let c = &server.config;
        let original =
            if c.prefix.is_empty() { exposed } else { exposed.strip_prefix(&naming(c, &cur.config).raw(""))? };
        (!filter_for(c, kind).admits(original)).then(|| {
            format!(
                "{} `{exposed}` is not exposed by this gateway: mcpServers.{}.{key} hides `{original}`",
                &key[..key.len() - 1],
                server.name()
            )
        })
    })
}

/// The server of a resource: the one listing it, else the one whose
/// template matches, else the only server offering resources.
fn resource_owner(g: &Gateway, session: &Arc<Session>, uri: &str) -> Result<Arc<Server>, RpcError> {
    let mut owner = g
        .offered
        .lists
        .find_in_list(&g.in_force(), session, ListKind::Resources, |l| l.find(uri).map(|e| e.server.to_string()))?;
    if owner.is_none() {
        owner = g.offered.lists.find_in_list(&g.in_force(), session, ListKind::Templates, |templates| {
            templates.items().find(|e| crate::catalog::template_matches(e.original, uri)).map(|e| e.server.to_string())
        })?;
    }
    if owner.is_none() {
        let offering: Vec<Arc<Downstream>> =
            session.open_downstreams().into_iter().filter(|d| d.offers("resources")).collect();
        if let [only] = offering.as_slice() {
            owner = Some(only.server.name().to_string());
        }
    }
    let name = owner.ok_or_else(|| RpcError::invalid_params(format!("no server lists resource `{uri}`")))?;
    let server = g.current().server(&name).cloned().ok_or_else(|| RpcError::server(&name, "no longer configured"))?;
    if !server.config.resources.admits(uri) {
        return Err(RpcError::invalid_params(format!(
            "resource `{uri}` is not exposed by this gateway: mcpServers.{name}.resources hides it"
        )));
    }
    Ok(server)
}

/// Sends a request to `server` with params rewritten for it; what the
/// server sends before its answer goes to the client on `events`.
fn forward(
    g: &Gateway,
    session: &Arc<Session>,
    server: &Arc<Server>,
    message: &Message,
    params: &Params,
    events: &mut dyn CallEvents,
) -> Outcome {
    match call(session, server, message, params, events, &g.call_settings()) {
        Outcome::Error(e) if authorize::link_of(&e).is_some() => {
            let oauth = &g.downstreams.oauth;
            match authorize::sign_in_session_era(oauth, &g.current().config, session, server, message, events, e) {
                SignIn::Told(outcome) => outcome,
                // Signed in: the call again, once.
                SignIn::Signed => authorize::again(
                    message.method(),
                    call(session, server, message, params, events, &g.call_settings()),
                ),
            }
        }
        Outcome::Error(e) => cut_short_by_shutdown(g, server, e).into(),
        outcome => outcome,
    }
}

/// [`run_with_reopen`] with the gateway's `open_retry`, its error
/// saying so when it comes of a shutdown.
pub(super) fn run_on_server<T>(
    g: &Gateway,
    session: &Session,
    server: &Arc<Server>,
    work: impl FnMut(&Downstream) -> Result<T, DownstreamError>,
) -> Result<T, RpcError> {
    run_with_reopen(session, server, g.current().config.open_retry, work)
        .map_err(|e| cut_short_by_shutdown(g, server, e))
}

/// A request's error while mcpgate shuts down names the shutdown, not what it did to the request.
fn cut_short_by_shutdown(g: &Gateway, server: &Server, e: RpcError) -> RpcError {
    cut_short(&g.life, server, e)
}

fn set_level(session: &Arc<Session>, message: &Message, params: &Params) -> Outcome {
    session.remember_log_level(message.params.as_deref());
    let targets: Vec<Arc<Downstream>> =
        session.open_downstreams().into_iter().filter(|d| d.offers("logging")).collect();
    threads::for_each_parallel("fanout", &targets, targets.len(), |d| {
        match d.own_request("logging/setLevel", Some(params)) {
            Ok(m) if m.error.is_some() => {
                crate::limited!(warn, "server `{}` refused logging/setLevel", d.server.name())
            }
            Ok(_) => {}
            Err(e) => {
                crate::limited!(
                    warn,
                    "server `{}`: logging/setLevel: {}",
                    d.server.name(),
                    d.server.redact(&e.to_string())
                )
            }
        }
    });
    Outcome::Result(json!({}))
}

pub(super) fn client_notification(session: &Arc<Session>, message: &Message) {
    match message.method() {
        "notifications/cancelled" => {
            if let Ok(params) = message.params_object() {
                cancel(session, params);
            }
        }
        "notifications/roots/list_changed" => {
            for d in session.open_downstreams() {
                if let Err(e) = d.notify("notifications/roots/list_changed", None) {
                    crate::limited!(warn, "server `{}`: forwarding roots/list_changed failed: {e}", d.server.name());
                }
            }
        }
        "notifications/initialized" => {}
        other => log::debug!("client notification `{other}` has no server to go to; ignored"),
    }
}

/// The client answered a request a server made: send it to that server.
pub(super) fn client_answer(session: &Arc<Session>, message: &Message) {
    let Some((downstream, body)) = session.answer_from_client(message) else {
        log::debug!("session {}: an answer to an unknown request ignored", session::short(&session.id));
        return;
    };
    if let Err(e) = downstream.send(&body) {
        crate::limited!(warn, "server `{}`: forwarding the client's answer failed: {e}", downstream.server.name());
    }
}
