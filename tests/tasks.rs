//! Tasks (protocol 2025-11-25, experimental) through mcpgate: the servers'
//! `tasks` capability is offered, a task-augmented call reaches its server,
//! and every task id the client sees is mcpgate's, scoped to its session,
//! while each server gets its own ids back (two servers may mint the same
//! id). server-everything's `simulate-research-query` could not be called
//! through mcpgate before (`tasks/get`: -32601).

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Client, Fixture, Gate, config};

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
