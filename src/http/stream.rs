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
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::runtime::clock;

/// The socket of one client connection.
pub(crate) enum Stream {
    Plain(Plain),
    #[cfg(feature = "tls")]
    Tls(Box<super::tls::TlsStream>),
}

/// A plain TCP connection, with the timeouts last set on it: one is set
/// again only when it no longer fits ([`clock::timeout_fits`]).
pub(crate) struct Plain {
    tcp: TcpStream,
    /// Nanoseconds of `SO_RCVTIMEO` as last set; 0: not set yet.
    read_timeout: AtomicU64,
    /// Nanoseconds of `SO_SNDTIMEO` as last set; 0: not set yet.
    write_timeout: AtomicU64,
}

impl Plain {
    /// Sets `timeout` through `set` unless the one in `last` is close enough.
    fn bound(
        &self,
        last: &AtomicU64,
        timeout: Duration,
        set: impl FnOnce(&TcpStream, Option<Duration>) -> io::Result<()>,
    ) -> io::Result<()> {
        let want = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX).max(1);
        let have = last.load(Ordering::Relaxed);
        if have > 0 && clock::timeout_fits(Duration::from_nanos(have), Duration::from_nanos(want)) {
            return Ok(());
        }
        set(&self.tcp, Some(Duration::from_nanos(want)))?;
        last.store(want, Ordering::Relaxed);
        Ok(())
    }
}

impl Stream {
    /// A plain connection.
    pub(crate) fn plain(tcp: TcpStream) -> Stream {
        Stream::Plain(Plain { tcp, read_timeout: AtomicU64::new(0), write_timeout: AtomicU64::new(0) })
    }

    /// The TCP socket beneath: for shutdown, the peer's address, a reset.
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(plain) => &plain.tcp,
            #[cfg(feature = "tls")]
            Stream::Tls(tls) => tls.tcp(),
        }
    }

    /// Reads what has arrived, waiting at most `timeout` (not zero) for it;
    /// 0 when the peer closed.
    pub(crate) fn read_within(&self, buf: &mut [u8], timeout: Duration) -> io::Result<usize> {
        match self {
            Stream::Plain(plain) => {
                plain.bound(&plain.read_timeout, timeout, TcpStream::set_read_timeout)?;
                (&plain.tcp).read(buf)
            }
            #[cfg(feature = "tls")]
            Stream::Tls(tls) => tls.read_within(buf, timeout),
        }
    }

    /// Writes some of `bufs`, waiting at most `timeout` (not zero) for the
    /// socket to take them; how many bytes of `bufs` were taken.
    pub(crate) fn write_within(&self, bufs: &[IoSlice<'_>], timeout: Duration) -> io::Result<usize> {
        match self {
            Stream::Plain(plain) => {
                plain.bound(&plain.write_timeout, timeout, TcpStream::set_write_timeout)?;
                (&plain.tcp).write_vectored(bufs)
            }
            #[cfg(feature = "tls")]
            Stream::Tls(tls) => tls.write_within(bufs, timeout),
        }
    }

    /// Whether the client closed its side of the connection.
    pub(crate) fn peer_closed(&self) -> bool {
        match self {
            Stream::Plain(plain) => crate::runtime::sys::peer_closed(&plain.tcp),
            #[cfg(feature = "tls")]
            Stream::Tls(tls) => tls.peer_closed(),
        }
    }

    /// Whether this connection speaks TLS.
    pub(crate) fn is_tls(&self) -> bool {
        !matches!(self, Stream::Plain(_))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    use super::Stream;

    #[test]
    fn a_timeout_is_set_again_unless_the_one_set_is_at_most_a_sixteenth_longer() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let stream = Stream::plain(listener.accept().unwrap().0);
        let ms = Duration::from_millis;
        let mut buf = [0u8; 16];
        // The kernel keeps a timeout in clock ticks, so what it gives back
        // may differ from what was set by a tick (4 ms at 250 Hz).
        // (asked, set on the socket after the read)
        for (asked, set) in [(1000, 1000), (990, 1000), (950, 1000), (900, 900), (2000, 2000), (1000, 1000)] {
            client.write_all(b"x").unwrap();
            assert_eq!(stream.read_within(&mut buf, ms(asked)).unwrap(), 1);
            let got = stream.tcp().read_timeout().unwrap().unwrap();
            assert!(got.abs_diff(ms(set)) <= ms(10), "asked for {asked} ms: {got:?} set, not {set} ms");
        }
        for (asked, set) in [(200, 200), (195, 200), (100, 100), (5000, 5000)] {
            assert_eq!(stream.write_within(&[std::io::IoSlice::new(b"y")], ms(asked)).unwrap(), 1);
            let got = stream.tcp().write_timeout().unwrap().unwrap();
            assert!(got.abs_diff(ms(set)) <= ms(10), "asked for {asked} ms: {got:?} set, not {set} ms");
        }
    }
}
