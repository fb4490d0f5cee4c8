//! How a downstream exchange fails: one error for every transport, in
//! words a person can act on, with what the server's health and counters
//! make of each kind. It becomes JSON-RPC above, in the session.

use std::fmt;
use std::time::Duration;

use crate::stats::{Counter, ServerStats};

/// A user must sign in to a server (one with `oauth`): the link to give
/// them, which `oauth/` makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SignIn {
    pub(crate) server: String,
    pub(crate) elicitation_id: String,
    pub(crate) url: String,
    /// What to tell them, with the link.
    pub(crate) message: String,
}

/// Why a downstream exchange failed, in words a person can act on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DownstreamError {
    /// The server could not be reached.
    Connect(String),
    /// No connection to the server within `connect_timeout_secs` (it did not answer).
    ConnectTimeout(Duration),
    /// The server sent no message for longer than the request timeout.
    Timeout(Duration),
    /// The server did not answer a `DELETE` within `delete_timeout_secs`.
    DeleteTimeout(Duration),
    /// Every lane to the server stayed taken while the request waited.
    Busy(usize),
    /// An HTTP status other than the ones MCP defines for the exchange.
    Status { status: u16, detail: String },
    /// The server answered 404 for our session id: it no longer knows it.
    SessionGone,
    /// The answer broke the protocol: bad JSON, wrong content type, a stream without a response.
    Protocol(String),
    /// The server refused `initialize` or offered no usable protocol version.
    Refused(String),
    /// mcpgate is closing this downstream session.
    Closed,
    /// The downstream session was closed before this request was sent (a
    /// reload retired its server): it may be sent on another.
    Gone,
    /// mcpgate is out of a resource it needs (threads, descriptors, memory).
    Exhausted(String),
    /// The client cancelled the request.
    Cancelled,
    /// A stdio server's process ended while the request ran: how.
    Exited(String),
    /// The server wants OAuth and the user has not signed in (or must again):
    /// the link to give them.
    SignIn(Box<SignIn>),
    /// mcpgate could not get the user a token for the server (its metadata,
    /// its authorization server, the store): why, naming both.
    OAuth(String),
    /// The server answered 401 or 403 with its `WWW-Authenticate` (if any):
    /// what a server with `oauth` signs in from; one without it wants a token.
    Unauthorized { status: u16, challenge: Option<String> },
}

impl fmt::Display for DownstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DownstreamError::Connect(e) => write!(f, "unreachable: {e}"),
            DownstreamError::ConnectTimeout(d) => {
                write!(f, "unreachable: no connection within {} s (connect_timeout_secs)", d.as_secs_f64())
            }
            DownstreamError::Timeout(d) => {
                write!(f, "sent no message within {} s (request_timeout_secs)", d.as_secs_f64())
            }
            DownstreamError::DeleteTimeout(d) => {
                write!(f, "did not answer DELETE within {} s (delete_timeout_secs)", d.as_secs_f64())
            }
            DownstreamError::Busy(n) => {
                write!(f, "busy: {n} requests to it are in flight (calls_per_server); try again later")
            }
            DownstreamError::Status { status, detail } if detail.is_empty() => write!(f, "answered HTTP {status}"),
            DownstreamError::Status { status, detail } => write!(f, "answered HTTP {status}: {detail}"),
            DownstreamError::SessionGone => {
                write!(f, "the server no longer knows this session (HTTP 404, or its process ended)")
            }
            DownstreamError::Protocol(e) => write!(f, "protocol error: {e}"),
            DownstreamError::Refused(e) => write!(f, "initialize refused: {e}"),
            DownstreamError::Closed => write!(f, "the session is closing"),
            DownstreamError::Gone => write!(f, "the session was closed before the request was sent"),
            DownstreamError::Exhausted(e) => write!(f, "{e}"),
            DownstreamError::Cancelled => write!(f, "the request was cancelled"),
            DownstreamError::Exited(how) => write!(f, "{how}"),
            DownstreamError::SignIn(sign_in) => f.write_str(&sign_in.message),
            DownstreamError::OAuth(why) => f.write_str(why),
            DownstreamError::Unauthorized { status, challenge } => {
                let said = challenge.as_deref().map(super::challenge::parse_challenge);
                match said.flatten().and_then(|c| c.resource_metadata) {
                    Some(metadata) => write!(
                        f,
                        "answered HTTP {status}: it wants each user to sign in with OAuth (its metadata: {metadata}); \
                         add \"oauth\": {{}} to this server in mcpgate's configuration"
                    ),
                    None => write!(f, "answered HTTP {status}: it wants a token (`headers`, or `oauth`)"),
                }
            }
        }
    }
}

