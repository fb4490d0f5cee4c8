//! The fixture's tasks (protocol 2025-11-25, experimental; `mcp-fixture --tasks`), checked
//! directly against the fixture (no mcpgate in between), so that the gateway's task tests stand
//! on a server known to follow the spec.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Client, Fixture};

const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

fn start() -> (Fixture, Client) {
    let fixture = Fixture::start("tasks", &["--tasks"]);
    let mut client = Client::new(&fixture.url());
    client.initialize();
    (fixture, client)
}

/// Calls `tool` as a task (ttl 60 s) and returns the Task of the CreateTaskResult.
fn create_task(client: &mut Client, tool: &str, arguments: Value) -> Value {
    let params = json!({"name": tool, "arguments": arguments, "task": {"ttl": 60_000}});
    let reply = client.request("tools/call", params);
    let result = reply.result();
    assert_eq!(result.as_object().map(|r| r.len()), Some(1), "a CreateTaskResult has only `task`: {result}");
    result["task"].clone()
}

fn id_of(task: &Value) -> String {
    task["taskId"].as_str().unwrap_or_else(|| panic!("no taskId in {task}")).to_string()
}

fn get(client: &mut Client, id: &str) -> Value {
    client.request("tasks/get", json!({"taskId": id})).result().clone()
}

/// Polls `tasks/get` until the task leaves `working` (at most 5 s).
fn wait_terminal(client: &mut Client, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let task = get(client, id);
        if task["status"] != "working" {
            return task;
        }
        assert!(Instant::now() < deadline, "task {id} still working after 5 s: {task}");
        std::thread::sleep(Duration::from_millis(task["pollInterval"].as_u64().unwrap_or(100)));
    }
}

fn is_iso8601(text: &Value) -> bool {
    let text = text.as_str().unwrap_or_default();
    let bytes = text.as_bytes();
    text.len() == 24 && text.ends_with('Z') && bytes[4] == b'-' && bytes[10] == b'T' && bytes[19] == b'.'
}

fn assert_task_shape(task: &Value) {
    assert!(id_of(task).starts_with("task-"), "{task}");
    assert!(is_iso8601(&task["createdAt"]), "createdAt: {task}");
    assert!(is_iso8601(&task["lastUpdatedAt"]), "lastUpdatedAt: {task}");
    assert_eq!(task["ttl"], 60_000, "{task}");
    assert!(task["pollInterval"].as_u64().is_some(), "{task}");
}

#[test]
fn the_capability_and_the_tools_task_support_are_declared() {
    let fixture = Fixture::start("tasks", &["--tasks"]);
    let mut client = Client::new(&fixture.url());
    let init = client.initialize();
    let expected = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
    assert_eq!(init["capabilities"]["tasks"], expected, "{init}");

    let tools = client.list_all("tools/list", "tools");
    let support = |name: &str| tools.iter().find(|t| t["name"] == name).map(|t| t["execution"]["taskSupport"].clone());
    assert_eq!(support("research"), Some(json!("optional")));
    assert_eq!(support("research_required"), Some(json!("required")));
    assert_eq!(support("echo"), Some(Value::Null), "other tools declare no execution");

    // Tasks are a 2025-11-25 feature: an older session is not offered them.
    let mut old = Client::new(&fixture.url());
    let params =
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}});
    let reply = old.request("initialize", params);
    assert!(reply.result()["capabilities"].get("tasks").is_none(), "{}", reply.body);
}

#[test]
fn without_the_flag_there_are_no_tasks() {
    let fixture = Fixture::start("plain", &[]);
    let mut client = Client::new(&fixture.url());
    let init = client.initialize();
    assert!(init["capabilities"].get("tasks").is_none(), "{init}");
    let names = client.tool_names();
    assert!(!names.iter().any(|n| n.starts_with("research")), "{names:?}");
    let get = client.request("tasks/get", json!({"taskId": "task-x-1"}));
    assert_eq!(get.error_code(), -32601, "{:?}", get.body);
    // A receiver without the capability ignores `task` and answers the call itself.
    let echo = client.request("tools/call", json!({"name": "echo", "arguments": {"text": "x"}, "task": {}}));
    assert_eq!(echo.result()["content"][0]["text"], "x", "{:?}", echo.body);
    let stats = fixture.stats();
    assert_eq!(
        (stats["tasks_created"].clone(), stats["task_requests"].clone()),
        (json!(0), json!([{"method": "tasks/get", "taskId": "task-x-1"}]))
    );
}

