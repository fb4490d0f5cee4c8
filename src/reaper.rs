#![forbid(unsafe_code)]
//! The reaper: one thread that closes idle sessions through the one close
//! path, and joins reader threads that outlived their close.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Sender, bounded, select, tick};

use crate::gateway::Gateway;
use crate::session::CloseReason;
use crate::{reader, threads};

pub struct Reaper {
    stop: Sender<()>,
    handle: JoinHandle<()>,
}

/// How often the reaper looks: a tenth of the idle timeout, from 100 ms to 5 s.
pub fn interval(idle_timeout: Duration) -> Duration {
    (idle_timeout / 10).clamp(Duration::from_millis(100), Duration::from_secs(5))
}

pub fn start(gateway: Arc<Gateway>) -> std::io::Result<Reaper> {
    let (stop, stopped) = bounded::<()>(0);
    let handle = threads::spawn("reaper", "", move || {
        let _live = gateway.stats.threads_reaper.enter();
        let ticks = tick(interval(gateway.current().config.session_idle_timeout));
        loop {
            select! {
                recv(stopped) -> _ => return,
                recv(ticks) -> _ => {
                    // Read each time: a reload may change it.
                    let timeout = gateway.current().config.session_idle_timeout;
                    let idle = gateway.sessions.take_idle(timeout);
                    if !idle.is_empty() {
                        log::debug!("{} idle session(s) evicted", idle.len());
                        gateway.close(idle, CloseReason::Idle);
                    }
                    reader::join_stragglers(false);
                }
            }
        }
    })?;
    Ok(Reaper { stop, handle })
}

impl Reaper {
    pub fn stop(self) {
        drop(self.stop);
        let _ = self.handle.join();
    }
}
