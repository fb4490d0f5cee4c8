//! The Redis backend of the session store (`store`), with the `redis`
//! crate's blocking client: one connection per thread that needs one,
//! taken from a small pool, each read and write bounded by an eighth of the
//! lease.
//!
//! Keys (all under `mcpgate:`):
//! - `s:<id>`, a hash per session: `rec` (its record: `initialize` params,
//!   version, principal digest, scope), `owner` and `inc` (the instance
//!   holding it and that instance's incarnation, drawn at its start),
//!   `epoch`, `active` (unix seconds), and `d:<server>` per downstream
//!   session (its id and version);
//! - `sessions`, the set of session ids (for the sweep of orphans);
//! - `instances`, a hash: per instance its incarnation, its `peer_url` and
//!   a heartbeat counter it moves every quarter lease;
//! - `closing`, a hash of the downstream sessions whose `DELETE` is under
//!   way, by `<incarnation>:<key>`.
//!
//! An instance is alive while its heartbeat moves, as each peer sees it:
//! a peer counts the lease from the last change it saw, on its own clock
//! (no clocks are compared across hosts), and after an outage of the store
//! it waits a whole lease before it counts anyone dead. Every write of a
//! session checks in a script that this instance still holds it; a claim is
//! a compare-and-swap of the epoch in a script.
//!
//! Writes of a session's life come from the journal (`Mirror`): queued, and
//! written by one thread in a pipeline; `commit` waits for them (at most
//! 5 s), which is what `initialize` does before it answers.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::{Connection, Value};

use super::{Claim, Found, Holder, SessionStore, StoreError};
use crate::runtime::state::{Change, Mirror, SavedDownstream, SavedSession, StateError};
use crate::runtime::{clock, threads};

const PREFIX: &str = "mcpgate:";
/// Idle connections kept for the next request.
const POOL: usize = 8;
/// The longest a request waits for its writes.
const COMMIT_WAIT: Duration = Duration::from_secs(5);
/// How often the writer retries a failed write.
const RETRY_EVERY: Duration = Duration::from_millis(250);

/// Creates a session, or (claimed, or written again after an outage)
/// updates its record if this instance holds it. The epoch of a new one is 1.
const OPENED: &str = r"
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and (owner ~= ARGV[2] or redis.call('HGET', KEYS[1], 'inc') ~= ARGV[3]) then return 0 end
if not owner then redis.call('HSET', KEYS[1], 'epoch', 1) end
redis.call('HSET', KEYS[1], 'rec', ARGV[1], 'owner', ARGV[2], 'inc', ARGV[3], 'active', ARGV[4])
redis.call('SADD', KEYS[2], ARGV[5])
return 1";

/// Writes a session this instance holds again, with its epoch, if the
/// store lost it (ARGV: rec, owner, inc, epoch, active, id, then field and
/// value pairs of its downstream sessions).
const REASSERT: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'rec', ARGV[1], 'owner', ARGV[2], 'inc', ARGV[3], 'epoch', ARGV[4], 'active', ARGV[5])
for i = 7, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('SADD', KEYS[2], ARGV[6])
return 1";

/// Sets a field of a session this instance holds.
const SET_MINE: &str = r"
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] and redis.call('HGET', KEYS[1], 'inc') == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
  return 1
end
return 0";

/// A downstream session closing: kept in `closing`, and out of its
/// session (if this instance holds it and it is still that one).
const CLOSING: &str = r"
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] and redis.call('HGET', KEYS[1], 'inc') == ARGV[2] then
  local v = redis.call('HGET', KEYS[1], ARGV[5])
  if v and tostring(cjson.decode(v).session_id) == ARGV[6] then redis.call('HDEL', KEYS[1], ARGV[5]) end
end
return 1";

/// A session this instance holds ended.
const ENDED: &str = r"
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] and redis.call('HGET', KEYS[1], 'inc') == ARGV[2] then
  redis.call('DEL', KEYS[1])
  redis.call('SREM', KEYS[2], ARGV[3])
  return 1
