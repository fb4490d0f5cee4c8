//! A child's stdout: the line being read from it, what it is charged,
//! and how its reading ends. Held by whoever reads it (`reader.rs`): the
//! child's reader thread, or a call reading its own answer there.

use std::io::{self, BufRead, BufReader};
use std::process::ChildStdout;
use std::time::{Duration, Instant};

use crate::runtime::memory::Charge;
use crate::runtime::sys;

/// A child's stdout, and the line being read from it: held by whoever
/// reads it, its reader thread or a call (`reader.rs`, `Turn`). What one of them
/// left half-read, the next goes on with.
pub(super) struct Stdout {
    pub(super) reader: BufReader<ChildStdout>,
    line: Vec<u8>,
    /// The line's bytes past 64 KiB, charged to `max_memory_mb` while read.
    charge: Charge,
    max: usize,
    /// Why it ended, once it did: said again to whoever reads next.
    ended: Option<String>,
}

impl Stdout {
    pub(super) fn new(stdout: ChildStdout, max: usize) -> Stdout {
        Stdout {
            reader: BufReader::with_capacity(8 * 1024, stdout),
            line: Vec::new(),
            charge: Charge::empty(),
            max,
            ended: None,
        }
    }
}

/// What one read of stdout got.
pub(super) enum Got {
    /// A whole line, without its `\n`, and what it was charged while read
    /// (its bytes past 64 KiB), to hold as long as the line is held.
    Line(Vec<u8>, Charge),
    /// Nothing within the wait (a line may be half-read).
    Quiet,
    /// The stream ended, why: then the child is gone.
    End(String),
}

impl Stdout {
    /// Reads on until a whole line, `wait` in all (a line that trickles in
    /// is read on by the next call), or the end of the stream (or of the
    /// child `pid`, whose stdout another process may hold open: `npx`, a
    /// shell without `exec`).
    pub(super) fn next(&mut self, pid: u32, wait: Duration) -> Got {
        if let Some(why) = &self.ended {
            return Got::End(why.clone());
        }
        match self.read_line(pid, wait) {
            Ok(Some((line, charge))) => Got::Line(line, charge),
            Ok(None) => Got::Quiet,
            Err(why) => {
                // What was half-read is given back: nothing more is read.
                self.line = Vec::new();
                self.charge = Charge::empty();
                self.ended = Some(why.clone());
                Got::End(why)
            }
        }
    }

    fn read_line(&mut self, pid: u32, wait: Duration) -> Result<Option<(Vec<u8>, Charge)>, String> {
        let failed = |e: io::Error| format!("reading its stdout failed: {e}");
        let until = Instant::now() + wait;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if self.reader.buffer().is_empty() && !sys::wait_readable(self.reader.get_ref(), left).map_err(failed)? {
                if sys::has_exited(pid) {
                    return Err("it exited; a process it started holds its stdout".to_string());
                }
                return Ok(None);
            }
            let buf = match self.reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(failed(e)),
            };
            if buf.is_empty() {
                return Err("it closed its stdout".to_string());
            }
            let (take, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(at) => (at, true),
                None => (buf.len(), false),
            };
            if self.line.len() + take > self.max {
                return Err(failed(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a message larger than {} bytes", self.max),
                )));
            }
            if self.line.len() + take > 64 * 1024 && !self.charge.grow(take) {
                return Err(failed(io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    "mcpgate holds its limit of max_memory_mb",
                )));
            }
            self.line.extend_from_slice(&buf[..take]);
            self.reader.consume(take + usize::from(done));
            if done {
                let charge = std::mem::replace(&mut self.charge, Charge::empty());
                return Ok(Some((std::mem::take(&mut self.line), charge)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    use super::*;

    /// A shell running `script`, its pid, and its stdout read in lines of at most `max` bytes.
    fn sh(script: &str, max: usize) -> (std::process::Child, u32, Stdout) {
        let mut process = Command::new("sh").args(["-c", script]).stdout(Stdio::piped()).spawn().expect("sh");
        let stdout = Stdout::new(process.stdout.take().expect("its stdout"), max);
        let pid = process.id();
        (process, pid, stdout)
    }

    /// Whoever holds stdout next goes on with the line the last holder
    /// left half-read, and its end is said to every holder after.
    #[test]
    fn a_half_read_line_is_finished_by_the_next_read_and_the_end_is_said_again() {
        let (mut process, pid, mut stdout) = sh("printf '{\"a\":1}\\n{\"b\"'; sleep 0.5; printf ':2}\\n'", 1024);
        let line = |got: Got| match got {
            Got::Line(line, _) => String::from_utf8(line).expect("text"),
            Got::Quiet => "quiet".into(),
            Got::End(why) => format!("end: {why}"),
        };
        assert_eq!(line(stdout.next(pid, Duration::from_secs(5))), r#"{"a":1}"#);
        assert_eq!(line(stdout.next(pid, Duration::from_millis(50))), "quiet", "half a line is not a line");
        assert_eq!(line(stdout.next(pid, Duration::from_secs(5))), r#"{"b":2}"#, "the half read before goes first");
        let end = line(stdout.next(pid, Duration::from_secs(5)));
        assert!(end == "end: it closed its stdout" || end.starts_with("end: it exited"), "{end}");
        assert_eq!(line(stdout.next(pid, Duration::from_secs(5))), end, "said again");
        let _ = process.wait();
    }

    /// A long line comes with what it was charged while read (its bytes
    /// past 64 KiB), for whoever holds it next; a short one with none.
    #[test]
    fn a_long_line_comes_with_its_charge() {
        let (mut process, pid, mut stdout) = sh("printf '{}\n'; head -c 200000 /dev/zero | tr '\\0' x; echo", 1 << 20);
        match stdout.next(pid, Duration::from_secs(5)) {
            Got::Line(line, charge) => assert_eq!((line.len(), charge.bytes()), (2, 0)),
            _ => panic!("a line"),
        }
        match stdout.next(pid, Duration::from_secs(5)) {
            Got::Line(line, charge) => {
                assert_eq!(line.len(), 200_000);
                assert!((200_000 - 64 * 1024..=200_000).contains(&charge.bytes()), "{}", charge.bytes());
            }
            _ => panic!("a line of 200,000 bytes"),
        }
        assert_eq!(stdout.charge.bytes(), 0, "handed on, not kept");
        let _ = process.wait();
    }

    /// A line past `max_message_bytes` ends the stream, and what was read
    /// of it is given back then, not when the child is dropped.
    #[test]
    fn a_line_too_long_ends_the_stream_and_its_bytes_are_let_go() {
        let (mut process, pid, mut stdout) = sh("printf '0123456789'; sleep 0.2; printf '0123456789\n'", 16);
        assert!(matches!(stdout.next(pid, Duration::from_millis(100)), Got::Quiet));
        assert_eq!(stdout.line.len(), 10, "half a line held");
        match stdout.next(pid, Duration::from_secs(5)) {
            Got::End(why) => assert!(why.contains("larger than 16 bytes"), "{why}"),
            _ => panic!("a line past 16 bytes must end the stream"),
        }
        assert_eq!((stdout.line.capacity(), stdout.charge.bytes()), (0, 0));
        let _ = process.wait();
    }
}
