//! `mcpgate import FILE`: a client's config file written as mcpgate's own,
//! in plain JSON: `mcpServers` for VS Code's `servers`, `url` for
//! Windsurf's `serverUrl`, `${NAME}` for `${env:NAME}` and for VS Code's
//! `${input:ID}` (the variable its value is then read from), the editor's
//! `${workspaceFolder}` and `${userHome}` filled in, an `envFile` as an
//! absolute path, without the disabled servers and the client's own
//! settings, and the servers in the file's order. What it left out or
//! needs goes to stderr as notes, and the result is checked as `--check`
//! would check it.

use std::cell::RefCell;
use std::path::Path;

use serde_json::{Map, Value};

use super::clients::Mode;
use super::{Config, ConfigError, Invalid, read_json, server_order};

/// The configuration as mcpgate's JSON, and what to tell the user about it.
pub struct Imported {
    pub json: String,
    pub notes: Vec<String>,
}

/// Converts the file at `path`; `env` says which variables are set here.
pub fn import(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Imported, ConfigError> {
    let refused = |invalid| ConfigError { file: path.to_path_buf(), invalid };
    let text = std::fs::read_to_string(path).map_err(|e| refused(Invalid::new("", format!("cannot read: {e}"))))?;
    let (mut root, adapted, text) = read_json(&text, Some(path), env, Mode::Import).map_err(refused)?;
    let order = adapted.order(server_order(&text).map_err(refused)?);
    let mut servers = match root.remove("mcpServers") {
        Some(Value::Object(servers)) => servers,
        _ => Map::new(),
    };
    let servers: Vec<(String, Value)> =
        order.into_iter().filter_map(|name| servers.remove(&name).map(|entry| (name, entry))).collect();
    let json = render(&root, &servers);

    let mut notes: Vec<String> = adapted.summary().into_iter().collect();
    for (var, asks) in &adapted.inputs {
        let asks = if asks.is_empty() { String::new() } else { format!(" (VS Code asks: \"{asks}\")") };
        notes.push(format!("VS Code's input is read from `{var}`: set it where mcpgate runs{asks}"));
    }
    // Checked as `--check` would, with the variables that are not set here standing in as `0`.
    let unset = RefCell::new(Vec::<String>::new());
    let check_env = |name: &str| {
        env(name).or_else(|| {
            unset.borrow_mut().push(name.to_string());
            Some("0".to_string())
        })
    };
    let checked = Config::parse_file(&json, None, &check_env);
    let mut unset = unset.into_inner();
    unset.sort();
    unset.dedup();
    unset.retain(|var| !adapted.inputs.iter().any(|(v, _)| v == var));
    if !unset.is_empty() {
        notes.push(format!("not set here, needed where mcpgate runs: {}", unset.join(", ")));
    }
    checked.map_err(|mut invalid| {
        if !unset.is_empty() {
            invalid.problem.push_str(&format!(" (checked with {} as `0`)", unset.join(", ")));
        }
        refused(invalid)
    })?;
    Ok(Imported { json, notes })
}

/// The top-level keys, then the servers in their order, as indented JSON.
fn render(root: &Map<String, Value>, servers: &[(String, Value)]) -> String {
    let pretty = |value: &Value, indent: &str| {
        serde_json::to_string_pretty(value).unwrap_or_default().replace('\n', &format!("\n{indent}"))
    };
    let quoted = |key: &str| Value::String(key.to_string()).to_string();
    let mut items: Vec<String> = root.iter().map(|(k, v)| format!("  {}: {}", quoted(k), pretty(v, "  "))).collect();
    let entries: Vec<String> =
        servers.iter().map(|(name, entry)| format!("    {}: {}", quoted(name), pretty(entry, "    "))).collect();
    items.push(if entries.is_empty() {
        "  \"mcpServers\": {}".to_string()
    } else {
        format!("  \"mcpServers\": {{\n{}\n  }}", entries.join(",\n"))
    });
    format!("{{\n{}\n}}\n", items.join(",\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vs_code_file_becomes_mcpgates_json_in_the_files_order() {
        let dir = std::env::temp_dir().join(format!("mcpgate-import-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(".vscode")).unwrap();
        let file = dir.join(".vscode/mcp.json");
        std::fs::write(
            &file,
            r#"{
              // VS Code's own
              "inputs": [{"type": "promptString", "id": "api-key", "description": "API key", "password": true}],
              "servers": {
                "zeta": {"type": "http", "url": "https://zeta.example.com/mcp",
                         "headers": {"Authorization": "Bearer ${input:api-key}"}},
                "alpha": {"type": "stdio", "command": "uvx", "args": ["mcp-server-git", "--repository", "${workspaceFolder}"],
                          "env": {"GITHUB_TOKEN": "${env:GITHUB_TOKEN}"}, "dev": {"watch": "**/*.py"}},
                "off": {"command": "x", "disabled": true},
              },
            }"#,
        )
        .unwrap();
        let imported = import(&file, &|name| (name == "GITHUB_TOKEN").then(|| "ghp_x".to_string())).unwrap();
        let value: Value = serde_json::from_str(&imported.json).unwrap();
        assert_eq!(value["mcpServers"]["zeta"]["headers"]["Authorization"], "Bearer ${API_KEY}");
        assert_eq!(value["mcpServers"]["alpha"]["env"]["GITHUB_TOKEN"], "${GITHUB_TOKEN}");
        assert_eq!(value["mcpServers"]["alpha"]["args"][2], dir.to_string_lossy().as_ref());
        assert!(value["mcpServers"].get("off").is_none() && value["mcpServers"]["alpha"].get("dev").is_none());
        assert!(
            imported.json.find("\"zeta\"") < imported.json.find("\"alpha\""),
            "the file's order: {}",
            imported.json
        );
        let notes = imported.notes.join("\n");
        assert!(notes.contains("VS Code's input is read from `API_KEY`") && notes.contains("\"API key\""), "{notes}");
        assert!(notes.contains("left out the disabled server(s) off"), "{notes}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
