//! The config files clients already have, read as they are: Claude
//! Desktop's `claude_desktop_config.json`, Cursor's `mcp.json`, VS Code's
//! `.vscode/mcp.json`, Windsurf's `mcp_config.json`, Cline's and Roo Code's
//! MCP settings. Before mcpgate reads its own keys, [`adapt`] turns what
//! each client writes its own way into mcpgate's keys (VS Code's `servers`,
//! Windsurf's `serverUrl`, Roo Code's `disabledTools`), takes out what only
//! the client uses (Claude Desktop's `globalShortcut`, Cline's
//! `autoApprove`), leaves out servers marked `disabled`, reads each
//! server's `envFile`, and fills in the variables an editor fills in
//! (`${workspaceFolder}`, `${userHome}`). What it did is kept in [`Notes`],
//! which mcpgate logs in one line.
//!
//! The formats, as each client documents them: VS Code's MCP configuration
//! reference (`servers`, `inputs`, `type` `stdio`/`http`/`sse`, `envFile`,
//! `dev`, `sandboxEnabled`, `${input:ID}`), Cursor's (`mcpServers`,
//! `envFile`, `auth`, `${env:NAME}`, `${userHome}`, `${workspaceFolder}`),
//! Windsurf's (`serverUrl` beside `url`, `${env:NAME}`), Cline's settings
//! schema (`disabled`, `autoApprove`, `timeout`, `type` `streamableHttp`,
//! the older `transportType`) and Roo Code's (`alwaysAllow`,
//! `disabledTools`, `watchPaths`, `type` `streamable-http`). Examples of
//! each, as mcpgate takes or refuses them, are in tests/data/clients/.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

pub use super::client_keys::reference_markdown;
pub(crate) use super::client_keys::{IN_SERVER, TOP_LEVEL};
use super::env_file;
use super::invalid::{Invalid, kind};
use super::keys::valid_name;
use super::suggest;
use super::vars::expand;
use super::vars::{input_unset, input_variable};

/// What [`adapt`] did to a file, for the log and for `mcpgate import`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Notes {
    /// The client's own settings left aside, as key paths (`globalShortcut`,
    /// `mcpServers.gh.autoApprove`).
    pub(crate) ignored: Vec<String>,
    /// Servers with `"disabled": true`: left out.
    pub(crate) disabled: Vec<String>,
    /// Server names mcpgate cannot use as they are (`github.com/org/repo`,
    /// `My Server`), and the ones it gives them.
    pub(crate) renamed: Vec<(String, String)>,
    /// The `envFile` of each stdio server that has one.
    pub(crate) env_files: Vec<EnvFile>,
    /// `mcpgate import`: the environment variables that stand for VS Code's
    /// inputs, with what VS Code asks for them.
    pub(crate) inputs: Vec<(String, String)>,
}

/// A stdio server's `envFile`, as it was read.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct EnvFile {
    /// The server's name (after any renaming).
    pub(crate) server: String,
    pub(crate) path: PathBuf,
    pub(super) vars: Vec<(String, String)>,
}

impl fmt::Debug for EnvFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.vars.iter().map(|(n, _)| n.as_str()).collect();
        write!(f, "EnvFile({}, {}, {names:?})", self.server, self.path.display())
    }
}