#[test]
fn a_task_runs_to_completion_and_its_result_carries_the_related_task() {
    let (fixture, mut client) = start();
    let task = create_task(&mut client, "research", json!({"ms": 200}));
    assert_task_shape(&task);
    assert_eq!(task["status"], "working", "{task}");
    let id = id_of(&task);

    let done = wait_terminal(&mut client, &id);
    assert_eq!(done["status"], "completed", "{done}");
    assert_task_shape(&done);
    assert_eq!(done["createdAt"], task["createdAt"]);

    let reply = client.request("tasks/result", json!({"taskId": id}));
    let result = reply.result();
    assert_eq!(result["content"][0]["text"], "research done", "{result}");
    assert_eq!(result["_meta"][RELATED_TASK], json!({"taskId": id}), "{result}");

    let listed = client.request("tasks/list", json!({})).result().clone();
    let tasks = listed["tasks"].as_array().unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(tasks.len(), 1, "{listed}");
    assert_eq!(tasks[0], done, "tasks/list shows what tasks/get does");
    assert!(listed.get("nextCursor").is_none(), "{listed}");

    let stats = fixture.stats();
    assert_eq!(stats["tasks_created"], 1, "{stats}");
    let requests = stats["task_requests"].as_array().unwrap_or_else(|| panic!("{stats}"));
    assert!(requests.contains(&json!({"method": "tasks/get", "taskId": id})), "{stats}");
    assert_eq!(requests.last(), Some(&json!({"method": "tasks/result", "taskId": id})), "{stats}");
}

#[test]
fn tasks_result_waits_for_the_task_to_end() {
    let (_fixture, mut client) = start();
    let started = Instant::now();
    let id = id_of(&create_task(&mut client, "research", json!({"ms": 600})));
    assert!(started.elapsed() < Duration::from_millis(400), "the CreateTaskResult comes at once");
    let result = client.request("tasks/result", json!({"taskId": id})).result().clone();
    assert!(started.elapsed() >= Duration::from_millis(600), "tasks/result answered before the task ended");
    assert_eq!(result["content"][0]["text"], "research done", "{result}");
    assert_eq!(get(&mut client, &id)["status"], "completed");
}

#[test]
fn a_cancelled_task_stays_cancelled() {
    let (_fixture, mut client) = start();
    let id = id_of(&create_task(&mut client, "research", json!({"ms": 60_000})));
    let cancelled = client.request("tasks/cancel", json!({"taskId": id})).result().clone();
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["taskId"], id.as_str());
    assert!(cancelled["statusMessage"].is_string(), "{cancelled}");
    assert_eq!(get(&mut client, &id)["status"], "cancelled");

    let again = client.request("tasks/cancel", json!({"taskId": id}));
    assert_eq!(again.error_code(), -32602, "a terminal task cannot be cancelled: {:?}", again.body);
    let result = client.request("tasks/result", json!({"taskId": id}));
    assert_eq!(result.error_code(), -32603, "a cancelled task has no result: {:?}", result.body);
}

#[test]
fn status_changes_arrive_on_the_get_stream() {
    let (_fixture, mut client) = start();
    let stream = client.open_stream();
    let id = id_of(&create_task(&mut client, "research", json!({"ms": 100})));
    let note = stream.next_with_method("notifications/tasks/status", Duration::from_secs(5));
    let note = note.unwrap_or_else(|| panic!("no notifications/tasks/status within 5 s"));
    assert_eq!(note["params"]["taskId"], id.as_str(), "{note}");
    assert_eq!(note["params"]["status"], "completed", "{note}");
    assert!(note["params"].get("_meta").is_none(), "{note}");

    let id = id_of(&create_task(&mut client, "research", json!({"ms": 60_000})));
    client.request("tasks/cancel", json!({"taskId": id})).result();
    let note = stream.next_with_method("notifications/tasks/status", Duration::from_secs(5));
    let note = note.unwrap_or_else(|| panic!("no notifications/tasks/status for the cancel within 5 s"));
    assert_eq!(note["params"]["taskId"], id.as_str(), "{note}");
    assert_eq!(note["params"]["status"], "cancelled", "{note}");
    stream.close();
}

