#![allow(unsafe_code)]
//! The only unsafe code in mcpgate: the OS calls std does not offer.
//! Children started as `posix_spawn` starts them, but killed with mcpgate
//! ([`spawn`]). Signal handling: SIGTERM, SIGINT and SIGHUP are blocked in
//! every thread (the mask is set in `main` before any thread starts, and
//! threads inherit it), and one thread takes them with `sigwait`, so no
//! handler ever runs asynchronously.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{ChildStderr, ChildStdin, ChildStdout, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};

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
/// musl has no `malloc_trim`: its allocator (mallocng) returns freed
/// groups to the kernel by itself, so there it does nothing.
pub(crate) fn release_free_memory() {
    // SAFETY: malloc_trim only walks glibc's own heap metadata.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Two malloc arenas instead of up to eight per core: with one reader
/// thread per downstream session, per-thread arenas kept freed memory that
/// `malloc_trim` did not give back (17 MB after 20 sessions that had read
/// long events were closed, against none with two arenas). Call before
/// threads start. musl's allocator has one heap under one lock and no
/// `mallopt`: nothing to limit there.
pub fn limit_malloc_arenas() {
    // SAFETY: mallopt only sets an allocator parameter; M_ARENA_MAX takes a count.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Fills `buf` from the kernel's random source (`getrandom(2)`): no file
/// descriptor needed, so session ids can still be minted when descriptors
/// run out (opening /dev/urandom then failed every `initialize`).
pub(crate) fn random(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: the pointer and length describe `rest`, a live mutable slice.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        filled += n as usize;
    }
    Ok(())
}

/// Raises the soft limit on open files to the hard limit, as systemd's
/// own services and most servers do (the soft limit is often 1024 for
/// compatibility with `select`, which mcpgate does not use). Returns the
/// limit in force afterwards.
pub fn raise_fd_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a live local of the type getrlimit fills.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
        // SAFETY: `raised` is a live local; setrlimit only reads it.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    Ok(rlim(limit.rlim_cur))
}

/// An `rlim_t` as u64 (it is u32 on some 32-bit targets).
#[allow(clippy::unnecessary_cast)]
fn rlim(value: libc::rlim_t) -> u64 {
    value as u64
}

/// The user id this process acts as (what owns the files it writes).
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// The soft limit on open files now.
pub(crate) fn fd_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a live local of the type getrlimit fills.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return u64::MAX;
    }
    rlim(limit.rlim_cur)
}

/// Descriptors open in this process, from `/proc/self/fd`; `None` when
/// that cannot be read (no descriptor left to read it with, say).
pub(crate) fn open_fds() -> Option<u64> {
    // One of the entries is the descriptor read_dir itself holds.
    std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count().saturating_sub(1) as u64)
}

/// Makes closing `socket` send a reset and drop unsent data (`SO_LINGER`
/// with a zero timeout): for a client that stopped taking its answer,
/// whose megabytes would otherwise sit in kernel buffers.
pub fn reset_on_close(socket: &impl std::os::fd::AsRawFd) {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: the descriptor is open (borrowed from a live socket) and
    // `linger` is a live local of the size passed.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// Turns on TCP keepalive for `socket`: after `idle` without traffic the
/// kernel probes the peer every `interval`, and `count` probes unanswered
/// end the connection (a read then fails): a peer that vanished without a
/// FIN (a host lost behind a partition, or rebooted) is found even while
/// nothing is read or written.
pub(crate) fn keep_alive(
    socket: &impl std::os::fd::AsRawFd,
    idle: std::time::Duration,
    interval: std::time::Duration,
    count: u32,
) -> io::Result<()> {
    let fd = socket.as_raw_fd();
    let set = |level: libc::c_int, name: libc::c_int, value: u64| -> io::Result<()> {
        let value = libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX);
        // SAFETY: the descriptor is open (borrowed from a live socket) and
        // `value` is a live local of the size passed.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, idle.as_secs().max(1))?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, interval.as_secs().max(1))?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, u64::from(count.max(1)))
}

/// How many more threads this process may start: the tighter of
/// `RLIMIT_NPROC` (less this process's threads; under systemd's
/// `DynamicUser` the user runs nothing else) and its cgroup's `pids.max`
/// (systemd's `TasksMax`). `None` when neither limits it.
pub(crate) fn thread_headroom() -> Option<u64> {
    let threads = std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count() as u64);
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a live local of the type getrlimit fills.
    let by_rlimit = (unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut limit) } == 0
        && limit.rlim_cur != libc::RLIM_INFINITY)
        .then(|| rlim(limit.rlim_cur).saturating_sub(threads));
    let by_cgroup = cgroup_pids_left();
    match (by_rlimit, by_cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `pids.max - pids.current` of this process's cgroup (v2), if it has a limit.
fn cgroup_pids_left() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let dir = std::path::Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let max: u64 = std::fs::read_to_string(dir.join("pids.max")).ok()?.trim().parse().ok()?;
    let current: u64 = std::fs::read_to_string(dir.join("pids.current")).ok()?.trim().parse().ok()?;
    Some(max.saturating_sub(current))
}