end
return 0";

/// Takes a session over if its epoch is still the one seen: {0} gone,
/// {1, owner, epoch} moved on, {2, epoch, fields...} won.
const CLAIM: &str = r"
local e = redis.call('HGET', KEYS[1], 'epoch')
if not e then return {0} end
if e ~= ARGV[1] then return {1, redis.call('HGET', KEYS[1], 'owner') or '', e} end
local next = tonumber(e) + 1
redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'inc', ARGV[3], 'epoch', next, 'active', ARGV[4])
return {2, tostring(next), redis.call('HGETALL', KEYS[1])}";

/// A peer as this instance saw it: its heartbeat, and when it last moved.
struct Seen {
    incarnation: String,
    beat: u64,
    peer: String,
    moved: Instant,
}

/// The writes of the journal waiting for the writer, and how far it got.
#[derive(Default)]
struct Writes {
    pending: Vec<Change>,
    queued: u64,
    durable: u64,
    failure: Option<(u64, String)>,
    stopping: bool,
}

/// What this instance saw of its peers, and since when it could see.
struct Peers {
    seen: HashMap<String, Seen>,
    /// When the store last answered after not answering (or at start): no
    /// peer counts as dead before a whole lease has passed since.
    watching_since: Option<Instant>,
}

pub struct RedisStore {
    name: String,
    client: redis::Client,
    /// Guards the idle connections; one is taken out for its I/O.
    pool: Mutex<Vec<Connection>>,
    me: String,
    incarnation: String,
    peer_url: String,
    lease: Duration,
    io_timeout: Duration,
    /// Guards the journal's writes; `wake` tells the writer, `written` the commits.
    writes: Mutex<Writes>,
    wake: Condvar,
    written: Condvar,
    /// Guards what was seen of the peers.
    peers: Mutex<Peers>,
    beats: AtomicU64,
    /// When the heartbeat last ran, whatever its outcome: a gap much longer
    /// than its interval means the process was paused.
    last_beat: Mutex<Instant>,
    losses: AtomicU64,
    /// Guards the activity last written per session.
    active_written: Mutex<HashMap<String, u64>>,
    /// Guards the sessions this instance is claiming: the script names it
    /// holder before the adoption puts the session in its table, and a find
    /// in between waits (`adopted`) rather than answer "held here".
    adopting: Mutex<std::collections::HashSet<String>>,
    adopted: Condvar,
    /// Reads and writes that failed.
    pub(crate) errors: AtomicU64,
}

/// A claim under way on this instance, from before its script runs to
/// after its adoption: finds of the session wait for it (`wait_adopted`).
struct Adopting<'a> {
    store: &'a RedisStore,
    id: String,
}

impl<'a> Adopting<'a> {
    /// After any claim of `id` already under way here: two requests of one
    /// client may both find its holder dead, and the second must not end
    /// the first's wait when it loses.
    fn begin(store: &'a RedisStore, id: &str) -> Adopting<'a> {
        let deadline = Instant::now() + ADOPTION_WAIT;
        let mut adopting = store.adopting.lock();
        while adopting.contains(id) && !store.adopted.wait_until(&mut adopting, deadline).timed_out() {}
        adopting.insert(id.to_string());
        Adopting { store, id: id.to_string() }
    }
}

impl Drop for Adopting<'_> {
    fn drop(&mut self) {
        self.store.adopting.lock().remove(&self.id);
        self.store.adopted.notify_all();
    }
}

/// How long a find waits for a claim of its session on this instance: a
/// claim's script and its adoption (the journal's commit, bounded by the
/// store's I/O timeout) take far less.
const ADOPTION_WAIT: Duration = Duration::from_secs(10);

impl RedisStore {
    /// Until no claim of session `id` runs on this instance (at most
    /// `ADOPTION_WAIT`).
    fn wait_adopted(&self, id: &str) {
        let deadline = Instant::now() + ADOPTION_WAIT;
        let mut adopting = self.adopting.lock();
        while adopting.contains(id) && !self.adopted.wait_until(&mut adopting, deadline).timed_out() {}
    }

