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

/// What of the sessions outlives this process: the journal, and the
/// session store this instance shares with its peers, if any.
pub struct Store {
    /// Where opens and closes of downstream sessions are written ahead.
    pub journal: Arc<Journal>,
    /// Who holds each session, for instances that continue each other's
    /// (`state_dir` or `store`); `None` for an instance alone.
    pub(crate) shared: Option<Arc<dyn SessionStore>>,
    /// The Redis store (`store`), whose writer thread `main` starts and stops.
    pub redis: Option<Arc<RedisStore>>,
    /// `instance_id` as at start (a reload does not change it): starts every session id.
    pub(crate) instance_id: Option<String>,
}

/// The journal, and the session store when instances continue each
/// other's sessions: `state_dir` (the files, the journal its own) or
/// `store` (Redis, the journal's changes mirrored there, no file).
pub(super) fn open_store(config: &Config) -> Store {
    let (journal, shared, redis) = open(config);
    Store { journal: Arc::new(journal), shared, redis, instance_id: config.instance_id.clone() }
}

type Opened = (Journal, Option<Arc<dyn SessionStore>>, Option<Arc<RedisStore>>);

fn open(config: &Config) -> Opened {
    let journal = Journal::new(config.state_file.as_deref(), config.instance_id.as_deref());
    let (Some(id), Some(peer)) = (&config.instance_id, &config.peer_url) else { return (journal, None, None) };
    if let Some(url) = &config.store {
        match RedisStore::new(url, id, peer, config.store_lease) {
            Ok(redis) => {
                let redis = Arc::new(redis);
                let mirror: Arc<dyn Mirror> = redis.clone();
                return (journal.with_mirror(mirror), Some(redis.clone()), Some(redis));
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
        return (journal.with_mirror(mirror), Some(files), None);
    }
    (journal, None, None)
}
