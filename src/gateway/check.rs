//! `mcpgate --check --start`: each server started and asked for its tools,
//! as a session's first list would, nothing called; per server what works,
//! and for what does not, the cause (a refused connection, a process that
//! ended with its last stderr lines, a refused `initialize`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::json;

use super::current::Current;
use super::lists::{Paging, fetch_pages};
use super::reopen::run_with_reopen;
use crate::downstream::Server;
use crate::http::auth::Access;
use crate::protocol::jsonrpc;
use crate::runtime::threads;
use crate::session::{self, CloseReason, Session};
use crate::stats::Stats;

/// How trying one server went.
pub struct Tried {
    pub server: String,
    /// Its transport and where it is, for people: `stdio: npx -y ...`.
    pub what: String,
    pub took: Duration,
    /// Its tools' count, or why it does not work.
    pub outcome: Result<usize, String>,
}

/// Opens a session with every server of `cur` (starting its process),
/// lists its tools and closes it again, all servers at once; in
/// configuration order. Nothing shuts down meanwhile: an error is the
/// server's own.
pub fn try_servers(cur: &Current, stats: &Stats) -> Vec<Tried> {
    let params = json!({
        "protocolVersion": crate::protocol::versions::NEWEST,
        "capabilities": {},
        "clientInfo": {"name": "mcpgate check", "version": env!("CARGO_PKG_VERSION")},
    });
    let session = Session::new(
        "check".into(),
        crate::protocol::versions::NEWEST.into(),
        jsonrpc::raw(&params),
        "mcpgate check".into(),
        &Access::Open,
    );
    let paging = Paging::of(&cur.config);
    let tried: Mutex<Vec<(usize, Tried)>> = Mutex::new(Vec::new());
    threads::for_each_parallel("fanout", &cur.servers, cur.servers.len(), |server: &Arc<Server>| {
        let started = Instant::now();
        let outcome =
            run_with_reopen(&session, server, cur.config.open_retry, |d| fetch_pages(d, "tools/list", "tools", paging))
                .map(|tools| tools.len())
                .map_err(|e| e.message);
        let what = format!("{}: {}", server.transport(), server.redact(&server.config.target()));
        let rank = cur.rank(server.name());
        tried.lock().push((rank, Tried { server: server.name().into(), what, took: started.elapsed(), outcome }));
    });
    session::close_sessions(vec![session], CloseReason::Refused, cur.servers.len().max(1), stats);
    let mut tried = tried.into_inner();
    tried.sort_by_key(|(rank, _)| *rank);
    tried.into_iter().map(|(_, t)| t).collect()
}
