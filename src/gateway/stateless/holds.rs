//! Calls held for clients of the 2026-07-28 era. Such a client cannot be
//! asked anything mid-call: when the session-era server behind a call asks
//! for sampling, elicitation or roots, mcpgate answers the client with
//! `input_required` and holds the server's call (its thread keeps waiting)
//! until the client retries with its answers and the `requestState`
//! mcpgate gave it.
//!
//! The state is `mcpgate:<hold>.<expiry ms>.<HMAC-SHA-256 hex>`: the MAC, under a
//! key drawn at start and never written anywhere, covers the hold's number,
//! its expiry, and the principal that made the call (`Access::principal`: a
//! token's hash, an OAuth subject's digest), so a state is good only for
//! that hold, until then, and for that caller. Holds are
//! bounded in number (`max_held_calls`) and in time
//! (`held_call_timeout_secs`); the reaper cancels those that expire.
//!
//! What a call on its own thread holds is charged to `max_memory_mb` and
//! shown as `memory.sessionless_calls_bytes`, from its start until its
//! thread is joined: [`THREAD_BYTES`] for the thread, its request twice
//! (the call as sent and its params), and each notification waiting for
//! its client. Its waiter joins the thread once the call is done, so an
//! ended call keeps nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::Receiver;
use parking_lot::Mutex;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::protocol::jsonrpc::RpcError;
use crate::runtime::memory::{self, Tallied};
use crate::runtime::secret::constant_time_eq;
use crate::runtime::sha256;
use crate::session::Session;

use crate::gateway::outcome::Outcome;

/// What begins every `requestState` mcpgate issues; any other is a
/// server's own (of the 2026-07-28 era), passed to it untouched.
pub(in crate::gateway) const STATE_PREFIX: &str = "mcpgate:";

/// What a call's thread keeps resident, charged for as long as it lives:
/// its stack's touched pages, 24 KiB for each ended thread in smaps (8,162
/// of them held 195,856 KiB), and a running one's deeper frames.
pub(in crate::gateway) const THREAD_BYTES: usize = 32 * 1024;

/// What a held call's thread reports to whoever answers its client.
pub(in crate::gateway) enum HoldEvent {
    /// The server's answer became a stream: the client's may start.
    Streaming,
    /// A notification for the client (progress, a log message), as JSON,
    /// charged until it is written; a log message carries its level.
    Notify { bytes: memory::Event, log_level: Option<String> },
    /// The server asks the client: mcpgate's id for the request, its method
    /// and params.
    Ask { id: u64, method: String, params: Option<Box<RawValue>> },
    /// The call is over.
    Done(Outcome),
}

/// A call that runs on a thread of its own, for a client that may be
/// answered `input_required` and retry: what [`Holds::hold`] keeps.
pub(in crate::gateway) struct HeldCall {
    pub(crate) events: Receiver<HoldEvent>,
    /// The session the call runs on, and its id there (to cancel it).
    pub(crate) pool: Arc<Session>,
    pub(crate) call_id: Value,
    /// The server's requests the client must answer, by mcpgate's id.
    pub(crate) asks: Vec<u64>,
    pub(crate) thread: HoldThread,
    /// The method the client called.
    pub(crate) method: String,
    /// Whose call it is: only a `requestState` made for it takes the call back.
    pub(crate) token: Option<[u8; 32]>,
}

/// A call whose client was answered `input_required`, waiting for its retry.
struct Held {
    call: HeldCall,
    /// Milliseconds since the epoch.
    expires: u64,
}

/// The thread a call runs on, and the charge of what the call holds.
/// Joined by its waiter once the call is done ([`HoldThread::join`]); let
/// go before that (the call was cancelled), it is joined now if it has
/// ended, or else handed to be joined when it has.
pub(in crate::gateway) struct HoldThread {
    handle: Option<JoinHandle<()>>,
    _charge: Tallied,
}

impl HoldThread {
    pub(crate) fn new(handle: JoinHandle<()>, charge: Tallied) -> HoldThread {
        HoldThread { handle: Some(handle), _charge: charge }
    }

