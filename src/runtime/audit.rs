//! The audit log's writer: JSON lines handed over by the request threads,
//! written by one thread of its own to a file with size-bounded rotation,
//! and (with `audit.journal`) to the systemd journal as structured fields.
//!
//! Nothing here may slow a call or stop it: a line goes into a bounded
//! queue (its bytes charged to `max_memory_mb`) and the caller goes on; a
//! full queue, a refused charge, a full or read-only disk drop the line and
//! count it. The file never passes `max_bytes`: a line that would take it
//! past rotates it first (`audit.jsonl` → `audit.jsonl.1` → ... up to
//! `files`), and no line is longer than [`MAX_LINE`].

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use parking_lot::Mutex;

use crate::runtime::memory::Charge;
use crate::runtime::threads;

/// The longest line written: a record's arguments are cut to fit.
pub(crate) const MAX_LINE: usize = 64 * 1024;
/// Lines waiting for the writer at most.
const QUEUE: usize = 4096;
/// Where journald takes structured records (`sd_journal_send`'s socket).
const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// Where the audit log goes, from `audit` in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// The file, or none (journal only).
    pub(crate) file: Option<PathBuf>,
    /// The most bytes of one file before it is rotated.
    pub(crate) max_bytes: u64,
    /// Rotated files kept besides the current one.
    pub(crate) files: usize,
    /// Whether records go to the journal too, as fields.
    pub(crate) journal: bool,
    /// Whether call arguments are kept (redacted by key).
    pub(crate) arguments: bool,
    /// Keys whose values are replaced by `***` (matched as parts of a key, in any case).
    pub(crate) redact: Vec<String>,
}

/// One record: its JSON line, and the fields the journal gets.
pub(crate) struct Record {
    pub(crate) line: String,
    /// `MCP_TOOL=...` and the like, and `MESSAGE=`.
    pub(crate) fields: Vec<(&'static str, String)>,
}

/// What the writer counts, for the status page.
#[derive(Default, Debug)]
pub(crate) struct Counts {
    pub(crate) written: AtomicU64,
    /// Dropped: the queue was full, the memory budget refused it, or the disk did.
    pub(crate) dropped: AtomicU64,
    pub(crate) rotations: AtomicU64,
}

/// The running audit log: the queue to its writer thread.
pub(crate) struct AuditLog {
    pub(crate) config: AuditConfig,
    queue: Mutex<Option<Sender<(Record, Charge)>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    pub(crate) counts: Arc<Counts>,
}

impl AuditLog {
    /// Opens the file (its directory must exist) and starts the writer.
    pub(crate) fn start(config: AuditConfig) -> io::Result<AuditLog> {
        let file = match &config.file {
            Some(path) => Some(Output::open(path, config.max_bytes, config.files)?),
            None => None,
        };
        let journal = config.journal.then(Journal::connect).flatten();
        let counts = Arc::new(Counts::default());
        let (tx, rx) = bounded(QUEUE);
        let thread = {
            let counts = counts.clone();
            threads::spawn("audit", "", move || write_all(&rx, file, journal, &counts))?
        };
        Ok(AuditLog { config, queue: Mutex::new(Some(tx)), thread: Mutex::new(Some(thread)), counts })
    }

    /// Hands `record` to the writer; dropped (and counted) if it cannot wait.
    pub(crate) fn write(&self, record: Record) {
        let Some(charge) = Charge::new(record.line.len()) else {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let queue = self.queue.lock().clone();
        let sent = match queue {
            Some(queue) => match queue.try_send((record, charge)) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            },
            None => false,
        };
        if !sent {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            crate::limited!(warn, "audit log: a record was dropped (the writer is behind, or stopped)");
        }
    }

