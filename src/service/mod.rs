//! What keeps the gateway running as a service, above it: the reaper,
//! systemd's notifications and watchdog, and the restore of the state file
//! at start, and the peers sharing a state directory.

pub mod notify;
pub mod peers;
pub mod reaper;
pub mod restore;
