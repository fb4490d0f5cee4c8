//! One child process: its stdin (written within the request timeout,
//! never blocking longer), the table of the calls waiting on it, and its
//! end: the close path's stdin closed, grace, SIGTERM to its group, grace,
//! SIGKILL; or its exit on its own, reaped at once by its reader
//! (`reader.rs`). Either way its group is killed before it is reaped.

use std::io::{self, Write};
use std::process::{ChildStdin, ExitStatus};
use std::sync::Weak;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::stdout::Stdout;
use crate::downstream::children::{Children, Sweep, descendants, exits_within, reap_all};
use crate::downstream::correlate::{Correlator, Incoming};
use crate::downstream::{DownstreamError, Inbox, Readiness};
use crate::protocol::jsonrpc::Message;
use crate::runtime::sys::{self, ChildSignal, Process};
use crate::runtime::threads;
use crate::stats::Gauge;

/// One running child process.
pub(crate) struct Child {
    pub(super) pid: u32,
    pub(super) started: Instant,
    /// Guards the process handle; taken by whoever reaps it.
    pub(super) process: Mutex<Option<Process>>,
    /// Guards its stdin (non-blocking); `None` once closed.
    pub(super) stdin: Mutex<Option<ChildStdin>>,
    /// The calls waiting, and where what it sends unasked goes.
    pub(super) calls: Correlator,
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
    /// Guards how a shared child's start goes: mcpgate initializes it once,
    /// for every session that uses it; `settled` tells the waiters.
    pub(super) start: Mutex<Start>,
    pub(super) settled: Condvar,
    /// When a shared child must have answered `initialize` by.
    pub(super) start_deadline: Instant,
    /// Set once `notifications/initialized` went: a session's is not sent again.
    pub(super) initialized: AtomicBool,
    /// Its stdout as `/proc` names it (`pipe:[inode]`): a process it left
    /// behind that still holds it is found by it.
    pub(super) pipe: Option<String>,
    /// Serves the sessions of a user, or every session (not `"sharing": "session"`).
    pub(super) shared: bool,
    /// Guards the last lines of its stderr (each cut, a few in all): what an
    /// error about its end says of why.
    pub(super) stderr_tail: Mutex<std::collections::VecDeque<String>>,
    /// Set when its stderr's thread has read to the end.
    pub(super) stderr_done: AtomicBool,
    /// Guards its stdout, read by whoever holds it: its reader thread, or a
    /// call that found it free and reads its own answer (`reader.rs`).
    pub(super) stdout: Mutex<Option<Stdout>>,
    /// When a call last began, in µs since `started` (0: none yet): the
    /// reader thread leaves stdout to the calls for a while after.
    pub(super) last_call: AtomicU64,
    /// Guards whether a call that read stdout asked the reader thread to
    /// read again (it left calls waiting, or saw the stream end).
    pub(super) reader_wake: Mutex<bool>,
    pub(super) reader_woke: Condvar,
}

/// Lines of a child's stderr kept for the error that says why it ended.
pub(super) const TAIL_LINES: usize = 6;
/// The most bytes of one such line.
pub(super) const TAIL_LINE: usize = 240;

/// How a shared child's start goes.
pub(super) enum Start {
    /// Its `initialize` is sent; these sessions are told when it is ready
    /// (their lists left it out).
    Pending(Vec<Weak<dyn Inbox>>),
    /// It answered: the answer every session opened on it gets.
    Ready(Message),
    /// It refused, ended, or stayed silent past its deadline: why.
    Failed(String),
}

impl Child {
    pub(super) fn idle_for(&self) -> Duration {
        self.used.lock().elapsed()
    }

    /// The answer to a shared child's `initialize`, waiting for it until
    /// `until` at most (never past the child's own deadline): `None` while
    /// it is still starting then.
    pub(super) fn wait_started(&self, until: Instant) -> Option<Result<Message, String>> {
        let until = until.min(self.start_deadline);
        let mut start = self.start.lock();
        loop {
            match &*start {
                Start::Ready(answer) => return Some(Ok(answer.clone())),
                Start::Failed(why) => return Some(Err(why.clone())),
                Start::Pending(_) if Instant::now() >= until => return None,
                Start::Pending(_) => {
                    // A wake-up before `until` looks again; one at it returns above.
                    let _ = self.settled.wait_until(&mut start, until);
                }
            }
        }
    }

    /// Whether a shared child is ready within `within`; still starting then,
    /// `inbox` (if any) is told when it is, once.
    pub(super) fn ready_within(&self, within: Duration, inbox: Option<Weak<dyn Inbox>>) -> Readiness {
        // Settled, or late: opening a session on it says how it went.
        if self.wait_started(Instant::now() + within).is_some() || Instant::now() >= self.start_deadline {
            return Readiness::Ready;
        }
        let mut start = self.start.lock();
        match (&mut *start, inbox) {
            (Start::Pending(waiting), Some(inbox)) => {
                if !waiting.iter().any(|w| w.ptr_eq(&inbox)) {
                    waiting.push(inbox);
                }
                Readiness::Starting
            }
            (Start::Pending(_), None) => Readiness::Starting,
            // Settled meanwhile.
            _ => Readiness::Ready,
        }
    }

