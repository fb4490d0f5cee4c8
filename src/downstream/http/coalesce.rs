//! One write per request. ureq sends a request's head and then its body,
//! two writes: on a loopback or LAN connection with `TCP_NODELAY` that is
//! two segments, two wake-ups of the server's reader, and a system call on
//! each side more than the request needs. [`Coalesce`] wraps whatever the
//! connector chain made (TCP, or TLS over it) and holds a small write back
//! until the next one, or until the request is sent and ureq turns to read
//! the answer; the two then go out as one.
//!
//! Nothing is held across a read: ureq reads only once it has written all
//! it meant to (the answer, or a `100 Continue` it asked for), so every
//! held byte is out before mcpgate waits for anything.

use std::fmt;

use ureq::Error;
use ureq::unversioned::transport::{Buffers, ConnectionDetails, Connector, NextTimeout, Transport};

/// Wraps every transport of a chain in [`Coalesced`].
#[derive(Debug, Default)]
pub(crate) struct Coalesce;

impl<In: Transport> Connector<In> for Coalesce {
    type Out = Coalesced<In>;

    fn connect(&self, _: &ConnectionDetails, chained: Option<In>) -> Result<Option<Self::Out>, Error> {
        Ok(chained.map(|inner| Coalesced { inner, held: Vec::new(), timeout: None }))
    }
}

/// A transport whose small writes wait for the next write or read.
pub(crate) struct Coalesced<T> {
    inner: T,
    /// Bytes written but not sent yet: at most a quarter of the output buffer.
    held: Vec<u8>,
    /// The timeout of the held write.
    timeout: Option<NextTimeout>,
}

impl<T: Transport> Coalesced<T> {
    /// Sends what is held, alone.
    fn flush(&mut self, timeout: NextTimeout) -> Result<(), Error> {
        if self.held.is_empty() {
            return Ok(());
        }
        let timeout = self.timeout.take().unwrap_or(timeout);
        let n = self.held.len();
        self.inner.buffers().output()[..n].copy_from_slice(&self.held);
        self.held.clear();
        self.inner.transmit_output(n, timeout)
    }
}

impl<T: Transport> Transport for Coalesced<T> {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        let room = self.inner.buffers().output().len();
        let held = self.held.len();
        if held == 0 && amount <= room / 4 {
            // Probably a head: wait for its body.
            self.held.extend_from_slice(&self.inner.buffers().output()[..amount]);
            self.timeout = Some(timeout);
            return Ok(());
        }
        if held > 0 && held + amount <= room {
            // The held bytes go in front of these, and out together.
            let output = self.inner.buffers().output();
            output.copy_within(..amount, held);
            output[..held].copy_from_slice(&self.held);
            self.held.clear();
            self.timeout = None;
            return self.inner.transmit_output(held + amount, timeout);
        }
        if held > 0 {
            // Too much for one buffer: the held bytes first, then these.
            let these = self.inner.buffers().output()[..amount].to_vec();
            self.flush(timeout)?;
            self.inner.buffers().output()[..amount].copy_from_slice(&these);
        }
        self.inner.transmit_output(amount, timeout)
    }

    fn maybe_await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        self.flush(timeout)?;
        self.inner.maybe_await_input(timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        self.flush(timeout)?;
        self.inner.await_input(timeout)
    }

    fn is_open(&mut self) -> bool {
        self.held.is_empty() && self.inner.is_open()
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}

impl<T: fmt::Debug> fmt::Debug for Coalesced<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coalesced").field("inner", &self.inner).field("held", &self.held.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::time::Duration;

    use ureq::Agent;
    use ureq::unversioned::transport::{Connector, TcpConnector};

    use super::Coalesce;

    fn agent(config: ureq::config::Config) -> Agent {
        let connector = ().chain(TcpConnector::default()).chain(Coalesce);
        Agent::with_parts(config, connector, ureq::unversioned::resolver::DefaultResolver::default())
    }

    /// What a server's reads of each request returned, over one kept-alive
    /// connection: the requests' sizes when each came in one read.
    fn reads_per_request(requests: usize, body: &[u8]) -> Vec<Vec<usize>> {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut seen = Vec::new();
            for _ in 0..requests {
                let (mut reads, mut got) = (Vec::new(), Vec::new());
                let mut buf = [0u8; 65536];
                // The head, then as many bytes as Content-Length says.
                loop {
                    let n = conn.read(&mut buf).unwrap();
                    assert!(n > 0, "the client closed early");
                    reads.push(n);
                    got.extend_from_slice(&buf[..n]);
                    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
                    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if got.len() >= end + 4 + length {
                        break;
                    }
                }
                conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").unwrap();
                seen.push(reads);
            }
            seen
        });
        let config = Agent::config_builder().timeout_global(Some(Duration::from_secs(20))).build();
        let agent = agent(config);
        for _ in 0..requests {
            let answer = agent.post(&url).header("Content-Type", "application/json").send(body).unwrap();
            assert_eq!(answer.into_body().read_to_string().unwrap(), "{}");
        }
        server.join().unwrap()
    }

    /// Without `Coalesce` this failed: most requests came in two reads, 134
    /// bytes of head and then 71 of body.
    #[test]
    fn a_request_with_a_small_body_leaves_in_one_write() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}"#;
        let seen = reads_per_request(30, body);
        assert!(seen.iter().all(|reads| reads.len() == 1), "reads per request: {seen:?}");
    }

    #[test]
    fn a_body_larger_than_the_buffer_still_arrives_whole_and_in_order() {
        // Twice ureq's default output buffer: the head goes out first, then the body.
        let body: Vec<u8> = (0..256 * 1024).map(|i| b'a' + (i % 26) as u8).collect();
        let seen = reads_per_request(3, &body);
        assert_eq!(seen.len(), 3);
        assert!(seen.iter().all(|reads| reads.iter().sum::<usize>() > body.len()), "reads per request: {seen:?}");
    }

    #[test]
    fn a_request_without_a_body_is_sent_before_its_answer_is_awaited() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
            }
            conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").unwrap();
            String::from_utf8_lossy(&got).into_owned()
        });
        let config = Agent::config_builder().timeout_global(Some(Duration::from_secs(20))).build();
        let agent = agent(config);
        let answer = agent.get(&url).call().unwrap();
        assert_eq!(answer.into_body().read_to_string().unwrap(), "ok");
        assert!(server.join().unwrap().starts_with("GET /mcp HTTP/1.1\r\n"));
    }
}
