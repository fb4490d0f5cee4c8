//! Stdio servers behind mcpgate: the fixture in `--stdio` mode as a config entry, what /proc
//! says about a process and its children, the fixture children as their `/stats` show them
//! (found through mcpgate's log, where their stderr goes), and a gate that leaves none of its
//! children or grandchildren behind, whatever the test did.

use std::collections::BTreeSet;
use std::ops::{Deref, DerefMut};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Gate, fixture_bin, http_agent, wait_until};

/// The arguments of a fixture in `--stdio` mode named `name`, serving its `/stats` on a port
/// of its own (announced on its stderr, hence in mcpgate's log), with `extra` after them.
pub fn stdio_args(name: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> =
        ["--stdio", "--name", name, "--stats-listen", "127.0.0.1:0"].iter().map(|s| s.to_string()).collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// A `mcpServers` entry: the fixture as a stdio server (see [`stdio_args`]), a process of its
/// own per session (`"sharing": "session"`); [`user_server`] is the default, shared by a user.
pub fn stdio_server(name: &str, extra: &[&str]) -> Value {
    json!({ "command": fixture_bin(), "args": stdio_args(name, extra), "sharing": "session" })
}

/// A `mcpServers` entry: the fixture as a stdio server with the default sharing (one process
/// for the sessions of one user).
pub fn user_server(name: &str, extra: &[&str]) -> Value {
    json!({ "command": fixture_bin(), "args": stdio_args(name, extra) })
}

/// A `mcpServers` entry: `/bin/sh -c script` with `$0`, `$1`... set to `params`, for a server
/// the fixture alone cannot be (one that ignores SIGTERM, crashes once, ...), a process of its
/// own per session. The script is expected to `exec` the fixture, so that the child's pid is
/// the fixture's.
pub fn shell_server(script: &str, params: &[&str]) -> Value {
    let mut args = vec!["-c".to_string(), script.to_string()];
    args.extend(params.iter().map(|s| s.to_string()));
    json!({ "command": "/bin/sh", "args": args, "sharing": "session" })
}

/// Calls the `echo` of each of `servers` (fixtures) in `client`'s session, in parallel: their
/// processes start when first needed. Each call must answer.
pub fn use_servers(client: &super::Client, servers: &[&str]) {
    std::thread::scope(|s| {
        for server in servers {
            s.spawn(move || {
                let mut one = client.same_session();
                let text = one.tool_text(&format!("{server}__echo"), json!({"text": "start"}));
                assert_eq!(text, "start", "server `{server}`");
            });
        }
    });
}

/// A `mcpServers` entry: the fixture as a stdio server named `$SERVER_NAME$SUFFIX` of its
/// environment, with `env_file` as its `envFile`, written with `vars`.
pub fn named_by_env_file(env_file: &std::path::Path, vars: &str) -> Value {
    std::fs::write(env_file, vars).expect("write the envFile");
    let mut server = shell_server("exec \"$0\" --stdio --name \"$SERVER_NAME$SUFFIX\"", &[fixture_bin()]);
    server["envFile"] = json!(env_file);
    server
}

/// What /proc says about one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    /// `comm`: the program's name, at most 15 bytes.
    pub name: String,
    /// `R`, `S`, `Z` (zombie: exited, not yet reaped) ...
    pub state: char,
    pub ppid: u32,
    pub pgid: u32,
}

impl Proc {
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z'
    }
}

/// `/proc/<pid>/stat`, or `None` once the process is reaped.
pub fn proc_info(pid: u32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, tail) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_string();
    let mut fields = tail.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    Some(Proc { pid, name, state, ppid, pgid })
}

/// Every process of the machine, from /proc.
pub fn all_processes() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()).filter_map(proc_info).collect()
}

/// The processes whose parent is `parent` (zombies included), by pid.
pub fn children_of(parent: u32) -> Vec<Proc> {
    let mut children: Vec<Proc> = all_processes().into_iter().filter(|p| p.ppid == parent).collect();
    children.sort_by_key(|p| p.pid);
    children
}

/// The processes of the process group `pgid`.
pub fn group_members(pgid: u32) -> Vec<Proc> {
    all_processes().into_iter().filter(|p| p.pgid == pgid).collect()
}

/// Whether `pid`, a child of `parent`, is reaped: no /proc entry left, or one that is no longer
/// `parent`'s (its pid reused). A zombie child of `parent` is not reaped: `parent` owes it a wait.
pub fn reaped_by(pid: u32, parent: u32) -> bool {
    proc_info(pid).is_none_or(|p| p.ppid != parent)
}

/// Whether `pid` no longer runs `name`: gone, or a zombie (a process whose parent died is
/// reaped by init, which may take its time), or another program under a reused pid.
pub fn is_dead(pid: u32, name: &str) -> bool {
    proc_info(pid).is_none_or(|p| p.is_zombie() || p.name != name)
}

/// `/proc/<pid>/environ` as `NAME=value` pairs.
pub fn environ(pid: u32) -> Vec<(String, String)> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    raw.split(|&b| b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let entry = String::from_utf8_lossy(entry);
            let (name, value) = entry.split_once('=').unwrap_or((&entry, ""));
            (name.to_string(), value.to_string())
        })
        .collect()
}

/// Sends SIGKILL to `pid`, whatever it is doing; no error if it is gone.
pub fn kill_pid(pid: u32) {
    let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
}

/// The `/stats` addresses that the children of stdio server `server` announced (`listening on
/// ADDR` on their stderr, which mcpgate logs as `server `<name>` (stderr): ...`), in order.
pub fn stats_addresses(log: &str, server: &str) -> Vec<String> {
    let marker = format!("server `{server}` (stderr): listening on ");
    log.lines().filter_map(|line| line.split_once(&marker)).map(|(_, addr)| addr.trim().to_string()).collect()
}

