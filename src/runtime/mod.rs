//! What every floor uses: the backoff of every retry loop, the audit log's
//! writer, traces and their exporter (`trace`, `otlp`) and the context a
//! thread holds (`tracecontext`), the state file and its journal, the
//! threads and their roles, the memory budget and the buffers large
//! answers are read into again (`recycle`), rate-limited logging, the
//! clock, SHA-256 and the comparison of secrets, the watch of files that
//! reloads the configuration when it is saved, and the OS calls (`sys`,
//! the only `unsafe` code).

pub(crate) mod audit;
pub(crate) mod backoff;
pub mod clock;
pub(crate) mod memory;
pub(crate) mod otlp;
pub(crate) mod ratelog;
pub(crate) mod recycle;
pub(crate) mod secret;
pub(crate) mod sha256;
pub mod state;
pub mod store;
pub mod sys;
pub mod threads;
pub(crate) mod trace;
pub(crate) mod tracecontext;
pub mod watch;
