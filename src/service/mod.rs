//! What keeps the gateway running as a service, above it: the reaper,
//! systemd's notifications and watchdog, and the restore of the state file
//! at start, the peers sharing a state directory, and the heartbeat of
//! instances whose sessions are in Redis.

pub mod heartbeat;
pub mod notify;
pub mod peers;
pub mod reaper;
pub mod restore;