/// A program to start as a child, made ready before it is started: the
/// child shares mcpgate's memory until it execs, so it only reads this.
pub(crate) struct Exec {
    /// The file to exec.
    path: CString,
    /// `argv`: the program as configured, then its arguments.
    argv: Vec<CString>,
    /// The same for `/bin/sh`, if the file turns out to be a script without
    /// a `#!` line (`ENOEXEC`), as `execvp` does.
    sh_argv: Vec<CString>,
    /// `NAME=value`, the whole environment.
    envp: Vec<CString>,
    cwd: Option<CString>,
}

impl Exec {
    /// The file `path` (found where `program` is: see
    /// `StdioConfig::find_program`) as `program` with `args`, with exactly
    /// the environment `env`, in `cwd` (mcpgate's own if `None`).
    pub(crate) fn new(
        path: &Path,
        program: &str,
        args: &[String],
        env: &BTreeMap<OsString, OsString>,
        cwd: Option<&Path>,
    ) -> io::Result<Exec> {
        let nul = |what: &dyn std::fmt::Display| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("{what} holds a NUL byte"))
        };
        let c = |s: &OsStr, what: &str| CString::new(s.as_bytes()).map_err(|_| nul(&what));
        let args: Vec<CString> = args.iter().map(|a| c(OsStr::new(a), "an argument")).collect::<Result<_, _>>()?;
        // Found from mcpgate's directory, exec'd from `cwd`.
        let path = if path.is_relative() { std::env::current_dir()?.join(path) } else { path.to_path_buf() };
        let path = c(path.as_os_str(), "the program")?;
        let argv = std::iter::once(c(OsStr::new(program), "the program")?).chain(args.iter().cloned()).collect();
        let sh_argv = [c"/bin/sh".to_owned(), path.clone()].into_iter().chain(args).collect();
        let envp = env
            .iter()
            .map(|(name, value)| {
                let pair = [name.as_bytes(), b"=", value.as_bytes()].concat();
                CString::new(pair).map_err(|_| nul(&format_args!("the variable {}", name.to_string_lossy())))
            })
            .collect::<Result<_, _>>()?;
        let cwd = cwd.map(|dir| c(dir.as_os_str(), "the directory")).transpose()?;
        Ok(Exec { path, argv, sh_argv, envp, cwd })
    }
}

/// A child started by [`spawn`], until it is waited for.
#[derive(Debug)]
pub(crate) struct Process(u32);

impl Process {
    pub(crate) fn id(&self) -> u32 {
        self.0
    }

