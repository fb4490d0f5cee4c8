#![allow(unsafe_code)]
//! The only unsafe code in mcpgate: signal handling, which std does not
//! offer. SIGTERM, SIGINT and SIGHUP are blocked in every thread (the mask
//! is set in `main` before any thread starts, and threads inherit it), and
//! one thread takes them with `sigwait`, so no handler ever runs
//! asynchronously.

use std::io;

/// A signal mcpgate acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Terminate,
    Interrupt,
    Hangup,
}

/// The set of signals mcpgate takes, blocked in this thread.
pub struct Signals(libc::sigset_t);

// SAFETY: a sigset_t is plain data with no pointers.
unsafe impl Send for Signals {}

/// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread and in every
/// thread it starts afterwards. Call it first thing in `main`.
pub fn block() -> io::Result<Signals> {
    // SAFETY: sigset_t is a plain C struct that sigemptyset initialises;
    // the pointers passed are to live locals.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, signal);
        }
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(Signals(set))
    }
}

impl Signals {
    /// Waits until one of the signals arrives.
    pub fn wait(&self) -> io::Result<Signal> {
        loop {
            let mut signal: libc::c_int = 0;
            // SAFETY: the set was initialised by `block`; `signal` is a live local.
            let rc = unsafe { libc::sigwait(&self.0, &mut signal) };
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            match signal {
                libc::SIGTERM => return Ok(Signal::Terminate),
                libc::SIGINT => return Ok(Signal::Interrupt),
                libc::SIGHUP => return Ok(Signal::Hangup),
                _ => continue,
            }
        }
    }
}

/// Sends SIGTERM to this process: wakes the thread in [`Signals::wait`]
/// when mcpgate stops for another reason.
pub fn terminate_self() {
    // SAFETY: kill with our own pid and a valid signal number has no memory effects.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
}

/// Gives memory that glibc's allocator holds free back to the kernel, so
/// that RSS follows the sessions that are live after many have closed.
pub fn release_free_memory() {
    // SAFETY: malloc_trim only walks glibc's own heap metadata.
    unsafe {
        libc::malloc_trim(0);
    }
}
