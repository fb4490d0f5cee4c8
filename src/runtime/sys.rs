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

/// Has the program `command` starts killed with SIGKILL when mcpgate dies,
/// even by `kill -9` (`PR_SET_PDEATHSIG`). The signal follows the thread
/// that forked the child, so children are started from one long-lived
/// thread (see `downstream::children`). A child whose parent died before the
/// setting took is refused at once.
pub(crate) fn die_with_parent(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: between fork and exec only async-signal-safe calls are made
    // (prctl, getppid), and no memory is allocated or shared.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(io::Error::other("mcpgate exited while this child started"));
            }
            Ok(())
        });
    }
}

/// Has the program `command` starts begin with no signal blocked. mcpgate
/// blocks SIGTERM, SIGINT and SIGHUP in every thread (see [`block`]), and a
/// signal mask is inherited across fork and exec, which std's `Command`
/// does not reset: a child would never see the SIGTERM of its close path
/// (nor a SIGINT or SIGHUP), and every child that needed a signal would
/// wait a second grace for SIGKILL.
pub(crate) fn unblock_signals(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only async-signal-safe calls are made
    // (sigemptyset, pthread_sigmask) on a local set; nothing is allocated.
    unsafe {
        command.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(())
        });
    }
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
