//! Thread roles: every thread mcpgate starts is spawned here, named
//! `mcpgate-<role>-<detail>` so that `/proc/self/task/*/comm` (15 bytes)
//! still shows the role, with a small stack.

use std::io;
use std::thread::{Builder, JoinHandle, Scope, ScopedJoinHandle};

/// Stack size for every mcpgate thread. The deepest path is serde_json at its
/// recursion limit of 128 plus rustls; 256 KiB leaves room. Only touched
/// pages count towards RSS.
pub(crate) const STACK_BYTES: usize = 256 * 1024;

/// The roles, as they appear in thread names and on the status page.
pub(crate) const ROLES: &[&str] = &[
    "accept", "conn", "reader", "reaper", "signal", "fanout", "close", "state", "notify", "resolve", "stdio", "stderr",
    "spawner", "hold", "watch", "audit", "trace",
];

/// The roles whose threads do part of one request's work (its fan-out to
/// several servers, a held call): they carry the trace context of the
/// thread that starts them, so that the requests they send belong to the
/// request's trace. Others (readers, the reaper) start no trace of anyone.
const CARRY_TRACE: &[&str] = &["fanout", "hold"];

/// Threads whose owner could not wait for them (a reader that did not stop
/// within its bound, a name lookup past its timeout). The reaper joins
/// those that finished, and shutdown joins the rest: every thread is
/// joined, even late.
static LATE: parking_lot::Mutex<Vec<JoinHandle<()>>> = parking_lot::Mutex::new(Vec::new());

/// Past this many threads handed to [`join_later`], handing one more joins
/// those that finished. A thread that ended keeps its stack's touched pages
/// (24 KiB resident, measured) until it is joined: left to the reaper's
/// round, every 5 s, the threads of 2,900 calls a second held 350 MB.
const JOIN_AT: usize = 16;

/// Hands a thread to be joined later, when it has finished; those already
/// finished are joined now once [`JOIN_AT`] wait.
pub(crate) fn join_later(handle: JoinHandle<()>) {
    let ready = {
        let mut list = LATE.lock();
        list.push(handle);
        if list.len() < JOIN_AT {
            return;
        }
        take_finished(&mut list)
    };
    join_all(ready);
}

/// Joins the threads handed to [`join_later`] that have finished.
pub(crate) fn join_late() {
    let ready = take_finished(&mut LATE.lock());
    join_all(ready);
}

/// The threads of `list` that have finished, taken out of it (under the
/// lock; they are joined outside it).
fn take_finished(list: &mut Vec<JoinHandle<()>>) -> Vec<JoinHandle<()>> {
    let (ready, pending) = std::mem::take(list).into_iter().partition(|h| h.is_finished());
    *list = pending;
    ready
}

fn join_all(handles: Vec<JoinHandle<()>>) {
    for handle in handles {
        let _ = handle.join();
    }
}

/// Joins every thread handed to [`join_later`], waiting for them until
/// `deadline` (shutdown); how many were still running then.
pub fn join_late_by(deadline: std::time::Instant) -> usize {
    loop {
        join_late();
        let left = LATE.lock().len();
        if left == 0 || std::time::Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn builder(role: &str, detail: &str) -> Builder {
    debug_assert!(ROLES.contains(&role), "unknown thread role {role}");
    let name = if detail.is_empty() { format!("mcpgate-{role}") } else { format!("mcpgate-{role}-{detail}") };
    Builder::new().name(name).stack_size(STACK_BYTES)
}

/// Starts a thread of `role`; the caller owns the handle and must join it.
pub fn spawn<F, T>(role: &str, detail: &str, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    if CARRY_TRACE.contains(&role)
        && let Some(context) = super::tracecontext::current()
    {
        return builder(role, detail).spawn(move || {
            let _in = super::tracecontext::enter(Some(context));
            f()
        });
    }
    builder(role, detail).spawn(f)
}

/// Starts a scoped thread of `role`, joined when the scope ends.
pub(crate) fn spawn_scoped<'scope, 'env, F, T>(
    scope: &'scope Scope<'scope, 'env>,
    role: &str,
    detail: &str,
    f: F,
) -> io::Result<ScopedJoinHandle<'scope, T>>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    if CARRY_TRACE.contains(&role)
        && let Some(context) = super::tracecontext::current()
    {
        return builder(role, detail).spawn_scoped(scope, move || {
            let _in = super::tracecontext::enter(Some(context));
            f()
        });
    }
    builder(role, detail).spawn_scoped(scope, f)
}

/// Runs `f` on every item, on up to `parallel` scoped threads of `role`;
/// inline when there is one item or a thread cannot be started.
pub(crate) fn for_each_parallel<T: Sync>(role: &str, items: &[T], parallel: usize, f: impl Fn(&T) + Sync) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = parallel.min(items.len());
    if threads <= 1 {
        items.iter().for_each(&f);
        return;
    }
    let next = AtomicUsize::new(0);
    let work = || {
        while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
            f(item);
        }
    };
    std::thread::scope(|s| {
        for i in 0..threads {
            if spawn_scoped(s, role, &i.to_string(), work).is_err() {
                break;
            }
        }
        // Whatever the threads did not take (or could not be started for) runs here.
        work();
    });
}

/// Threads of this process by role, from `/proc/self/task/*/comm`; threads
/// not named by mcpgate count as `other`.
pub(crate) fn count_by_role() -> Vec<(String, u64)> {
    let mut counts: Vec<(String, u64)> = ROLES.iter().map(|r| (r.to_string(), 0)).collect();
    counts.push(("other".into(), 0));
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return counts };
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let role = comm.trim().strip_prefix("mcpgate-").map(|rest| rest.split('-').next().unwrap_or(""));
        let slot = role.and_then(|r| counts.iter().position(|(name, _)| name == r)).unwrap_or(ROLES.len());
        counts[slot].1 += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_survives_the_15_byte_comm_limit() {
        for role in ROLES {
            let name = format!("mcpgate-{role}-some-long-detail");
            let comm = &name[..15.min(name.len())];
            assert_eq!(comm.strip_prefix("mcpgate-").unwrap().split('-').next().unwrap(), *role);
        }
    }

    #[test]
    fn for_each_parallel_visits_every_item_once() {
        let seen = std::sync::Mutex::new(Vec::new());
        let items: Vec<usize> = (0..100).collect();
        for_each_parallel("close", &items, 8, |i| seen.lock().unwrap().push(*i));
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(seen, items);
    }

    #[test]
    fn named_threads_are_counted_by_role() {
        let (started_tx, started) = std::sync::mpsc::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let h = spawn("reaper", "", move || {
            started_tx.send(()).unwrap();
            rx.recv().ok()
        })
        .unwrap();
        started.recv().unwrap();
        let reapers = count_by_role().into_iter().find(|(r, _)| r == "reaper").unwrap().1;
        drop(tx);
        h.join().unwrap();
        assert!(reapers >= 1);
    }
}
