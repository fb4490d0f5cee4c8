//! One child process: its stdin (written within the request timeout,
//! never blocking longer), the reader of its stdout (a message per line,
//! each routed where it belongs) and of its stderr (to the log, bounded and
//! rate-limited), and its end: the close path's stdin closed, grace,
//! SIGTERM to its group, grace, SIGKILL; or its exit on its own, reaped at
//! once by its reader. Either way its group is killed before it is reaped.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::process::{Child as Process, ChildStdin, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use super::endpoint;
use super::routing::{Calls, Incoming, route};
use crate::downstream::{DownstreamError, Server};
use crate::limited;
use crate::protocol::jsonrpc::Message;
use crate::runtime::children::{Children, Sweep, descendants, exits_within, reap_all};
use crate::runtime::memory::Charge;
use crate::runtime::ratelog::RateLimit;
use crate::runtime::sys::{self, ChildSignal};
use crate::runtime::threads;

/// Lines of a child's stderr logged before they are rate-limited.
const STDERR_BURST: u64 = 50;
/// The longest stderr line logged; the rest of it is cut.
const STDERR_LINE: usize = 2048;

/// One running child process.
pub(crate) struct Child {
    pub(super) pid: u32,
    pub(super) started: Instant,
    /// Guards the process handle; taken by whoever reaps it.
    pub(super) process: Mutex<Option<Process>>,
    /// Guards its stdin (non-blocking); `None` once closed.
    pub(super) stdin: Mutex<Option<ChildStdin>>,
    /// Guards the calls waiting, and where unasked messages go.
    pub(super) calls: Mutex<Calls>,
    /// Downstream sessions using it (1 unless shared).
    pub(super) views: AtomicUsize,
    pub(super) next_wire: AtomicU64,
    /// Guards when a session last used it (a shared child stops when idle).
    pub(super) used: Mutex<Instant>,
    pub(super) gone: AtomicBool,
    /// Set by the close path: its end is not a crash.
    pub(super) stopping: AtomicBool,
    /// Guards its reader and stderr threads, joined when it is stopped.
    pub(super) threads: Mutex<Vec<JoinHandle<()>>>,
    /// A shared child's `initialize` answer, for the views after the first.
    pub(super) initialize: Mutex<Option<Message>>,
    pub(super) initialized: AtomicBool,
    /// Its stdout as `/proc` names it (`pipe:[inode]`): a process it left
    /// behind that still holds it is found by it.
    pub(super) pipe: Option<String>,
}

impl Child {
    pub(super) fn idle_for(&self) -> Duration {
        self.used.lock().elapsed()
    }

    /// Writes one message as a line, within `timeout`: a child that does not
    /// read its stdin does not hold the writer longer.
    pub(super) fn write_line(&self, body: &[u8], timeout: Duration) -> Result<(), DownstreamError> {
        let deadline = Instant::now() + timeout;
        let mut line = Vec::with_capacity(body.len() + 1);
        line.extend_from_slice(body);
        line.push(b'\n');
        let mut stdin = self.stdin.lock();
        let Some(pipe) = stdin.as_mut() else { return Err(DownstreamError::Closed) };
        let mut rest = &line[..];
        while !rest.is_empty() {
            match pipe.write(rest) {
                Ok(0) => return Err(DownstreamError::Protocol("its stdin is closed".into())),
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() || !sys::wait_writable(pipe, left).unwrap_or(false) {
                        return Err(DownstreamError::Timeout(timeout));
                    }
                }
                Err(e) => return Err(DownstreamError::Protocol(format!("writing to its stdin failed: {e}"))),
            }
        }
        Ok(())
    }

    /// Ends the child: stdin closed, then the grace to exit, SIGTERM to its
    /// group, the grace again, SIGKILL; reaped in any case, and its threads
    /// joined. Once only: whoever comes second (or after it ended on its
    /// own) gets `None`; the first, whether it needed a signal.
    pub(super) fn stop(&self, children: &Children) -> Option<Signalled> {
        self.stopping.store(true, Ordering::Release);
        drop(self.stdin.lock().take());
        let Some(mut process) = self.process.lock().take() else {
            self.join_threads();
            return None;
        };
        // What it started, wherever in its tree: a grandchild that left its
        // group (setsid) is out of reach of the signals to the group.
        let tree = descendants(self.pid);
        let grace = children.grace();
        let mut signalled = false;
        if !exits_within(self.pid, grace) {
            signalled = true;
            let _ = sys::signal_group(self.pid, ChildSignal::Terminate);
            // Past this grace, the SIGKILL below ends it.
            exits_within(self.pid, grace);
        }
        // What the child started is in its group: nothing of it outlives it.
        // Sent before the child is reaped, while its pid (the group's id)
        // cannot have been reused.
        let _ = sys::signal_group(self.pid, ChildSignal::Kill);
        let status = process.wait().ok();
        children.forget(self.pid);
        children.reaped.inc();
        children.live.dec();
        // Its tree is mcpgate's now (its subreaper): killed, and reaped.
        let left: Vec<u32> = tree.into_iter().filter(|&pid| sys::kill(pid).is_ok()).collect();
        reap_all(&left);
        if let Some(pipe) = &self.pipe {
            children.sweep(Sweep::Holding(pipe));
        }
        self.end_calls(&format!("its process was stopped ({})", describe(status)));
        self.join_threads();
        if signalled {
            log::debug!("process {} needed a signal to stop", self.pid);
        }
        Some(Signalled(signalled))
    }

    /// Wakes every call waiting on the child with `why`.
    pub(super) fn end_calls(&self, why: &str) {
        let waiting: Vec<Sender<Incoming>> = self.calls.lock().waiting.drain().map(|(_, w)| w.tx).collect();
        for tx in waiting {
            let _ = tx.send(Incoming::Ended(why.to_string()));
        }
    }

    fn join_threads(&self) {
        let handles: Vec<JoinHandle<()>> = std::mem::take(&mut *self.threads.lock());
        for handle in handles {
            // The reader is this thread when the child ended on its own.
            if handle.thread().id() == std::thread::current().id() {
                threads::join_later(handle);
            } else {
                let _ = handle.join();
            }
        }
    }
}

