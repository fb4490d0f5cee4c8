//! The instances that continue each other's sessions (`instance_id` with
//! `peer_url`): the session store that says who holds each session,
//! `state_dir` (files) or `store` (Redis), and the journal that mirrors
//! its changes there.

use std::sync::Arc;

use crate::config::Config;
use crate::runtime::state::{Journal, Mirror};
use crate::runtime::store::SessionStore;
use crate::runtime::store::files::FileStore;
use crate::runtime::store::redis::RedisStore;

/// The session store this instance shares with its peers, if any.
#[derive(Default)]
pub struct Peers {
    /// Who holds each session, for instances that continue each other's
    /// (`state_dir` or `store`); `None` for an instance alone.
    pub store: Option<Arc<dyn SessionStore>>,
    /// The Redis store (`store`), whose writer thread `main` starts and stops.
    pub redis: Option<Arc<RedisStore>>,
}

/// The journal, and the session store when instances continue each
/// other's sessions: `state_dir` (the files, the journal its own) or
/// `store` (Redis, the journal's changes mirrored there, no file).
pub(super) fn open_store(config: &Config) -> (Journal, Peers) {
    let journal = Journal::new(config.state_file.as_deref(), config.instance_id.as_deref());
    let (Some(id), Some(peer)) = (&config.instance_id, &config.peer_url) else { return (journal, Peers::default()) };
    if let Some(url) = &config.store {
        match RedisStore::new(url, id, peer, config.store_lease) {
            Ok(redis) => {
                let redis = Arc::new(redis);
                let mirror: Arc<dyn Mirror> = redis.clone();
                return (journal.with_mirror(mirror), Peers { store: Some(redis.clone()), redis: Some(redis) });
            }
            Err(e) => log::error!("{e}: sessions are kept in this instance only"),
        }
    }
    if let Some(dir) = &config.state_dir {
        let files = Arc::new(FileStore::new(dir, id));
        if let Err(e) = files.announce(peer) {
            log::error!(
                "{}: cannot say where this instance is reached ({e}): peers cannot pass it requests",
                files.name()
            );
        }
        let mirror: Arc<dyn Mirror> = files.clone();
        return (journal.with_mirror(mirror), Peers { store: Some(files), redis: None });
    }
    (journal, Peers::default())
}
