//! The `tool_search` mode over real sockets: its quality on the fixed
//! corpus (three fixtures serving 100 real servers' tools each, 50 queries
//! written as a user would ask), and `call_tool` carrying what a direct
//! call carries (progress, the server's requests, cancellation, tasks),
//! within the session's view.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixture/corpus");

fn corpus_fixture(name: &str) -> Fixture {
    Fixture::start(name, &["--tools-from", &format!("{CORPUS}/{name}.json")])
}

fn search_keys(extra: Value) -> Value {
    let mut mode = json!({"enabled": true, "max_results": 5});
    for (k, v) in extra.as_object().into_iter().flatten() {
        mode[k] = v.clone();
    }
    json!({ "tool_search": mode })
}

/// `find_tools` for `query`: the names it answers with, best first.
fn find(client: &mut Client, query: &str, server: Option<&str>) -> Vec<String> {
    let mut arguments = json!({ "query": query });
    if let Some(server) = server {
        arguments["server"] = json!(server);
    }
    let reply = client.call_tool("find_tools", arguments);
    let result = reply.result();
    assert_ne!(result["isError"], true, "{query}: {}", reply.body);
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap_or("")).unwrap_or_default();
    assert_eq!(text, result["structuredContent"], "the text is the structured answer");
    let tools = result["structuredContent"]["tools"].as_array().cloned().unwrap_or_default();
    for tool in &tools {
        assert!(tool["inputSchema"].is_object() && tool["description"].is_string(), "a full definition: {tool}");
    }
    tools.iter().map(|t| t["name"].as_str().unwrap_or_default().to_string()).collect()
}

fn body_bytes(tools: &[Value]) -> usize {
    json!({ "tools": tools }).to_string().len()
}

