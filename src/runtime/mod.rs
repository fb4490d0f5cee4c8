//! What runs beside the requests: the reaper, the state file, systemd
//! notification, the threads and their roles, the memory budget, rate-limited
//! logging, and the OS calls (`sys`, the only `unsafe` code).

pub mod memory;
pub mod notify;
pub mod ratelog;
pub mod reaper;
pub mod sha256;
pub mod state;
pub mod sys;
pub mod threads;
