//! The configuration and servers in force, which a reload replaces whole,
//! and the servers of it a session may reach.

use std::sync::Arc;

use crate::config::Config;
use crate::downstream::Server;
use crate::session::Session;

/// The configuration in force and its servers; replaced whole on reload.
pub struct Current {
    pub config: Config,
    /// In configuration order: the first wins a name collision.
    pub servers: Vec<Arc<Server>>,
}

impl Current {
    pub(crate) fn server(&self, name: &str) -> Option<&Arc<Server>> {
        self.servers.iter().find(|s| s.name() == name)
    }

    /// Position in the configuration, for collision order.
    pub(super) fn rank(&self, name: &str) -> usize {
        self.servers.iter().position(|s| s.name() == name).unwrap_or(usize::MAX)
    }
}

/// The servers a session may reach, in configuration order.
pub(super) fn visible(current: &Current, session: &Session) -> Vec<Arc<Server>> {
    current.servers.iter().filter(|s| session.allows(s.name())).cloned().collect()
}