#[test]
fn recall_on_the_corpus_of_three_servers_of_100_tools_reaches_0_9_at_5() {
    let (dev, web, work) = (corpus_fixture("dev"), corpus_fixture("web"), corpus_fixture("work"));
    let gate = Gate::start_for(&[&dev, &web, &work], search_keys(json!({})));
    let mut client = gate.open_session();
    let listed = client.list_all("tools/list", "tools");
    let names: Vec<&str> = listed.iter().map(|t| t["name"].as_str().unwrap_or_default()).collect();
    assert_eq!(names, ["find_tools", "call_tool"], "only mcpgate's two tools are listed");

    let queries: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{CORPUS}/queries.json")).unwrap()).unwrap();
    let queries = queries["queries"].as_array().unwrap();
    assert_eq!(queries.len(), 50);
    let (mut at1, mut at5, mut misses) = (0, 0, Vec::new());
    for q in queries {
        let query = q["query"].as_str().unwrap();
        let expect: Vec<&str> = q["expect"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        let found = find(&mut client, query, None);
        assert!(found.len() <= 5, "max_results bounds the answer: {found:?}");
        match found.iter().position(|n| expect.contains(&n.as_str())) {
            Some(0) => at1 += 1,
            Some(_) => {}
            None => misses.push(format!("{query:?}: expected {expect:?}, found {found:?}")),
        }
        if found.iter().take(5).any(|n| expect.contains(&n.as_str())) {
            at5 += 1;
        }
    }
    let n = queries.len() as f64;
    let (recall1, recall5) = (at1 as f64 / n, at5 as f64 / n);
    println!(
        "tool_search corpus: 300 tools, 50 queries: recall@1 {recall1:.2} ({at1}/50), recall@5 {recall5:.2} ({at5}/50)"
    );
    for miss in &misses {
        println!("  not in the first 5: {miss}");
    }

    // What a client is spared: the full list against the mode's.
    let plain = Gate::start_for(&[&dev, &web, &work], json!({}));
    let all = plain.open_session().list_all("tools/list", "tools");
    assert_eq!(all.len(), 300);
    println!(
        "tools/list: {} bytes for 300 tools without the mode, {} bytes with it",
        body_bytes(&all),
        body_bytes(&listed)
    );
    assert!(body_bytes(&listed) * 20 < body_bytes(&all));
    assert!(recall5 >= 0.9, "recall@5 {recall5:.2} is below the goal of 0.9:\n{}", misses.join("\n"));
}

#[test]
fn the_pinned_tools_stay_listed_and_every_tool_stays_callable_by_its_name() {
    let (a, b) = Fixture::alpha_and_beta();
    let gate = Gate::start_for(&[&a, &b], search_keys(json!({"pinned": ["alpha__echo", "beta__a*"]})));
    let mut client = gate.open_session();
    assert_eq!(client.tool_names(), ["find_tools", "call_tool", "alpha__echo", "beta__add"]);
    assert_eq!(client.tool_text("call_tool", json!({"name": "beta__echo", "arguments": {"text": "hi"}})), "hi");
    assert_eq!(client.tool_text("beta__echo", json!({"text": "direct"})), "direct", "a direct call still works");
    let found = find(&mut client, "add two numbers", None);
    assert_eq!(found.first().map(String::as_str), Some("alpha__add"), "{found:?}");
    assert_eq!(find(&mut client, "add two numbers", Some("beta")).first().map(String::as_str), Some("beta__add"));

    // An empty query: each server, its tool count, a few names.
    let reply = client.call_tool("find_tools", json!({"query": ""}));
    let servers = reply.result()["structuredContent"]["servers"].clone();
    let count = a.stats();
    assert_eq!(servers[0]["server"], "alpha", "{servers}");
    assert_eq!(servers[1]["server"], "beta", "{servers}");
    let listed = gate.open_session().call_tool("find_tools", json!({"query": "", "server": "beta"}));
    assert_eq!(listed.result()["structuredContent"]["servers"].as_array().map(Vec::len), Some(1));
    assert!(servers[0]["tools"].as_u64().unwrap_or(0) >= 10, "{servers} {count}");
    assert_eq!(servers[0]["examples"].as_array().map(Vec::len), Some(5), "{servers}");

    // What a client gets wrong is said, and names what to do.
    let unknown = client.call_tool("find_tools", json!({"query": "echo", "server": "gamma"}));
    assert_eq!(unknown.result()["isError"], true, "{}", unknown.body);
    assert!(unknown.body.to_string().contains("alpha, beta"), "{}", unknown.body);
    let nameless = client.call_tool("call_tool", json!({"arguments": {"text": "x"}}));
    assert!(nameless.error_message().contains("arguments.name"), "{}", nameless.body);
    let missing = client.call_tool("call_tool", json!({"name": "alpha__nope"}));
    assert!(missing.error_message().contains("unknown tool `alpha__nope`"), "{}", missing.body);
    // A name given twice in what call_tool unwraps is named, and reaches no server.
    let before = (a.stats()["methods"]["tools/call"].clone(), b.stats()["methods"]["tools/call"].clone());
    let body = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"call_tool","arguments":{"name":"alpha__echo","arguments":{"text":"a"},"name":"beta__echo"}}}"#;
    let twice = client.post(body.as_bytes(), &[]);
    assert!(twice.error_message().contains("member `name` given twice"), "{}", twice.body);
    let after = (a.stats()["methods"]["tools/call"].clone(), b.stats()["methods"]["tools/call"].clone());
    assert_eq!(before, after, "neither server was called");
}

