//! Running mcpgate as another user under a limit that only root may set.
//!
//! That user must reach what it runs and reads. A clone in a directory only
//! its owner may enter (`mktemp -d` makes one; root's home is one) is out of
//! its reach: there, the tests that ran mcpgate as nobody failed with
//! `unexpected first line: ""`. So mcpgate, its config and each program the
//! config starts from such a place go to a fresh directory under /tmp that
//! every user may enter, removed with the gate, and nobody runs or reads each
//! of them before the start: where it cannot, the test fails at once, saying
//! what to change.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use super::{Gate, TempDir};

/// Where nobody's copies go: /tmp, not TMPDIR, which may be private too.
const SHARED_TMP: &str = "/tmp";

/// The uid of `nobody`, whom mcpgate runs as under a thread limit.
pub const NOBODY: u32 = 65534;

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|ids| ids.split_whitespace().nth(1)) == Some("0")
}

/// Fails a root-only test run without root, saying `why` it needs it. Such
/// a test is `#[ignore = "needs root"]`, so a plain `cargo test` leaves it
/// out (listed as ignored, not passed); CI runs as root and includes it
/// (`--include-ignored`, scripts/test.sh).
pub fn require_root(why: &str) {
    assert!(is_root(), "this test needs root ({why}): run it as root with `cargo test -- --include-ignored`");
}

/// Threads (tasks) whose real uid is `uid`, machine-wide: what RLIMIT_NPROC counts.
pub fn threads_of_uid(uid: u32) -> usize {
    let Ok(procs) = std::fs::read_dir("/proc") else { return 0 };
    let mut total = 0;
    for entry in procs.flatten() {
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::split_whitespace);
        let real_uid = field("Uid:").and_then(|mut f| f.next()).and_then(|v| v.parse::<u32>().ok());
        if real_uid == Some(uid) {
            total += field("Threads:").and_then(|mut f| f.next()).and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
        }
    }
    total
}

impl Gate {
    /// mcpgate as nobody, whose threads machine-wide may number at most
    /// `limit` (`prlimit --nproc`). Needs root, `setpriv` and `prlimit`.
    pub fn start_as_nobody(config: &Value, limit: usize) -> Gate {
        Gate::start_as_nobody_from(Path::new(env!("CARGO_BIN_EXE_mcpgate")), config, limit)
    }

    /// [`Gate::start_as_nobody`] of the mcpgate binary at `bin`. Each stdio
    /// server's `command` nobody could not run is run from a copy (a program
    /// named only in its `args` is not).
    pub fn start_as_nobody_from(bin: &Path, config: &Value, limit: usize) -> Gate {
        let dir = TempDir::new_in(Path::new(SHARED_TMP));
        set_mode(&dir.0, 0o755);
        let mcpgate = copy_for_nobody(&dir, 0, bin);
        let mut config = config.clone();
        let mut programs = Vec::new();
        for server in config["mcpServers"].as_object_mut().into_iter().flat_map(|servers| servers.values_mut()) {
            let Some(command) = server["command"].as_str().map(PathBuf::from) else { continue };
            if command.is_absolute() && !others_may_run(&command) {
                let copy = copy_for_nobody(&dir, programs.len() + 1, &command);
                server["command"] = json!(copy);
                programs.push(copy);
            }
        }
        let path = dir.write_config(&config);
        set_mode(&path, 0o644);
        // Through `env`: setpriv's own exec may still pass where nobody's would not.
        nobody_can("run mcpgate", as_nobody().arg("env").arg(&mcpgate).arg("--version"));
        nobody_can("read the config", as_nobody().arg("test").arg("-r").arg(&path));
        for program in &programs {
            nobody_can("run a stdio server", as_nobody().arg("test").arg("-x").arg(program));
        }
        let mut command = as_nobody();
        command.arg("prlimit").arg(format!("--nproc={limit}:{limit}"));
        command.arg(&mcpgate).arg("--config").arg(&path);
        Gate::spawn(command, dir)
    }
}

/// `setpriv` as nobody, with no groups; the program and its arguments follow.
fn as_nobody() -> Command {
    let mut command = Command::new("setpriv");
    command.args([&format!("--reuid={NOBODY}"), &format!("--regid={NOBODY}"), "--clear-groups", "--"]);
    command
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

/// Whether users other than the owner may enter every directory above
/// `program` and run it (by its mode bits; [`nobody_can`] has the last word).
fn others_may_run(program: &Path) -> bool {
    let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode()).unwrap_or(0);
    mode(program) & 0o005 == 0o005 && program.ancestors().skip(1).all(|dir| mode(dir) & 0o001 != 0)
}

/// `program` copied to `<dir>/<n>/<its name>`: its name stays, for what
/// /proc shows of it, and `n` keeps two of the same name apart.
fn copy_for_nobody(dir: &TempDir, n: usize, program: &Path) -> PathBuf {
    let into = dir.0.join(n.to_string());
    std::fs::create_dir(&into).unwrap();
    set_mode(&into, 0o755);
    let copy = into.join(program.file_name().expect("a program's file name"));
    std::fs::copy(program, &copy).unwrap_or_else(|e| panic!("copy {} to {}: {e}", program.display(), copy.display()));
    set_mode(&copy, 0o755);
    copy
}

/// Fails the test at once, saying what to change, when nobody cannot do
/// `what` (the `command`, run as nobody, fails).
fn nobody_can(what: &str, command: &mut Command) {
    let out = command.output().expect("run setpriv (util-linux)");
    assert!(
        out.status.success(),
        "nobody (uid {NOBODY}) cannot {what}: {command:?} failed ({}): {}\n\
         The tests copy what nobody runs into a new directory of mode 0755 under {SHARED_TMP}: \
         {SHARED_TMP} must let every user in (mode 1777) and allow running programs (not mounted noexec).",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
}
