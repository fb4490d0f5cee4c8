//! Reload on save (`watch_config`, on by default): a saved configuration
//! file, or a server's saved `envFile`, is reloaded as SIGHUP reloads it,
//! with no signal; a broken save keeps the running configuration and says
//! why, once; `"watch_config": false` leaves a save alone until SIGHUP.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Fixture, Gate, StdioGate, TempDir, config_for, named_by_env_file, wait_until};

/// Long enough for a save to be seen on a loaded host (mcpgate looks every second).
const WAIT: Duration = Duration::from_secs(20);

/// [`config_for`] these fixtures, watched as by default (without `watch_config`).
fn watched(fixtures: &[&Fixture]) -> Value {
    let mut c = config_for(fixtures);
    c.as_object_mut().expect("an object").remove("watch_config");
    c
}

fn save(gate: &Gate, text: &str) {
    std::fs::write(gate.dir.0.join("mcpgate.json"), text).unwrap();
}

fn reload_error(gate: &Gate) -> String {
    gate.status()["reload"]["error"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_saved_config_is_reloaded_and_its_new_server_appears() {
    let (a, b) = Fixture::alpha_and_beta();
    let gate = Gate::start(&watched(&[&a]));
    let mut client = gate.open_session();
    assert!(!client.tool_names().contains(&"beta__echo".to_string()));

    // As a user would save it: VS Code's key, with a comment.
    let mut c = watched(&[&a, &b]);
    let servers = c.as_object_mut().unwrap().remove("mcpServers").unwrap();
    c["servers"] = servers;
    save(&gate, &format!("// beta added\n{c:#}"));
    assert!(
        wait_until(WAIT, || client.tool_names().contains(&"beta__echo".to_string())),
        "beta never appeared: {}",
        gate.stderr()
    );
    assert_eq!(client.tool_text("beta__echo", json!({"text": "hi"})), "hi");
    let log = gate.stderr();
    assert!(log.contains("changed on disk: reloading"), "{log}");
    assert_eq!(log.matches("configuration reloaded").count(), 1, "one save, one reload: {log}");
    assert_eq!(gate.status()["reload"]["changed_servers"], json!(["beta (new)"]));
}

#[test]
fn a_broken_save_keeps_the_running_config_and_says_why_once() {
    let (a, b) = Fixture::alpha_and_beta();
    let good = watched(&[&a]);
    let gate = Gate::start_checked(&good);
    let mut client = gate.open_session();

    save(&gate, "{ \"mcpServers\": { \"alpha\": ");
    assert!(wait_until(WAIT, || !reload_error(&gate).is_empty()), "{}", gate.status()["reload"]);
    let error = reload_error(&gate);
    assert!(error.contains("mcpgate.json: not valid JSON"), "{error}");
    let log = gate.stderr_once(|log| log.contains("reload refused"));
    assert!(log.contains("configuration reload refused, the previous configuration stays in force"), "{log}");
    assert_eq!(client.tool_text("alpha__echo", json!({"text": "still here"})), "still here");

    // A misspelled key: named, with the key meant.
    let mut typo = watched(&[&a, &b]);
    typo["sesion_idle_timeout_secs"] = json!(60);
    save(&gate, &typo.to_string());
    assert!(wait_until(WAIT, || reload_error(&gate).contains("sesion_idle")), "{}", gate.status()["reload"]);
    assert!(reload_error(&gate).contains("did you mean `session_idle_timeout_secs`?"), "{}", reload_error(&gate));
    // Refused once, not at every look.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(gate.stderr().matches("reload refused").count(), 2, "{}", gate.stderr());
    assert!(!client.tool_names().contains(&"beta__echo".to_string()), "the refused file's server is not there");

    save(&gate, &watched(&[&a, &b]).to_string());
    assert!(
        wait_until(WAIT, || client.tool_names().contains(&"beta__echo".to_string())),
        "{}",
        gate.status()["reload"]
    );
    assert_eq!(gate.status()["reload"]["error"], Value::Null, "the good save cleared it");
}

#[test]
fn with_watch_config_false_a_save_waits_for_sighup() {
    let (a, b) = Fixture::alpha_and_beta();
    let mut c = watched(&[&a]);
    c["watch_config"] = json!(false);
    let gate = Gate::start_checked(&c);
    let mut client = gate.open_session();
    let mut both = watched(&[&a, &b]);
    both["watch_config"] = json!(false);
    save(&gate, &both.to_string());
    // Three looks' worth: a watch would have reloaded.
    std::thread::sleep(Duration::from_secs(3));
    assert!(!client.tool_names().contains(&"beta__echo".to_string()), "{}", gate.stderr());
    assert!(!gate.stderr().contains("configuration reloaded"), "{}", gate.stderr());
    support::signal(gate.pid(), "HUP");
    assert!(wait_until(WAIT, || client.tool_names().contains(&"beta__echo".to_string())), "{}", gate.stderr());
}

#[test]
fn a_saved_env_file_restarts_its_server_with_the_new_values() {
    let dir = TempDir::new();
    let env_file = dir.0.join("fixture.env");
    let server = named_by_env_file(&env_file, "SERVER_NAME=first\n");
    let gate = StdioGate::start(&json!({"listen": "127.0.0.1:0", "mcpServers": {"fx": server}}));
    let mut client = gate.open_session();
    assert!(client.tool_text("fx__whoami", json!({})).starts_with("first:"));

    std::fs::write(&env_file, "SERVER_NAME=second-and-longer\n").unwrap();
    let renamed = wait_until(WAIT, || {
        let reply = client.call_tool("fx__whoami", json!({}));
        reply.body["result"]["content"][0]["text"].as_str().is_some_and(|t| t.starts_with("second-and-longer:"))
    });
    assert!(renamed, "{}", gate.stderr());
    assert_eq!(gate.status()["reload"]["changed_servers"], json!(["fx"]));
}