#[test]
fn call_tool_carries_progress_the_servers_requests_and_cancellation_like_a_direct_call() {
    let a = Fixture::start("a", &[]);
    let gate = Gate::start_for(&[&a], search_keys(json!({})));
    let mut client = gate.client();
    client.initialize_with(json!({"sampling": {}, "elicitation": {}}));

    // Progress: the client's token, on the call's stream.
    let body = json!({"jsonrpc": "2.0", "id": "p1", "method": "tools/call", "params": {
        "name": "call_tool", "arguments": {"name": "a__slow", "arguments": {"ms": 300, "steps": 3}},
        "_meta": {"progressToken": "tok-1"}}});
    let reply = client.post(body.to_string().as_bytes(), &[]);
    let progress: Vec<&Value> = reply.events.iter().filter(|e| e["method"] == "notifications/progress").collect();
    assert_eq!(progress.len(), 3, "{:?}", reply.events);
    assert!(progress.iter().all(|p| p["params"]["progressToken"] == "tok-1"), "{progress:?}");
    assert_eq!(reply.body["id"], "p1");

    // Sampling and elicitation: the server asks the client on the way.
    let (asked, answer) =
        client.call_streaming("call_tool", json!({"name": "a__sample", "arguments": {"prompt": "hi"}}), |m| {
            (m["method"] == "sampling/createMessage")
                .then(|| json!({"role": "assistant", "content": {"type": "text", "text": "sampled"}, "model": "m"}))
        });
    assert!(asked.iter().any(|m| m["method"] == "sampling/createMessage"), "{asked:?}");
    assert!(answer.to_string().contains("sampled"), "{answer}");
    let (asked, answer) =
        client.call_streaming("call_tool", json!({"name": "a__elicit", "arguments": {"message": "name?"}}), |m| {
            (m["method"] == "elicitation/create").then(|| json!({"action": "accept", "content": {"name": "Ada"}}))
        });
    assert!(asked.iter().any(|m| m["method"] == "elicitation/create"), "{asked:?}");
    assert!(answer.to_string().contains("Ada"), "{answer}");

    // Cancellation of call_tool's own request id reaches the server.
    let before = a.count("requests");
    let worker = client.same_session();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let body = json!({"jsonrpc": "2.0", "id": "cancel-me", "method": "tools/call", "params": {
            "name": "call_tool", "arguments": {"name": "a__cancellable", "arguments": {"ms": 10000}}}});
        let _ = done_tx.send(worker.post(body.to_string().as_bytes(), &[]));
    });
    assert!(wait_until(Duration::from_secs(5), || a.count("requests") > before), "{}", a.stats());
    assert_eq!(client.notify("notifications/cancelled", json!({"requestId": "cancel-me", "reason": "test"})), 202);
    let arrived =
        wait_until(Duration::from_secs(5), || a.stats()["cancelled"].as_array().is_some_and(|c| !c.is_empty()));
    assert!(arrived, "no cancel reached the server: {}", a.stats());
    assert!(done_rx.recv_timeout(Duration::from_secs(8)).is_ok(), "the cancelled call ended");
}

#[test]
fn call_tool_starts_a_task_and_the_task_is_the_clients() {
    let a = Fixture::start("a", &["--tasks"]);
    let gate = Gate::start_for(&[&a], search_keys(json!({})));
    let mut client = gate.open_session();
    let reply = client.request(
        "tools/call",
        json!({"name": "call_tool", "task": {"ttl": 60000},
        "arguments": {"name": "a__research", "arguments": {"ms": 100}}}),
    );
    let task = reply.result()["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{}", reply.body)).to_string();
    let done = wait_until(Duration::from_secs(5), || {
        client.request("tasks/get", json!({"taskId": task})).result()["status"] == "completed"
    });
    assert!(done, "the task of a call made through call_tool completes");
    let result = client.request("tasks/result", json!({"taskId": task}));
    assert!(result.body.to_string().contains("research done"), "{}", result.body);
}

#[test]
fn a_search_finds_only_what_the_session_may_call() {
    let (a, b) = Fixture::alpha_and_beta();
    let mut config = config_for(&[&a, &b]);
    config["tool_search"] = json!({"enabled": true});
    config["mcpServers"]["alpha"]["tools"] = json!({"deny": ["add"]});
    config["auth"] = json!({"tokens": [{"token": "only-alpha-0123456789", "servers": ["alpha"]}]});
    let gate = Gate::start_checked(&config);
    let mut client = gate.client_with_token("only-alpha-0123456789");
    client.initialize();
    let found = find(&mut client, "adds two numbers echo the text", None);
    assert!(found.iter().all(|n| n.starts_with("alpha__")), "beta is not this token's: {found:?}");
    assert!(!found.contains(&"alpha__add".to_string()), "alpha's filter hides add: {found:?}");
    assert!(found.contains(&"alpha__echo".to_string()), "{found:?}");
    let refused = client.call_tool("call_tool", json!({"name": "beta__echo", "arguments": {"text": "x"}}));
    assert!(refused.body.get("error").is_some(), "{}", refused.body);
}

