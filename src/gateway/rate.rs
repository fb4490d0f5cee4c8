//! Rate limits (`rate_limit`): token buckets of calls per user and per
//! (user, tool), with per-server and per-tool settings. Keyed by the user
//! (a token's or an OAuth subject's digest), never by the session: a new
//! `initialize` does not refill them. The buckets are bounded in number
//! (`max_buckets`, the least recently used goes first) and each is charged
//! to `max_memory_mb`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::config::{Config, Rate};
use crate::http::HttpReply;
use crate::protocol::jsonrpc::{self, RpcError};
use crate::runtime::memory::Charge;

/// What one bucket costs, as charged: its key, its state, the map's share.
const BUCKET_BYTES: usize = 128;

/// The methods a limit counts: those that reach a server for its work.
pub(super) fn counted(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get" | "resources/read" | "completion/complete")
}

/// A call over a limit: which, and when a call would be let through.
#[derive(Debug, Clone)]
pub(super) struct Limited {
    pub(crate) limit: String,
    pub(crate) retry_after: Duration,
}

impl Limited {
    /// Whole seconds to wait, at least 1 (`Retry-After`).
    pub(super) fn retry_secs(&self) -> u64 {
        self.retry_after.as_secs_f64().ceil().max(1.0) as u64
    }

    /// The JSON-RPC error that says so, inside a batch or a stream.
    pub(super) fn error(&self, who: &str) -> RpcError {
        let secs = self.retry_secs();
        let mut e = RpcError::new(jsonrpc::RATE_LIMITED, format!("{who} is over {}: retry in {secs} s", self.limit));
        e.data = Some(serde_json::json!({ "retryAfterSecs": secs, "limit": self.limit }));
        e
    }