impl Notes {
    /// What to log, in one line; `None` when the file was mcpgate's own as it is.
    pub fn summary(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.ignored.is_empty() {
            parts.push(format!("ignored the client's own settings {}", self.ignored.join(", ")));
        }
        if !self.disabled.is_empty() {
            parts.push(format!("left out the disabled server(s) {}", self.disabled.join(", ")));
        }
        if !self.renamed.is_empty() {
            let renamed: Vec<String> = self.renamed.iter().map(|(from, to)| format!("`{from}` as `{to}`")).collect();
            parts.push(format!("named {}", renamed.join(", ")));
        }
        for file in &self.env_files {
            parts.push(format!(
                "server `{}` gets {} variable(s) from {}",
                file.server,
                file.vars.len(),
                file.path.display()
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// The server names of the file, in its order, as mcpgate names them:
    /// renamed, and without the disabled ones.
    pub(crate) fn order(&self, names: Vec<String>) -> Vec<String> {
        names
            .into_iter()
            .filter(|n| !self.disabled.contains(n))
            .map(|n| self.renamed.iter().find(|(from, _)| *from == n).map_or(n, |(_, to)| to.clone()))
            .collect()
    }

    /// The files besides the config file that a change to should reload it.
    pub(crate) fn files(&self) -> impl Iterator<Item = &Path> {
        self.env_files.iter().map(|f| f.path.as_path())
    }
}

/// Whether the file runs mcpgate, or is converted by `mcpgate import`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// `${input:ID}` must be set in the environment; each `envFile` is read.
    Run,
    /// `${input:ID}` and `${env:NAME}` are written as mcpgate's `${NAME}`;
    /// an `envFile` is kept, as an absolute path.
    Import,
}

/// Where the file is, for the variables an editor fills in.
struct Place<'a> {
    /// The folder that holds the file's `.vscode/`, `.cursor/` or `.roo/`.
    workspace: Option<PathBuf>,
    /// What a relative `envFile` is relative to.
    base: PathBuf,
    env: &'a dyn Fn(&str) -> Option<String>,
    mode: Mode,
    /// VS Code's `inputs`: id and description.
    inputs: Vec<(String, String)>,
}

/// Turns what clients write their own way in `root` into mcpgate's keys,
/// as the [module](self) says; `file` is where it was read from.
pub(super) fn adapt(
    root: &mut Map<String, Value>,
    file: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
    mode: Mode,
) -> Result<Notes, Invalid> {
    let mut notes = Notes::default();
    match (root.contains_key("mcpServers"), root.remove("servers")) {
        (true, Some(_)) => return Err(Invalid::new("servers", "give `mcpServers` or VS Code's `servers`, not both")),
        (false, Some(servers)) => {
            root.insert("mcpServers".into(), servers);
        }
        (false, None) => {
            // No servers at all: a misspelling of their key is the likely cause, named before the rest.
            let known = suggest::known_at("");
            let misspelled = root
                .keys()
                .find(|k| !known.contains(&k.as_str()) && suggest::nearest(k, ["mcpServers", "servers"]).is_some());
            if let Some(key) = misspelled {
                return Err(Invalid::new(key.clone(), suggest::unknown_key(key, "")));
            }
        }
        (true, None) => {}
    }
    let mut place = place(file, env, mode);
    place.inputs = inputs(root.get("inputs"));
    for key in TOP_LEVEL.iter().map(|k| k.key).filter(|k| *k != "servers") {
        if root.remove(key).is_some() {
            notes.ignored.push(key.to_string());
        }
    }
    let Some(Value::Object(servers)) = root.get_mut("mcpServers") else { return Ok(notes) };
    let names: Vec<String> = servers.keys().cloned().collect();
    for name in &names {
        let Some(Value::Object(entry)) = servers.get_mut(name) else { continue };
        if !server(entry, name, &place, &mut notes)? {
            servers.remove(name);
            notes.disabled.push(name.clone());
        }
    }
    if servers.is_empty() && !notes.disabled.is_empty() {
        return Err(Invalid::new("mcpServers", "every server is `disabled`: enable one"));
    }
    rename(servers, &mut notes)?;
    Ok(notes)
}

/// VS Code's `inputs`: `[{"id": ..., "description": ...}]`.
fn inputs(value: Option<&Value>) -> Vec<(String, String)> {
    let Some(Value::Array(items)) = value else { return Vec::new() };
    items
        .iter()
        .filter_map(|i| Some((i["id"].as_str()?.to_string(), i["description"].as_str().unwrap_or("").to_string())))
        .collect()
}

fn place<'a>(file: Option<&Path>, env: &'a dyn Fn(&str) -> Option<String>, mode: Mode) -> Place<'a> {
    // Absolute, so that a filled-in `${workspaceFolder}` means the same from any directory.
    let file = file.map(|f| std::path::absolute(f).unwrap_or_else(|_| f.to_path_buf()));
    let dir = file.as_deref().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
    let editor_dir = dir.file_name().is_some_and(|n| [".vscode", ".cursor", ".roo"].iter().any(|d| n == *d));
    let workspace = if editor_dir { dir.parent().map(Path::to_path_buf) } else { None };
    let base = workspace.clone().unwrap_or(dir);
    Place { workspace, base, env, mode, inputs: Vec::new() }
}

