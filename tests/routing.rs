//! Routing through mcpgate, checked against real fixture servers: merged
//! lists under prefixes, calls reaching the server that owns a name or URI
//! (counted at the servers), collisions, one downstream session per client
//! session, pagination on both sides, a server that is down at start and
//! comes back, progress on a POST's SSE answer, servers that always stream or
//! offer no GET stream, and server notifications on the client's GET stream.

mod support;

use std::collections::HashSet;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Client, Fixture, Gate, TempDir, assert_balanced, config, downstream_session, wait_until};

const FOUR_LISTS: [(&str, &str, &str); 4] = [
    ("tools/list", "tools", "name"),
    ("prompts/list", "prompts", "name"),
    ("resources/list", "resources", "uri"),
    ("resources/templates/list", "resourceTemplates", "uriTemplate"),
];

fn gate_for(a: &Fixture, b: &Fixture) -> Gate {
    Gate::start(&config(&[("alpha", a.url()), ("beta", b.url())]))
}

/// A gate whose config file lists the servers (name, url, prefix) in exactly
/// this order. `config()` goes through serde_json's map, which sorts its
/// keys, so the file is written here and handed to mcpgate instead.
fn gate_in_order(servers: &[(&str, String, Option<&str>)]) -> (Gate, TempDir) {
    let mut base = config(&[]);
    base.as_object_mut().unwrap().remove("mcpServers");
    let entries: Vec<String> = servers
        .iter()
        .map(|(name, url, prefix)| {
            let mut server = json!({ "url": url });
            if let Some(prefix) = prefix {
                server["prefix"] = json!(prefix);
            }
            format!("{}: {server}", json!(name))
        })
        .collect();
    let base = base.to_string();
    let text = format!("{{\"mcpServers\": {{{}}}, {}", entries.join(", "), &base[1..]);
    let dir = TempDir::new();
    let path = dir.0.join("ordered.json");
    std::fs::write(&path, &text).unwrap();
    let gate = Gate::start_with(&config(&[]), |_| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcpgate"));
        command.arg("--config").arg(&path);
        command
    });
    (gate, dir)
}

/// The `key` of every item of a list, every page followed.
fn keys(client: &mut Client, method: &str, field: &str, key: &str) -> Vec<String> {
    client
        .list_all(method, field)
        .iter()
        .map(|item| item[key].as_str().unwrap_or_else(|| panic!("{method}: item without `{key}`: {item}")).to_string())
        .collect()
}

/// What a fixture lists itself, asked directly (no mcpgate in between).
fn direct_keys(f: &Fixture, method: &str, field: &str, key: &str) -> Vec<String> {
    let mut client = Client::new(&f.url());
    client.initialize();
    let keys = keys(&mut client, method, field, key);
    assert_eq!(client.delete(), 200, "closing the direct session on {}", f.name);
    keys
}

fn prefixed(prefix: &str, names: &[String]) -> Vec<String> {
    names.iter().map(|n| format!("{prefix}__{n}")).collect()
}

fn assert_no_duplicates(names: &[String]) {
    let unique: HashSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "duplicates in {names:?}");
}

/// How many JSON-RPC requests each fixture received while `act` ran.
fn requests_during(a: &Fixture, b: &Fixture, act: impl FnOnce()) -> (u64, u64) {
    let before = (a.count("requests"), b.count("requests"));
    act();
    (a.count("requests") - before.0, b.count("requests") - before.1)
}