    /// Writes what is queued and stops the writer (shutdown, or a reload that changed `audit`).
    pub(crate) fn stop(&self) {
        drop(self.queue.lock().take());
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        self.stop();
    }
}

fn write_all(rx: &Receiver<(Record, Charge)>, mut file: Option<Output>, journal: Option<Journal>, counts: &Counts) {
    for (record, _charge) in rx {
        let mut ok = true;
        if let Some(out) = &mut file {
            match out.append(&record.line) {
                Ok(rotated) => {
                    if rotated {
                        counts.rotations.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(e) => {
                    ok = false;
                    crate::limited!(warn, "audit log: {}: {e}; the record is dropped", out.path.display());
                }
            }
        }
        if let Some(journal) = &journal {
            journal.send(&record.fields);
        }
        let counter = if ok { &counts.written } else { &counts.dropped };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The file, its size, and its rotation.
struct Output {
    path: PathBuf,
    file: File,
    size: u64,
    max: u64,
    keep: usize,
}

impl Output {
    fn open(path: &Path, max: u64, keep: usize) -> io::Result<Output> {
        let file = OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
        let size = file.metadata()?.len();
        Ok(Output { path: path.to_path_buf(), file, size, max, keep })
    }

    /// Appends `line` and a newline, rotating first when it would pass the
    /// cap; whether it rotated.
    fn append(&mut self, line: &str) -> io::Result<bool> {
        let len = line.len() as u64 + 1;
        let rotate = self.size > 0 && self.size + len > self.max;
        if rotate {
            self.rotate()?;
        }
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        self.file.write_all(&bytes)?;
        self.size += len;
        Ok(rotate)
    }

    /// `audit.jsonl` becomes `audit.jsonl.1`, which becomes `.2`, ...; the
    /// oldest beyond `keep` is removed; a new file is opened.
    fn rotate(&mut self) -> io::Result<()> {
        let numbered = |n: usize| PathBuf::from(format!("{}.{n}", self.path.display()));
        let _ = std::fs::remove_file(numbered(self.keep));
        for n in (1..self.keep).rev() {
            let _ = std::fs::rename(numbered(n), numbered(n + 1));
        }
        std::fs::rename(&self.path, numbered(1))?;
        *self = Output::open(&self.path, self.max, self.keep)?;
        Ok(())
    }
}

/// The journal's socket, for records as fields (the native protocol: one
/// datagram of `NAME=value` lines; a value with a newline goes in the
/// length-prefixed form).
struct Journal(std::os::unix::net::UnixDatagram);

impl Journal {
    fn connect() -> Option<Journal> {
        let socket = std::os::unix::net::UnixDatagram::unbound().ok()?;
        match socket.connect(JOURNAL_SOCKET) {
            Ok(()) => Some(Journal(socket)),
            Err(e) => {
                log::warn!(
                    "audit log: the journal's socket {JOURNAL_SOCKET} cannot be reached ({e}): records go to the file only"
                );
                None
            }
        }
    }

    fn send(&self, fields: &[(&'static str, String)]) {
        let mut datagram = Vec::with_capacity(256);
        for (name, value) in fields {
            datagram.extend_from_slice(name.as_bytes());
            if value.contains('\n') {
                datagram.push(b'\n');
                datagram.extend_from_slice(&(value.len() as u64).to_le_bytes());
                datagram.extend_from_slice(value.as_bytes());
                datagram.push(b'\n');
            } else {
                datagram.push(b'=');
                datagram.extend_from_slice(value.as_bytes());
                datagram.push(b'\n');
            }
        }
        if let Err(e) = self.0.send(&datagram) {
            crate::limited!(warn, "audit log: the journal refused a record: {e}");
        }
    }
}

/// A copy of `value` with the values of keys that look secret (a part of
/// the key is one of `redact`, in any case) replaced by `***`, at any depth.
pub(crate) fn redacted(value: &serde_json::Value, redact: &[String]) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, item)| {
                    let lower = key.to_ascii_lowercase();
                    if redact.iter().any(|r| lower.contains(&r.to_ascii_lowercase())) {
                        (key.clone(), Value::String("***".into()))
                    } else {
                        (key.clone(), redacted(item, redact))
                    }
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|item| redacted(item, redact)).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_by_key_at_any_depth() {
        let redact: Vec<String> = ["password", "token"].iter().map(|s| s.to_string()).collect();
        let value = serde_json::json!({"user": "a", "Password": "x", "nested": [{"github_token": "y", "ok": 1}]});
        assert_eq!(
            redacted(&value, &redact),
            serde_json::json!({"user": "a", "Password": "***", "nested": [{"github_token": "***", "ok": 1}]})
        );
    }

    #[test]
    fn a_rotated_file_never_passes_its_cap_and_the_oldest_goes() {
        let dir = std::env::temp_dir().join(format!("mcpgate-audit-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        let mut out = Output::open(&path, 100, 2).unwrap();
        let line = "x".repeat(29);
        for _ in 0..20 {
            out.append(&line).unwrap();
        }
        for file in [path.clone(), dir.join("audit.jsonl.1"), dir.join("audit.jsonl.2")] {
            let len = std::fs::metadata(&file).unwrap().len();
            assert!(len <= 100 && len > 0, "{}: {len} bytes", file.display());
        }
        assert!(!dir.join("audit.jsonl.3").exists(), "more files than kept");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
