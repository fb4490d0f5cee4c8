//! Calls of the 2026-07-28 era that run on the connection thread that read
//! them. That thread waits on the server, so it cannot see its client
//! leave; in this era closing the answer's stream is the cancel. One
//! watcher thread looks at every such call's client every 250 ms and
//! cancels the calls whose client left. It starts with the first call and
//! ends after a quiet second, so an idle mcpgate runs no thread for it,
//! and a call costs an insert and a remove in a table, not a thread.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;

use crate::http::Client;
use crate::runtime::threads;
use crate::session::Session;

/// How often the watcher looks.
const LOOK: Duration = Duration::from_millis(250);
/// How long the watcher stays with no call to watch before it ends.
const QUIET: Duration = Duration::from_secs(1);

/// A call being watched: its client's connection, and what cancels it.
struct Watched {
    client: Client,
    pool: Arc<Session>,
    call_id: Value,
}

#[derive(Default)]
struct State {
    calls: HashMap<u64, Watched>,
    /// The watcher thread: the last one started, joined once another is.
    thread: Option<JoinHandle<()>>,
    /// Whether it runs: it says so itself, under the lock, as it ends.
    running: bool,
    stopping: bool,
}

/// The calls running on their connection thread, and their watcher.
#[derive(Default)]
pub(in crate::gateway) struct Watch {
    /// Guards the table and the watcher's handle; held to add, remove or
    /// list, never across a look at a socket or a cancel.
    state: Arc<Mutex<State>>,
}

/// A call watched until this is dropped.
pub(in crate::gateway) struct Watching {
    state: Arc<Mutex<State>>,
    number: u64,
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.state.lock().calls.remove(&self.number);
    }
}

impl Watch {
    /// Watches call `number` of `pool` (its id there `call_id`) until the
    /// guard is dropped; `cancel` ends it when its client leaves. Without a
    /// client connection (a test's request) or a watcher thread (none can
    /// start now), the call runs unwatched: it ends when its server answers.
    pub(crate) fn add(
        &self,
        number: u64,
        client: Option<&Client>,
        pool: &Arc<Session>,
        call_id: &Value,
        cancel: fn(&Session, &Value, &str),
    ) -> Watching {
        let guard = Watching { state: self.state.clone(), number };
        let Some(client) = client else { return guard };
        let mut st = self.state.lock();
        if st.stopping {
            return guard;
        }
        st.calls.insert(number, Watched { client: client.clone(), pool: pool.clone(), call_id: call_id.clone() });
        if !st.running {
            if let Some(done) = st.thread.take() {
                threads::join_later(done);
            }
            let state = self.state.clone();
            match threads::spawn("watch", "", move || watch(&state, cancel)) {
                Ok(handle) => {
                    st.thread = Some(handle);
                    st.running = true;
                }
                Err(e) => crate::limited!(
                    warn,
                    "no thread to watch calls of protocol 2026-07-28 ({e}): a client that leaves does not cancel its call"
                ),
            }
        }
        guard
    }

    /// Stops the watcher (shutdown); its thread is joined with the late ones.
    pub(crate) fn stop(&self) {
        let mut st = self.state.lock();
        st.stopping = true;
        st.calls.clear();
        if let Some(thread) = st.thread.take() {
            threads::join_later(thread);
        }
    }
}

/// The watcher: looks at each call's client, cancels those that left, and
/// ends after [`QUIET`] with nothing to watch.
fn watch(state: &Mutex<State>, cancel: fn(&Session, &Value, &str)) {
    let mut quiet_since = Instant::now();
    loop {
        std::thread::sleep(LOOK);
        let calls: Vec<(u64, Client)> = {
            let mut st = state.lock();
            if st.stopping {
                st.running = false;
                return;
            }
            if st.calls.is_empty() {
                if quiet_since.elapsed() >= QUIET {
                    // Under the lock: a call added from now on starts a new watcher.
                    st.running = false;
                    return;
                }
                continue;
            }
            st.calls.iter().map(|(n, w)| (*n, w.client.clone())).collect()
        };
        quiet_since = Instant::now();
        let gone: Vec<u64> = calls.into_iter().filter(|(_, client)| client.gone()).map(|(n, _)| n).collect();
        for number in gone {
            let Some(call) = state.lock().calls.remove(&number) else { continue };
            log::debug!("a call of protocol 2026-07-28 is cancelled: its client left");
            cancel(&call.pool, &call.call_id, "the client closed its stream");
        }
    }
}