#[test]
fn lists_of_two_servers_are_merged_under_their_prefixes_in_configuration_order() {
    let (a, b) = Fixture::alpha_and_beta();
    let gate = gate_for(&a, &b);
    let mut client = gate.open_session();

    let (alpha_tools, beta_tools) =
        (direct_keys(&a, "tools/list", "tools", "name"), direct_keys(&b, "tools/list", "tools", "name"));
    assert!(alpha_tools.len() >= 10 && alpha_tools.contains(&"echo".to_string()), "{alpha_tools:?}");
    let tools = keys(&mut client, "tools/list", "tools", "name");
    assert_eq!(tools, [prefixed("alpha", &alpha_tools), prefixed("beta", &beta_tools)].concat());
    assert_no_duplicates(&tools);

    // Only the name changes: descriptions and schemas are the server's own.
    let merged = client.list_all("tools/list", "tools");
    let echo = merged.iter().find(|t| t["name"] == "beta__echo").expect("beta__echo listed");
    assert_eq!(echo["description"], "Echoes the text back (beta)");
    assert_eq!(echo["inputSchema"]["required"], json!(["text"]));

    let prompts = keys(&mut client, "prompts/list", "prompts", "name");
    assert_eq!(prompts, ["alpha__greet", "beta__greet"]);

    let resources = keys(&mut client, "resources/list", "resources", "uri");
    assert_eq!(resources, ["fixture://alpha/readme", "fixture://beta/readme"]);
    let templates = keys(&mut client, "resources/templates/list", "resourceTemplates", "uriTemplate");
    assert_eq!(templates, ["fixture://alpha/items/{id}", "fixture://beta/items/{id}"]);
    assert_eq!(gate.status()["collisions"], json!([]), "distinct prefixes never collide");

    // The order is the file's, not the names': beta configured first comes first.
    let (reversed, _dir) = gate_in_order(&[("beta", b.url(), None), ("alpha", a.url(), None)]);
    let mut client = reversed.open_session();
    let tools = keys(&mut client, "tools/list", "tools", "name");
    assert_eq!(tools, [prefixed("beta", &beta_tools), prefixed("alpha", &alpha_tools)].concat());
    assert_eq!(keys(&mut client, "prompts/list", "prompts", "name"), ["beta__greet", "alpha__greet"]);
    let resources = keys(&mut client, "resources/list", "resources", "uri");
    assert_eq!(resources, ["fixture://beta/readme", "fixture://alpha/readme"]);
    let templates = keys(&mut client, "resources/templates/list", "resourceTemplates", "uriTemplate");
    assert_eq!(templates, ["fixture://beta/items/{id}", "fixture://alpha/items/{id}"]);
}

#[test]
fn calls_reach_only_the_server_that_owns_the_name_or_uri() {
    let (a, b) = Fixture::alpha_and_beta();
    let gate = gate_for(&a, &b);
    let mut client = gate.open_session();
    // With the merged lists cached, routing a call asks no server for its list.
    for (method, field, key) in FOUR_LISTS {
        assert_eq!(keys(&mut client, method, field, key).len() % 2, 0, "{method}: both servers listed");
    }

    let seen = requests_during(&a, &b, || {
        assert_eq!(client.tool_text("alpha__echo", json!({"text": "to alpha"})), "to alpha");
    });
    assert_eq!(seen, (1, 0), "alpha__echo: requests seen by (alpha, beta)");

    let seen = requests_during(&a, &b, || {
        downstream_session(&mut client, "beta__whoami", "beta");
    });
    assert_eq!(seen, (0, 1), "beta__whoami: requests seen by (alpha, beta)");

    let seen = requests_during(&a, &b, || {
        let reply = client.request("prompts/get", json!({"name": "beta__greet", "arguments": {"name": "Ada"}}));
        assert_eq!(reply.result()["messages"][0]["content"]["text"], "Hello, Ada!", "{}", reply.body);
    });
    assert_eq!(seen, (0, 1), "prompts/get beta__greet: requests seen by (alpha, beta)");

    let seen = requests_during(&a, &b, || {
        let reply = client.request("resources/read", json!({"uri": "fixture://alpha/readme"}));
        assert_eq!(reply.result()["contents"][0]["text"], "readme of alpha", "{}", reply.body);
    });
    assert_eq!(seen, (1, 0), "resources/read of alpha's readme: requests seen by (alpha, beta)");

    let seen = requests_during(&a, &b, || {
        let reply = client.request("resources/read", json!({"uri": "fixture://beta/items/7"}));
        assert_eq!(reply.result()["contents"][0]["text"], "item 7 of beta", "{}", reply.body);
        assert_eq!(reply.result()["contents"][0]["uri"], "fixture://beta/items/7");
    });
    assert_eq!(seen, (0, 1), "resources/read of a templated beta URI: requests seen by (alpha, beta)");

    let seen = requests_during(&a, &b, || {
        let params = json!({
            "ref": {"type": "ref/prompt", "name": "alpha__greet"},
            "argument": {"name": "name", "value": ""},
        });
        let reply = client.request("completion/complete", params);
        assert_eq!(reply.result()["completion"]["values"], json!(["alice", "bob"]), "{}", reply.body);
    });
    assert_eq!(seen, (1, 0), "completion/complete for alpha__greet: requests seen by (alpha, beta)");

    let seen = requests_during(&a, &b, || {
        let params = json!({
            "ref": {"type": "ref/resource", "uri": "fixture://beta/items/{id}"},
            "argument": {"name": "id", "value": "1"},
        });
        let reply = client.request("completion/complete", params);
        assert_eq!(reply.result()["completion"]["values"], json!([]), "{}", reply.body);
    });
    assert_eq!(seen, (0, 1), "completion/complete for beta's template: requests seen by (alpha, beta)");

    // A name no server has is refused by mcpgate itself.
    let seen = requests_during(&a, &b, || {
        let reply = client.call_tool("gamma__echo", json!({"text": "x"}));
        assert_eq!(reply.error_code(), -32602, "{}", reply.body);
        assert!(reply.error_message().contains("gamma__echo"), "{}", reply.body);
    });
    assert!(seen.0 <= 1 && seen.1 <= 1, "at most one fresh list per server for an unknown name: {seen:?}");
}

