//! A new configuration while mcpgate runs (SIGHUP, `POST /reload`): servers
//! that changed are retired and their downstream sessions closed; the rest
//! are kept, with their sessions.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::downstream::{self, Limits, Server};

use super::{Current, Gateway, ReloadOutcome, new_server};

impl Gateway {
    /// Applies a new configuration. Servers removed or changed (URL, headers,
    /// prefix, the values of their variables, limits) are retired: every
    /// downstream session of theirs is closed through the close path and
    /// reopened lazily with the new settings. Unchanged servers and their
    /// sessions are left alone; sessions whose lists change (a server, or
    /// `tool_search`) are told with `list_changed`. Settings of the listener need a restart and are reported.
    pub(crate) fn reload(&self, new: Config) -> ReloadOutcome {
        let _one_at_a_time = self.life.one_reload_at_a_time();
        let old = self.current();
        let mut outcome = ReloadOutcome { at: Some(std::time::SystemTime::now()), ..Default::default() };
        for (key, differs) in [
            ("listen", old.config.listen != new.listen),
            ("max_connections", old.config.max_connections != new.max_connections),
            ("max_body_bytes", old.config.max_body_bytes != new.max_body_bytes),
            ("max_header_count", old.config.max_header_count != new.max_header_count),
            ("max_header_bytes", old.config.max_header_bytes != new.max_header_bytes),
            ("client_idle_timeout_secs", old.config.client_idle_timeout != new.client_idle_timeout),
            ("client_write_timeout_secs", old.config.client_write_timeout != new.client_write_timeout),
            ("header_timeout_secs", old.config.header_timeout != new.header_timeout),
            ("state_file", old.config.state_file != new.state_file),
            ("instance_id", old.config.instance_id != new.instance_id),
            ("state_dir", old.config.state_dir != new.state_dir),
            ("store", old.config.store != new.store),
            ("store_lease_ms", old.config.store_lease != new.store_lease),
            ("peer_url", old.config.peer_url != new.peer_url),
            // The files of `tls` are read again on reload; HTTPS on or off is the listener's.
            ("tls", old.config.tls.is_some() != new.tls.is_some()),
        ] {
            if differs {
                outcome.restart_needed.push(key.to_string());
            }
        }
        let same_limits = Limits::from_config(&old.config) == Limits::from_config(&new)
            && old.config.calls_per_server == new.calls_per_server;
        let mut servers = Vec::with_capacity(new.servers.len());
        let context = self.context();
        self.downstreams.children.configure(new.max_processes, new.stdio_grace, new.max_message_bytes);
        for config in &new.servers {
            match old.server(&config.name) {
                Some(server) if server.config == *config && same_limits => servers.push(server.clone()),
                _ => servers.push(new_server(config, &new, &context)),
            }
        }
        let retired: Vec<Arc<Server>> =
            old.servers.iter().filter(|o| !servers.iter().any(|s| Arc::ptr_eq(s, o))).cloned().collect();
        let added = servers.iter().filter(|s| !old.servers.iter().any(|o| Arc::ptr_eq(s, o))).count();
        outcome.changed = retired.iter().map(|s| s.name().to_string()).collect();
        outcome
            .changed
            .extend(servers.iter().filter(|s| old.server(s.name()).is_none()).map(|s| format!("{} (new)", s.name())));
        crate::runtime::memory::set_limit(new.max_memory);
        self.downstreams.oauth.configure(&new);
        *self.current.write() = Arc::new(Current { config: new, servers });
        // After the swap: an open that finishes now sees its server retired
        // and opens again on the one that replaced it.
        for server in &retired {
            if let Some(next) = self.current().server(server.name()) {
                server.succeeded_by(next);
            }
            server.retire();
        }
        // The mode decides what tools/list shows: every session's list changes with it.
        let search_changed = old.config.tool_search != self.current().config.tool_search;
        let mut closing = Vec::new();
        for session in self.sessions.snapshot() {
            let taken = session.take_servers(&retired);
            if !taken.is_empty() || added > 0 || !retired.is_empty() || search_changed {
                session.lists_changed();
            }
            closing.extend(taken);
        }
        let closed = closing.len();
        let wait = self.current().config.request_timeout;
        downstream::close_when_idle(closing, wait, self.life.draining());
        for server in &retired {
            // A shared process nobody uses now stops at once.
            server.stop_idle(Duration::ZERO);
        }
        log::info!(
            "configuration reloaded: {} server(s) changed, {} downstream session(s) closed once their calls end{}",
            outcome.changed.len(),
            closed,
            if outcome.restart_needed.is_empty() {
                String::new()
            } else {
                format!("; these take effect after a restart: {}", outcome.restart_needed.join(", "))
            }
        );
        self.life.reloaded(&outcome);
        self.start_eager(None);
        self.govern.configure_audit(self.current().config.audit.as_ref());
        self.configure_tracing();
        outcome
    }

    /// Reloads from `source`. A configuration that cannot be loaded is
    /// refused with a log line and a status-page entry; the old one stays.
    pub(crate) fn reload_from(&self, source: &crate::config::Source) -> ReloadOutcome {
        match source.load() {
            Ok(config) => {
                if let Some(notes) = config.notes.summary() {
                    log::info!("{}: {notes}", source.path.display());
                }
                self.reload(config)
            }
            Err(e) => {
                log::error!("configuration reload refused, the previous configuration stays in force: {e}");
                let outcome = ReloadOutcome {
                    at: Some(std::time::SystemTime::now()),
                    error: Some(e.to_string()),
                    ..Default::default()
                };
                self.life.reloaded(&outcome);
                outcome
            }
        }
    }
}