    /// A store at `url` for instance `me`, reached by its peers at
    /// `peer_url`. Nothing is connected yet: the first write or heartbeat does.
    pub fn new(url: &str, me: &str, peer_url: &str, lease: Duration) -> Result<RedisStore, StoreError> {
        let name = format!("redis {}", without_password(url));
        let client = redis::Client::open(url).map_err(|e| StoreError { store: name.clone(), why: e.to_string() })?;
        let mut random = [0u8; 8];
        let _ = crate::runtime::sys::random(&mut random);
        Ok(RedisStore {
            name,
            client,
            pool: Mutex::new(Vec::new()),
            me: me.to_string(),
            incarnation: crate::runtime::sha256::to_hex(&random),
            peer_url: peer_url.to_string(),
            lease,
            io_timeout: (lease / 8).max(Duration::from_millis(100)),
            writes: Mutex::new(Writes::default()),
            wake: Condvar::new(),
            written: Condvar::new(),
            peers: Mutex::new(Peers { seen: HashMap::new(), watching_since: None }),
            beats: AtomicU64::new(0),
            last_beat: Mutex::new(Instant::now()),
            losses: AtomicU64::new(0),
            active_written: Mutex::new(HashMap::new()),
            adopting: Mutex::new(std::collections::HashSet::new()),
            adopted: Condvar::new(),
            errors: AtomicU64::new(0),
        })
    }

    /// How often the heartbeat runs: a quarter of the lease.
    pub(crate) fn beat_every(&self) -> Duration {
        self.lease / 4
    }

    fn failed(&self, e: impl std::fmt::Display) -> StoreError {
        self.errors.fetch_add(1, Ordering::Relaxed);
        StoreError { store: self.name.clone(), why: e.to_string() }
    }

    /// Runs `f` on a connection of the pool (a new one if none is idle),
    /// outside the pool's lock; a connection that failed is dropped.
    fn with<T>(&self, f: impl FnOnce(&mut Connection) -> redis::RedisResult<T>) -> Result<T, StoreError> {
        let idle = self.pool.lock().pop();
        let mut conn = match idle {
            Some(conn) => conn,
            None => {
                let conn = self.client.get_connection_with_timeout(self.io_timeout).map_err(|e| self.failed(e))?;
                conn.set_read_timeout(Some(self.io_timeout)).map_err(|e| self.failed(e))?;
                conn.set_write_timeout(Some(self.io_timeout)).map_err(|e| self.failed(e))?;
                conn
            }
        };
        let result = f(&mut conn).map_err(|e| self.failed(e))?;
        let mut pool = self.pool.lock();
        if pool.len() < POOL {
            pool.push(conn);
        }
        Ok(result)
    }

    fn key(id: &str) -> String {
        format!("{PREFIX}s:{id}")
    }

    /// Whether `instance` of incarnation `incarnation` is alive, as seen here.
    fn alive(&self, instance: &str, incarnation: &str) -> bool {
        if instance == self.me && incarnation == self.incarnation {
            return true;
        }
        // Paused, this instance's view of its peers is as old as the pause:
        // it counts nobody dead until its heartbeat has seen them again.
        if self.may_have_lost() {
            return true;
        }
        let peers = self.peers.lock();
        let Some(since) = peers.watching_since else { return true };
        if since.elapsed() < self.lease {
            // Not watched for a whole lease yet: nobody counts as dead.
            return true;
        }
        peers.seen.get(instance).is_some_and(|s| s.incarnation == incarnation && s.moved.elapsed() < self.lease)
    }

    /// Whether an instance of incarnation `incarnation` is alive, as seen here.
    fn incarnation_alive(&self, incarnation: &str) -> bool {
        let instance = {
            let peers = self.peers.lock();
            peers.seen.iter().find(|(_, s)| s.incarnation == incarnation).map(|(id, _)| id.clone())
        };
        match instance {
            Some(instance) => self.alive(&instance, incarnation),
            // Unknown: dead, once this instance has watched its peers for a lease.
            None => self.alive("", incarnation),
        }
    }