    /// Settles a shared child's start, once; the sessions to tell it is ready.
    pub(super) fn settle_start(&self, outcome: Result<Message, String>) -> Vec<Weak<dyn Inbox>> {
        let mut start = self.start.lock();
        let Start::Pending(waiting) = &mut *start else { return Vec::new() };
        let waiting = std::mem::take(waiting);
        *start = match outcome {
            Ok(answer) => Start::Ready(answer),
            Err(why) => Start::Failed(why),
        };
        drop(start);
        self.settled.notify_all();
        waiting
    }

    /// Whether a shared child can serve sessions: it answered `initialize`,
    /// or may still, within its deadline.
    pub(super) fn usable(&self) -> bool {
        match &*self.start.lock() {
            Start::Ready(_) => true,
            Start::Pending(_) => Instant::now() < self.start_deadline,
            Start::Failed(_) => false,
        }
    }

    /// Whether a shared child answered its `initialize`.
    pub(super) fn is_ready(&self) -> bool {
        matches!(&*self.start.lock(), Start::Ready(_))
    }

    /// Why a shared child that cannot serve did not start (`timeout`: its
    /// start's bound).
    pub(super) fn why_not_started(&self, timeout: Duration) -> String {
        match &*self.start.lock() {
            Start::Failed(why) => why.clone(),
            _ => format!(
                "its process did not answer initialize within {} s (start_timeout_secs); it is stopped",
                timeout.as_secs()
            ),
        }
    }

    /// Whether a shared child is still starting.
    pub(super) fn is_starting(&self) -> bool {
        matches!(&*self.start.lock(), Start::Pending(_))
    }

    /// A call begins: the reader thread leaves stdout to the calls a while.
    pub(super) fn began_call(&self) {
        let now = self.started.elapsed().as_micros() as u64 + 1;
        self.last_call.store(now, Ordering::Relaxed);
    }

    /// Whether a call began within `within`.
    pub(super) fn call_began_within(&self, within: Duration) -> bool {
        let last = self.last_call.load(Ordering::Relaxed);
        let now = self.started.elapsed().as_micros() as u64 + 1;
        last != 0 && now.saturating_sub(last) < within.as_micros() as u64
    }

    /// Waits until the reader thread is to read stdout: a call asked it to,
    /// none began within `linger` (the calls read their own answers), or
    /// one waits for an answer (whoever holds stdout reads it; if no one
    /// does, the reader). Within `linger` in any case.
    pub(super) fn reader_turn(&self, linger: Duration) {
        let mut woken = self.reader_wake.lock();
        while !std::mem::take(&mut *woken)
            && !self.stopping.load(Ordering::Acquire)
            && self.call_began_within(linger)
            && !self.calls.awaiting()
        {
            let _ = self.reader_woke.wait_for(&mut woken, linger);
        }
    }

    /// Waits up to `within` for a call to ask the reader thread to read.
    pub(super) fn reader_woken(&self, within: Duration) {
        let mut woken = self.reader_wake.lock();
        if !*woken {
            let _ = self.reader_woke.wait_for(&mut woken, within);
        }
    }

    /// Asks the reader thread to read stdout: a call stopped reading it.
    pub(super) fn wake_reader(&self) {
        *self.reader_wake.lock() = true;
        self.reader_woke.notify_one();
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
    pub(super) fn stop(&self, children: &Children, server_live: &Gauge) -> Option<Signalled> {
        self.stopping.store(true, Ordering::Release);
        drop(self.stdin.lock().take());
        // Its reader reads on to the end of its stdout, now.
        self.wake_reader();
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
        // Its server's count first: whoever reads mcpgate's at 0 reads 0 there too.
        server_live.dec();
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

    /// Keeps `line` among the last lines of its stderr.
    pub(super) fn note_stderr(&self, line: &str) {
        let mut cut = line.trim().to_string();
        if cut.len() > TAIL_LINE {
            let mut at = TAIL_LINE;
            while !cut.is_char_boundary(at) {
                at -= 1;
            }
            cut.truncate(at);
            cut.push('…');
        }
        if cut.is_empty() {
            return;
        }
        let mut tail = self.stderr_tail.lock();
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(cut);
    }

    /// The last lines of its stderr, joined (waiting up to `wait` for its
    /// stderr's thread to read to the end); `None` when it wrote none.
    pub(super) fn last_stderr(&self, wait: Duration) -> Option<String> {
        let deadline = Instant::now() + wait;
        while !self.stderr_done.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let tail = self.stderr_tail.lock();
        (!tail.is_empty()).then(|| tail.iter().map(String::as_str).collect::<Vec<_>>().join(" | "))
    }

    /// Wakes every call waiting on the child with `why`; a start pending
    /// fails so. Its stream is ended in the same step: a call that registers
    /// after is refused (`SessionGone`, a new child takes it), not left
    /// waiting for an answer until its timeout.
    pub(super) fn end_calls(&self, why: &str) {
        let (waiting, _, _) = self.calls.end(why);
        for tx in waiting {
            let _ = tx.send(Incoming::Ended(DownstreamError::Exited(why.to_string())));
        }
        self.settle_start(Err(why.to_string()));
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
pub(super) fn describe(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) if s.code().is_some() => format!("exit status {}", s.code().unwrap_or_default()),
        Some(s) => format!("killed by signal {}", s.signal().unwrap_or_default()),
        None => "exit status unknown".into(),
    }
}