    /// The HTTP answer for a request alone: 429 with `Retry-After`.
    pub(super) fn reply(&self, id: &serde_json::Value, who: &str) -> HttpReply {
        super::refusal::reply_to(super::refusal::Why::RateLimited(self.retry_secs()), id, &self.error(who))
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    user: Option<[u8; 32]>,
    /// `None`: the user's own bucket.
    tool: Option<String>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
    /// When it was last used: the least recently used goes first.
    used: u64,
    _charge: Charge,
}

/// The buckets, by user and tool.
#[derive(Default)]
pub(super) struct RateLimiter {
    /// Guards the buckets and the use counter; held for the arithmetic only.
    state: Mutex<(HashMap<Key, Bucket>, u64)>,
}

impl RateLimiter {
    /// Takes one call of `user` to `tool` (its exposed name, or the method
    /// when it has none) from its buckets, or says which limit it is over
    /// (nothing is taken then).
    pub(super) fn take(&self, config: &Config, user: Option<[u8; 32]>, tool: &str) -> Result<(), Limited> {
        let limits = &config.rate_limit;
        let per_tool = limits.tools.get(tool).map(|r| (*r, format!("rate_limit.tools.{tool}"))).or_else(|| {
            server_of(config, tool)
                .and_then(|server| server.rate_limit.0.map(|r| (r, format!("mcpServers.{}.rate_limit", server.name))))
        });
        let per_tool = per_tool.or_else(|| limits.per_tool.map(|r| (r, "rate_limit.per_tool".to_string())));
        let mut wanted: Vec<(Key, Rate, String)> = Vec::with_capacity(2);
        if let Some(rate) = limits.per_user {
            wanted.push((Key { user, tool: None }, rate, "rate_limit.per_user".into()));
        }
        if let Some((rate, name)) = per_tool {
            wanted.push((Key { user, tool: Some(tool.to_string()) }, rate, name));
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        let mut state = self.state.lock();
        let (buckets, clock) = &mut *state;
        *clock += 1;
        let mut over: Option<Limited> = None;
        for (key, rate, name) in &wanted {
            let tokens = buckets.get(key).map_or(rate.burst as f64, |b| refilled(b, rate, now));
            if tokens < 1.0 {
                let per_sec = rate.per_minute as f64 / 60.0;
                let wait = Duration::from_secs_f64((1.0 - tokens) / per_sec);
                if over.as_ref().is_none_or(|o| wait > o.retry_after) {
                    over = Some(Limited {
                        limit: format!("{name} ({} a minute, {} at once)", rate.per_minute, rate.burst),
                        retry_after: wait,
                    });
                }
            }
        }
        if let Some(over) = over {
            return Err(over);
        }
        for (key, rate, _) in wanted {
            let tokens = buckets.get(&key).map_or(rate.burst as f64, |b| refilled(b, &rate, now));
            match buckets.get_mut(&key) {
                Some(bucket) => {
                    bucket.tokens = tokens - 1.0;
                    bucket.at = now;
                    bucket.used = *clock;
                }
                None => {
                    if buckets.len() >= config.rate_limit.max_buckets {
                        evict_oldest(buckets);
                    }
                    // Without room in max_memory_mb the call goes on, unlimited by a bucket
                    // nobody can keep: refusing it would make the memory budget a rate limit.
                    if let Some(charge) = Charge::new(BUCKET_BYTES) {
                        buckets.insert(key, Bucket { tokens: tokens - 1.0, at: now, used: *clock, _charge: charge });
                    }
                }
            }
        }
        Ok(())
    }

    /// Buckets held now.
    pub(super) fn len(&self) -> usize {
        self.state.lock().0.len()
    }
}

/// A bucket's tokens now: refilled at its rate since it was last taken from, up to its burst.
fn refilled(bucket: &Bucket, rate: &Rate, now: Instant) -> f64 {
    let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
    (bucket.tokens + elapsed * rate.per_minute as f64 / 60.0).min(rate.burst as f64)
}

fn evict_oldest(buckets: &mut HashMap<Key, Bucket>) {
    if let Some(oldest) = buckets.iter().min_by_key(|(_, b)| b.used).map(|(k, _)| k.clone()) {
        buckets.remove(&oldest);
    }
}

/// The server whose prefix the exposed name `tool` starts with.
fn server_of<'c>(config: &'c Config, tool: &str) -> Option<&'c crate::config::ServerConfig> {
    config.servers.iter().find(|s| {
        if s.prefix.is_empty() {
            return false;
        }
        tool.strip_prefix(s.prefix.as_str()).is_some_and(|rest| rest.starts_with(s.separator.as_str()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::parse(text, &|_| None).unwrap()
    }

    #[test]
    fn a_burst_passes_then_one_call_per_refill_and_users_are_apart() {
        let c = config(
            r#"{"rate_limit": {"per_user": {"per_minute": 60, "burst": 3}}, "mcpServers": {"a": {"url": "http://127.0.0.1:9/mcp"}}}"#,
        );
        let limiter = RateLimiter::default();
        let (alice, bob) = (Some([1u8; 32]), Some([2u8; 32]));
        for _ in 0..3 {
            assert!(limiter.take(&c, alice, "a__echo").is_ok());
        }
        let over = limiter.take(&c, alice, "a__echo").unwrap_err();
        assert!(over.limit.starts_with("rate_limit.per_user"), "{over:?}");
        assert!(over.retry_after <= Duration::from_secs(1) && over.retry_secs() == 1, "{over:?}");
        assert!(limiter.take(&c, bob, "a__echo").is_ok(), "another user has a bucket of their own");
    }

    #[test]
    fn a_tool_limit_overrides_the_servers_which_overrides_per_tool() {
        let c = config(
            r#"{"rate_limit": {"per_tool": {"per_minute": 600, "burst": 100}, "tools": {"a__slow": {"per_minute": 1, "burst": 1}}},
                "mcpServers": {"a": {"url": "http://127.0.0.1:9/mcp", "rate_limit": {"per_minute": 2, "burst": 2}},
                               "b": {"url": "http://127.0.0.1:9/mcp"}}}"#,
        );
        let limiter = RateLimiter::default();
        let user = Some([1u8; 32]);
        assert!(limiter.take(&c, user, "a__slow").is_ok());
        assert!(limiter.take(&c, user, "a__slow").unwrap_err().limit.starts_with("rate_limit.tools.a__slow"));
        assert!(limiter.take(&c, user, "a__echo").is_ok() && limiter.take(&c, user, "a__echo").is_ok());
        assert!(limiter.take(&c, user, "a__echo").unwrap_err().limit.starts_with("mcpServers.a.rate_limit"));
        for _ in 0..50 {
            assert!(limiter.take(&c, user, "b__echo").is_ok(), "b's tools have per_tool's 100");
        }
    }

    #[test]
    fn buckets_are_bounded_and_the_least_recently_used_goes() {
        let c = config(
            r#"{"rate_limit": {"per_tool": {"per_minute": 60, "burst": 1}, "max_buckets": 16}, "mcpServers": {"a": {"url": "http://127.0.0.1:9/mcp"}}}"#,
        );
        let limiter = RateLimiter::default();
        for i in 0..100u8 {
            assert!(limiter.take(&c, Some([i; 32]), "a__echo").is_ok());
        }
        assert_eq!(limiter.len(), 16);
    }
}