    fn peer_of(&self, instance: &str) -> Option<String> {
        self.peers.lock().seen.get(instance).map(|s| s.peer.clone())
    }

    /// Starts the thread that writes the journal's changes.
    pub fn start_writer(self: &Arc<Self>) -> std::io::Result<JoinHandle<()>> {
        let store = self.clone();
        threads::spawn("state", "store", move || store.write_loop())
    }

    /// Writes what is pending, then the writer stops.
    pub fn stop_writer(&self, handle: JoinHandle<()>) {
        let _ = Mirror::commit(self);
        self.writes.lock().stopping = true;
        self.wake.notify_all();
        self.written.notify_all();
        let _ = handle.join();
    }

    fn write_loop(&self) {
        let mut st = self.writes.lock();
        loop {
            if st.stopping && (st.pending.is_empty() || st.failure.is_some()) {
                return;
            }
            if st.pending.is_empty() {
                self.wake.wait_for(&mut st, RETRY_EVERY);
                continue;
            }
            let changes = std::mem::take(&mut st.pending);
            let target = st.queued;
            drop(st);
            let result = self.write(&changes);
            st = self.writes.lock();
            match result {
                Ok(()) => {
                    st.durable = st.durable.max(target);
                    st.failure = None;
                }
                Err(e) => {
                    crate::limited!(error, "{e}; new sessions are refused until it answers (those held go on)");
                    let mut again = changes;
                    again.append(&mut st.pending);
                    st.pending = again;
                    st.failure = Some((target, e.why));
                    self.written.notify_all();
                    self.wake.wait_for(&mut st, RETRY_EVERY);
                    continue;
                }
            }
            self.written.notify_all();
        }
    }