#[test]
fn the_status_page_shows_the_mode_its_index_and_which_queries_hit() {
    let a = Fixture::start("a", &[]);
    let gate = Gate::start_for(&[&a], search_keys(json!({})));
    let mut client = gate.open_session();
    for _ in 0..3 {
        let found = find(&mut client, "echo the text back", None);
        assert_eq!(found.first().map(String::as_str), Some("a__echo"));
        client.tool_text("call_tool", json!({"name": "a__echo", "arguments": {"text": "x"}}));
    }
    find(&mut client, "echo the text back", None);
    client.tool_text("a__add", json!({"a": 1, "b": 2}));
    let status = get_json(&format!("http://{}/status.json", gate.addr));
    let search = &status["tool_search"];
    assert_eq!(search["enabled"], true, "{search}");
    assert!(search["index_tools"].as_u64().unwrap_or(0) >= 10, "{search}");
    assert!(search["index_bytes"].as_u64().unwrap_or(0) > 1000, "{search}");
    assert_eq!(search["queries"], 4, "{search}");
    assert_eq!(search["calls"], 3, "{search}");
    assert_eq!(search["first_result_called"], 3, "{search}");
    assert_eq!(search["top_queries"][0], json!({"query": "echo the text back", "asked": 4, "first_result_called": 3}));
    let page = get_text(&format!("http://{}/status", gate.addr));
    assert!(page.contains("Tool search") && page.contains("echo the text back"), "the page shows the mode");

    let plain = Gate::start_for(&[&a], json!({}));
    let mut off = plain.open_session();
    assert!(!off.tool_names().contains(&"find_tools".to_string()), "off by default");
    assert!(off.call_tool("find_tools", json!({"query": "x"})).body.get("error").is_some());
}

#[test]
fn a_reload_that_changes_the_mode_changes_the_list_and_tells_the_client() {
    let a = Fixture::start("a", &[]);
    let mut conf = config_for(&[&a]);
    conf["tool_search"] = json!({"enabled": true, "pinned": ["a__echo"]});
    let gate = Gate::start_checked(&conf);
    let mut client = gate.open_session();
    let stream = client.open_stream();
    assert_eq!(client.tool_names(), ["find_tools", "call_tool", "a__echo"]);

    conf["tool_search"]["pinned"] = json!(["a__add"]);
    std::fs::write(gate.dir.0.join("mcpgate.json"), serde_json::to_vec_pretty(&conf).unwrap()).unwrap();
    let reply = raw_request(gate.addr, "POST", "/reload", &[("Content-Type", "application/json")], b"{}");
    assert_eq!(reply.status, 200, "{reply:?}");
    let mut told = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match stream.next(left) {
            Some(m) if m["method"] == "notifications/tools/list_changed" => {
                told = true;
                break;
            }
            Some(_) => {}
            None => break,
        }
    }
    assert!(told, "the client's stream carried tools/list_changed");
    assert_eq!(client.tool_names(), ["find_tools", "call_tool", "a__add"]);

    conf["tool_search"] = json!({"enabled": false});
    std::fs::write(gate.dir.0.join("mcpgate.json"), serde_json::to_vec_pretty(&conf).unwrap()).unwrap();
    let reply = raw_request(gate.addr, "POST", "/reload", &[("Content-Type", "application/json")], b"{}");
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(!client.tool_names().contains(&"find_tools".to_string()), "off again: every tool listed");
    stream.close();
}
