//! What the servers behind share besides the counters and the journal:
//! the child processes of stdio servers, the `DELETE`s a fault lost, and
//! the users' tokens at servers with `oauth`. Each lives as long as the
//! gateway; a reload configures them again.

use std::sync::Arc;

use crate::config::Config;
use crate::downstream::children::Children;
use crate::downstream::oauth::Authorizer;
use crate::downstream::{Context, Deletes};
use crate::runtime::state::Journal;
use crate::stats::Stats;

/// The children, the lost `DELETE`s and the OAuth tokens of the servers.
pub struct Downstreams {
    /// The child processes of stdio servers.
    pub children: Arc<Children>,
    /// The `DELETE`s a fault lost, which the reaper sends again.
    pub(crate) deletes: Arc<Deletes>,
    /// Users' tokens at servers with `oauth`, and their sign-ins.
    pub oauth: Arc<Authorizer>,
}

impl Downstreams {
    pub(super) fn new(config: &Config) -> Downstreams {
        Downstreams {
            children: Children::new(config.max_processes, config.stdio_grace, config.max_message_bytes),
            deletes: Arc::new(Deletes::default()),
            oauth: Authorizer::new(config),
        }
    }

    /// What every server shares: these, with the counters and the journal.
    pub(super) fn context(&self, stats: &Arc<Stats>, journal: &Arc<Journal>) -> Context {
        Context {
            stats: stats.clone(),
            journal: journal.clone(),
            children: self.children.clone(),
            deletes: self.deletes.clone(),
            oauth: self.oauth.clone(),
        }
    }
}