#[test]
fn an_error_result_fails_the_task_and_is_its_result() {
    let (_fixture, mut client) = start();
    let id = id_of(&create_task(&mut client, "research", json!({"ms": 0, "fail": true})));
    let task = wait_terminal(&mut client, &id);
    assert_eq!(task["status"], "failed", "{task}");
    assert!(task["statusMessage"].as_str().is_some_and(|m| m.contains("failed on purpose")), "{task}");
    let result = client.request("tasks/result", json!({"taskId": id})).result().clone();
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["_meta"][RELATED_TASK]["taskId"], id.as_str(), "{result}");
}

#[test]
fn calls_without_a_task_run_as_before() {
    let (fixture, mut client) = start();
    assert_eq!(client.tool_text("research", json!({"ms": 10})), "research done");
    let failed = client.call_tool("research", json!({"ms": 0, "fail": true}));
    assert_eq!(failed.result()["isError"], true, "{:?}", failed.body);
    assert_eq!(fixture.count("tasks_created"), 0);
}

#[test]
fn protocol_errors() {
    let (_fixture, mut client) = start();
    let required = client.call_tool("research_required", json!({"ms": 0}));
    assert_eq!(required.error_code(), -32601, "required task support, no task: {:?}", required.body);
    let task = create_task(&mut client, "research_required", json!({"ms": 0}));
    assert_eq!(task["status"], "working");

    let echo = client.request("tools/call", json!({"name": "echo", "arguments": {"text": "x"}, "task": {}}));
    assert_eq!(echo.error_code(), -32601, "a task for a tool without task support: {:?}", echo.body);
    let bad = client.request("tools/call", json!({"name": "research", "arguments": {}, "task": 5}));
    assert_eq!(bad.error_code(), -32602, "{:?}", bad.body);

    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let unknown = client.request(method, json!({"taskId": "task-nope-1"}));
        assert_eq!(unknown.error_code(), -32602, "{method} of an unknown task: {:?}", unknown.body);
        let missing = client.request(method, json!({}));
        assert_eq!(missing.error_code(), -32602, "{method} without taskId: {:?}", missing.body);
    }
    let cursor = client.request("tasks/list", json!({"cursor": "bogus"}));
    assert_eq!(cursor.error_code(), -32602, "{:?}", cursor.body);

    // Tasks belong to their session.
    let mut other = Client::new(&client.url);
    other.initialize();
    let foreign = other.request("tasks/get", json!({"taskId": id_of(&task)}));
    assert_eq!(foreign.error_code(), -32602, "another session's task: {:?}", foreign.body);
    assert_eq!(other.request("tasks/list", json!({})).result()["tasks"], json!([]));
}

#[test]
fn a_session_keeps_at_most_100_tasks() {
    let (_fixture, mut client) = start();
    let mut ids = Vec::new();
    for _ in 0..100 {
        ids.push(id_of(&create_task(&mut client, "research", json!({"ms": 60_000}))));
    }
    let refused = client.request("tools/call", json!({"name": "research", "task": {}}));
    assert_eq!(refused.error_code(), -32603, "100 working tasks: {:?}", refused.body);

    // tasks/list pages through them all, oldest first.
    let listed: Vec<String> = client.list_all("tasks/list", "tasks").iter().map(id_of).collect();
    assert_eq!(listed, ids);

    // A terminal task makes room: the oldest terminal one is forgotten.
    client.request("tasks/cancel", json!({"taskId": ids[7]})).result();
    let newest = id_of(&create_task(&mut client, "research", json!({"ms": 0})));
    assert_eq!(client.request("tasks/get", json!({"taskId": ids[7]})).error_code(), -32602);
    assert_eq!(wait_terminal(&mut client, &newest)["status"], "completed");
    assert_eq!(client.list_all("tasks/list", "tasks").len(), 100);
}