    /// Waits for it to end, and reaps it.
    pub(crate) fn wait(&mut self) -> io::Result<ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        let mut status = 0;
        loop {
            // SAFETY: `status` is a live local that waitpid only writes.
            if unsafe { libc::waitpid(self.0 as libc::pid_t, &mut status, 0) } >= 0 {
                return Ok(ExitStatus::from_raw(status));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// A child just started, with the parent's ends of its stdin, stdout and stderr.
pub(crate) struct Spawned {
    pub(crate) process: Process,
    pub(crate) stdin: ChildStdin,
    pub(crate) stdout: ChildStdout,
    pub(crate) stderr: ChildStderr,
}

/// Bytes of the stack the child runs on until it execs: what [`child`]
/// calls needs a few hundred.
const CHILD_STACK: usize = 64 * 1024;

/// What the child reads (fds and pointers into an [`Exec`]), and where it
/// leaves why its exec failed.
struct Handoff {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    sh_argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    /// Its stdin, stdout and stderr, each at 3 or above.
    fds: [libc::c_int; 3],
    /// The signals to set back to their default: see [`to_default`].
    defaults: *const libc::c_int,
    defaults_len: usize,
    parent: libc::pid_t,
    error: AtomicI32,
}

/// Starts `exec` with its stdin, stdout and stderr piped, as a process
/// group of its own (its group is signalled on the close path), with no
/// signal blocked or handled (mcpgate blocks SIGTERM, SIGINT and SIGHUP in
/// every thread, and a mask is inherited across exec), SIGPIPE back to its
/// default, and killed with SIGKILL when the calling thread ends, even by
/// `kill -9` of mcpgate (`PR_SET_PDEATHSIG`: it follows the thread that
/// started the child, so children are started from one long-lived thread,
/// see `downstream::children`).
///
/// As `posix_spawn` does, the child is a `clone` that shares mcpgate's
/// memory and runs while the calling thread waits, until it execs
/// (`CLONE_VM | CLONE_VFORK`): no copy of mcpgate's page tables as a `fork`
/// makes, nor the copy-on-write faults every thread of mcpgate then takes
/// (`std::process::Command` forks when it is given a `pre_exec`, which
/// `PR_SET_PDEATHSIG` needs).
pub(crate) fn spawn(exec: &Exec) -> io::Result<Spawned> {
    let (stdin_read, stdin_write) = pipe()?;
    let (stdout_read, stdout_write) = pipe()?;
    let (stderr_read, stderr_write) = pipe()?;
    let pointers = |strings: &[CString]| -> Vec<*const libc::c_char> {
        strings.iter().map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect()
    };
    let (argv, sh_argv, envp) = (pointers(&exec.argv), pointers(&exec.sh_argv), pointers(&exec.envp));
    let defaults = to_default();
    let handoff = Handoff {
        path: exec.path.as_ptr(),
        argv: argv.as_ptr(),
        sh_argv: sh_argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: exec.cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
        fds: [stdin_read.as_raw_fd(), stdout_write.as_raw_fd(), stderr_write.as_raw_fd()],
        defaults: defaults.as_ptr(),
        defaults_len: defaults.len(),
        // SAFETY: getpid has no memory effects.
        parent: unsafe { libc::getpid() },
        error: AtomicI32::new(0),
    };
    // Never read before the child writes it: left as allocated.
    let mut stack: Vec<u8> = Vec::with_capacity(CHILD_STACK);
    // SAFETY: the child runs `child` on `stack` (its top, 16-byte aligned;
    // stacks grow down on every target mcpgate builds for) while this thread
    // waits (CLONE_VFORK), and only reads `handoff` and what it points to,
    // which outlive the call, but for `error`, an atomic. Every signal is
    // blocked in this thread across the clone, so the child starts with
    // them blocked and no handler of mcpgate's runs in it; the old mask is
    // set back after.
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(CHILD_STACK);
        let top = top.sub(top as usize % 16);
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            child,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::addr_of!(handoff).cast_mut().cast(),
        );
        let cloned = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(cloned);
        }
        pid
    };
    drop(stack);
    let error = handoff.error.load(Ordering::Acquire);
    if error != 0 {
        // It exited without exec: reaped here, as no one else knows of it.
        let _ = Process(pid as u32).wait();
        return Err(io::Error::from_raw_os_error(error));
    }
    drop((stdin_read, stdout_write, stderr_write));
    Ok(Spawned {
        process: Process(pid as u32),
        stdin: ChildStdin::from(stdin_write),
        stdout: ChildStdout::from(stdout_read),
        stderr: ChildStderr::from(stderr_read),
    })
}

