//! The processes under test, on 127.0.0.1 and stopped by PID when dropped:
//! the `mcp-fixture` server, mcpgate itself with its config, and signals.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Client, addr_of_url, get_json, wait_until};

/// The fixture's binary, `mcp-fixture`. It is a package of its own (fixture/), so cargo does not
/// build it for mcpgate's tests: the first call of each test process asks cargo to build it into
/// the directory this test runs from (`<target>/debug/`, or the profile's), which also rebuilds a
/// stale one, and is a no-op otherwise. Test processes building at once wait on cargo's lock.
pub fn fixture_bin() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(build_fixture)
}

fn build_fixture() -> String {
    // A test runs as <target>/<profile>/deps/<test>-<hash>.
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("the test runs in <target>/<profile>/deps/");
    let profile = profile_dir.file_name().and_then(|n| n.to_str()).expect("a profile directory");
    let target_dir = profile_dir.parent().expect("a target directory");
    let bin = profile_dir.join("mcp-fixture");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args(["build", "--quiet", "--package", "mcp-fixture", "--bin", "mcp-fixture", "--manifest-path"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    match profile {
        "debug" => {}
        "release" => {
            build.arg("--release");
        }
        other => {
            build.args(["--profile", other]);
        }
    }
    let how = "build it with `cargo build -p mcp-fixture` (scripts/test.sh does)";
    match build.output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            panic!("cannot build mcp-fixture ({}); {how}:\n{}", out.status, String::from_utf8_lossy(&out.stderr))
        }
        // No cargo here (a test binary run by hand): a fixture already built will do.
        Err(e) if bin.is_file() => eprintln!("cannot run cargo ({e}); using {} as it is", bin.display()),
        Err(e) => panic!("cannot run cargo to build mcp-fixture ({e}); {how}"),
    }
    assert!(bin.is_file(), "cargo built mcp-fixture, but not as {}; {how}", bin.display());
    bin.into_os_string().into_string().expect("a UTF-8 path")
}

/// The first stdout line of a child, `listening on <where>`: where, and how
/// long after `since` it came; `None` if it did not come within `timeout`.
/// The rest of its stdout is drained, so that the child never blocks on a full pipe.
pub fn listening_on(child: &mut Child, since: Instant, timeout: Duration) -> Option<(String, Duration)> {
    let (line, took) = first_line(child, since, timeout)?;
    let at = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected first line: {line:?}"));
    Some((at.to_string(), took))
}

/// The first stdout line of a child (empty if it closed its stdout first), and
/// how long after `since` it came; `None` if it did not come within `timeout`.
/// The rest of its stdout is drained.
fn first_line(child: &mut Child, since: Instant, timeout: Duration) -> Option<(String, Duration)> {
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let mut reader = BufReader::new(stdout);
        let _ = reader.read_line(&mut line);
        let _ = tx.send((line, since.elapsed()));
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    rx.recv_timeout(timeout).ok()
}

/// Where a child listens, from its first stdout line, within 10 s.
fn listening_line(child: &mut Child) -> String {
    let (at, _) = listening_on(child, Instant::now(), Duration::from_secs(10))
        .expect("child printed no `listening on` line within 10 s");
    at
}

/// Sends a signal by name (`TERM`, `KILL`, `HUP`) to a PID.
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().expect("run kill");
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// Waits for a child to exit, at most `timeout`; kills it if it does not.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A fixture MCP server process.
pub struct Fixture {
    child: Child,
    pub addr: String,
    pub name: String,
    args: Vec<String>,
}

impl Fixture {
    pub fn start(name: &str, args: &[&str]) -> Fixture {
        Fixture::start_on(name, "127.0.0.1:0", args)
    }

    /// Two fixtures, `alpha` and `beta`.
    pub fn alpha_and_beta() -> (Fixture, Fixture) {
        (Fixture::start("alpha", &[]), Fixture::start("beta", &[]))
    }

