#![forbid(unsafe_code)]
//! The state file: the live client sessions with their `initialize` params
//! and each downstream session's id, so that after a restart (clean or
//! `kill -9`) clients keep their sessions and no downstream session is left
//! open for ever. One thread writes it when sessions change, never a request;
//! each write is atomic (temporary file, fsync, rename).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, bounded, select, tick};
use serde::{Deserialize, Serialize};

use crate::config::ServerConfig;
use crate::downstream::{SavedDownstream, Server};
use crate::gateway::Gateway;
use crate::session::{SavedSession, Session};
use crate::threads;

const FORMAT: u32 = 1;
/// How often the writer looks for changes.
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// Activity alone (no session opened or closed) is written at most this
/// often, and at least four times per idle timeout.
fn activity_every(idle_timeout: Duration) -> Duration {
    (idle_timeout / 4).clamp(LOOK_EVERY, Duration::from_secs(30))
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Saved {
    pub format: u32,
    pub sessions: Vec<SavedSession>,
}

pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    pub fn new(path: &Path) -> StateFile {
        StateFile { path: path.to_path_buf() }
    }

    /// The saved state; an absent file is an empty state.
    pub fn load(&self) -> Result<Saved, String> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Saved::default()),
            Err(e) => return Err(format!("{}: cannot read: {e}", self.path.display())),
        };
        let saved: Saved =
            serde_json::from_str(&text).map_err(|e| format!("{}: not a state file: {e}", self.path.display()))?;
        if saved.format != FORMAT {
            return Err(format!("{}: state format {} is not {FORMAT}", self.path.display(), saved.format));
        }
        Ok(saved)
    }

    /// Writes atomically: a reader (or a crash) sees the old file or the new one.
    pub fn save(&self, saved: &Saved) -> std::io::Result<()> {
        let tmp = self.path.with_extension("tmp");
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&serde_json::to_vec(saved).expect("state serializes"))?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The rename itself is durable once the directory is synced.
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

/// Every live session; with `with_downstreams` false, only the client side
/// (at a clean shutdown, after which the downstream sessions are closed).
pub fn snapshot(gateway: &Gateway, with_downstreams: bool) -> Saved {
    let sessions = gateway.sessions.snapshot().iter().filter_map(|s| s.saved(with_downstreams)).collect();
    Saved { format: FORMAT, sessions }
}

/// Brings back saved sessions at start. Sessions idle past the timeout are
/// closed properly (a `DELETE` for each of their downstream sessions); the
/// others are restored and their downstream sessions taken over by id.
pub fn restore(gateway: &Gateway, saved: Saved) {
    let current = gateway.current();
    // The saved activity may be one write interval old: a session is expired
    // only past that, so one in use at the crash is never closed at start.
    let idle_timeout = current.config.session_idle_timeout;
    let timeout = (idle_timeout + activity_every(idle_timeout)).as_secs();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut to_close: Vec<(Arc<Server>, SavedDownstream)> = Vec::new();
    let (mut restored, mut expired) = (0, 0);
    for session in saved.sessions {
        if now.saturating_sub(session.last_active) >= timeout {
            expired += 1;
            gateway.stats.sessions_expired_at_start.inc();
            to_close.extend(session.downstreams.iter().map(|d| (server_for(gateway, d), d.clone())));
            continue;
        }
        let live = Session::restore(&session);
        for saved in &session.downstreams {
            match current.server(&saved.server).filter(|s| s.config.url == saved.url) {
                Some(server) => live.adopt(server, saved),
                // Removed or moved since: close it where it was.
                None => to_close.push((server_for(gateway, saved), saved.clone())),
            }
        }
        if gateway.sessions.insert(live, current.config.max_sessions) {
            restored += 1;
            gateway.stats.sessions_restored.inc();
        }
    }
    threads::for_each_parallel("close", &to_close, 32, |(server, saved)| server.close_saved(saved));
    if restored + expired > 0 {
        log::info!(
            "state file: {restored} session(s) restored, {expired} expired (their {} downstream session(s) closed)",
            to_close.len()
        );
    }
}

/// The configured server a saved downstream session belongs to, or, when it
/// was removed or moved, one made up from what was saved, to send `DELETE`.
fn server_for(gateway: &Gateway, saved: &SavedDownstream) -> Arc<Server> {
    let current = gateway.current();
    if let Some(server) = current.server(&saved.server).filter(|s| s.config.url == saved.url) {
        return server.clone();
    }
    let headers = current.server(&saved.server).map(|s| s.config.headers.clone()).unwrap_or_default();
    let config = ServerConfig {
        name: saved.server.clone(),
        url: saved.url.clone(),
        headers,
        prefix: String::new(),
        secrets: Vec::new(),
    };
    let limits = crate::downstream::Limits::from_config(&current.config);
    Arc::new(Server::new(config, limits, 1, gateway.stats.clone()))
}

/// The thread that writes the state file when sessions change.
pub struct Writer {
    stop: Sender<()>,
    handle: JoinHandle<()>,
}

/// A number that changes whenever a session or a downstream session opens or closes.
fn structure(gateway: &Gateway) -> u64 {
    let s = &gateway.stats;
    s.sessions_created.get()
        + s.sessions_evicted_idle.get()
        + s.sessions_deleted_by_client.get()
        + s.downstream_opened.get()
        + s.downstream_closed.get()
}

pub fn start(gateway: Arc<Gateway>, file: StateFile) -> std::io::Result<Writer> {
    let (stop, stopped) = bounded::<()>(0);
    let handle = threads::spawn("state", "", move || {
        let ticks = tick(LOOK_EVERY);
        let (mut written, mut requests, mut at) = (u64::MAX, gateway.stats.requests.get(), Instant::now());
        loop {
            select! {
                recv(stopped) -> _ => return,
                recv(ticks) -> _ => {
                    let now = structure(&gateway);
                    let every = activity_every(gateway.current().config.session_idle_timeout);
                    let active = gateway.stats.requests.get() != requests && at.elapsed() >= every;
                    if now == written && !active {
                        continue;
                    }
                    match file.save(&snapshot(&gateway, true)) {
                        Ok(()) => (written, requests, at) = (now, gateway.stats.requests.get(), Instant::now()),
                        Err(e) => crate::limited!(error, "cannot write the state file {}: {e}", file.path.display()),
                    }
                }
            }
        }
    })?;
    Ok(Writer { stop, handle })
}

impl Writer {
    pub fn stop(self) {
        drop(self.stop);
        let _ = self.handle.join();
    }
}
