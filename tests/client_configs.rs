//! The config files clients already have, given to `--config` whole: one
//! test per file a new user tried (issue 39), each taken from
//! tests/data/clients/ (written after each client's documented format),
//! accepted, or refused with an error that names the cause. And `mcpgate
//! import`, which writes such a file as mcpgate's own.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use support::{StdioGate, TempDir, named_by_env_file};

/// A file of tests/data/clients/.
fn data(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/clients").join(file)
}

/// A directory with the programs the client files start (`npx`, `uvx`, `node`) as stubs, as
/// the machine that runs them would have them: `--check` looks for each on `PATH`. It sits
/// in cargo's scratch directory for tests, not in /tmp, where a run would leave it; each
/// stub is written whole and renamed into place, so runs at once never see half of one.
fn stub_programs() -> &'static Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("client-configs-bin");
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["npx", "uvx", "node"] {
            let written = dir.join(format!(".{name}.{}", std::process::id()));
            std::fs::write(&written, "#!/bin/sh\nexit 0\n").unwrap();
            std::fs::set_permissions(&written, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::rename(&written, dir.join(name)).unwrap();
        }
        dir
    })
}

/// mcpgate with `args`, with only `vars` of the variables the files name set.
fn mcpgate(args: &[&str], file: &Path, vars: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcpgate"));
    command.args(args).arg(file);
    let path = std::env::var("PATH").unwrap_or_default();
    command.env("PATH", format!("{}:{path}", stub_programs().display()));
    for var in ["GITHUB_TOKEN", "PERPLEXITY_KEY", "CONTEXT7_API_KEY", "FIGMA_TOKEN"] {
        command.env_remove(var);
    }
    command.envs(vars.iter().copied()).output().expect("run mcpgate")
}

/// `mcpgate --check --config FILE`: what it printed, once it accepted the file.
fn accepted(file: &str, vars: &[(&str, &str)]) -> String {
    let out = mcpgate(&["--check", "--config"], &data(file), vars);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{file} is refused: {said}");
    said
}

/// `mcpgate --check --config FILE`: why it refused the file (exit code 2).
fn refused(file: &str, vars: &[(&str, &str)]) -> String {
    let out = mcpgate(&["--check", "--config"], &data(file), vars);
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{file}: {said}{}", String::from_utf8_lossy(&out.stdout));
    said
}