    /// Waits for the thread to end: for a call that is done, only its
    /// return (it reports the end last).
    pub(crate) fn join(mut self) {
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

impl Drop for HoldThread {
    fn drop(&mut self) {
        match self.handle.take() {
            Some(handle) if handle.is_finished() => {
                let _ = handle.join();
            }
            Some(handle) => crate::runtime::threads::join_later(handle),
            None => {}
        }
    }
}

pub(in crate::gateway) struct Holds {
    key: [u8; 32],
    /// Guards the held calls by number.
    held: Mutex<HashMap<u64, Held>>,
    next: AtomicU64,
    /// Bytes charged for the calls on their own threads, held or running.
    charged: Arc<AtomicUsize>,
}

/// Why a retry's `requestState` was not accepted.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::gateway) enum Refused {
    /// Not a state mcpgate made, or made for another caller (token or OAuth subject).
    Forged,
    Expired,
    /// Answered already, or cancelled when it expired.
    Gone,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refused::Forged => "requestState is not one mcpgate issued for this token",
            Refused::Expired => "requestState has expired (held_call_timeout_secs); call again",
            Refused::Gone => "requestState names a call that is no longer held; call again",
        })
    }
}

impl Holds {
    pub(crate) fn new() -> Holds {
        let mut key = [0u8; 32];
        if let Err(e) = crate::runtime::sys::random(&mut key) {
            // Not expected (getrandom); still a key no client can know in advance.
            log::warn!("no randomness for the key of held calls ({e}); one is derived from the time and pid");
            let seed = format!("{:?} {} {:p}", SystemTime::now(), std::process::id(), &key);
            key = sha256::digest(seed.as_bytes());
        }
        Holds { key, held: Mutex::new(HashMap::new()), next: AtomicU64::new(1), charged: Arc::default() }
    }

    /// The tally of what the calls on their own threads hold.
    pub(crate) fn tally(&self) -> &Arc<AtomicUsize> {
        &self.charged
    }

    /// Bytes the calls on their own threads hold now.
    pub(crate) fn charged(&self) -> usize {
        self.charged.load(Ordering::Relaxed)
    }

    /// A number for a new hold.
    pub(crate) fn next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn len(&self) -> usize {
        self.held.lock().len()
    }

    fn mac(&self, hold: u64, expires: u64, token: Option<&[u8; 32]>) -> String {
        let token = token.map(|t| sha256::hex(t)).unwrap_or_default();
        let mac = sha256::hmac(&self.key, format!("{hold}.{expires}.{token}").as_bytes());
        sha256::to_hex(&mac)
    }

    /// Holds a call, at most `max` at once: its `requestState`, or the
    /// call back when there is no room (the caller cancels it).
    pub(crate) fn hold(
        &self,
        number: u64,
        held: HeldCall,
        timeout: Duration,
        max: usize,
    ) -> Result<String, Box<HeldCall>> {
        let expires = now_ms() + timeout.as_millis() as u64;
        let mut map = self.held.lock();
        if map.len() >= max {
            return Err(Box::new(held));
        }
        let state = format!("{STATE_PREFIX}{number}.{expires}.{}", self.mac(number, expires, held.token.as_ref()));
        map.insert(number, Held { call: held, expires });
        Ok(state)
    }

    /// The held call `state` names, taken out of the table, if `state` is
    /// one mcpgate issued for `token` and still good.
    pub(crate) fn take(&self, state: &str, token: Option<&[u8; 32]>) -> Result<HeldCall, Refused> {
        let Some(state) = state.strip_prefix(STATE_PREFIX) else { return Err(Refused::Forged) };
        let mut parts = state.splitn(3, '.');
        let (Some(number), Some(expires), Some(mac)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(Refused::Forged);
        };
        let (Ok(number), Ok(expires)) = (number.parse::<u64>(), expires.parse::<u64>()) else {
            return Err(Refused::Forged);
        };
        if !constant_time_eq(self.mac(number, expires, token).as_bytes(), mac.as_bytes()) {
            return Err(Refused::Forged);
        }
        if now_ms() > expires {
            self.held.lock().remove(&number);
            return Err(Refused::Expired);
        }
        self.held.lock().remove(&number).map(|h| h.call).ok_or(Refused::Gone)
    }

    /// The held calls past their time, taken out (the reaper cancels them).
    pub(crate) fn expired(&self) -> Vec<HeldCall> {
        let now = now_ms();
        let mut map = self.held.lock();
        let stale: Vec<u64> = map.iter().filter(|(_, h)| h.expires < now).map(|(n, _)| *n).collect();
        stale.into_iter().filter_map(|n| map.remove(&n)).map(|h| h.call).collect()
    }

    /// Every held call (shutdown).
    pub(crate) fn take_all(&self) -> Vec<HeldCall> {
        self.held.lock().drain().map(|(_, h)| h.call).collect()
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Refusals of a retry, as the client sees them.
pub(in crate::gateway) fn refused(e: &Refused) -> RpcError {
    RpcError::invalid_params(e.to_string())
}
