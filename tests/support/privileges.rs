//! Running mcpgate as another user under a limit that only root may set.

use std::process::Command;

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

/// Makes the directory of `--config` and the file readable by anyone (the gate runs as nobody).
pub fn open_config_to_all(command: &Command) {
    use std::os::unix::fs::PermissionsExt;
    let args: Vec<_> = command.get_args().collect();
    let at = args.iter().position(|a| *a == "--config").expect("--config") + 1;
    let path = std::path::Path::new(args[at]);
    std::fs::set_permissions(path.parent().unwrap(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// A `wrap` for [`super::Gate::start_with`]: mcpgate runs as nobody, whose
/// threads machine-wide may number at most `limit` (`prlimit --nproc`).
/// Needs root, `setpriv` and `prlimit`.
pub fn as_nobody_with_thread_limit(limit: usize) -> impl FnOnce(Command) -> Command {
    move |mcpgate| {
        open_config_to_all(&mcpgate);
        let mut wrapped = Command::new("setpriv");
        wrapped.args([&format!("--reuid={NOBODY}"), &format!("--regid={NOBODY}"), "--clear-groups", "prlimit"]);
        wrapped.arg(format!("--nproc={limit}:{limit}"));
        wrapped.arg(mcpgate.get_program()).args(mcpgate.get_args());
        wrapped
    }
}