#[test]
fn with_empty_prefixes_the_first_server_wins_each_name_and_the_hidden_ones_are_listed() {
    let (a, b) = Fixture::alpha_and_beta();
    // beta is configured first: it must win although alpha sorts first.
    let (gate, _dir) = gate_in_order(&[("beta", b.url(), Some("")), ("alpha", a.url(), Some(""))]);
    let mut client = gate.open_session();

    let own = direct_keys(&b, "tools/list", "tools", "name");
    let tools = keys(&mut client, "tools/list", "tools", "name");
    assert_eq!(tools, own, "each name once, unprefixed");
    assert_no_duplicates(&tools);
    let echo = client.list_all("tools/list", "tools").into_iter().find(|t| t["name"] == "echo").expect("echo listed");
    assert_eq!(echo["description"], "Echoes the text back (beta)", "the listed item is the winner's");
    assert_eq!(keys(&mut client, "prompts/list", "prompts", "name"), ["greet"]);

    let seen = requests_during(&a, &b, || {
        downstream_session(&mut client, "whoami", "beta");
        let reply = client.request("prompts/get", json!({"name": "greet", "arguments": {"name": "Bo"}}));
        assert_eq!(reply.result()["messages"][0]["content"]["text"], "Hello, Bo!", "{}", reply.body);
    });
    assert_eq!(seen, (0, 2), "whoami and greet go to the first configured server: requests seen by (alpha, beta)");

    let status = gate.status();
    let collisions: Vec<&str> = status["collisions"]
        .as_array()
        .unwrap_or_else(|| panic!("no collisions array: {status}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for name in &own {
        let line = format!("tool `{name}` of server `alpha` is hidden by server `beta`");
        assert!(collisions.contains(&line.as_str()), "missing {line:?} in {collisions:?}");
    }
    assert!(collisions.contains(&"prompt `greet` of server `alpha` is hidden by server `beta`"), "{collisions:?}");
    assert!(collisions.iter().all(|l| l.contains("of server `alpha` is hidden by server `beta`")), "{collisions:?}");
    assert_eq!(collisions.len(), own.len() + 1, "tools and the prompt, each once: {collisions:?}");
}

#[test]
fn each_client_session_has_its_own_downstream_session_reused_for_every_call() {
    let (a, b) = Fixture::alpha_and_beta();
    let gate = gate_for(&a, &b);
    let mut first = gate.open_session();
    let mut second = gate.open_session();

    let first_id = downstream_session(&mut first, "alpha__whoami", "alpha");
    let second_id = downstream_session(&mut second, "alpha__whoami", "alpha");
    assert_ne!(first_id, second_id, "two client sessions share a downstream session");
    for i in 0..20 {
        assert_eq!(
            downstream_session(&mut first, "alpha__whoami", "alpha"),
            first_id,
            "call {i}: downstream session changed"
        );
        assert_eq!(first.tool_text("alpha__echo", json!({"text": format!("{i}")})), format!("{i}"));
    }
    assert_eq!(downstream_session(&mut second, "alpha__whoami", "alpha"), second_id);
    let beta_first = downstream_session(&mut first, "beta__whoami", "beta");
    assert_eq!(downstream_session(&mut first, "beta__whoami", "beta"), beta_first);
    assert_ne!(downstream_session(&mut second, "beta__whoami", "beta"), beta_first);

    for f in [&a, &b] {
        let stats = f.stats();
        assert_eq!(stats["initialize"], 2, "{}: one downstream session per client session: {stats}", f.name);
        assert_eq!(stats["live_sessions"], 2, "{}: {stats}", f.name);
        assert_eq!(stats["delete"], 0, "{}: {stats}", f.name);
    }
    let status = gate.status();
    assert_eq!(status["downstream"]["opened"], 4, "{status}");
    assert_eq!(status["downstream"]["live"], 4, "{status}");
    assert_balanced(&status);
}

#[test]
fn paginated_servers_are_merged_whole_and_mcpgate_pages_are_stable() {
    let a = Fixture::start("alpha", &["--page-size", "3"]);
    let b = Fixture::start("beta", &[]);
    let mut c = config(&[("alpha", a.url()), ("beta", b.url())]);
    c["page_size"] = json!(5);
    let gate = Gate::start(&c);

    // The fixture really pages: 3 tools and a cursor.
    let mut direct = Client::new(&a.url());
    direct.initialize();
    let first = direct.request("tools/list", json!({}));
    assert_eq!(first.result()["tools"].as_array().map(Vec::len), Some(3), "{}", first.body);
    assert!(first.result()["nextCursor"].is_string(), "{}", first.body);
    assert_eq!(direct.delete(), 200);
    let expected = [
        prefixed("alpha", &direct_keys(&a, "tools/list", "tools", "name")),
        prefixed("beta", &direct_keys(&b, "tools/list", "tools", "name")),
    ]
    .concat();
    assert!(expected.len() > 10, "{expected:?}");

    let mut client = gate.open_session();
    // Walks mcpgate's pages: (the cursor asked with, names on the page).
    let walk = |client: &mut Client| -> Vec<(Option<String>, Vec<String>)> {
        let mut pages = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..50 {
            let params = cursor.as_ref().map_or_else(|| json!({}), |c| json!({"cursor": c}));
            let reply = client.request("tools/list", params);
            let names: Vec<String> = reply.result()["tools"]
                .as_array()
                .unwrap_or_else(|| panic!("{}", reply.body))
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect();
            let next = reply.result().get("nextCursor").and_then(Value::as_str).map(str::to_string);
            pages.push((cursor.clone(), names));
            match next {
                Some(next) => cursor = Some(next),
                None => return pages,
            }
        }
        panic!("more than 50 pages: {pages:?}");
    };
    let pages = walk(&mut client);
    assert_eq!(pages.len(), expected.len().div_ceil(5), "{pages:?}");
    for (i, (_, names)) in pages.iter().enumerate() {
        if i + 1 < pages.len() {
            assert_eq!(names.len(), 5, "page {i} is not full: {pages:?}");
        } else {
            assert!((1..=5).contains(&names.len()), "last page: {pages:?}");
        }
    }
    let union: Vec<String> = pages.iter().flat_map(|(_, names)| names.clone()).collect();
    assert_no_duplicates(&union);
    assert_eq!(union, expected, "the pages together are the whole merged list");

    // Stable: the same walk gives the same pages, and a page asked again is the same page.
    assert_eq!(walk(&mut client), pages);
    let (cursor, names) = &pages[2];
    let again = client.request("tools/list", json!({"cursor": cursor}));
    let again: Vec<&str> =
        again.result()["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(&again, names);

    for bad in [json!("bogus"), json!("mcpgate-zz"), json!("mcpgate-ffff"), json!(5)] {
        let reply = client.request("tools/list", json!({"cursor": bad}));
        assert_eq!(reply.error_code(), -32602, "cursor {bad}: {}", reply.body);
    }
    // Also in a session that never listed anything.
    let mut fresh = gate.open_session();
    let reply = fresh.request("tools/list", json!({"cursor": "bogus"}));
    assert_eq!(reply.error_code(), -32602, "{}", reply.body);
}

#[test]
fn a_server_down_at_start_is_left_out_named_in_errors_and_joins_once_it_is_up() {
    let a = Fixture::start("alpha", &[]);
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        listener.local_addr().unwrap().port()
    };
    let mut c = config(&[("alpha", a.url()), ("down", format!("http://127.0.0.1:{port}/mcp"))]);
    c["open_retry_secs"] = json!(1);
    let gate = Gate::start(&c);

    let mut client = gate.client();
    let before_first_attempt = Instant::now();
    let init = client.initialize();
    assert_eq!(init["capabilities"]["tools"]["listChanged"], true, "a missing server may add tools later: {init}");
    let alpha_tools = prefixed("alpha", &direct_keys(&a, "tools/list", "tools", "name"));
    assert_eq!(client.tool_names(), alpha_tools, "only the live server's tools");

    let status = gate.status();
    let down = &status["servers"]["down"];
    let error = down["last_error"].as_str().unwrap_or_else(|| panic!("no last_error for `down`: {status}"));
    assert!(error.contains("unreachable") && error.contains(&port.to_string()), "last_error: {error:?}");
    assert!(down["last_error_at"].is_u64(), "{down}");
    assert_eq!(down["live_sessions"], 0, "{down}");
    assert!(status["servers"]["alpha"]["last_error"].is_null(), "{status}");

    let reply = client.call_tool("down__echo", json!({"text": "x"}));
    assert_eq!(reply.status, 200, "{reply:?}");
    let message = reply.error_message();
    assert!(reply.error_code() < 0, "{}", reply.body);
    assert!(message.contains("`down`") && message.contains("unreachable"), "the error names the server: {message:?}");

    let d = Fixture::start_on("down", &format!("127.0.0.1:{port}"), &[]);
    let mut polls = 0;
    let joined = wait_until(Duration::from_secs(8), || {
        polls += 1;
        client.tool_names().iter().any(|n| n == "down__echo")
    });
    assert!(joined, "down__echo never listed after {polls} polls; status {}", gate.status());
    assert!(before_first_attempt.elapsed() >= Duration::from_secs(1), "retried before open_retry_secs passed");
    let names = client.tool_names();
    let down_tools = prefixed("down", &direct_keys(&d, "tools/list", "tools", "name"));
    assert_eq!(names, [alpha_tools, down_tools].concat());
    downstream_session(&mut client, "down__whoami", "down");
    assert_eq!(d.count("initialize"), 2, "one reopened downstream session (plus the direct one): {}", d.stats());
    let status = gate.status();
    assert!(status["servers"]["down"]["last_ok_at"].is_u64(), "{status}");
    assert_eq!(status["servers"]["down"]["live_sessions"], 1, "{status}");
}

#[test]
fn progress_notifications_stream_before_the_result() {
    let (a, b) = Fixture::alpha_and_beta();
    let gate = gate_for(&a, &b);
    let mut client = gate.open_session();
    let params = json!({
        "name": "alpha__slow",
        "arguments": {"ms": 300, "steps": 3},
        "_meta": {"progressToken": "tok-7"},
    });
    let reply = client.request("tools/call", params);
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.content_type, "text/event-stream", "{reply:?}");
    assert_eq!(reply.result()["content"][0]["text"], "done", "the result comes last: {reply:?}");
    assert_eq!(reply.events.len(), 3, "{:?}", reply.events);
    let mut last = 0.0;
    for event in &reply.events {
        assert_eq!(event["method"], "notifications/progress", "{event}");
        assert_eq!(event["params"]["progressToken"], "tok-7", "{event}");
        let progress = event["params"]["progress"].as_f64().unwrap_or_else(|| panic!("no progress: {event}"));
        assert!(progress > last, "progress must increase: {:?}", reply.events);
        last = progress;
    }
    // Without a token the same tool answers plain JSON.
    let plain = client.call_tool("beta__slow", json!({"ms": 50, "steps": 2}));
    assert_eq!(plain.content_type, "application/json", "{plain:?}");
    assert!(plain.events.is_empty());
}