/// One server's entry; `false` when it is disabled.
fn server(entry: &mut Map<String, Value>, name: &str, place: &Place, notes: &mut Notes) -> Result<bool, Invalid> {
    let path = format!("mcpServers.{name}");
    let at = |key: &str| format!("{path}.{key}");
    match entry.remove("disabled") {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => return Ok(false),
        Some(other) => {
            return Err(Invalid::new(at("disabled"), format!("expected true or false, found {}", kind(&other))));
        }
    }
    if let Some(url) = entry.remove("serverUrl") {
        if entry.contains_key("url") {
            return Err(Invalid::new(at("serverUrl"), "give `url` or Windsurf's `serverUrl`, not both"));
        }
        entry.insert("url".into(), url);
    }
    if let Some(transport) = entry.remove("transportType") {
        if entry.contains_key("type") {
            notes.ignored.push(at("transportType"));
        } else {
            entry.insert("type".into(), transport);
        }
    }
    if let Some(tools) = entry.remove("disabledTools") {
        let Some(names) = tools.as_array().filter(|n| n.iter().all(Value::is_string)) else {
            return Err(Invalid::new(
                at("disabledTools"),
                format!("expected an array of tool names, found {}", kind(&tools)),
            ));
        };
        // A `tools` or `deny` of another type is refused by the filter's own reading.
        if let Value::Object(filter) = entry.entry("tools").or_insert_with(|| json!({}))
            && let Value::Array(deny) = filter.entry("deny").or_insert_with(|| json!([]))
        {
            deny.extend(names.iter().cloned());
        }
    }
    if let Some(Value::Object(oauth)) = entry.get_mut("oauth") {
        for (theirs, ours) in [("clientId", "client_id"), ("clientSecret", "client_secret")] {
            if let Some(value) = oauth.remove(theirs) {
                oauth.entry(ours.to_string()).or_insert(value);
            }
        }
        if oauth.remove("callbackPort").is_some() {
            notes.ignored.push(at("oauth.callbackPort"));
        }
    }
    match entry.remove("sandboxEnabled") {
        Some(Value::Bool(true)) => {
            return Err(Invalid::new(
                at("sandboxEnabled"),
                "mcpgate runs no server in a sandbox: remove `sandboxEnabled`, or set it to false, to run this one without",
            ));
        }
        Some(_) => notes.ignored.push(at("sandboxEnabled")),
        None => {}
    }
    for key in IN_SERVER.iter().filter(|k| k.read_as.is_none()).map(|k| k.key) {
        if entry.remove(key).is_some() {
            notes.ignored.push(at(key));
        }
    }
    // Without `url` or `command`, an unknown key is the likely cause: named first, with a guess.
    if !entry.contains_key("url") && !entry.contains_key("command") {
        let known = suggest::known_at("mcpServers.<name>");
        if let Some(key) = entry.keys().find(|k| !known.contains(&k.as_str())) {
            let problem = match suggest::nearest(key, known.iter().copied()) {
                Some(meant @ ("command" | "url" | "serverUrl")) => format!("unknown key; did you mean `{meant}`?"),
                Some(meant) => format!("unknown key (did you mean `{meant}`?), and a server needs `url` or `command`"),
                None => "unknown key, and a server needs `url` or `command`".to_string(),
            };
            return Err(Invalid::new(at(key), problem));
        }
    }
    for (key, value) in entry.iter_mut() {
        fill_all(value, &at(key), place, notes)?;
    }
    if let Some(value) = entry.remove("envFile") {
        let key = at("envFile");
        let Value::String(file) = value else {
            return Err(Invalid::new(key, format!("expected a path, found {}", kind(&value))));
        };
        if !entry.contains_key("command") {
            return Err(Invalid::new(key, "`envFile` is for a stdio server (one with `command`)"));
        }
        match place.mode {
            Mode::Import => {
                let file = if file.contains("${") { PathBuf::from(file) } else { place.base.join(file) };
                entry.insert("envFile".into(), Value::String(file.to_string_lossy().into_owned()));
            }
            Mode::Run => {
                let file = expand(&file, place.env, &mut Vec::new()).map_err(|p| Invalid::new(key.clone(), p))?;
                let file = place.base.join(file);
                let text = std::fs::read_to_string(&file)
                    .map_err(|e| Invalid::new(key.clone(), format!("cannot read {}: {e}", file.display())))?;
                let vars = env_file::parse(&text).map_err(|p| Invalid::new(key, format!("{}: {p}", file.display())))?;
                notes.env_files.push(EnvFile { server: name.to_string(), path: file, vars });
            }
        }
    }
    Ok(true)
}

