//! The Redis backend's place in a build without the `redis` feature (a
//! board's, 1 MB smaller): no value of it can exist, so every use of it
//! type-checks and none runs; `store` in a configuration is refused with
//! a reason (`config`).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::{Claim, Found, Holder, SessionStore, StoreError};
use crate::runtime::state::{Change, Mirror, SavedSession, StateError};

/// Never made: this build has no Redis client.
pub enum RedisStore {}

impl RedisStore {
    pub(crate) fn new(url: &str, _me: &str, _peer_url: &str, _lease: Duration) -> Result<RedisStore, StoreError> {
        Err(StoreError { store: url.to_string(), why: "this mcpgate was built without the `redis` feature".into() })
    }

    pub(crate) fn beat_every(&self) -> Duration {
        match *self {}
    }

    pub fn start_writer(self: &Arc<Self>) -> std::io::Result<JoinHandle<()>> {
        match **self {}
    }

    pub fn stop_writer(&self, _handle: JoinHandle<()>) {
        match *self {}
    }
}

impl SessionStore for RedisStore {
    fn name(&self) -> &str {
        match *self {}
    }
    fn me(&self) -> &str {
        match *self {}
    }
    fn first_epoch(&self) -> u64 {
        match *self {}
    }
    fn find(&self, _id: &str) -> Result<Option<Found>, StoreError> {
        match *self {}
    }
    fn claim(&self, _: &str, _: &Holder, _: &mut dyn FnMut(&SavedSession, u64) -> bool) -> Result<Claim, StoreError> {
        match *self {}
    }
    fn holds(&self, _id: &str, _epoch: u64) -> Result<bool, StoreError> {
        match *self {}
    }
    fn beat(&self, _active: &[(String, u64)]) -> Result<(), StoreError> {
        match *self {}
    }
    fn orphans(&self, _idle: Duration) -> Result<Vec<(String, Holder)>, StoreError> {
        match *self {}
    }
}

impl Mirror for RedisStore {
    fn change(&self, _change: Change) {
        match *self {}
    }
    fn commit(&self) -> Result<(), StateError> {
        match *self {}
    }
}
