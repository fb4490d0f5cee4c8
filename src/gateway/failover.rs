//! A request for a session this instance does not hold: the session store
//! says who does. Alive, the request is passed to it (`forward`); dead
//! (its lock free in `state_dir`, its heartbeat still in Redis for a whole
//! lease), the session is claimed and continued here, the client none the
//! wiser: its id stays, its `initialize` params come from the store, the
//! Streamable HTTP servers' sessions are taken over by their ids, and the
//! other servers' (a child, an HTTP+SSE stream, which ended with the dead
//! instance) open anew when the session next needs them.
//!
//! And a session this instance holds, after a pause long enough for a
//! peer to take it (Redis): its hold is checked before it serves again,
//! and let go if the store gives it to another (`Session::hand_over`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::current::Current;
use super::forward::{self, FORWARDED, Unreachable};
use super::peers::Store;
use crate::downstream::AfterRestart;
use crate::http::{EventSink, HttpReply, HttpRequest};

use super::refusal::{self, Why};
use crate::protocol::SESSION_HEADER;
use crate::protocol::jsonrpc::RpcError;
use crate::runtime::clock;
use crate::runtime::state::Journal;
use crate::runtime::state::SavedSession;
use crate::runtime::store::{Claim, SessionStore, StoreError, plausible_id};
use crate::session::Sessions;
use crate::session::{self, Session};
use crate::stats::Stats;

/// How long a request waits between two looks at a holder it cannot reach.
const LOOK_AGAIN: Duration = Duration::from_millis(200);

/// What failing over reads of the gateway: the session store and the
/// configuration in force, the sessions, the counters and the journal.
pub(crate) struct Failover<'a> {
    pub(super) store: &'a Store,
    pub(super) current: Arc<Current>,
    pub(super) sessions: &'a Sessions,
    pub(super) stats: &'a Stats,
    pub(super) journal: &'a Journal,
}

