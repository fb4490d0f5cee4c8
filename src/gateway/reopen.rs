//! Running work on a session's downstream session with a server, opened
//! anew once when the server no longer knows it; and the error of a
//! request a shutdown cut short.

use std::sync::Arc;
use std::time::Duration;

use crate::downstream::{Downstream, DownstreamError, Server};
use crate::protocol::jsonrpc::RpcError;
use crate::session::{self, Session};

use super::life::Life;

/// Runs `work` on the session's downstream session with `server`, opening
/// it if needed (needs no gateway: a held call's thread runs it). If the server no longer knows that session (HTTP 404: it
/// restarted; or its process had ended before the request was sent), the
/// downstream session is closed, opened anew, and `work` runs once more:
/// the client never sees a half-alive session.
pub(super) fn run_with_reopen<T>(
    session: &Session,
    server: &Arc<Server>,
    open_retry: Duration,
    mut work: impl FnMut(&Downstream) -> Result<T, DownstreamError>,
) -> Result<T, RpcError> {
    let downstream = session.downstream(server, open_retry)?;
    let result = match work(&downstream) {
        // Closed before it was sent (a reload took it from its slot): sent
        // once more, on the session of the server now in force.
        Err(DownstreamError::Gone) => work(&*session.downstream(server, open_retry)?),
        Err(DownstreamError::SessionGone) => {
            crate::limited!(
                warn,
                "server `{}` no longer knows session {}'s downstream session: opening a new one and retrying once",
                server.name(),
                session::short(&session.id)
            );
            let downstream = session.reopen(server, &downstream)?;
            work(&downstream)
        }
        other => other,
    };
    result.map_err(|e| session::rpc_error(server, &e))
}

/// A request's error while mcpgate shuts down names the shutdown, not what it did to the request.
pub(super) fn cut_short(life: &Life, server: &Server, e: RpcError) -> RpcError {
    if life.stopping() {
        RpcError::server(server.name(), "mcpgate is shutting down; the request was cut short")
    } else {
        e
    }
}