    /// The journal's changes as one pipeline of scripts.
    fn write(&self, changes: &[Change]) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        let index = format!("{PREFIX}sessions");
        let closing = format!("{PREFIX}closing");
        let now = clock::unix_now();
        for change in changes {
            match change {
                Change::Opened(session) => {
                    let mut record = session.clone();
                    record.downstreams.clear();
                    let rec = serde_json::to_string(&record).unwrap_or_default();
                    pipe.cmd("EVAL")
                        .arg(OPENED)
                        .arg(2)
                        .arg(Self::key(&session.id))
                        .arg(&index)
                        .arg(rec)
                        .arg(&self.me)
                        .arg(&self.incarnation)
                        .arg(now)
                        .arg(&session.id)
                        .ignore();
                }
                Change::Downstream(d) => {
                    let Some(client) = &d.client else { continue };
                    pipe.cmd("EVAL")
                        .arg(SET_MINE)
                        .arg(1)
                        .arg(Self::key(client))
                        .arg(&self.me)
                        .arg(&self.incarnation)
                        .arg(format!("d:{}", d.server))
                        .arg(serde_json::to_string(d).unwrap_or_default())
                        .ignore();
                }
                Change::Closing(key, d) => {
                    let client = d.client.clone().unwrap_or_default();
                    pipe.cmd("EVAL")
                        .arg(CLOSING)
                        .arg(2)
                        .arg(Self::key(&client))
                        .arg(&closing)
                        .arg(&self.me)
                        .arg(&self.incarnation)
                        .arg(format!("{}:{key}", self.incarnation))
                        .arg(serde_json::to_string(d).unwrap_or_default())
                        .arg(format!("d:{}", d.server))
                        .arg(d.session_id.clone().unwrap_or_default())
                        .ignore();
                }
                Change::Closed(key) => {
                    pipe.cmd("HDEL").arg(&closing).arg(format!("{}:{key}", self.incarnation)).ignore();
                }
                Change::Ended(id) => {
                    pipe.cmd("EVAL")
                        .arg(ENDED)
                        .arg(2)
                        .arg(Self::key(id))
                        .arg(&index)
                        .arg(&self.me)
                        .arg(&self.incarnation)
                        .arg(id)
                        .ignore();
                    self.active_written.lock().remove(id);
                }
            }
        }
        self.with(|conn| pipe.exec(conn))
    }

    /// The session's record and downstream sessions from its hash's fields.
    fn session_of(fields: &HashMap<String, String>) -> Option<SavedSession> {
        let mut session: SavedSession = serde_json::from_str(fields.get("rec")?).ok()?;
        session.downstreams = fields
            .iter()
            .filter(|(k, _)| k.starts_with("d:"))
            .filter_map(|(_, v)| serde_json::from_str::<SavedDownstream>(v).ok())
            .collect();
        Some(session)
    }

    /// The heartbeat, and what it learns of the peers.
    fn beat_once(&self, active: &[(String, u64)]) -> Result<(), StoreError> {
        let beat = self.beats.fetch_add(1, Ordering::Relaxed) + 1;
        let me = serde_json::json!({ "inc": self.incarnation, "peer": self.peer_url, "beat": beat }).to_string();
        let changed: Vec<(String, u64)> = {
            let written = self.active_written.lock();
            active.iter().filter(|(id, at)| written.get(id) != Some(at)).cloned().collect()
        };
        let mut pipe = redis::pipe();
        pipe.cmd("HSET").arg(format!("{PREFIX}instances")).arg(&self.me).arg(me).ignore();
        for (id, at) in &changed {
            pipe.cmd("EVAL")
                .arg(SET_MINE)
                .arg(1)
                .arg(Self::key(id))
                .arg(&self.me)
                .arg(&self.incarnation)
                .arg("active")
                .arg(*at)
                .ignore();
        }
        pipe.cmd("HGETALL").arg(format!("{PREFIX}instances"));
        let (instances,): (HashMap<String, String>,) = self.with(|conn| pipe.query(conn))?;
        self.active_written.lock().extend(changed);
        let now = Instant::now();
        let mut peers = self.peers.lock();
        peers.watching_since.get_or_insert(now);
        peers.seen.retain(|id, _| instances.contains_key(id));
        for (id, text) in instances {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else { continue };
            let incarnation = value["inc"].as_str().unwrap_or_default().to_string();
            let beat = value["beat"].as_u64().unwrap_or(0);
            let peer = value["peer"].as_str().unwrap_or_default().to_string();
            match peers.seen.get_mut(&id) {
                Some(seen) if seen.incarnation == incarnation && seen.beat == beat => seen.peer = peer,
                _ => {
                    peers.seen.insert(id, Seen { incarnation, beat, peer, moved: now });
                }
            }
        }
        Ok(())
    }
}

/// The URL without its password, for the log and errors.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{rest}")
}

impl SessionStore for RedisStore {
    fn name(&self) -> &str {
        &self.name
    }

    fn me(&self) -> &str {
        &self.me
    }

    fn first_epoch(&self) -> u64 {
        1
    }

    fn find(&self, id: &str) -> Result<Option<Found>, StoreError> {
        self.wait_adopted(id);
        let (owner, inc, epoch): (Option<String>, Option<String>, Option<u64>) =
            self.with(|conn| redis::cmd("HMGET").arg(Self::key(id)).arg("owner").arg("inc").arg("epoch").query(conn))?;
        let (Some(owner), Some(inc), Some(epoch)) = (owner, inc, epoch) else { return Ok(None) };
        let alive = self.alive(&owner, &inc);
        let peer = self.peer_of(&owner);
        Ok(Some(Found { holder: Holder { instance: owner, epoch }, alive, peer }))
    }