/// Lines of mcpgate's log that carry stderr of `server`'s children.
pub fn stderr_lines_of<'a>(log: &'a str, server: &str) -> Vec<&'a str> {
    let marker = format!("server `{server}` (stderr): ");
    log.lines().filter(|line| line.contains(&marker)).collect()
}

/// One fixture child of mcpgate, as its `/stats` shows it.
#[derive(Debug, Clone)]
pub struct Kid {
    pub pid: u32,
    pub url: String,
}

impl Kid {
    /// Its `/stats`, or `None` once it is gone.
    pub fn try_stats(&self) -> Option<Value> {
        let mut response = http_agent(Some(Duration::from_secs(2))).get(&self.url).call().ok()?;
        serde_json::from_str(&response.body_mut().read_to_string().ok()?).ok()
    }

    pub fn stats(&self) -> Value {
        self.try_stats().unwrap_or_else(|| panic!("fixture {} does not answer on {}", self.pid, self.url))
    }

    /// The pid of its `--spawn-grandchild` sleep.
    pub fn grandchild(&self) -> u32 {
        let stats = self.stats();
        let pid = stats["grandchild_pid"].as_u64().unwrap_or_else(|| panic!("no grandchild_pid: {stats}"));
        u32::try_from(pid).expect("a pid")
    }
}

/// mcpgate with stdio servers. Dropped, it kills mcpgate and then, by pid, every process left in
/// the process groups of the children it saw (the fixtures and their grandchildren), so that a
/// failed test leaves nothing running.
pub struct StdioGate {
    pub gate: Gate,
    /// Process groups of the children of mcpgate seen so far (each child leads its own).
    groups: Mutex<BTreeSet<u32>>,
}

impl StdioGate {
    pub fn start(config: &Value) -> StdioGate {
        StdioGate { gate: Gate::start_checked(config), groups: Mutex::new(BTreeSet::new()) }
    }

    /// Starts mcpgate with `config`; `wrap` may change the command (its environment, say).
    pub fn start_with(config: &Value, wrap: impl FnOnce(Command) -> Command) -> StdioGate {
        StdioGate { gate: Gate::start_with(config, wrap), groups: Mutex::new(BTreeSet::new()) }
    }

    /// A session that used `servers` (fixtures): `initialize`, then a call of each one's `echo`,
    /// in parallel, which starts their processes (none starts at `initialize`).
    pub fn session_using(&self, servers: &[&str]) -> super::Client {
        let client = self.gate.open_session();
        use_servers(&client, servers);
        client
    }

    /// mcpgate's children now (zombies included), remembered for the drop.
    pub fn children(&self) -> Vec<Proc> {
        let children = children_of(self.gate.pid());
        self.groups.lock().unwrap().extend(children.iter().map(|c| c.pgid));
        children
    }

    /// mcpgate's live (not zombie) children, once there are `n` of them (within 5 s).
    pub fn wait_children(&self, n: usize) -> Vec<Proc> {
        let mut live = Vec::new();
        let ok = wait_until(Duration::from_secs(5), || {
            live = self.children().into_iter().filter(|c| !c.is_zombie()).collect();
            live.len() == n
        });
        assert!(ok, "expected {n} live children of mcpgate, found {live:?}");
        live
    }

    /// The first `n` fixture children of `server` that announced their `/stats` (within 5 s),
    /// in the order they started; each must still answer.
    pub fn kids(&self, server: &str, n: usize) -> Vec<Kid> {
        (1..=n).map(|nth| self.kid(server, nth)).collect()
    }

    /// The `nth` (from 1) child of `server` to announce its `/stats` (within 5 s); it must still
    /// answer.
    pub fn kid(&self, server: &str, nth: usize) -> Kid {
        let mut addresses = Vec::new();
        let ok = wait_until(Duration::from_secs(5), || {
            addresses = stats_addresses(&self.gate.stderr(), server);
            addresses.len() >= nth
        });
        assert!(ok, "server `{server}`: {} of {nth} children announced their /stats", addresses.len());
        let url = format!("http://{}/stats", addresses[nth - 1]);
        let stats = Kid { pid: 0, url: url.clone() }.stats();
        let pid = stats["pid"].as_u64().and_then(|p| u32::try_from(p).ok()).expect("a pid in /stats");
        if let Some(p) = proc_info(pid) {
            self.groups.lock().unwrap().insert(p.pgid);
        }
        Kid { pid, url }
    }

    /// Remembers a process group to clean up (a grandchild's, say).
    pub fn watch_group(&self, pgid: u32) {
        self.groups.lock().unwrap().insert(pgid);
    }

    /// Waits (at most `timeout`) until `pid`, mcpgate's child, is reaped; how long it took.
    pub fn reaped_within(&self, pid: u32, timeout: Duration) -> Option<Duration> {
        let started = Instant::now();
        wait_until(timeout, || reaped_by(pid, self.gate.pid())).then(|| started.elapsed())
    }
}

impl Deref for StdioGate {
    type Target = Gate;
    fn deref(&self) -> &Gate {
        &self.gate
    }
}

impl DerefMut for StdioGate {
    fn deref_mut(&mut self) -> &mut Gate {
        &mut self.gate
    }
}

impl Drop for StdioGate {
    fn drop(&mut self) {
        let _ = self.children();
        self.gate.kill();
        let groups = self.groups.lock().map(|g| g.clone()).unwrap_or_default();
        for pgid in groups {
            // Only what a test here starts: the fixture (or its shell) and its sleep.
            for p in group_members(pgid) {
                if !p.is_zombie() && ["mcp-fixture", "sleep", "sh"].contains(&p.name.as_str()) {
                    kill_pid(p.pid);
                }
            }
        }
    }
}
