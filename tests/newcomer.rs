//! A newcomer's first hour (issue 39): a config of six servers, three of them broken the ways
//! new users break them (a command that is not installed, a URL where nothing listens, a server
//! that exits at start with the reason on its stderr). `--check` names the missing command;
//! `--check --start` says per server what works and why the rest does not; a running mcpgate
//! says the same on its status page; and nothing `--check --start` started is left behind.

mod support;

use std::process::{Command, Output};

use serde_json::{Value, json};
use support::{Fixture, Gate, TempDir, all_processes, fixture_bin, stdio_args, wait_until};

/// A port on 127.0.0.1 where nothing listens (bound, then let go).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The six servers: three that work, three broken; `missing` adds the command that is not
/// installed. The stdio fixtures are named after `marker` (their command lines hold it).
fn servers(http: &Fixture, marker: &str, missing: bool) -> Value {
    let exits = "echo 'Error: None of the specified directories are accessible' >&2; exit 1";
    let mut servers = json!({
        "files": {"command": fixture_bin(), "args": stdio_args(&format!("files-{marker}"), &[])},
        "memory": {"command": fixture_bin(), "args": stdio_args(&format!("memory-{marker}"), &[])},
        "web": {"url": http.url()},
        "offline": {"url": format!("http://127.0.0.1:{}/mcp", closed_port())},
        "broken": {"command": "/bin/sh", "args": ["-c", exits]},
    });
    if missing {
        servers["typo"] = json!({"command": "npxx", "args": ["-y", "@modelcontextprotocol/server-memory"]});
    }
    servers
}

fn config(servers: Value) -> Value {
    json!({"listen": "127.0.0.1:0", "connect_timeout_secs": 2, "request_timeout_secs": 10, "mcpServers": servers})
}

fn mcpgate(args: &[&str], config: &Value, dir: &TempDir) -> Output {
    let path = dir.write_config(config);
    Command::new(env!("CARGO_BIN_EXE_mcpgate")).args(args).arg("--config").arg(path).output().expect("run mcpgate")
}

/// Processes whose command line holds `marker` (each server's fixture gets it as an argument).
fn marked(marker: &str) -> Vec<u32> {
    all_processes()
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{}/cmdline", p.pid))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .map(|p| p.pid)
        .collect()
}

#[test]
fn check_names_a_command_that_is_not_installed() {
    let http = Fixture::start("web", &[]);
    let dir = TempDir::new();
    let out = mcpgate(&["--check"], &config(servers(&http, "typo", true)), &dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("mcpServers.typo.command: `npxx` is not found on PATH ("), "{stderr}");
}

#[test]
fn check_start_says_per_server_what_works_and_why_the_rest_does_not() {
    let http = Fixture::start("web", &[]);
    let dir = TempDir::new();
    let marker = format!("checked{}", std::process::id());
    let out = mcpgate(&["--check", "--start"], &config(servers(&http, &marker, false)), &dir);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("{name}:\n{stdout}"))
    };
    for ok in ["files", "memory", "web"] {
        assert!(line(ok).trim_start().starts_with("ok ") && line(ok).contains(" tool(s), in "), "{}", line(ok));
    }
    assert!(
        line("offline").contains("FAILED") && line("offline").contains("Connection refused"),
        "{}",
        line("offline")
    );
    let broken = line("broken");
    assert!(
        broken.contains("FAILED") && broken.contains("None of the specified directories are accessible"),
        "{broken}"
    );
    assert!(
        stderr.contains("3 of 5 server(s) do not work") || stderr.contains("2 of 5 server(s) do not work"),
        "{stderr}"
    );
    let left = marked(&marker);
    assert!(wait_until(std::time::Duration::from_secs(3), || marked(&marker).is_empty()), "left running: {left:?}");
}

#[test]
fn a_running_mcpgate_says_why_each_broken_server_does_not_work() {
    let http = Fixture::start("web", &[]);
    let gate = Gate::start(&config(servers(&http, "running", true)));
    let mut client = gate.open_session();
    let tools = client.tool_names();
    assert!(tools.contains(&"files__echo".to_string()) && tools.contains(&"web__echo".to_string()), "{tools:?}");
    let _ = client.call_tool("typo__anything", json!({}));
    let status = gate.status();
    let error = |name: &str| status["servers"][name]["last_error"].as_str().unwrap_or_default().to_string();
    assert!(error("typo").contains("cannot start `npxx`"), "{}", status["servers"]["typo"]);
    assert!(error("offline").contains("Connection refused"), "{}", status["servers"]["offline"]);
    assert!(error("broken").contains("None of the specified directories are accessible"), "{}", error("broken"));
    for name in ["typo", "offline", "broken"] {
        assert_eq!(status["servers"][name]["state"], "down", "{name}: {}", status["servers"][name]);
    }
    assert_eq!(status["health"]["healthy"], false, "{}", status["health"]);
}