impl std::error::Error for DownstreamError {}

impl DownstreamError {
    /// Whether this failure says the server is down, not merely slow or
    /// busy: it cannot be reached, refused, answered an error status, broke
    /// the protocol, or its process ended; while a session opens, any
    /// failure of the server's (a server that never answers `initialize`).
    pub(super) fn says_down(&self, opening: bool) -> bool {
        match self {
            DownstreamError::Connect(_)
            | DownstreamError::ConnectTimeout(_)
            | DownstreamError::Refused(_)
            | DownstreamError::Status { .. }
            | DownstreamError::Protocol(_)
            | DownstreamError::Exited(_) => true,
            DownstreamError::Timeout(_) => opening,
            DownstreamError::DeleteTimeout(_)
            | DownstreamError::Busy(_)
            | DownstreamError::SessionGone
            | DownstreamError::Closed
            | DownstreamError::Gone
            | DownstreamError::Exhausted(_)
            | DownstreamError::Cancelled
            | DownstreamError::SignIn(_)
            | DownstreamError::OAuth(_)
            | DownstreamError::Unauthorized { .. } => false,
        }
    }

    /// Whether the server did not answer at all in time (no connection, or
    /// no message): a black hole, which every new session would wait for.
    pub(super) fn unanswered(&self) -> bool {
        matches!(self, DownstreamError::Timeout(_) | DownstreamError::ConnectTimeout(_))
    }

    /// Its kind, as the server's errors are counted: a span's `error.type`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            DownstreamError::Connect(_) | DownstreamError::ConnectTimeout(_) => "connect",
            DownstreamError::Timeout(_) | DownstreamError::DeleteTimeout(_) => "timeout",
            DownstreamError::Busy(_) => "busy",
            DownstreamError::Status { .. } => "status",
            DownstreamError::SessionGone => "session_gone",
            DownstreamError::Protocol(_) => "protocol",
            DownstreamError::Refused(_) => "refused",
            DownstreamError::Closed | DownstreamError::Gone => "closed",
            DownstreamError::Exhausted(_) => "exhausted",
            DownstreamError::Cancelled => "cancelled",
            DownstreamError::Exited(_) => "exited",
            DownstreamError::SignIn(_) | DownstreamError::OAuth(_) | DownstreamError::Unauthorized { .. } => {
                "authorization"
            }
        }
    }

    /// The counter of its kind among a server's errors.
    pub(super) fn counter<'a>(&self, stats: &'a ServerStats) -> &'a Counter {
        match self {
            DownstreamError::Connect(_) | DownstreamError::ConnectTimeout(_) => &stats.errors_connect,
            DownstreamError::Timeout(_) | DownstreamError::DeleteTimeout(_) => &stats.errors_timeout,
            DownstreamError::Busy(_) => &stats.errors_busy,
            DownstreamError::Status { .. } => &stats.errors_status,
            DownstreamError::SessionGone => &stats.errors_session_gone,
            DownstreamError::Protocol(_) => &stats.errors_protocol,
            DownstreamError::Refused(_) => &stats.errors_refused,
            DownstreamError::Closed | DownstreamError::Gone => &stats.errors_closed,
            DownstreamError::Exhausted(_) => &stats.errors_exhausted,
            DownstreamError::Cancelled => &stats.errors_cancelled,
            DownstreamError::Exited(_) => &stats.errors_exited,
            DownstreamError::SignIn(_) | DownstreamError::OAuth(_) | DownstreamError::Unauthorized { .. } => {
                &stats.errors_authorization
            }
        }
    }
}
