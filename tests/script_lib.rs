//! scripts/lib.sh, which every script starts its servers through: a name
//! started again (a restart) must be waited for by its new `listening on`
//! line, never by the one its last run left in the same log file. CI once
//! failed so: interop.sh restarted `oauth-out-one`, `wait_port` read the
//! old line, and then found the file emptied by the new process's
//! redirection, which runs in the forked child, later.

use std::process::Command;

#[test]
fn once_start_returns_a_restarted_names_logs_hold_nothing_of_its_last_run() {
    let dir = std::env::temp_dir().join(format!("mcpgate-script-lib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Read with `read`, a builtin: no fork gives the child time to empty
    // the files first. Before the fix, all 50 restarts read the old lines.
    let script = r#"
        set -euo pipefail
        SCRIPT=script_lib
        . "$ROOT/scripts/lib.sh"
        LOG_DIR=$DIR
        stale=0
        for i in $(seq 50); do
            echo "listening on http://127.0.0.1:1111/mcp" > "$LOG_DIR/x.out"
            echo "the last run's stderr" > "$LOG_DIR/x.err"
            start x sleep 0.05
            out= err=
            IFS= read -r out < "$LOG_DIR/x.out" || true
            IFS= read -r err < "$LOG_DIR/x.err" || true
            [[ -z $out && -z $err ]] || stale=$((stale + 1))
            wait "$PID" || true
        done
        echo "$stale"
    "#;
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .env("ROOT", env!("CARGO_MANIFEST_DIR"))
        .env("DIR", &dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the script failed: {stderr}");
    let stale = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stale.trim(), "0", "restarts (of 50) whose logs still held the last run's lines after `start`");
}