/// The child of [`spawn`], from its clone to its exec, on mcpgate's memory:
/// only system calls, nothing allocated, no lock taken. Its signals are all
/// blocked until, every handler set back to the default, it unblocks them.
extern "C" fn child(handoff: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `spawn` passes a `Handoff` that outlives the child's exec.
    let h = unsafe { &*(handoff as *const Handoff) };
    let fail = |h: &Handoff| -> ! {
        let errno = io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL);
        h.error.store(if errno == 0 { libc::EINVAL } else { errno }, Ordering::Release);
        // SAFETY: _exit ends this process only, without running anything of mcpgate's.
        unsafe { libc::_exit(127) }
    };
    // SAFETY: plain system calls on integers, live locals, and the
    // NUL-terminated strings and arrays `Exec` holds.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        for &signal in std::slice::from_raw_parts(h.defaults, h.defaults_len) {
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
        if libc::setpgid(0, 0) != 0 {
            fail(h);
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
            fail(h);
        }
        // mcpgate died before the setting took: nothing would ever kill it.
        if libc::getppid() != h.parent {
            *libc::__errno_location() = libc::ESRCH;
            fail(h);
        }
        for (target, &fd) in h.fds.iter().enumerate() {
            if libc::dup2(fd, target as libc::c_int) < 0 {
                fail(h);
            }
        }
        if !h.cwd.is_null() && libc::chdir(h.cwd) != 0 {
            fail(h);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(h.path, h.argv, h.envp);
        if *libc::__errno_location() == libc::ENOEXEC {
            libc::execve(c"/bin/sh".as_ptr(), h.sh_argv, h.envp);
        }
        fail(h)
    }
}

/// The signals a child sets back to their default before it execs: SIGPIPE
/// (which std ignores in every Rust program, and a child would inherit
/// ignored), and those with a handler in mcpgate (std's for SIGSEGV and
/// SIGBUS), which must not run in a child on mcpgate's memory. Read once:
/// mcpgate sets no handler after it starts (it takes its signals with
/// `sigwait`).
fn to_default() -> &'static [libc::c_int] {
    static SIGNALS: std::sync::OnceLock<Vec<libc::c_int>> = std::sync::OnceLock::new();
    SIGNALS.get_or_init(|| {
        // 64 on Linux (`_NSIG - 1`); glibc refuses the two it keeps for itself.
        (1..=64)
            .filter(|&signal| {
                // SAFETY: a sigaction is plain data, valid zeroed.
                let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
                // SAFETY: sigaction only writes the current action into a live local.
                let handled = unsafe { libc::sigaction(signal, std::ptr::null(), &mut action) } == 0
                    && action.sa_sigaction != libc::SIG_DFL
                    && action.sa_sigaction != libc::SIG_IGN;
                handled || signal == libc::SIGPIPE
            })
            .collect()
    })
}

/// A pipe, both ends close-on-exec and at 3 or above (so that the child's
/// `dup2` onto 0, 1 and 2 never lands on another of its ends).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a live local array of the two ints pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two new descriptors that nothing else owns.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(read)?, above_stdio(write)?))
}

fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: fcntl duplicates an open descriptor `fd` owns.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if moved < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: F_DUPFD_CLOEXEC returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

/// Sends `signal` to every process of the group `pgid` (a child started as
/// a group leader, with what it started).
pub(crate) fn signal_group(pgid: u32, signal: ChildSignal) -> io::Result<()> {
    let signal = match signal {
        ChildSignal::Terminate => libc::SIGTERM,
        ChildSignal::Kill => libc::SIGKILL,
    };
    // SAFETY: kill has no memory effects; a negative pid names a group.
    if unsafe { libc::kill(-(pgid as libc::pid_t), signal) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the child `pid` has ended, without reaping it (`waitid` with
/// `WNOWAIT`): until it is waited for, its pid, hence the id of the group it
/// leads, cannot be reused. A pid that is no child to wait for (already
/// reaped) counts as ended.
pub(crate) fn has_exited(pid: u32) -> bool {
    loop {
        // SAFETY: siginfo_t is plain data; zeroed, its pid reads 0 when no
        // child has ended (WNOHANG), and waitid only writes into it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        // SAFETY: `info` is a live local of the type waitid fills.
        if unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) } == 0 {
            // SAFETY: waitid filled `info` (or left it zeroed).
            return unsafe { info.si_pid() } != 0;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return true;
        }
    }
}

/// The signals mcpgate sends its children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChildSignal {
    Terminate,
    Kill,
}

/// Makes writes to `fd` (a child's stdin) return at once instead of blocking.
pub(crate) fn set_nonblocking(fd: &impl std::os::fd::AsRawFd) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl on an open descriptor borrowed from a live owner.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Waits until `fd` has something to read (or its end), at most `timeout`;
/// false on timeout.
pub(crate) fn wait_readable(fd: &impl std::os::fd::AsRawFd, timeout: std::time::Duration) -> io::Result<bool> {
    wait_for(fd, libc::POLLIN, timeout)
}

