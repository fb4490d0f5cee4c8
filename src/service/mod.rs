//! What keeps the gateway running as a service, above it: the reaper,
//! systemd's notifications and watchdog, and the restore of the state file
//! at start.

pub mod notify;
pub mod reaper;
pub mod restore;
