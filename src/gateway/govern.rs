//! What governs the calls of every session: the buckets of `rate_limit`,
//! by user and tool, and the audit log in force (`audit`), which a reload
//! that changes it replaces.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::{AuditConfig, Config};
use crate::protocol::jsonrpc::Message;
use crate::runtime::audit::AuditLog;
use crate::session::Session;
use crate::stats::Stats;

use super::{audit, rate};

/// The rate limits' buckets and the audit log.
#[derive(Default)]
pub struct Govern {
    /// The buckets of `rate_limit`, by user and tool.
    rates: rate::RateLimiter,
    /// Guards the audit log in force (`audit`); a reload that changes it
    /// stops the old writer and starts a new one.
    audit: Mutex<Option<Arc<AuditLog>>>,
}

/// The issuer of `auth.oauth`, if any: the audit log names it with a subject.
pub(super) fn issuer(config: &Config) -> Option<String> {
    config.oauth.as_ref().map(|o| o.issuer.clone())
}

impl Govern {
    /// Takes one call of `message` from the buckets of the session's user
    /// (`rate_limit`); over a limit, which one and when to retry.
    pub(super) fn rate_check(
        &self,
        config: &Config,
        stats: &Stats,
        session: &Session,
        message: &Message,
    ) -> Result<(), rate::Limited> {
        if !config.rate_limit.enabled || !rate::counted(message.method()) {
            return Ok(());
        }
        let name =
            message.params_object().ok().and_then(|p| p.get("name").and_then(|n| n.as_str()).map(str::to_string));
        let tool = name.unwrap_or_else(|| message.method().to_string());
        let result = self.rates.take(config, session.principal(), &tool);
        if let Err(limited) = &result {
            stats.calls_rate_limited.inc();
            crate::limited!(info, "call of `{tool}` for {} refused: over {}", session.who, limited.limit);
            if let Some(audit) = self.audit_log() {
                let issuer = issuer(config);
                audit.write(audit::refused_record(session, issuer.as_deref(), message.method(), &tool, &limited.limit));
            }
        }
        result
    }

    /// Buckets of `rate_limit` held now.
    pub(crate) fn rate_buckets(&self) -> usize {
        self.rates.len()
    }

    /// The audit log in force, if `audit` is configured.
    pub(super) fn audit_log(&self) -> Option<Arc<AuditLog>> {
        self.audit.lock().clone()
    }

    /// Starts the audit log of `config` (at start, and on a reload that
    /// changed `audit`), stopping the one before; a file that cannot be
    /// opened is said in the log, and the calls go on unaudited.
    pub fn configure_audit(&self, config: Option<&AuditConfig>) {
        let same = self.audit.lock().as_ref().map(|a| &a.config) == config;
        if same {
            return;
        }
        let new = config.and_then(|c| match AuditLog::start(c.clone()) {
            Ok(log) => Some(Arc::new(log)),
            Err(e) => {
                log::error!("audit log: cannot start it ({e}): calls are not audited until a reload that works");
                None
            }
        });
        let old = std::mem::replace(&mut *self.audit.lock(), new);
        if let Some(old) = old {
            old.stop();
        }
    }

    /// What the audit log counted: written, dropped, rotations.
    pub(crate) fn audit_counts(&self) -> (u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.audit.lock().as_ref().map_or((0, 0, 0), |a| {
            (a.counts.written.load(Relaxed), a.counts.dropped.load(Relaxed), a.counts.rotations.load(Relaxed))
        })
    }
}
