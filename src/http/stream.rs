//! A client's connection, plain or TLS, as the reader and writer of a
//! connection thread use it: a read or a write bounded by a timeout, the
//! TCP socket beneath for what only the socket does (shutdown, peer address,
//! a reset), and whether the client went away.
//!
//! An enum, not a trait object: a connection is one or the other for its
//! whole life, and the match costs a branch per read or write, next to a
//! system call each. mcpgate's CPU per call on the plain path stayed within
//! the noise of its measurement (docs/OAUTH.md, "What it costs").

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The socket of one client connection.
pub(crate) enum Stream {
    Plain(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<super::tls::TlsStream>),
}

impl Stream {
    /// The TCP socket beneath: for shutdown, the peer's address, a reset.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            #[cfg(feature = "tls")]
            Stream::Tls(tls) => tls.tcp(),
        }
    }

    /// Reads what has arrived, waiting at most `timeout` (not zero) for it;
    /// 0 when the peer closed.
    pub fn read_within(&self, buf: &mut [u8], timeout: Duration) -> io::Result<usize> {
        match self {
            Stream::Plain(tcp) => {
                tcp.set_read_timeout(Some(timeout))?;
                (&*tcp).read(buf)
            }
            #[cfg(feature = "tls")]
            Stream::Tls(tls) => tls.read_within(buf, timeout),
        }
    }

    /// Writes some of `bufs`, waiting at most `timeout` (not zero) for the
    /// socket to take them; how many bytes of `bufs` were taken.
    pub fn write_within(&self, bufs: &[IoSlice<'_>], timeout: Duration) -> io::Result<usize> {
        match self {
            Stream::Plain(tcp) => {
                tcp.set_write_timeout(Some(timeout))?;
                (&*tcp).write_vectored(bufs)
            }
            #[cfg(feature = "tls")]
            Stream::Tls(tls) => tls.write_within(bufs, timeout),
        }
    }

    /// Whether the client closed its side of the connection.
    pub fn peer_closed(&self) -> bool {
        match self {
            Stream::Plain(tcp) => crate::runtime::sys::peer_closed(tcp),
            #[cfg(feature = "tls")]
            Stream::Tls(tls) => tls.peer_closed(),
        }
    }

    /// Whether this connection speaks TLS.
    pub fn is_tls(&self) -> bool {
        !matches!(self, Stream::Plain(_))
    }
}