    fn claim(
        &self,
        id: &str,
        seen: &Holder,
        adopt: &mut dyn FnMut(&SavedSession, u64) -> bool,
    ) -> Result<Claim, StoreError> {
        let _adopting = Adopting::begin(self, id);
        let answer: Value = self.with(|conn| {
            redis::cmd("EVAL")
                .arg(CLAIM)
                .arg(1)
                .arg(Self::key(id))
                .arg(seen.epoch)
                .arg(&self.me)
                .arg(&self.incarnation)
                .arg(clock::unix_now())
                .query(conn)
        })?;
        let parts = match answer {
            Value::Array(parts) => parts,
            other => return Err(self.failed(format!("a claim answered {other:?}"))),
        };
        let text = |v: &Value| redis::from_redis_value_ref::<String>(v).unwrap_or_default();
        match parts.first().map(text).as_deref() {
            Some("0") => Ok(Claim::Gone),
            Some("1") => {
                let owner = parts.get(1).map(text).unwrap_or_default();
                let epoch = parts.get(2).map(text).and_then(|e| e.parse().ok()).unwrap_or(0);
                Ok(Claim::Held(Found {
                    alive: true,
                    peer: self.peer_of(&owner),
                    holder: Holder { instance: owner, epoch },
                }))
            }
            Some("2") => {
                let epoch: u64 = parts.get(1).map(text).and_then(|e| e.parse().ok()).unwrap_or(0);
                let fields: HashMap<String, String> =
                    parts.get(2).and_then(|v| redis::from_redis_value_ref(v).ok()).unwrap_or_default();
                let Some(session) = Self::session_of(&fields) else {
                    return Err(self.failed(format!("session {id}: its record does not read")));
                };
                self.active_written.lock().remove(id);
                if !adopt(&session, epoch) {
                    // Given up: it stays claimed by this instance, idle, and the sweep ends it.
                    log::warn!("session {id}: claimed, then given up here");
                }
                Ok(Claim::Won { session, epoch })
            }
            _ => Err(self.failed("a claim answered nothing")),
        }
    }

    fn holds(&self, id: &str, epoch: u64) -> Result<bool, StoreError> {
        let (owner, inc, at): (Option<String>, Option<String>, Option<u64>) =
            self.with(|conn| redis::cmd("HMGET").arg(Self::key(id)).arg("owner").arg("inc").arg("epoch").query(conn))?;
        Ok(owner.as_deref() == Some(self.me.as_str())
            && inc.as_deref() == Some(self.incarnation.as_str())
            && at == Some(epoch))
    }

    fn beat(&self, active: &[(String, u64)]) -> Result<(), StoreError> {
        let paused = {
            let mut last = self.last_beat.lock();
            let late = last.elapsed() > self.lease * 3 / 4;
            *last = Instant::now();
            late
        };
        if paused {
            self.losses.fetch_add(1, Ordering::AcqRel);
            // What it saw of its peers is as old as the pause: it watches them a whole lease again.
            self.peers.lock().watching_since = None;
        }
        let result = self.beat_once(active);
        if result.is_err() {
            // Blind from now on: once it answers again, a whole lease passes before anyone counts as dead.
            self.peers.lock().watching_since = None;
        }
        result
    }

    fn may_have_lost(&self) -> bool {
        self.last_beat.lock().elapsed() > self.lease * 3 / 4
    }

    fn losses(&self) -> u64 {
        self.losses.load(Ordering::Acquire)
    }

    fn orphans(&self, idle: Duration) -> Result<Vec<(String, Holder)>, StoreError> {
        let ids: Vec<String> = self.with(|conn| redis::cmd("SMEMBERS").arg(format!("{PREFIX}sessions")).query(conn))?;
        let mut out = Vec::new();
        let now = clock::unix_now();
        for chunk in ids.chunks(256) {
            let mut pipe = redis::pipe();
            for id in chunk {
                pipe.cmd("HMGET").arg(Self::key(id)).arg("owner").arg("inc").arg("epoch").arg("active");
            }
            type Row = (Option<String>, Option<String>, Option<u64>, Option<u64>);
            let rows: Vec<Row> = self.with(|conn| pipe.query(conn))?;
            for (id, (owner, inc, epoch, active)) in chunk.iter().zip(rows) {
                let (Some(owner), Some(inc), Some(epoch)) = (owner, inc, epoch) else {
                    // Its hash is gone: only the index named it.
                    let _ = self.with(|conn| redis::cmd("SREM").arg(format!("{PREFIX}sessions")).arg(id).exec(conn));
                    continue;
                };
                if now.saturating_sub(active.unwrap_or(0)) >= idle.as_secs() && !self.alive(&owner, &inc) {
                    out.push((id.clone(), Holder { instance: owner, epoch }));
                }
            }
        }
        Ok(out)
    }