/// Whether a child stopped by mcpgate needed SIGTERM or SIGKILL.
pub(super) struct Signalled(pub(super) bool);

/// `exit status 3`, `killed by signal 9`, or why it is not known.
fn describe(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) if s.code().is_some() => format!("exit status {}", s.code().unwrap_or_default()),
        Some(s) => format!("killed by signal {}", s.signal().unwrap_or_default()),
        None => "exit status unknown".into(),
    }
}

/// The reader of a child's stdout: a JSON-RPC message per line, each sent
/// where it belongs. At its end the child is gone: its calls get an error
/// naming its exit status, and it is reaped.
pub(super) fn read_stdout(server: &Arc<Server>, child: &Arc<Child>, stdout: std::process::ChildStdout) {
    let _live = server.stats.threads_readers.enter();
    let endpoint = endpoint(server);
    let max = endpoint.children.max_message.load(Ordering::Relaxed);
    let mut reader = BufReader::with_capacity(8 * 1024, stdout);
    let mut line = Vec::new();
    let why = loop {
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
        match Message::parse(&line) {
            Ok(message) => route(server, child, message),
            Err(e) => {
                limited!(warn, "server `{}`: a line on stdout is not JSON-RPC ({}); ignored", server.name(), e.message)
            }
        }
    };
    child.gone.store(true, Ordering::Release);
    if child.stopping.load(Ordering::Acquire) {
        return;
    }
    // It ended on its own: reap it now (no zombie), and tell its calls.
    let status = child.process.lock().take().map(|mut process| {
        // The grace to exit, if it has not; then its group goes with it, as
        // on the close path, before it is reaped.
        exits_within(child.pid, endpoint.children.grace());
        let _ = sys::signal_group(child.pid, ChildSignal::Kill);
        let status = process.wait().ok();
        endpoint.children.forget(child.pid);
        endpoint.children.reaped.inc();
        endpoint.children.live.dec();
        endpoint.live.dec();
        endpoint.ended_on_its_own(child);
        // What it left holding its stdout goes with it (mcpgate is its subreaper).
        if let Some(pipe) = &child.pipe {
            endpoint.children.sweep(Sweep::Holding(pipe));
        }
        status
    });
    let status = describe(status.flatten());
    limited!(
        warn,
        "server `{}`: its process {} ended ({why}, {status}); it is started again when next needed",
        server.name(),
        child.pid
    );
    child.end_calls(&format!("its process ended ({status})"));
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

/// A child's stderr into the log, prefixed with the server's name: the
/// first lines as they come, then at most one per 10 s, with a count of
/// those left out. Lines are cut at [`STDERR_LINE`] bytes. Ends with the
/// stream, or once the child `pid` has exited and nothing is left to read:
/// a process that left the child's group may hold the pipe for good, and
/// the close path joins this thread.
pub(super) fn log_stderr(name: &str, stderr: std::process::ChildStderr, pid: u32) {
    let limit = RateLimit::new(Duration::from_secs(10));
    let mut reader = BufReader::with_capacity(4 * 1024, stderr);
    let mut line = Vec::new();
    let mut seen = 0u64;
    let mut log = |line: &[u8]| {
        seen += 1;
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end();
        if seen <= STDERR_BURST {
            log::info!("server `{name}` (stderr): {text}");
        } else if let Some(suppressed) = limit.allow() {
            log::info!("server `{name}` (stderr): {text}{}", crate::runtime::ratelog::more(suppressed, &limit));
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