#[test]
fn servers_that_always_stream_or_have_no_get_stream_both_work() {
    let a = Fixture::start("alpha", &["--sse"]);
    let b = Fixture::start("beta", &["--no-get-stream"]);
    // The fixture does stream every answer.
    let mut probe = Client::new(&a.url());
    probe.initialize();
    assert_eq!(probe.call_tool("echo", json!({"text": "s"})).content_type, "text/event-stream", "--sse streams");
    assert_eq!(probe.delete(), 200);

    let gate = gate_for(&a, &b);
    let mut clients = [gate.open_session(), gate.open_session()];
    let alpha = prefixed("alpha", &direct_keys(&a, "tools/list", "tools", "name"));
    let beta = prefixed("beta", &direct_keys(&b, "tools/list", "tools", "name"));
    for client in &mut clients {
        assert_eq!(client.tool_names(), [alpha.clone(), beta.clone()].concat());
        assert_eq!(client.tool_text("alpha__echo", json!({"text": "via sse"})), "via sse");
        assert_eq!(client.tool_text("beta__echo", json!({"text": "no stream"})), "no stream");
        assert_eq!(client.tool_text("alpha__add", json!({"a": 2, "b": 3})), "5");
        downstream_session(client, "beta__whoami", "beta");
    }
    // One reader per session for alpha; beta's readers found 405 and ended.
    let readers = || gate.status()["threads"]["readers"].as_u64().unwrap_or(u64::MAX);
    assert!(wait_until(Duration::from_secs(5), || readers() == 2), "threads.readers = {}", readers());
    assert!(wait_until(Duration::from_secs(5), || a.count("get_streams_open") == 2), "{}", a.stats());
    assert_eq!(b.count("get_streams_open"), 0);
    let by_role = &gate.status()["process"]["threads_by_role"];
    assert_eq!(by_role["reader"], 2, "reader threads alive: {by_role}");
    // And they stay ended: a reader retrying beta would outlive a backoff step (0.25 to 0.5 s).
    let changed = wait_until(Duration::from_millis(800), || readers() != 2);
    assert!(!changed, "threads.readers changed to {}", readers());
    assert_eq!(b.count("get_streams_total"), 0, "{}", b.stats());
}