    fn leave(&self) {
        let _ = self.with(|conn| redis::cmd("HDEL").arg(format!("{PREFIX}instances")).arg(&self.me).exec(conn));
    }

    fn dead_closing(&self) -> Result<Vec<(String, SavedDownstream)>, StoreError> {
        let all: HashMap<String, String> =
            self.with(|conn| redis::cmd("HGETALL").arg(format!("{PREFIX}closing")).query(conn))?;
        Ok(all
            .into_iter()
            .filter(|(field, _)| field.split_once(':').is_some_and(|(inc, _)| !self.incarnation_alive(inc)))
            .filter_map(|(field, value)| Some((field, serde_json::from_str(&value).ok()?)))
            .collect())
    }

    fn take_closing(&self, field: &str) -> Result<bool, StoreError> {
        let removed: u64 =
            self.with(|conn| redis::cmd("HDEL").arg(format!("{PREFIX}closing")).arg(field).query(conn))?;
        Ok(removed == 1)
    }

    fn reassert(&self, held: &[(SavedSession, u64)]) -> Result<usize, StoreError> {
        let index = format!("{PREFIX}sessions");
        let mut written = 0;
        for chunk in held.chunks(256) {
            let mut pipe = redis::pipe();
            for (session, epoch) in chunk {
                let mut record = session.clone();
                let downstreams = std::mem::take(&mut record.downstreams);
                let cmd = pipe
                    .cmd("EVAL")
                    .arg(REASSERT)
                    .arg(2)
                    .arg(Self::key(&session.id))
                    .arg(&index)
                    .arg(serde_json::to_string(&record).unwrap_or_default())
                    .arg(&self.me)
                    .arg(&self.incarnation)
                    .arg(*epoch)
                    .arg(clock::unix_now())
                    .arg(&session.id);
                for d in downstreams {
                    let d = SavedDownstream { client: Some(session.id.clone()), ..d };
                    cmd.arg(format!("d:{}", d.server)).arg(serde_json::to_string(&d).unwrap_or_default());
                }
            }
            let counts: Vec<u64> = self.with(|conn| pipe.query(conn))?;
            written += counts.iter().sum::<u64>() as usize;
        }
        Ok(written)
    }
}

impl Mirror for RedisStore {
    fn change(&self, change: Change) {
        let mut st = self.writes.lock();
        st.pending.push(change);
        st.queued += 1;
        drop(st);
        self.wake.notify_one();
    }

    fn commit(&self) -> Result<(), StateError> {
        let mut st = self.writes.lock();
        let target = st.queued;
        let deadline = Instant::now() + COMMIT_WAIT;
        loop {
            if st.durable >= target {
                return Ok(());
            }
            if let Some((at, why)) = &st.failure
                && *at >= target
            {
                return Err(StateError::Store { store: self.name.clone(), why: why.clone() });
            }
            if st.stopping {
                return Err(StateError::Stopped);
            }
            if self.written.wait_until(&mut st, deadline).timed_out() && st.durable < target {
                return Err(StateError::Store { store: self.name.clone(), why: "no answer within 5 s".into() });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_is_named_without_its_password() {
        assert_eq!(without_password("redis://:s3cret@10.0.0.7:6379/0"), "redis://10.0.0.7:6379/0");
        assert_eq!(without_password("rediss://user:pw@h/1"), "rediss://h/1");
        assert_eq!(without_password("redis://h:6379"), "redis://h:6379");
    }
}