/// Waits until `fd` can be written, at most `timeout`; false on timeout.
pub(crate) fn wait_writable(fd: &impl std::os::fd::AsRawFd, timeout: std::time::Duration) -> io::Result<bool> {
    wait_for(fd, libc::POLLOUT, timeout)
}

/// Waits until `fd` is ready for `events`, at most `timeout`; false on
/// timeout or on a signal.
fn wait_for(fd: &impl std::os::fd::AsRawFd, events: libc::c_short, timeout: std::time::Duration) -> io::Result<bool> {
    let mut poll = libc::pollfd { fd: fd.as_raw_fd(), events, revents: 0 };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `poll` is a live local and the count is 1.
    let n = unsafe { libc::poll(&mut poll, 1, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(e) };
    }
    Ok(n > 0)
}

/// One byte peeked without waiting: how many are there (0: the peer
/// closed), or why none could be. Nothing is consumed, and the socket's
/// blocking mode (shared with every clone of it) is left alone.
fn peek(socket: &impl std::os::fd::AsRawFd) -> io::Result<usize> {
    let mut byte = [0u8; 1];
    // SAFETY: `byte` is a live local buffer of the length given.
    let n = unsafe { libc::recv(socket.as_raw_fd(), byte.as_mut_ptr().cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Whether the peer of `socket` has closed its side: a peek that finds the
/// end of the stream. Data waiting (a pipelined request) or nothing yet
/// both mean it is still there.
pub(crate) fn peer_closed(socket: &impl std::os::fd::AsRawFd) -> bool {
    match peek(socket) {
        Ok(n) => n == 0,
        Err(e) => !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted),
    }
}

/// Whether a kept-alive connection to a server can carry another request:
/// open, and nothing waiting on it (bytes nobody asked for mean the
/// connection is out of step).
pub(crate) fn idle_and_open(socket: &impl std::os::fd::AsRawFd) -> bool {
    // A peek that does not wait is interrupted only by a signal that came
    // in the instant it ran: tried a few times, then taken as not reusable.
    for _ in 0..4 {
        match peek(socket) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return e.kind() == io::ErrorKind::WouldBlock,
            Ok(_) => return false,
        }
    }
    false
}

/// Makes mcpgate the reaper of what its children leave behind
/// (`PR_SET_CHILD_SUBREAPER`): a process a stdio server started, whose
/// parent ended, becomes mcpgate's child instead of init's, so that mcpgate
/// can still find it, stop it and reap it. A grandchild that left its
/// group and session (`setsid`) escaped every signal to the group, and
/// outlived its session and mcpgate's own exit.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes a plain integer flag.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reaps `pid`, a child of mcpgate's, if it has ended (`waitpid` with
/// `WNOHANG`); true when it is reaped now or is no child of mcpgate's.
pub(crate) fn reap(pid: u32) -> bool {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a live local that waitpid only writes.
        let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
        match rc {
            0 => return false,
            -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => return true,
        }
    }
}