    /// Starts it on a given address, e.g. the port of a fixture that was killed.
    pub fn start_on(name: &str, listen: &str, args: &[&str]) -> Fixture {
        let mut child = Command::new(fixture_bin())
            .args(["--listen", listen, "--name", name])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mcp-fixture");
        let addr = listening_line(&mut child);
        Fixture { child, addr, name: name.into(), args: args.iter().map(|s| s.to_string()).collect() }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// The stream of a fixture of the old HTTP+SSE transport (`--sse-transport`).
    pub fn sse_url(&self) -> String {
        format!("http://{}/sse", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the server counted: initializations, DELETEs, live sessions, open GET streams.
    pub fn stats(&self) -> Value {
        get_json(&format!("http://{}/stats", self.addr))
    }

    /// How many requests of `method` reached it, in either era.
    pub fn received(&self, method: &str) -> u64 {
        let stats = self.stats();
        ["methods", "modern_requests"].iter().map(|key| stats[key][method].as_u64().unwrap_or(0)).sum()
    }

    pub fn count(&self, key: &str) -> u64 {
        self.stats()[key].as_u64().unwrap_or_else(|| panic!("fixture stats have no `{key}`"))
    }

    /// Kills it with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again on the same port (it remembers nothing).
    pub fn restart(&mut self) {
        self.kill();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        *self = Fixture::start_on(&self.name.clone(), &self.addr.clone(), &args);
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

static DIRS: AtomicUsize = AtomicUsize::new(0);

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        TempDir::new_in(&std::env::temp_dir())
    }

    /// A scratch directory in `parent`.
    pub fn new_in(parent: &Path) -> TempDir {
        let n = DIRS.fetch_add(1, Ordering::Relaxed);
        let path = parent.join(format!("mcpgate-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create a temp dir");
        TempDir(path)
    }

    /// Writes `config` here as `mcpgate.json`; its path.
    pub fn write_config(&self, config: &Value) -> PathBuf {
        let path = self.0.join("mcpgate.json");
        std::fs::write(&path, serde_json::to_vec_pretty(config).unwrap()).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A config with test-friendly timeouts and the given servers (name, url).
pub fn config(servers: &[(&str, String)]) -> Value {
    let mut map = serde_json::Map::new();
    for (name, url) in servers {
        map.insert(name.to_string(), json!({ "url": url }));
    }
    json!({
        "listen": "127.0.0.1:0",
        "calls_per_server": 4,
        "session_idle_timeout_secs": 300,
        "client_idle_timeout_secs": 1,
        "connect_timeout_secs": 2,
        "request_timeout_secs": 10,
        // Reloads come from SIGHUP or `POST /reload`, when a test says; tests/reload_on_save.rs
        // turns the watch on.
        "watch_config": false,
        "mcpServers": map,
    })
}

/// [`config`] for these fixtures, each under its own name.
pub fn config_for(fixtures: &[&Fixture]) -> Value {
    let servers: Vec<(&str, String)> = fixtures.iter().map(|f| (f.name.as_str(), f.url())).collect();
    config(&servers)
}

/// `mcpgate --check` on `config`: `Err` with mcpgate's reason when it refuses it.
pub fn check_config(config: &Value) -> Result<(), String> {
    let dir = TempDir::new();
    let path = dir.write_config(config);
    let out = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .arg("--check")
        .arg("--config")
        .arg(&path)
        .output()
        .expect("run mcpgate --check");
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).trim().to_string()) }
}

/// A running mcpgate process.
pub struct Gate {
    child: Child,
    pub addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
    pub dir: TempDir,
}

impl Gate {
    pub fn start(config: &Value) -> Gate {
        Gate::start_with(config, |c| c)
    }

    /// Starts mcpgate once `mcpgate --check` accepts `config`: a refusal (a
    /// key this build does not know, say) fails the test with its reason,
    /// not with a gateway that never starts.
    pub fn start_checked(config: &Value) -> Gate {
        if let Err(why) = check_config(config) {
            panic!("mcpgate refuses the config: {why}");
        }
        Gate::start(config)
    }

    /// [`Gate::start_checked`] in front of `fixtures` (each under its own
    /// name), with `keys` set over [`config`]'s.
    pub fn start_for(fixtures: &[&Fixture], keys: Value) -> Gate {
        let mut c = config_for(fixtures);
        for (key, value) in keys.as_object().expect("keys are an object") {
            c[key] = value.clone();
        }
        Gate::start_checked(&c)
    }

    /// Starts mcpgate with `config`; `wrap` may prefix the command (e.g. setpriv).
    pub fn start_with(config: &Value, wrap: impl FnOnce(Command) -> Command) -> Gate {
        let dir = TempDir::new();
        let path = dir.write_config(config);
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcpgate"));
        command.arg("--config").arg(&path);
        Gate::spawn(wrap(command), dir)
    }

    /// Runs `command` (mcpgate, as it is or wrapped) until it says where it
    /// listens; `dir`, which holds what it reads, lives as long as the Gate.
    pub fn spawn(mut command: Command, dir: TempDir) -> Gate {
        let mut child = command
            .env("MCPGATE_LOG", "mcpgate=debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mcpgate");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let line = first_line(&mut child, Instant::now(), Duration::from_secs(10));
        let Some(at) = line.as_ref().and_then(|(l, _)| l.trim().strip_prefix("listening on ")) else {
            // What it said before it ended (or was killed here) says why.
            let status = wait_exit(&mut child, Duration::from_secs(5)).map(|s| s.to_string());
            wait_until(Duration::from_secs(5), || reader.is_finished());
            let said = stderr.lock().unwrap().clone();
            panic!("mcpgate did not start ({command:?}): first line {line:?}, exit {status:?}, stderr:\n{said}");
        };
        let addr = addr_of_url(at);
        Gate { child, addr, stderr, dir }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn client(&self) -> Client {
        Client::new(&self.url())
    }

    /// A client with a session of its own, initialized.
    pub fn open_session(&self) -> Client {
        let mut client = self.client();
        client.initialize();
        client
    }

    /// A client that sends `Authorization: Bearer <token>`.
    pub fn client_with_token(&self, token: &str) -> Client {
        let mut client = self.client();
        client.headers.push(("Authorization".into(), format!("Bearer {token}")));
        client
    }

    pub fn status(&self) -> Value {
        get_json(&format!("http://{}/status.json", self.addr))
    }

    /// Threads of the mcpgate process, counted from /proc.
    pub fn threads(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/task", self.pid())).map(|d| d.count()).unwrap_or(0)
    }

    /// Waits until the thread count is back to `baseline` (at most 10 s).
    pub fn settles_to(&self, baseline: usize) -> bool {
        wait_until(Duration::from_secs(10), || self.threads() == baseline)
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The log once `ready` holds for it (at most 20 s): a thread of the
    /// test reads it, and on a loaded host it lags what mcpgate did.
    pub fn stderr_once(&self, ready: impl Fn(&str) -> bool) -> String {
        wait_until(Duration::from_secs(20), || ready(&self.stderr()));
        self.stderr()
    }

    /// SIGTERM, then the exit status (None if it did not exit within `timeout`).
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        signal(self.pid(), "TERM");
        wait_exit(&mut self.child, timeout)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `/proc/<pid>/status` field in bytes (0 once the process is gone).
fn proc_status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = status.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.split_whitespace().next());
    kb.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) * 1024
}

/// The resident memory of a process now, in bytes (0 once it is gone).
pub fn rss_bytes(pid: u32) -> u64 {
    proc_status_bytes(pid, "VmRSS:")
}

/// The most resident memory a process has had, in bytes (0 once it is gone).
pub fn peak_rss_bytes(pid: u32) -> u64 {
    proc_status_bytes(pid, "VmHWM:")
}

/// The TCP states (`ESTABLISHED`, `CLOSE_WAIT`, ...) of the sockets process
/// `pid` holds toward port `port` on 127.0.0.1, from /proc.
pub fn sockets_to(pid: u32, port: u16) -> Vec<&'static str> {
    socket_timers_to(pid, port).into_iter().map(|(state, _)| state).collect()
}

/// [`sockets_to`], each with its timer as /proc shows it (0: none, 1:
/// retransmit, 2: keepalive, 3: TIME_WAIT, 4: window probe): its
/// descriptors' inodes, looked up in its network namespace's table.
pub fn socket_timers_to(pid: u32, port: u16) -> Vec<(&'static str, u8)> {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|link| {
                    let link = link.to_string_lossy().to_string();
                    Some(link.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    let remote = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let timer = fields.get(5)?.split(':').next().and_then(|t| u8::from_str_radix(t, 16).ok())?;
            (fields.len() > 9 && fields[2] == remote && inodes.contains(fields[9]))
                .then(|| (tcp_state(fields[3]), timer))
        })
        .collect()
}

/// The name of a state in /proc/net/tcp.
fn tcp_state(hex: &str) -> &'static str {
    match hex {
        "01" => "ESTABLISHED",
        "02" => "SYN_SENT",
        "04" => "FIN_WAIT1",
        "05" => "FIN_WAIT2",
        "06" => "TIME_WAIT",
        "07" => "CLOSE",
        "08" => "CLOSE_WAIT",
        "09" => "LAST_ACK",
        _ => "OTHER",
    }
}