#[test]
fn server_notifications_reach_the_clients_get_stream() {
    let (a, b) = Fixture::alpha_and_beta();
    let gate = gate_for(&a, &b);
    let mut client = gate.open_session();
    let stream = client.open_stream();
    // mcpgate's reader must hold alpha's GET stream, or alpha has nowhere to send.
    assert!(wait_until(Duration::from_secs(5), || a.count("get_streams_open") == 1), "{}", a.stats());

    assert_eq!(client.tool_text("alpha__notify", json!({"kind": "tools"})), "sent");
    let changed = stream.next_with_method("notifications/tools/list_changed", Duration::from_secs(5));
    assert!(changed.is_some(), "no tools/list_changed on the GET stream within 5 s");

    assert_eq!(client.tool_text("alpha__notify", json!({"kind": "message"})), "sent");
    let message = stream
        .next_with_method("notifications/message", Duration::from_secs(5))
        .expect("no notifications/message on the GET stream within 5 s");
    assert_eq!(message["params"]["data"], "hello from alpha", "{message}");
    assert_eq!(message["params"]["level"], "info", "{message}");
    // The list still answers after it was made stale.
    assert_eq!(client.tool_names().len(), 2 * direct_keys(&a, "tools/list", "tools", "name").len());
}

/// A JSON field in `value` that is `null`, by its path: what mcpgate writes
/// must leave an absent optional field out, as the TypeScript SDK's schema
/// refuses `null` where it allows absence (`"instructions": null` stopped
/// every client built on it at `initialize`).
fn nulls(value: &Value, path: &str, found: &mut Vec<String>) {
    match value {
        Value::Null => found.push(path.to_string()),
        Value::Array(items) => items.iter().enumerate().for_each(|(i, v)| nulls(v, &format!("{path}[{i}]"), found)),
        Value::Object(map) => map.iter().for_each(|(k, v)| nulls(v, &format!("{path}.{k}"), found)),
        _ => {}
    }
}