/// Sends SIGKILL to the one process `pid`.
pub(crate) fn kill(pid: u32) -> io::Result<()> {
    // SAFETY: kill has no memory effects; a positive pid names one process.
    if unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::time::{Duration, Instant};

    use super::*;

    fn exec(program: &str, args: &[&str], env: &[(&str, &str)], cwd: Option<&Path>) -> Exec {
        let env = env.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))).collect();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        Exec::new(Path::new(program), program, &args, &env, cwd).expect("exec")
    }

    fn output(mut spawned: Spawned) -> (String, String, ExitStatus) {
        drop(spawned.stdin);
        let (mut out, mut err) = (String::new(), String::new());
        spawned.stdout.read_to_string(&mut out).expect("stdout");
        spawned.stderr.read_to_string(&mut err).expect("stderr");
        (out, err, spawned.process.wait().expect("wait"))
    }

    /// A field of `/proc/PID/status`, such as `SigBlk`.
    fn status_field(pid: u32, name: &str) -> String {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let line = status.lines().find(|l| l.starts_with(&format!("{name}:"))).expect("field");
        line[name.len() + 1..].trim().to_string()
    }

    #[test]
    fn a_child_gets_exactly_its_arguments_environment_and_directory() {
        let dir = std::env::temp_dir();
        let script = "printf '%s|' \"$0\" \"$@\"; pwd; env | sort; echo oops >&2; exit 3";
        let spawned =
            spawn(&exec("/bin/sh", &["-c", script, "zero", "a b", ""], &[("A", "1"), ("B", "x=y")], Some(&dir)))
                .expect("spawn");
        let (out, err, status) = output(spawned);
        let dir = dir.canonicalize().expect("dir");
        // sh sets PWD and may add SHLVL and `_` of its own: only A and B come from mcpgate.
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some(format!("zero|a b||{}", dir.display()).as_str()), "{out}");
        let env: Vec<&str> =
            lines.filter(|l| !l.starts_with("PWD=") && !l.starts_with("SHLVL=") && !l.starts_with("_=")).collect();
        assert_eq!(env, ["A=1", "B=x=y"], "{out}");
        assert_eq!((err.as_str(), status.code()), ("oops\n", Some(3)));
    }

    #[test]
    fn a_child_starts_in_its_own_group_with_no_signal_blocked_or_ignored() {
        // As in mcpgate: SIGTERM blocked in the starting thread, which
        // lives on until the child is checked (the child dies with it).
        let (started_tx, started) = std::sync::mpsc::channel();
        let (done, done_rx) = std::sync::mpsc::channel::<()>();
        let starter = std::thread::spawn(move || {
            let _blocked = block().expect("block");
            started_tx.send(spawn(&exec("/bin/sh", &["-c", "echo ready; read line"], &[], None))).expect("send");
            let _ = done_rx.recv();
        });
        let mut spawned = started.recv().expect("started").expect("spawn");
        let pid = spawned.process.id();
        let mut ready = String::new();
        BufReader::new(&mut spawned.stdout).read_line(&mut ready).expect("ready");
        assert_eq!(ready, "ready\n");
        assert_eq!(status_field(pid, "SigBlk"), "0000000000000000");
        // std ignores SIGPIPE in every Rust program: the child has it back.
        // What was ignored before mcpgate started stays ignored, as exec keeps it.
        let ignored = |pid: u32| u64::from_str_radix(&status_field(pid, "SigIgn"), 16).expect("hex");
        let sigpipe = 1u64 << (libc::SIGPIPE - 1);
        assert_ne!(ignored(std::process::id()) & sigpipe, 0);
        assert_eq!(ignored(pid), ignored(std::process::id()) & !sigpipe);
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        let pgrp: u32 = stat[stat.rfind(')').expect(")") + 2..].split(' ').nth(2).expect("pgrp").parse().expect("n");
        assert_eq!(pgrp, pid);
        let _ = spawned.stdin.write_all(b"\n");
        assert_eq!(output(spawned).2.code(), Some(0));
        drop(done);
        starter.join().expect("starter");
    }

    #[test]
    fn a_child_dies_with_the_thread_that_started_it() {
        // PR_SET_PDEATHSIG follows the starting thread: when it ends, SIGKILL.
        let spawned = std::thread::spawn(|| spawn(&exec("/bin/sleep", &["30"], &[], None)).expect("spawn"))
            .join()
            .expect("thread");
        let pid = spawned.process.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !has_exited(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let (_, _, status) = output(spawned);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    }

    #[test]
    fn a_script_without_a_shebang_runs_with_sh_and_a_failed_exec_is_an_error() {
        let dir = std::env::temp_dir().join(format!("mcpgate-spawn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let script = dir.join("script");
        std::fs::write(&script, "echo \"script $1\"\n").expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let spawned = spawn(&exec(script.to_str().expect("utf-8"), &["one"], &[], None)).expect("spawn");
        assert_eq!(output(spawned).0, "script one\n");
        // A directory cannot be exec'd: the error is execve's, and the child is reaped.
        let e = spawn(&exec(dir.to_str().expect("utf-8"), &[], &[], None)).err().expect("refused");
        assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
        let e = spawn(&exec("/bin/sh", &[], &[], Some(&dir.join("none")))).err().expect("refused");
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
        std::fs::remove_dir_all(&dir).expect("clean");
    }
}
