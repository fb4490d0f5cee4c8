//! The two reader threads of a child: its stdout, a JSON-RPC message per
//! line (at most `max_message_bytes`), each routed where it belongs, until
//! the child is gone (then it is reaped at once, if it ended on its own);
//! and its stderr, into the log, prefixed with the server's name, bounded
//! and rate-limited. Both notice the child's exit even when a process that
//! escaped its group holds the pipes.

use std::io::{self, BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};

use super::child::Child;
use super::routing::hand_over;
use super::stdout::{Got, Stdout};
use crate::downstream::Server;
use crate::downstream::correlate::Incoming;
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

/// How long after a call began the reader thread leaves a child's stdout
/// to the calls: a call that finds it free reads its own answer there, as
/// a call to an HTTP server reads its socket, with no thread between.
const LINGER: Duration = Duration::from_millis(50);
/// How long a call reading stdout waits for a line before it looks
/// whether its own call ended otherwise (cancelled, the child stopped).
const LOOK: Duration = Duration::from_millis(50);

/// A line from the child, sent where it belongs.
fn dispatch(server: &Arc<Server>, child: &Arc<Child>, line: Vec<u8>, charge: Charge) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    // The line is the message's to keep: its result is not copied out of
    // it, and a large one is checked by `protocol/validate.rs`.
    match Message::parse_charged(line, charge) {
        Ok(message) => hand_over(server, child, message),
        Err(e) => {
            limited!(warn, "server `{}`: a line on stdout is not JSON-RPC ({}); ignored", server.name(), e.message)
        }
    }
}

/// The reader thread of a child's stdout: reads a JSON-RPC message per line
/// and sends each where it belongs, except while calls read it themselves
/// (a call began within [`LINGER`] and none waits for an answer it has not
/// read). Returns why it ended: then the child is gone
/// ([`Program::ended`](super::program::Program::ended)).
pub(super) fn read_stdout(server: &Arc<Server>, child: &Arc<Child>) -> String {
    loop {
        child.reader_turn(LINGER);
        let Some(mut stdout) = child.stdout.try_lock() else {
            // A call reads it; it calls when it leaves a call waiting.
            child.reader_woken(EXIT_CHECK);
            continue;
        };
        let Some(reading) = stdout.as_mut() else { return "it has no stdout".to_string() };
        loop {
            match reading.next(child.pid, EXIT_CHECK) {
                Got::Line(line, charge) => dispatch(server, child, line, charge),
                Got::Quiet => {}
                Got::End(why) => {
                    // Its pipe is closed now, not when the child is dropped.
                    *stdout = None;
                    return why;
                }
            }
            let stopping = child.stopping.load(std::sync::atomic::Ordering::Acquire);
            if !stopping
                && reading.reader.buffer().is_empty()
                && !child.calls.awaiting()
                && child.call_began_within(LINGER)
            {
                break;
            }
        }
    }
}

/// A call's turn at reading its child's stdout, while it waits for its
/// answer: taken only when no one else reads it (else the call waits for
/// the reader, or another call, to send it its answer). Left when dropped:
/// if calls still wait, the reader thread reads for them.
pub(super) struct Turn<'a> {
    server: &'a Arc<Server>,
    child: &'a Arc<Child>,
    stdout: Option<parking_lot::MutexGuard<'a, Option<Stdout>>>,
}

impl<'a> Turn<'a> {
    pub(super) fn take(server: &'a Arc<Server>, child: &'a Arc<Child>) -> Turn<'a> {
        let stdout = child.stdout.try_lock().filter(|stdout| stdout.is_some());
        Turn { server, child, stdout }
    }

    /// What comes next to the call's inbox `rx`, by `deadline` if one is
    /// given: while the call holds stdout it reads there meanwhile, a line
    /// (within [`LOOK`]) at a time, each sent where it belongs, its own
    /// answer to `rx`. `None` past the deadline, or with `rx` gone.
    pub(super) fn recv(&mut self, rx: &Receiver<Incoming>, deadline: Option<Instant>) -> Option<Incoming> {
        loop {
            let Some(stdout) = self.stdout.as_mut() else {
                return match deadline {
                    Some(deadline) => rx.recv_deadline(deadline).ok(),
                    None => rx.recv().ok(),
                };
            };
            match rx.try_recv() {
                Ok(got) => return Some(got),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) if deadline.is_some_and(|d| Instant::now() >= d) => return None,
                Err(TryRecvError::Empty) => {}
            }
            // At the stream's end the reader thread, woken, says the child ended.
            match stdout.as_mut().map(|stdout| stdout.next(self.child.pid, LOOK)) {
                Some(Got::Line(line, charge)) => dispatch(self.server, self.child, line, charge),
                Some(Got::Quiet) => {}
                Some(Got::End(_)) | None => self.let_go(),
            }
        }
    }

    /// Lets go of stdout, if this call holds it: the reader thread reads on
    /// if a request still waits or lines are buffered.
    pub(super) fn let_go(&mut self) {
        let Some(stdout) = self.stdout.take() else { return };
        let buffered = stdout.as_ref().is_some_and(|stdout| !stdout.reader.buffer().is_empty());
        // Let go first, then look: a call that registers from now on finds
        // stdout free, and one that registered before is seen here.
        drop(stdout);
        if buffered || self.child.calls.awaiting() {
            self.child.wake_reader();
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.let_go();
    }
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