#[test]
fn what_mcpgate_writes_for_servers_without_instructions_has_no_nulls() {
    let (a, b) = (Fixture::start("a", &["--no-instructions"]), Fixture::start("b", &["--no-instructions"]));
    let gate = gate_for(&a, &b);
    let mut client = gate.client();
    let result = client.initialize();
    let mut found = Vec::new();
    nulls(&result, "result", &mut found);
    for (method, field) in [("tools/list", "tools"), ("prompts/list", "prompts"), ("resources/list", "resources")] {
        let reply = client.request(method, json!({}));
        nulls(&reply.body, method, &mut found);
        assert!(reply.result()[field].is_array(), "{method}: {reply:?}");
    }
    assert!(found.is_empty(), "null fields: {found:?} in {result}");
    assert!(result.get("instructions").is_none(), "{result}");
}

/// Clients limit tool names (Claude: `^[a-zA-Z0-9_-]{1,64}$`; OpenAI: no
/// dots; Gemini: 64 at most): what mcpgate exposes fits by construction,
/// shortened with a hash of the full name so it is stable across restarts,
/// while the server still gets its own name. The renamed ones are listed
/// on the status page.
#[test]
fn exposed_tool_names_fit_every_client_and_still_reach_their_tool() {
    let long = "a_server_with_a_rather_long_name_for_its_own_good";
    let fixture = Fixture::start("fx", &["--conformance"]);
    let c = config(&[(long, fixture.url())]);
    let gate = Gate::start(&c);
    let mut client = gate.client();
    client.initialize();
    let names = client.tool_names();
    for name in &names {
        assert!(
            (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "`{name}` breaks ^[a-zA-Z0-9_-]{{1,64}}$"
        );
    }
    assert_no_duplicates(&names);
    assert_eq!(names.len(), direct_keys(&fixture, "tools/list", "tools", "name").len(), "every tool: {names:?}");
    let renamed = gate.status()["renamed_tools"].clone();
    let exposed = |original: &str| {
        renamed.as_array().and_then(|r| r.iter().find(|t| t["original"] == original)).map(|t| t["name"].clone())
    };
    // Too long: the end of the prefix goes first, so the tool's own name shows.
    let add = exposed("json_schema_2020_12_tool").unwrap_or_else(|| panic!("not renamed: {renamed}"));
    let add = add.as_str().unwrap();
    assert!(add.starts_with("a_server_") && add.contains("__json_schema_2020_12_tool-"), "{add}");
    let text = client.call_tool(add, json!({"name": "x"}));
    assert_eq!(text.status, 200, "{text:?}");
    assert!(text.body.get("result").is_some(), "the server got its own name back: {:?}", text.body);
    assert!(exposed("echo").is_none(), "a name that fits is kept: {renamed}");
    // The same names after a restart: they are a function of the names, nothing else.
    let again = Gate::start(&c);
    let mut other = again.client();
    other.initialize();
    assert_eq!(other.tool_names(), names);
}

/// A server's `tools.allow` and `tools.deny` (globs over its own names)
/// decide what is listed and callable; a hidden tool's call is an error that
/// names it. Prompts and resources take the same filters.
#[test]
fn allow_and_deny_lists_decide_what_a_server_exposes() {
    let fixture = Fixture::start("fx", &[]);
    let mut c = config(&[("fx", fixture.url())]);
    c["mcpServers"]["fx"]["tools"] = json!({"allow": ["ec*", "add", "sl?w", "big"], "deny": ["big"]});
    c["mcpServers"]["fx"]["prompts"] = json!({"deny": ["*"]});
    let gate = Gate::start(&c);
    let mut client = gate.client();
    client.initialize();
    let mut names = client.tool_names();
    names.sort();
    assert_eq!(names, ["fx__add", "fx__echo", "fx__slow"]);
    assert_eq!(client.tool_text("fx__echo", json!({"text": "ok"})), "ok");
    for hidden in ["fx__big", "fx__whoami"] {
        let reply = client.call_tool(hidden, json!({}));
        let message = reply.error_message();
        assert_eq!(reply.error_code(), -32602, "{hidden}: {reply:?}");
        assert!(message.contains(hidden) && message.contains("mcpServers.fx.tools"), "{hidden}: {message}");
    }
    let prompts = client.list_all("prompts/list", "prompts");
    assert!(prompts.is_empty(), "{prompts:?}");
    assert!(fixture.count("requests") > 0);
}

/// JSON-RPC ids of outstanding requests are unique within a session: a
/// second request with the id of one still in flight is refused with an
/// error naming the id, and the first runs on, its cancel reaching it.
/// Before, the routing kept the newer: a cancel of that id ended the later
/// call and the earlier ran on.
#[test]
fn a_second_request_with_the_id_of_one_in_flight_is_refused_naming_the_id() {
    let fixture = Fixture::start("fx", &[]);
    let gate = Gate::start(&config(&[("fx", fixture.url())]));
    let mut client = gate.client();
    client.initialize();
    let call = |tool: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": "dup-7", "method": "tools/call",
               "params": {"name": tool, "arguments": arguments}})
        .to_string()
    };
    let first = {
        let (client, body) = (client.same_session(), call("fx__cancellable", json!({"ms": 20_000})));
        std::thread::spawn(move || {
            let started = Instant::now();
            let reply = client.post(body.as_bytes(), &[]);
            (reply, started.elapsed())
        })
    };
    assert!(
        wait_until(Duration::from_secs(10), || fixture.received("tools/call") == 1
            && fixture.count("requests_running") == 1),
        "{}",
        fixture.stats()
    );
    let second = client.post(call("fx__echo", json!({"text": "second"})).as_bytes(), &[]);
    assert_eq!(second.body["error"]["code"], -32600, "{second:?}");
    let message = second.error_message();
    assert!(message.contains("\"dup-7\"") && message.contains("in flight"), "{message}");
    // The cancel of that id reaches the first call, not a later one.
    assert_eq!(client.notify("notifications/cancelled", json!({"requestId": "dup-7"})), 202);
    let (reply, took) = first.join().unwrap();
    assert!(took < Duration::from_secs(15), "the first call was cancelled, not run for 20 s: {took:?} {reply:?}");
    assert!(reply.body.get("result").is_none(), "a cancelled call gets no response: {reply:?}");
    assert!(wait_until(Duration::from_secs(10), || fixture.count("requests_running") == 0), "{}", fixture.stats());
    // The id is free again once its request ended.
    let again = client.post(call("fx__echo", json!({"text": "again"})).as_bytes(), &[]);
    assert_eq!(again.body["result"]["content"][0]["text"], "again", "{again:?}");
}