/// `mcpgate import FILE`: the JSON it printed, and its notes.
fn imported(file: &str, vars: &[(&str, &str)]) -> (Value, String) {
    let out = mcpgate(&["import"], &data(file), vars);
    let notes = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{file}: {notes}");
    (serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{file}: {e}")), notes)
}

#[test]
fn a_claude_desktop_file_is_read_whole_and_its_own_settings_are_named_in_one_line() {
    let said = accepted("claude-desktop/claude_desktop_config.json", &[]);
    assert!(said.contains("valid, 4 server(s)"), "{said}");
    let line =
        said.lines().find(|l| l.contains("ignored")).unwrap_or_else(|| panic!("no line of what was ignored: {said}"));
    assert!(
        line.ends_with("ignored the client's own settings globalShortcut, preferences, isUsingBuiltInNodeForMcp"),
        "{line}"
    );
}

#[test]
fn a_vs_code_file_reads_its_servers_and_asks_for_each_input_in_the_environment() {
    let file = "vscode/.vscode/mcp.json";
    let said = refused(file, &[]);
    assert!(
        said.contains("mcpServers.github.headers.Authorization: `${input:github_token}` is a value VS Code asks the user for (\"GitHub Personal Access Token\")")
            && said.contains("set `GITHUB_TOKEN` in mcpgate's environment (`GITHUB_TOKEN=... mcpgate --config FILE`"),
        "{said}"
    );
    let said = refused(file, &[("GITHUB_TOKEN", "ghp_0123456789")]);
    assert!(said.contains("`${input:perplexity-key}`") && said.contains("set `PERPLEXITY_KEY`"), "{said}");
    let said = accepted(file, &[("GITHUB_TOKEN", "ghp_0123456789"), ("PERPLEXITY_KEY", "pplx-0123456789")]);
    assert!(said.contains("valid, 5 server(s)"), "{said}");
    assert!(said.contains("ignored the client's own settings inputs, mcpServers.git.dev"), "{said}");
}

#[test]
fn comments_and_trailing_commas_are_read_as_vs_code_reads_them() {
    let text = std::fs::read_to_string(data("vscode/.vscode/mcp.json")).unwrap();
    assert!(text.lines().nth(1).is_some_and(|l| l.trim_start().starts_with("//")), "the file has a comment on line 2");
    assert!(text.contains("},\n  },\n}"), "and trailing commas");
    accepted("vscode/.vscode/mcp.json", &[("GITHUB_TOKEN", "ghp_0123456789"), ("PERPLEXITY_KEY", "pplx-0123456789")]);
    // What is still wrong is named where it is in the file, comments and all.
    let dir = TempDir::new();
    let broken = dir.0.join("mcp.json");
    std::fs::write(&broken, "{\n  // a comment\n  \"servers\": {\n    \"a\": {\"url\": \"http://127.0.0.1:9/mcp\"}\n    \"b\": {}\n  }\n}\n").unwrap();
    let out = mcpgate(&["--check", "--config"], &broken, &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("at line 5 column 5"), "{out:?}");
}

#[test]
fn env_prefixed_variables_are_read_as_cursor_and_windsurf_write_them() {
    let said = refused("cursor/mcp.json", &[]);
    assert!(
        said.contains(
            "mcpServers.github.env.GITHUB_PERSONAL_ACCESS_TOKEN: environment variable `GITHUB_TOKEN` is not set"
        ),
        "{said}"
    );
    let said = accepted("cursor/mcp.json", &[("GITHUB_TOKEN", "ghp_0123456789"), ("CONTEXT7_API_KEY", "c7-0123")]);
    assert!(said.contains("valid, 3 server(s)"), "{said}");
}

#[test]
fn a_cursor_env_file_is_read_from_the_project_and_its_auth_left_to_cursor() {
    let said = accepted("cursor-project/.cursor/mcp.json", &[]);
    let env = data("cursor-project/.env");
    assert!(said.contains(&format!("server `postgres` gets 2 variable(s) from {}", env.display())), "{said}");
    assert!(said.contains("ignored the client's own settings mcpServers.linear.auth"), "{said}");
}

#[test]
fn windsurfs_server_url_is_the_servers_url_and_a_disabled_server_is_left_out() {
    let vars = [("GITHUB_TOKEN", "ghp_0123456789"), ("FIGMA_TOKEN", "figd_0123")];
    let said = accepted("windsurf/mcp_config.json", &vars);
    assert!(said.contains("valid, 2 server(s)") && said.contains("left out the disabled server(s) figma"), "{said}");
    let (config, _) = imported("windsurf/mcp_config.json", &vars);
    assert_eq!(config["mcpServers"]["r2"], json!({"url": "https://docs.mcp.cloudflare.com/mcp"}));
}

#[test]
fn a_cline_file_loses_its_disabled_server_and_approvals_and_keeps_its_marketplace_servers() {
    let said = accepted("cline/cline_mcp_settings.json", &[]);
    assert!(said.contains("valid, 3 server(s)"), "{said}");
    for part in [
        "left out the disabled server(s) github.com/modelcontextprotocol/servers/tree/main/src/puppeteer",
        "mcpServers.weather.autoApprove",
        "mcpServers.github.com/upstash/context7-mcp.timeout",
        "named `github.com/modelcontextprotocol/servers/tree/main/src/github` as `github`",
    ] {
        assert!(said.contains(part), "`{part}` in {said}");
    }
}

#[test]
fn roo_codes_disabled_tools_are_denied_and_its_approvals_left_to_it() {
    let said = accepted("roo/.roo/mcp.json", &[]);
    assert!(said.contains("ignored the client's own settings mcpServers.filesystem.alwaysAllow"), "{said}");
    assert!(said.contains("left out the disabled server(s) dev-server"), "{said}");
    let (config, _) = imported("roo/.roo/mcp.json", &[]);
    assert_eq!(config["mcpServers"]["filesystem"]["tools"], json!({"deny": ["write_file", "move_file"]}));
    assert_eq!(config["mcpServers"]["notion"]["type"], "streamable-http");
}

#[test]
fn a_misspelled_key_is_named_with_the_key_it_is_nearest() {
    for (file, error) in [
        ("typos/comand.json", "mcpServers.time.comand: unknown key; did you mean `command`?"),
        ("typos/mcpServer.json", "mcpServer: unknown key; did you mean `mcpServers`?"),
        ("typos/arg.json", "mcpServers.time.arg: unknown key; did you mean `args`?"),
        (
            "typos/sesion_idle_timeout_secs.json",
            "sesion_idle_timeout_secs: unknown key; did you mean `session_idle_timeout_secs`?",
        ),
    ] {
        let said = refused(file, &[]);
        assert!(said.trim_end().ends_with(&format!("{}: {error}", data(file).display())), "{file}: {said}");
    }
}

#[test]
fn import_prints_a_config_that_loads_with_the_servers_in_the_files_order() {
    let (config, notes) = imported("vscode/.vscode/mcp.json", &[]);
    let names: Vec<&String> = config["mcpServers"].as_object().unwrap().keys().collect();
    assert_eq!(names.len(), 5, "{config}");
    let servers = &config["mcpServers"];
    assert_eq!(servers["github"]["headers"]["Authorization"], "Bearer ${GITHUB_TOKEN}");
    assert_eq!(servers["git"]["envFile"], data("vscode/.env").to_string_lossy().as_ref());
    assert!(servers["git"].get("dev").is_none());
    assert!(notes.contains("VS Code's input is read from `PERPLEXITY_KEY`"), "{notes}");
    let out = mcpgate(&["import"], &data("vscode/.vscode/mcp.json"), &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    let at = |name: &str| text.find(&format!("\"{name}\": {{")).unwrap_or_else(|| panic!("{name} in {text}"));
    assert!(at("github") < at("context7") && at("context7") < at("perplexity") && at("perplexity") < at("git"));
    let dir = TempDir::new();
    let file = dir.0.join("mcpgate.json");
    std::fs::write(&file, text.as_bytes()).unwrap();
    let out = mcpgate(&["--check", "--config"], &file, &[("GITHUB_TOKEN", "g-0123"), ("PERPLEXITY_KEY", "p-0123")]);
    assert!(out.status.success(), "{out:?}");
}

/// The variables of an `envFile` reach the server's process, beneath its `env`.
#[test]
fn a_stdio_server_gets_the_variables_of_its_env_file() {
    let dir = TempDir::new();
    let vars = "# the fixture's name\nSERVER_NAME=from-the-env-file\nSUFFIX=-file\n";
    let mut server = named_by_env_file(&dir.0.join("fixture.env"), vars);
    server["env"] = json!({"SUFFIX": "-env"});
    let config = json!({"listen": "127.0.0.1:0", "mcpServers": {"fx": server}});
    let gate = StdioGate::start(&config);
    let mut client = gate.open_session();
    let me = client.tool_text("fx__whoami", json!({}));
    assert!(me.starts_with("from-the-env-file-env:"), "{me}");
}
