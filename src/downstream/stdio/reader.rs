//! The two reader threads of a child: its stdout, a JSON-RPC message per
//! line (at most `max_message_bytes`), each routed where it belongs, until
//! the child is gone (then it is reaped at once, if it ended on its own);
//! and its stderr, into the log, prefixed with the server's name, bounded
//! and rate-limited. Both notice the child's exit even when a process that
//! escaped its group holds the pipes.

use std::io::{self, BufRead, BufReader, Read};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use super::child::Child;
use super::routing::hand_over;
use crate::downstream::Server;
use crate::limited;
use crate::protocol::jsonrpc::Message;
use crate::runtime::memory::Charge;
use crate::runtime::ratelog::RateLimit;
use crate::runtime::sys;

/// Lines of a child's stderr logged before they are rate-limited.
const STDERR_BURST: u64 = 50;
/// The longest stderr line logged; the rest of it is cut.
const STDERR_LINE: usize = 2048;

/// Whether a line of a server's stderr says something went wrong: what a
/// user must see at the default level, among banners and box drawings.
fn looks_like_trouble(line: &str) -> bool {
    const WORDS: &[&str] = &[
        "error",
        "warn",
        "fatal",
        "panic",
        "exception",
        "traceback",
        "fail",
        "denied",
        "refused",
        "cannot",
        "can't",
        "could not",
        "unable",
        "not found",
        "invalid",
        "missing",
        "unknown",
        "abort",
        "killed",
    ];
    let lower = line.to_ascii_lowercase();
    WORDS.iter().any(|w| lower.contains(w))
}

/// The reader of a child's stdout: a JSON-RPC message per line (at most
/// `max` bytes), each sent where it belongs. Returns why it ended: then the
/// child is gone ([`Program::ended`](super::program::Program::ended)).
pub(super) fn read_stdout(
    server: &Arc<Server>,
    child: &Arc<Child>,
    stdout: std::process::ChildStdout,
    max: usize,
) -> String {
    let mut reader = BufReader::with_capacity(8 * 1024, stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        match read_line(&mut reader, &mut line, max, child.pid) {
            Ok(Got::Eof) => break "it closed its stdout".to_string(),
            Ok(Got::Exited) => break "it exited; a process it started holds its stdout".to_string(),
            Ok(Got::Line) => {}
            Err(e) => break format!("reading its stdout failed: {e}"),
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // The line is the message's to keep: its result is not copied out
        // of it, and a large one is checked by `protocol/validate.rs`.
        match Message::parse_owned(std::mem::take(&mut line)) {
            Ok(message) => hand_over(server, child, message),
            Err(e) => {
                limited!(warn, "server `{}`: a line on stdout is not JSON-RPC ({}); ignored", server.name(), e.message)
            }
        }
    }
}

/// What [`read_line`] got.
enum Got {
    /// A line, in `line`.
    Line,
    /// The end of the stream.
    Eof,
    /// Nothing to read, and the child has exited: the stream's end may never
    /// come, as a process the child started holds the pipe open (`npx`, a
    /// shell without `exec`), until its group is killed.
    Exited,
}

/// How often a reader with nothing to read looks whether its child exited.
const EXIT_CHECK: Duration = Duration::from_millis(200);

/// Waits until `reader` has something to read, or its end: false if its
/// child `pid` exited meanwhile, leaving nothing to read.
fn input_or_exit<R: AsRawFd>(reader: &BufReader<R>, pid: u32) -> io::Result<bool> {
    while reader.buffer().is_empty() && !sys::wait_readable(reader.get_ref(), EXIT_CHECK)? {
        if sys::has_exited(pid) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// One line into `line`, without its `\n`; or the end of the stream, or of
/// the child `pid`.
fn read_line<R: Read + AsRawFd>(
    reader: &mut BufReader<R>,
    line: &mut Vec<u8>,
    max: usize,
    pid: u32,
) -> io::Result<Got> {
    let mut charge = Charge::empty();
    loop {
        if !input_or_exit(reader, pid)? {
            return Ok(Got::Exited);
        }
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(Got::Eof);
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(at) => (at, true),
            None => (buf.len(), false),
        };
        if line.len() + take > max {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a message larger than {max} bytes")));
        }
        if line.len() + take > 64 * 1024 && !charge.grow(take) {
            return Err(io::Error::new(io::ErrorKind::OutOfMemory, "mcpgate holds its limit of max_memory_mb"));
        }
        line.extend_from_slice(&buf[..take]);
        reader.consume(take + usize::from(done));
        if done {
            return Ok(Got::Line);
        }
    }
}

/// A child's stderr into the log, prefixed with the server's name: a line
/// that looks like trouble (an error, a warning, a failure) at `warn`, the
/// rest (banners, progress) at `debug`; the first lines as they come, then
/// at most one per 10 s for the server (`limit`, shared by its children),
/// with a count of those left out. Lines are cut at [`STDERR_LINE`] bytes;
/// the last few are kept on `child` for the error that says why it ended.
/// Ends with the stream, or once the child has exited and nothing is left
/// to read: a process that left the child's group may hold the pipe for
/// good, and the close path joins this thread.
pub(super) fn log_stderr(name: &str, stderr: std::process::ChildStderr, child: &Child, limit: &RateLimit) {
    let pid = child.pid;
    let mut reader = BufReader::with_capacity(4 * 1024, stderr);
    let mut line = Vec::new();
    let mut seen = 0u64;
    let mut log = |line: &[u8]| {
        seen += 1;
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end();
        child.note_stderr(text);
        let level = if looks_like_trouble(text) { log::Level::Warn } else { log::Level::Debug };
        if seen <= STDERR_BURST {
            log::log!(level, "server `{name}` (stderr): {text}");
        } else if let Some(suppressed) = limit.allow() {
            log::log!(level, "server `{name}` (stderr): {text}{}", crate::runtime::ratelog::more(suppressed, limit));
        }
    };
    loop {
        let buf: &[u8] = match input_or_exit(&reader, pid) {
            Ok(true) => match reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => &[],
            },
            _ => &[],
        };
        if buf.is_empty() {
            if !line.is_empty() {
                log(&line);
            }
            child.stderr_done.store(true, std::sync::atomic::Ordering::Release);
            return;
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(at) => (at, true),
            None => (buf.len(), false),
        };
        // What is past STDERR_LINE bytes of a line is read and dropped.
        let room = STDERR_LINE.saturating_sub(line.len());
        line.extend_from_slice(&buf[..take.min(room)]);
        reader.consume(take + usize::from(done));
        if done {
            log(&line);
            line.clear();
        }
    }
}
