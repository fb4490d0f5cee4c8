//! Tasks (protocol 2025-11-25, experimental) through mcpgate: the servers'
//! `tasks` capability is offered, a task-augmented call reaches its server,
//! and every task id the client sees is mcpgate's, scoped to its session,
//! while each server gets its own ids back (two servers may mint the same
//! id). server-everything's `simulate-research-query` could not be called
//! through mcpgate before (`tasks/get`: -32601).

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Client, Fixture, Gate, Modern, Reply, config};

const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// Two fixtures with tasks (named `a` and `b`, so each mints `task-<session>-1` first) behind mcpgate.
fn gate() -> (Fixture, Fixture, Gate, Client) {
    let (a, b) = (Fixture::start("a", &["--tasks"]), Fixture::start("b", &["--tasks"]));
    let gate = Gate::start(&config(&[("a", a.url()), ("b", b.url())]));
    let mut client = gate.client();
    let init = client.initialize();
    assert!(init["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object(), "{init}");
    assert!(init["capabilities"]["tasks"]["list"].is_object() && init["capabilities"]["tasks"]["cancel"].is_object());
    (a, b, gate, client)
}

fn create(client: &mut Client, tool: &str, arguments: Value) -> String {
    let reply = client.request("tools/call", json!({"name": tool, "arguments": arguments, "task": {"ttl": 60_000}}));
    reply.result()["task"]["taskId"].as_str().unwrap_or_else(|| panic!("no task: {reply:?}")).to_string()
}

fn wait_terminal(client: &mut Client, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let task = client.request("tasks/get", json!({"taskId": id})).result().clone();
        if task["status"] != "working" {
            return task;
        }
        assert!(Instant::now() < deadline, "task {id} still working: {task}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The ids of tasks/get, tasks/result and tasks/cancel requests a fixture received.
fn ids_received(f: &Fixture) -> Vec<String> {
    f.stats()["task_requests"]
        .as_array()
        .map(|r| r.iter().filter_map(|t| t["taskId"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

#[test]
fn tasks_of_two_servers_get_distinct_ids_and_each_server_gets_its_own_back() {
    let (a, b, _gate, mut client) = gate();
    let (ta, tb) = (
        create(&mut client, "a__research", json!({"ms": 100})),
        create(&mut client, "b__research", json!({"ms": 100})),
    );
    assert_ne!(ta, tb, "the servers minted the same id; the client must see two");
    assert!(!ta.starts_with("task-") && !tb.starts_with("task-"), "mcpgate's ids, not the servers': {ta} {tb}");
    for (id, server) in [(&ta, &a), (&tb, &b)] {
        let task = wait_terminal(&mut client, id);
        assert_eq!(
            (task["taskId"].as_str(), task["status"].as_str()),
            (Some(id.as_str()), Some("completed")),
            "{task}"
        );
        let result = client.request("tasks/result", json!({"taskId": id})).result().clone();
        assert_eq!(result["content"][0]["text"], "research done", "{result}");
        assert_eq!(result["_meta"][RELATED_TASK]["taskId"], id.as_str(), "{result}");
        let received = ids_received(server);
        assert!(!received.is_empty() && received.iter().all(|r| r.starts_with("task-")), "{received:?}");
    }
    let listed = client.request("tasks/list", json!({})).result().clone();
    let mut ids: Vec<&str> = listed["tasks"].as_array().unwrap().iter().filter_map(|t| t["taskId"].as_str()).collect();
    ids.sort();
    let mut want = vec![ta.as_str(), tb.as_str()];
    want.sort();
    assert_eq!(ids, want, "{listed}");
}

#[test]
fn a_task_can_be_cancelled_and_unknown_or_foreign_ids_are_refused() {
    let (a, _b, gate, mut client) = gate();
    let id = create(&mut client, "a__research", json!({"ms": 5000}));
    let cancelled = client.request("tasks/cancel", json!({"taskId": id})).result().clone();
    assert_eq!((cancelled["taskId"].as_str(), cancelled["status"].as_str()), (Some(id.as_str()), Some("cancelled")));
    assert_eq!(ids_received(&a).len(), 1);
    let unknown = client.request("tasks/get", json!({"taskId": "task-nothing"}));
    assert_eq!(unknown.error_code(), -32602, "{unknown:?}");
    assert!(unknown.error_message().contains("unknown task"), "{unknown:?}");
    // Another session cannot reach this session's task.
    let mut other = gate.client();
    other.initialize();
    assert_eq!(other.request("tasks/get", json!({"taskId": id})).error_code(), -32602);
    assert_eq!(ids_received(&a).len(), 1, "nothing reached the server");
}

#[test]
fn task_status_notifications_reach_the_get_stream_with_the_clients_id() {
    let (_a, _b, _gate, mut client) = gate();
    let stream = client.open_stream();
    let id = create(&mut client, "b__research", json!({"ms": 100}));
    let status = stream
        .next_with_method("notifications/tasks/status", Duration::from_secs(5))
        .expect("a status notification on the GET stream");
    assert_eq!(status["params"]["taskId"], id.as_str(), "{status}");
    assert_eq!(status["params"]["status"], "completed", "{status}");
}

// Clients of 2026-07-28: tasks are the extension `io.modelcontextprotocol/tasks` (SEP-2663),
// bridged to the session-era servers' tasks of 2025-11-25.

const EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// A client of 2026-07-28 that declares the tasks extension.
fn tasks_client(gate: &Gate) -> Modern {
    let mut client = Modern::new(&gate.url());
    client.capabilities = json!({"extensions": {EXTENSION: {}}});
    client
}

fn era_gate() -> (Fixture, Fixture, Gate) {
    let (a, b) = (Fixture::start("a", &["--tasks"]), Fixture::start("b", &["--tasks"]));
    let gate = Gate::start(&config(&[("a", a.url()), ("b", b.url())]));
    (a, b, gate)
}

/// `tasks/get` until the task is no longer `working`.
fn poll_ended(client: &Modern, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task = client.send(json!(9), "tasks/get", json!({"taskId": id}), &[]).result().clone();
        if task["status"] != "working" {
            return task;
        }
        assert!(Instant::now() < deadline, "task {id} still working: {task}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The capabilities `server/discover` offers the client.
fn discovered(client: &Modern) -> Value {
    client.send(json!(1), "server/discover", json!({}), &[]).result()["capabilities"].clone()
}

fn created(reply: &Reply) -> String {
    let result = reply.result();
    assert_eq!(result["resultType"], "task", "{result}");
    result["taskId"].as_str().unwrap_or_else(|| panic!("no task: {result}")).to_string()
}

#[test]
fn a_client_of_2026_gets_the_tasks_extension_over_session_era_tasks() {
    let (a, b, gate) = era_gate();
    let client = tasks_client(&gate);
    let first = client.call(2, "a__research", json!({"ms": 100}));
    let task = first.result().clone();
    assert_eq!(task["status"], "working", "{task}");
    assert!(task["createdAt"].is_string() && task["lastUpdatedAt"].is_string(), "{task}");
    assert!(task["ttlMs"].is_u64() && task["pollIntervalMs"].is_u64(), "as the extension writes them: {task}");
    assert!(task.get("task").is_none() && task.get("ttl").is_none(), "flat, not 2025-11-25's shape: {task}");
    let (ta, tb) = (created(&first), created(&client.call(3, "b__research", json!({"ms": 100}))));
    assert_ne!(ta, tb, "the servers minted the same id; the client must see two");
    for (id, server) in [(&ta, &a), (&tb, &b)] {
        assert!(!id.starts_with("task-"), "mcpgate's id, not the server's: {id}");
        let ended = poll_ended(&client, id);
        assert_eq!((ended["taskId"].as_str(), ended["status"].as_str()), (Some(id.as_str()), Some("completed")));
        assert_eq!(ended["resultType"], "complete", "{ended}");
        assert_eq!(ended["result"]["content"][0]["text"], "research done", "{ended}");
        assert_eq!(ended["result"]["resultType"], "complete", "the inlined result is of the era too: {ended}");
        let received = ids_received(server);
        assert!(!received.is_empty() && received.iter().all(|r| r.starts_with("task-")), "{received:?}");
    }
}

#[test]
fn a_tools_error_result_is_a_completed_task_and_a_cancelled_task_says_so() {
    let (a, _b, gate) = era_gate();
    let client = tasks_client(&gate);
    let failed = created(&client.call(1, "a__research", json!({"ms": 10, "fail": true})));
    let ended = poll_ended(&client, &failed);
    assert_eq!(ended["status"], "completed", "an isError result is completed in the extension: {ended}");
    assert_eq!(ended["result"]["isError"], true, "{ended}");

    let long = created(&client.call(2, "a__research", json!({"ms": 20_000})));
    let before = ids_received(&a).len();
    let ack = client.send(json!(3), "tasks/cancel", json!({"taskId": long}), &[]);
    assert_eq!(ack.result(), &json!({"resultType": "complete"}), "an empty acknowledgement");
    assert!(ids_received(&a).len() > before, "the cancel reached the server");
    assert_eq!(poll_ended(&client, &long)["status"], "cancelled");
}

#[test]
fn unknown_task_ids_are_refused_by_get_and_acknowledged_by_update_and_cancel() {
    let (a, _b, gate) = era_gate();
    let client = tasks_client(&gate);
    let unknown = client.send(json!(1), "tasks/get", json!({"taskId": "task-a-1"}), &[]);
    assert_eq!(unknown.error_code(), -32602, "{unknown:?}");
    assert!(unknown.error_message().contains("unknown task"), "{unknown:?}");
    for method in ["tasks/update", "tasks/cancel"] {
        let params = json!({"taskId": "mcpgate-task-1-0", "inputResponses": {}});
        let ack = client.send(json!(2), method, params, &[]);
        assert_eq!(ack.result()["resultType"], "complete", "{method}: {ack:?}");
    }
    assert!(ids_received(&a).is_empty(), "nothing reached the server");
    // The routing header must name the task, as for any request of the era.
    let id = created(&client.call(3, "a__research", json!({"ms": 10})));
    let mismatch = client.send(json!(4), "tasks/get", json!({"taskId": id}), &[("Mcp-Name", "another")]);
    assert_eq!(mismatch.error_code(), -32020, "{mismatch:?}");
}

#[test]
fn a_tool_that_requires_a_task_needs_the_extension_and_an_optional_one_runs_at_once_without() {
    let (a, _b, gate) = era_gate();
    let plain = Modern::new(&gate.url());
    let refused = plain.call(1, "a__research_required", json!({"ms": 10}));
    assert_eq!(refused.error_code(), -32021, "{refused:?}");
    assert!(refused.body["error"]["data"]["requiredCapabilities"]["extensions"][EXTENSION].is_object(), "{refused:?}");
    assert_eq!(a.stats()["methods"]["tools/call"], Value::Null, "not sent: {}", a.stats());
    let at_once = plain.call(2, "a__research", json!({"ms": 10}));
    assert_eq!(at_once.result()["content"][0]["text"], "research done", "{at_once:?}");
    assert_eq!(at_once.result()["resultType"], "complete");
    assert_eq!(a.stats()["tasks_created"], 0, "no task without the extension");

    let client = tasks_client(&gate);
    let id = created(&client.call(3, "a__research_required", json!({"ms": 10})));
    assert_eq!(poll_ended(&client, &id)["status"], "completed");
    // Tools that take no task run as before, with or without the extension.
    let echo = client.call(4, "a__echo", json!({"text": "hi"}));
    assert_eq!(echo.result()["resultType"], "complete", "{echo:?}");
}

#[test]
fn with_tokens_a_task_belongs_to_its_token() {
    let a = Fixture::start("a", &["--tasks"]);
    let (ka, kb) = ("token-a-0123456789abcdef", "token-b-0123456789abcdef");
    let mut c = config(&[("a", a.url())]);
    c["auth"] = json!({"tokens": [{"token": ka}, {"token": kb}]});
    let gate = Gate::start(&c);
    let mut client = tasks_client(&gate);
    client.token = Some(ka.into());
    let id = created(&client.call(1, "a__research", json!({"ms": 10})));
    client.token = Some(kb.into());
    assert_eq!(client.send(json!(2), "tasks/get", json!({"taskId": id}), &[]).error_code(), -32602);
    client.token = Some(ka.into());
    assert_eq!(poll_ended(&client, &id)["status"], "completed");
}

#[test]
fn discover_offers_the_extension_when_a_server_runs_calls_as_tasks() {
    // Of both eras (spoken to in the session era, whose tasks it has): discover offers 2026-07-28.
    let both = Fixture::start("both", &["--both-eras", "--tasks"]);
    let gate = Gate::start(&config(&[("both", both.url())]));
    let client = tasks_client(&gate);
    let caps = discovered(&client);
    assert!(caps["extensions"][EXTENSION].is_object(), "{caps}");
    assert!(caps.get("tasks").is_none(), "the era has no core tasks: {caps}");
    let id = created(&client.call(2, "both__research", json!({"ms": 10})));
    assert_eq!(poll_ended(&client, &id)["status"], "completed");
    // Without tasks behind it, no extension is offered.
    let plain = Fixture::start("plain", &["--both-eras"]);
    let gate = Gate::start(&config(&[("plain", plain.url())]));
    let caps = discovered(&tasks_client(&gate));
    assert!(caps.get("extensions").is_none(), "{caps}");
}

/// What a fixture of 2026-07-28 received in its `tasks/*` requests: (method, taskId).
fn modern_task_requests(f: &Fixture) -> Vec<(String, String)> {
    let requests = f.stats()["modern_task_requests"].as_array().cloned().unwrap_or_default();
    requests
        .iter()
        .map(|r| (r["method"].as_str().unwrap_or("").into(), r["taskId"].as_str().unwrap_or("").into()))
        .collect()
}

#[test]
fn a_2026_servers_own_tasks_pass_through_with_mcpgates_ids() {
    let m = Fixture::start("m", &["--modern", "--tasks"]);
    let gate = Gate::start(&config(&[("m", m.url())]));
    let client = tasks_client(&gate);
    let caps = discovered(&client);
    assert!(caps["extensions"][EXTENSION].is_object(), "the server's extension is offered: {caps}");

    let id = created(&client.call(2, "m__research", json!({"ms": 100})));
    assert!(id.starts_with("mcpgate-task-"), "mcpgate's id, not the server's: {id}");
    let calls = m.stats()["modern_tool_calls"].clone();
    assert_eq!(calls[0]["declared"], true, "the client's declaration reached the server: {calls}");
    let ended = poll_ended(&client, &id);
    assert_eq!((ended["taskId"].as_str(), ended["status"].as_str()), (Some(id.as_str()), Some("completed")), "{ended}");
    assert_eq!(ended["result"]["content"][0]["text"], "research done", "{ended}");

    let long = created(&client.call(3, "m__research", json!({"ms": 20_000})));
    let update = client.send(json!(4), "tasks/update", json!({"taskId": long, "inputResponses": {}}), &[]);
    assert_eq!(update.result()["resultType"], "complete", "{update:?}");
    let cancel = client.send(json!(5), "tasks/cancel", json!({"taskId": long}), &[]);
    assert_eq!(cancel.result()["resultType"], "complete", "{cancel:?}");
    assert_eq!(poll_ended(&client, &long)["status"], "cancelled");
    let received = modern_task_requests(&m);
    let methods: std::collections::BTreeSet<&str> = received.iter().map(|(method, _)| method.as_str()).collect();
    assert_eq!(methods, ["tasks/cancel", "tasks/get", "tasks/update"].into_iter().collect(), "{received:?}");
    assert!(received.iter().all(|(_, theirs)| !theirs.is_empty() && !theirs.starts_with("mcpgate-")), "{received:?}");

    // The server's refusal of a client without the extension comes through as it is.
    let refused = Modern::new(&gate.url()).call(6, "m__research_required", json!({"ms": 10}));
    assert_eq!((refused.status, refused.error_code()), (400, -32021), "{refused:?}");
}