impl Failover<'_> {
    /// For a request that names a session: `None` when it is to be answered
    /// here (this instance holds the session, now or after claiming it, or
    /// nobody does, and the request gets 404); else the answer: the holder's,
    /// or an error.
    pub(super) fn elsewhere(&self, req: &HttpRequest, sink: &mut dyn EventSink) -> Option<HttpReply> {
        let store = self.store.shared.as_ref()?;
        let id = req.header(SESSION_HEADER)?;
        if let Some(session) = self.sessions.get(id)
            && self.still_held(store.as_ref(), &session)
        {
            return None;
        }
        if !plausible_id(id) {
            return None;
        }
        let config = self.current.config.clone();
        // A holder that cannot be reached is dead once its lease has run out.
        let deadline = Instant::now() + config.store_lease + Duration::from_secs(2);
        loop {
            let found = match store.find(id) {
                Ok(Some(found)) => found,
                Ok(None) => return None,
                Err(e) => return Some(self.store_failed(&e)),
            };
            if found.alive {
                if found.holder.instance == store.me() {
                    // Its own, not in its table: it ended here.
                    return None;
                }
                let holder = &found.holder.instance;
                if req.header(FORWARDED).is_some() {
                    let e = RpcError::internal(format!("this session is held by instance `{holder}`"));
                    return Some(refusal::reply(Why::Moving, &e));
                }
                let Some(peer) = &found.peer else {
                    let e = RpcError::internal(format!("instance `{holder}` holds this session and gave no peer_url"));
                    return Some(refusal::reply(Why::Unavailable, &e));
                };
                let passed = forward::forward(
                    peer,
                    store.me(),
                    req,
                    sink,
                    config.connect_timeout,
                    config.request_timeout,
                    config.keepalive,
                );
                match passed {
                    Ok(reply) => {
                        self.stats.requests_forwarded.inc();
                        return Some(reply);
                    }
                    Err(Unreachable(_)) if Instant::now() < deadline => {
                        std::thread::sleep(LOOK_AGAIN);
                        continue;
                    }
                    Err(Unreachable(why)) => {
                        let e = RpcError::internal(format!(
                            "instance `{holder}` holds this session and cannot be reached at {peer}: {why}"
                        ));
                        return Some(refusal::reply(Why::Unavailable, &e));
                    }
                }
            }
            match store.claim(id, &found.holder, &mut |saved, epoch| self.adopt(saved, epoch)) {
                Ok(Claim::Won { epoch, .. }) => {
                    self.stats.sessions_continued.inc();
                    log::info!(
                        "session {}: continued here from instance `{}` (not alive), epoch {epoch}",
                        session::short(id),
                        found.holder.instance
                    );
                    return None;
                }
                Ok(Claim::Gone) => return None,
                Ok(Claim::Held(_)) => {
                    self.stats.claims_lost.inc();
                    if Instant::now() >= deadline {
                        let e = RpcError::internal("another instance took this session over as this one tried");
                        return Some(refusal::reply(Why::Moving, &e));
                    }
                }
                Err(e) => return Some(self.store_failed(&e)),
            }
        }
    }

    /// 503 naming the store that failed.
    fn store_failed(&self, e: &StoreError) -> HttpReply {
        self.stats.store_errors.inc();
        crate::limited!(warn, "{e}: a request for a session this instance does not hold got 503");
        refusal::reply(Why::Unavailable, &RpcError::internal(format!("{e}; try again later")))
    }

    /// Whether this instance still holds `session`: asked of the store only
    /// after a pause in which a peer could have taken it. Lost, it is let
    /// go here. A store that cannot say leaves it served.
    fn still_held(&self, store: &dyn SessionStore, session: &Arc<Session>) -> bool {
        let losses = store.losses();
        let paused = store.may_have_lost();
        if !paused && session.checked_since(losses) {
            return true;
        }
        match store.holds(&session.id, session.epoch()) {
            Ok(true) => {
                // A pause the heartbeat has not counted yet is the next loss.
                session.mark_checked(if paused { losses + 1 } else { losses });
                true
            }
            Ok(false) => {
                self.let_go(&session.id);
                false
            }
            Err(e) => {
                self.stats.store_errors.inc();
                crate::limited!(warn, "{e}: a session held here goes on unchecked");
                true
            }
        }
    }

    /// Another instance holds session `id` now: it ends here without a
    /// word to the store or its servers' HTTP sessions.
    pub(crate) fn let_go(&self, id: &str) {
        if let Some(session) = self.sessions.take_handed_over(id) {
            session.hand_over();
            self.stats.sessions_handed_over.inc();
            log::warn!(
                "session {}: another instance took it over while this one was paused; let go here",
                session::short(id)
            );
        }
    }

    /// Makes a claimed session live here: in the table (and so in the
    /// journal), its Streamable HTTP servers' sessions taken over by id.
    /// False when it cannot be kept (the session limit, the journal).
    fn adopt(&self, saved: &SavedSession, epoch: u64) -> bool {
        let current = &self.current;
        // Its idle time starts now: a client is using it.
        let saved = SavedSession { last_active: clock::unix_now(), ..saved.clone() };
        let live = Session::restore(&saved);
        live.set_epoch(epoch);
        live.hold_params();
        let mut taken = Vec::new();
        for d in &saved.downstreams {
            let server = current.server(&d.server).filter(|s| s.config.url() == Some(d.url.as_str()));
            match server {
                // Ended with the instance that held it (an HTTP+SSE stream): opened anew when needed.
                Some(server) if server.after_restart() == AfterRestart::Resumed && !d.ends_with_process => {
                    taken.extend(live.adopt(server, d));
                }
                _ => {}
            }
        }
        if !self.sessions.insert(live.clone(), current.config.max_sessions) {
            live.hand_over();
            return false;
        }
        for d in &taken {
            if let Some(saved) = d.saved() {
                self.journal.opened_downstream(&live.id, saved);
            }
        }
        if let Err(e) = self.journal.commit() {
            log::error!("session {}: cannot be recorded here ({e}); not continued", session::short(&live.id));
            if let Some(live) = self.sessions.take_handed_over(&live.id) {
                live.hand_over();
            }
            return false;
        }
        for d in &taken {
            live.start_reader(d);
        }
        true
    }
}