/// Fills in the variables an editor fills in, in every string of `value`
/// (`key` is its path, for errors).
fn fill_all(value: &mut Value, key: &str, place: &Place, notes: &mut Notes) -> Result<(), Invalid> {
    match value {
        Value::String(text) if text.contains("${") => *text = fill(text, key, place, notes)?,
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                fill_all(item, &format!("{key}[{i}]"), place, notes)?;
            }
        }
        Value::Object(map) => {
            for (name, item) in map.iter_mut() {
                fill_all(item, &format!("{key}.{name}"), place, notes)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// One string: `${workspaceFolder}`, `${workspaceFolderBasename}`,
/// `${userHome}`, `${pathSeparator}` and `${/}` are filled in; a
/// `${input:ID}` must be set in the environment (or, for import, becomes
/// `${NAME}`, as `${env:NAME}` does). The rest is left to `expand`.
fn fill(text: &str, key: &str, place: &Place, notes: &mut Notes) -> Result<String, Invalid> {
    let refused = |problem: String| Invalid::new(key.to_string(), problem);
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find('}') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let token = &rest[start..start + end + 1];
        let name = &token[2..token.len() - 1];
        rest = &rest[start + end + 1..];
        let workspace = || {
            place.workspace.as_ref().ok_or_else(|| {
                refused(format!(
                    "`{token}` is the folder the editor has open: mcpgate knows it only for a file in a project's \
                     `.vscode/`, `.cursor/` or `.roo/` folder; write the path"
                ))
            })
        };
        match name {
            "workspaceFolder" => out.push_str(&workspace()?.to_string_lossy()),
            "workspaceFolderBasename" => {
                out.push_str(&workspace()?.file_name().map(|n| n.to_string_lossy()).unwrap_or_default())
            }
            "userHome" => {
                out.push_str(&(place.env)("HOME").ok_or_else(|| refused("`${userHome}`: HOME is not set".into()))?)
            }
            "pathSeparator" | "/" => out.push('/'),
            _ => match (name.strip_prefix("input:"), name.strip_prefix("env:"), place.mode) {
                (Some(id), _, Mode::Run) => {
                    let var = input_variable(id);
                    if (place.env)(&var).is_none() {
                        return Err(refused(input_unset(id, &var, description(place, id))));
                    }
                    out.push_str(token);
                }
                (Some(id), _, Mode::Import) => {
                    let var = input_variable(id);
                    if !notes.inputs.iter().any(|(v, _)| *v == var) {
                        notes.inputs.push((var.clone(), description(place, id).unwrap_or_default().to_string()));
                    }
                    out.push_str(&format!("${{{var}}}"));
                }
                (None, Some(var), Mode::Import) => out.push_str(&format!("${{{var}}}")),
                _ => out.push_str(token),
            },
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn description<'a>(place: &'a Place, id: &str) -> Option<&'a str> {
    place.inputs.iter().find(|(i, _)| i == id).map(|(_, d)| d.as_str()).filter(|d| !d.is_empty())
}

/// Gives each server whose name mcpgate cannot use a name it can: the last
/// part of a path (Cline names a server it installed `github.com/org/repo`),
/// with other characters (spaces) as `-`.
fn rename(servers: &mut Map<String, Value>, notes: &mut Notes) -> Result<(), Invalid> {
    let unusable: Vec<String> = servers.keys().filter(|n| !valid_name(n)).cloned().collect();
    for name in unusable {
        let Some(short) = short_name(&name) else { continue };
        if servers.contains_key(&short) {
            return Err(Invalid::new(
                format!("mcpServers.{name}"),
                format!(
                    "a server name is 1 to 64 of A-Z a-z 0-9 _ . -, and `{short}`, which would do for this one, \
                     names another server: rename one"
                ),
            ));
        }
        let entry = servers.remove(&name).unwrap_or_default();
        servers.insert(short.clone(), entry);
        for file in notes.env_files.iter_mut().filter(|f| f.server == name) {
            file.server = short.clone();
        }
        notes.renamed.push((name, short));
    }
    Ok(())
}

fn short_name(name: &str) -> Option<String> {
    let last = name.trim_end_matches('/').rsplit('/').next().unwrap_or(name);
    let mut short = String::new();
    for c in last.chars() {
        if c.is_ascii_alphanumeric() || "_.-".contains(c) {
            short.push(c);
        } else if !short.ends_with('-') {
            short.push('-');
        }
    }
    let short: String = short.trim_matches('-').chars().take(64).collect();
    valid_name(&short).then_some(short)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOME" => Some("/home/me".into()),
            "GITHUB_TOKEN" => Some("ghp_0123456789".into()),
            "PERPLEXITY_KEY" => Some("pplx-0123456789".into()),
            _ => None,
        }
    }

    fn adapted(text: &str, file: Option<&Path>, mode: Mode) -> Result<(Value, Notes), Invalid> {
        let Value::Object(mut root) = serde_json::from_str(text).unwrap() else { panic!("an object") };
        let notes = adapt(&mut root, file, &env, mode)?;
        Ok((Value::Object(root), notes))
    }

    #[test]
    fn a_vs_code_file_is_read_with_its_inputs_and_workspace() {
        let text = r#"{
            "inputs": [{"type": "promptString", "id": "perplexity-key", "description": "Perplexity API Key", "password": true}],
            "servers": {
                "perplexity": {"type": "stdio", "command": "npx", "args": ["-y", "server-perplexity-ask"],
                               "env": {"PERPLEXITY_API_KEY": "${input:perplexity-key}"}},
                "files": {"command": "npx", "args": ["${workspaceFolder}/data", "${userHome}${/}notes"],
                          "dev": {"watch": "src/**/*.ts"}, "sandboxEnabled": false}
            }
        }"#;
        let file = Path::new("/home/me/project/.vscode/mcp.json");
        let (root, notes) = adapted(text, Some(file), Mode::Run).unwrap();
        assert_eq!(root["mcpServers"]["files"]["args"], json!(["/home/me/project/data", "/home/me/notes"]));
        assert_eq!(root["mcpServers"]["perplexity"]["env"]["PERPLEXITY_API_KEY"], "${input:perplexity-key}");
        assert_eq!(notes.ignored, ["inputs", "mcpServers.files.sandboxEnabled", "mcpServers.files.dev"]);
        assert!(root.get("servers").is_none() && root.get("inputs").is_none());

        let unset = text.replace("perplexity-key", "pplx-key");
        let Invalid { key, problem } = adapted(&unset, Some(file), Mode::Run).unwrap_err();
        assert_eq!(key, "mcpServers.perplexity.env.PERPLEXITY_API_KEY");
        assert!(problem.contains("(\"Perplexity API Key\")") && problem.contains("set `PPLX_KEY`"), "{problem}");

        let Invalid { key, problem } =
            adapted(text, Some(Path::new("/etc/mcpgate/mcpgate.json")), Mode::Run).unwrap_err();
        assert_eq!(key, "mcpServers.files.args[0]");
        assert!(problem.contains("`${workspaceFolder}` is the folder the editor has open"), "{problem}");

        let (root, notes) = adapted(&unset, Some(file), Mode::Import).unwrap();
        assert_eq!(root["mcpServers"]["perplexity"]["env"]["PERPLEXITY_API_KEY"], "${PPLX_KEY}");
        assert_eq!(notes.inputs, [("PPLX_KEY".to_string(), "Perplexity API Key".to_string())]);
    }

    #[test]
    fn cline_roo_and_windsurf_keys_become_mcpgates_or_are_left_to_the_client() {
        let text = r#"{"mcpServers": {
            "github.com/modelcontextprotocol/servers/tree/main/src/github": {
                "command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                "disabled": false, "autoApprove": ["list_issues"], "timeout": 60},
            "old": {"command": "old-server", "disabled": true},
            "remote": {"serverUrl": "https://mcp.example.com/mcp", "disabledTools": ["delete_page"],
                       "headers": {"Authorization": "Bearer ${env:GITHUB_TOKEN}"}},
            "legacy": {"url": "https://legacy.example.com/sse", "transportType": "sse", "alwaysAllow": []}
        }}"#;
        let (root, notes) = adapted(text, None, Mode::Run).unwrap();
        let servers = &root["mcpServers"];
        assert_eq!(servers["remote"]["url"], "https://mcp.example.com/mcp");
        assert_eq!(servers["remote"]["tools"], json!({"deny": ["delete_page"]}));
        assert_eq!(servers["legacy"]["type"], "sse");
        assert_eq!(servers["github"]["command"], "npx");
        assert!(servers.get("old").is_none());
        assert_eq!(notes.disabled, ["old"]);
        assert_eq!(
            notes.renamed,
            [("github.com/modelcontextprotocol/servers/tree/main/src/github".into(), "github".into())]
        );
        let order = notes.order(vec![
            "github.com/modelcontextprotocol/servers/tree/main/src/github".into(),
            "old".into(),
            "remote".into(),
        ]);
        assert_eq!(order, ["github", "remote"]);
        let summary = notes.summary().unwrap();
        assert!(
            summary.contains("mcpServers.github.com/modelcontextprotocol/servers/tree/main/src/github.autoApprove")
                && summary.contains("left out the disabled server(s) old"),
            "{summary}"
        );
        assert_eq!(short_name("AWS API MCP Server").as_deref(), Some("AWS-API-MCP-Server"));
        assert_eq!(short_name("服务"), None);
    }

    #[test]
    fn what_cannot_be_read_is_refused_with_its_key() {
        for (text, key, says) in [
            (r#"{"servers": {}, "mcpServers": {}}"#, "servers", "not both"),
            (r#"{"mcpServers": {"a": {"url": "http://x", "disabled": true}}}"#, "mcpServers", "every server is"),
            (r#"{"mcpServer": {"a": {"url": "http://x"}}}"#, "mcpServer", "did you mean `mcpServers`?"),
            (r#"{"mcpServers": {"time": {"comand": "uvx"}}}"#, "mcpServers.time.comand", "did you mean `command`?"),
            (r#"{"mcpServers": {"time": {"cmd": "uvx"}}}"#, "mcpServers.time.cmd", "a server needs `url` or `command`"),
            (
                r#"{"mcpServers": {"a": {"url": "http://x", "disabled": "yes"}}}"#,
                "mcpServers.a.disabled",
                "true or false",
            ),
            (
                r#"{"mcpServers": {"a": {"url": "http://x", "serverUrl": "http://y"}}}"#,
                "mcpServers.a.serverUrl",
                "not both",
            ),
            (
                r#"{"mcpServers": {"a": {"command": "x", "sandboxEnabled": true}}}"#,
                "mcpServers.a.sandboxEnabled",
                "no server in a sandbox",
            ),
            (
                r#"{"mcpServers": {"a": {"url": "http://x", "envFile": ".env"}}}"#,
                "mcpServers.a.envFile",
                "for a stdio server",
            ),
            (
                r#"{"mcpServers": {"a": {"command": "x", "envFile": "/nonexistent/.env"}}}"#,
                "mcpServers.a.envFile",
                "cannot read /nonexistent/.env",
            ),
            (
                r#"{"mcpServers": {"a": {"command": "x", "disabledTools": "rm"}}}"#,
                "mcpServers.a.disabledTools",
                "array of tool names",
            ),
            (
                r#"{"mcpServers": {"a b": {"url": "http://x"}, "a-b": {"url": "http://y"}}}"#,
                "mcpServers.a b",
                "names another server",
            ),
        ] {
            let Invalid { key: k, problem } = adapted(text, None, Mode::Run).unwrap_err();
            assert_eq!(k, key, "{text}");
            assert!(problem.contains(says), "{text}: {problem}");
        }
    }

    #[test]
    fn an_env_file_is_read_from_the_workspace() {
        let dir = std::env::temp_dir().join(format!("mcpgate-clients-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(".cursor")).unwrap();
        std::fs::write(dir.join(".env"), "GITHUB_TOKEN=ghp_fromthefile\nLOG=debug\n").unwrap();
        let text = r#"{"mcpServers": {"gh": {"command": "npx", "envFile": ".env", "env": {"LOG": "info"}}}}"#;
        let file = dir.join(".cursor/mcp.json");
        let (root, notes) = adapted(text, Some(&file), Mode::Run).unwrap();
        assert!(root["mcpServers"]["gh"].get("envFile").is_none());
        assert_eq!(notes.files().collect::<Vec<_>>(), [dir.join(".env").as_path()]);
        let vars: Vec<&(String, String)> = notes.env_files.iter().flat_map(|f| &f.vars).collect();
        assert_eq!(vars.len(), 2, "both variables read: {:?}", notes.env_files);
        let (root, _) = adapted(text, Some(&file), Mode::Import).unwrap();
        assert_eq!(root["mcpServers"]["gh"]["envFile"], dir.join(".env").to_string_lossy().as_ref());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
