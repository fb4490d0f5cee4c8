//! What a session sends its client: `GET` streams, `POST` answers that
//! stream, the backlog while no stream is open, and the replay log that
//! lets a client resume with `Last-Event-ID`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};

use crate::protocol::jsonrpc;
use crate::protocol::sse;
use crate::runtime::memory::{self, Event, Held};

/// Messages kept for a client that has no `GET` stream open yet; in bytes,
/// what the session holds stays within its share of `max_memory_mb`.
const BACKLOG: usize = 256;

/// Messages queued on one `GET` stream before it counts as stuck.
const STREAM_QUEUE: usize = 256;

/// Events kept for clients that resume a stream with `Last-Event-ID`; the
/// oldest go first when the session needs room for new ones.
const REPLAY_EVENTS: usize = 256;

const REPLAY_BYTES: usize = 1 << 20;

/// What a 2025-11-25 client waits before it reconnects a dropped stream.
const RETRY_MS: u64 = 1000;

/// Where the session's messages to the client go: its `GET` streams, the
/// `POST` answers streaming now, what waits for a stream, and the replay
/// log behind all of them.
pub(super) struct Streams {
    /// `GET` streams open now, the newest last.
    open: Vec<ClientStream>,
    /// Stream numbers (in event ids), `GET` and `POST` alike.
    next: u64,
    next_attach: u64,
    /// Messages for a `GET` stream that is not open yet.
    backlog: VecDeque<Event>,
    /// `POST` answers streaming now, with the `GET` that resumed one, if any.
    posts: HashMap<u64, Option<Sender<Event>>>,
    replay: ReplayLog,
    /// `subscriptions/listen` streams (2026-07-28), each with what it asked for.
    listeners: Vec<Listener>,
    next_listener: u64,
    /// Bytes of events this session holds (queued, kept, waiting).
    tally: Arc<AtomicUsize>,
    /// The session's short id, for the log.
    label: String,
}

/// What a `subscriptions/listen` stream asked to hear.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ListenFilter {
    pub(crate) tools: bool,
    pub(crate) prompts: bool,
    pub(crate) resources: bool,
}

impl ListenFilter {
    /// Whether `method` (a notification) is one this stream asked for.
    fn wants(&self, method: &str) -> bool {
        match method {
            "notifications/tools/list_changed" => self.tools,
            "notifications/prompts/list_changed" => self.prompts,
            "notifications/resources/list_changed" => self.resources,
            _ => false,
        }
    }

    /// The acknowledgement's `notifications`: what mcpgate honors of it.
    pub(crate) fn honored(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for (key, on) in [
            ("toolsListChanged", self.tools),
            ("promptsListChanged", self.prompts),
            ("resourcesListChanged", self.resources),
        ] {
            if on {
                out.insert(key.into(), serde_json::Value::Bool(true));
            }
        }
        serde_json::Value::Object(out)
    }
}

/// One `subscriptions/listen` stream.
struct Listener {
    id: u64,
    /// The listen request's id, which every message on it carries.
    subscription: serde_json::Value,
    filter: ListenFilter,
    tx: Sender<Event>,
}

impl Streams {
    pub(super) fn new(label: &str) -> Streams {
        Streams {
            tally: Arc::new(AtomicUsize::new(0)),
            label: label.to_string(),
            open: Vec::new(),
            next: 0,
            next_attach: 0,
            backlog: VecDeque::new(),
            posts: HashMap::new(),
            replay: ReplayLog::new(),
            listeners: Vec::new(),
            next_listener: 0,
        }
    }

    /// Ends every stream and forgets what was kept (the session closes).
    pub(super) fn clear(&mut self) {
        self.listeners.clear();
        self.open.clear();
        self.backlog.clear();
        self.posts.clear();
        self.replay.clear();
    }

    pub(super) fn is_empty(&self) -> bool {
        self.open.is_empty() && self.listeners.is_empty()
    }

    /// `GET` streams open now.
    pub(super) fn open_count(&self) -> usize {
        self.open.len()
    }
}

/// A `GET` stream as the session sees it. Dropped when the stream ends: what
/// is still queued for it is dropped at once (a writer blocked on a client
/// that does not read would hold it until its write times out).
struct ClientStream {
    /// The stream number in event ids.
    id: u64,
    /// This attachment: a resumed stream keeps its number on a new connection.
    attach: u64,
    tx: Sender<Event>,
    /// The writer's end too, to empty the queue when the stream is cut.
    rx: Receiver<Event>,
}

impl Drop for ClientStream {
    fn drop(&mut self) {
        while self.rx.try_recv().is_ok() {}
    }
}

/// An SSE event as sent, kept for replay. Ids are `<stream>-<seq>`: unique
/// within the session, and they name the stream they belong to.
struct ReplayEvent {
    stream: u64,
    seq: u64,
    /// The response that ends a `POST` stream.
    last: bool,
    bytes: Event,
}

/// A `GET` stream as the connection thread writes it: `first` (replay,
/// priming, waiting messages), then whatever arrives on `rx` until it
/// disconnects. `id` is set for a `GET` stream to detach when it ends.
pub(crate) struct Attached {
    pub(crate) id: Option<u64>,
    pub(crate) first: Vec<Event>,
    pub(crate) rx: Receiver<Event>,
}

/// The events a session keeps for clients that resume a stream with
/// `Last-Event-ID`: at most [`REPLAY_EVENTS`] and [`REPLAY_BYTES`], and
/// within the session's share of `max_memory_mb`, oldest out first.
struct ReplayLog {
    next_seq: u64,
    events: VecDeque<ReplayEvent>,
    bytes: usize,
}

impl ReplayLog {
    fn new() -> ReplayLog {
        ReplayLog { next_seq: 1, events: VecDeque::new(), bytes: 0 }
    }

    /// Encodes `message` as the next event of `stream`, without keeping it.
    fn encode(&mut self, stream: u64, message: &[u8]) -> Vec<u8> {
        let seq = self.next_seq;
        self.next_seq += 1;
        sse::encode(Some(&format!("{stream}-{seq}")), message)
    }

    /// Encodes `message` as the next event of `stream` and keeps it for
    /// replay; `None` when the budget has no room for it even after the
    /// session gave up its oldest replay events.
    fn record(&mut self, stream: u64, message: &[u8], last: bool, tally: &Arc<AtomicUsize>) -> Option<Event> {
        let seq = self.next_seq;
        let bytes = self.encode(stream, message);
        self.make_room(bytes.len(), memory::share(), tally);
        let mut bytes = bytes;
        let event = loop {
            match Held::new(bytes, tally) {
                Ok(event) => break event,
                // Spent: what this session keeps for replay goes first.
                Err(back) if !self.events.is_empty() => {
                    bytes = back;
                    self.drop_oldest();
                }
                Err(_) => return None,
            }
        };
        self.events.push_back(ReplayEvent { stream, seq, last, bytes: event.clone() });
        self.bytes += event.len();
        while self.events.len() > REPLAY_EVENTS || self.bytes > REPLAY_BYTES {
            self.drop_oldest();
        }
        Some(event)
    }

    /// The kept events of `stream` after `seq`, in order.
    fn after(&self, stream: u64, seq: u64) -> Vec<Event> {
        self.events.iter().filter(|e| e.stream == stream && e.seq > seq).map(|e| e.bytes.clone()).collect()
    }

    /// Whether `stream` (a `POST` answer) has ended.
    fn finished(&self, stream: u64) -> bool {
        self.events.iter().any(|e| e.stream == stream && e.last)
    }

    /// Gives up replay events until `more` bytes fit in the session's `share`.
    fn make_room(&mut self, more: usize, share: usize, tally: &AtomicUsize) {
        while !self.events.is_empty() && tally.load(Ordering::Relaxed) + more > share {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        if let Some(old) = self.events.pop_front() {
            self.bytes -= old.bytes.len();
        }
    }

    fn clear(&mut self) {
        self.events.clear();
        self.bytes = 0;
    }
}

/// One message of a listen stream as SSE: `params._meta` names the listen request.
fn listener_event(subscription: &serde_json::Value, method: &str, mut params: serde_json::Value) -> Vec<u8> {
    params["_meta"] = serde_json::json!({ crate::protocol::stateless::META_SUBSCRIPTION: subscription });
    sse::encode(None, &jsonrpc::notification(method, Some(&jsonrpc::raw(&params))))
}

/// The priming event that opens `stream` for a 2025-11-25 client: an id
/// to resume from and how long to wait before reconnecting.
pub(super) fn priming(stream: u64) -> Vec<u8> {
    sse::priming(&format!("{stream}-0"), Some(RETRY_MS))
}

/// The priming event of a `POST` answer that carries its request (at most
/// [`MAX_CARRIED`] bytes of it, base64url after a dot): a client that
/// resumes the stream on another instance, after this one died, names the
/// call that was in flight, and that instance can answer it.
pub(super) fn priming_with(stream: u64, request: &[u8]) -> Vec<u8> {
    use base64::Engine;
    if request.len() > MAX_CARRIED {
        return priming(stream);
    }
    let carried = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(request);
    sse::priming(&format!("{stream}-0.{carried}"), Some(RETRY_MS))
}

/// The most bytes of a request a priming event id carries.
const MAX_CARRIED: usize = 1024;

/// `<stream>-<seq>` back into numbers (a request carried after a dot is not read).
fn parse_event_id(id: &str) -> Option<(u64, u64)> {
    let (stream, seq) = id.trim().split_once('-')?;
    let seq = seq.split_once('.').map_or(seq, |(seq, _)| seq);
    Some((stream.parse().ok()?, seq.parse().ok()?))
}

/// The request a priming event id of another holder's `POST` stream
/// carries, with its stream number.
pub(super) fn carried_request(id: &str) -> Option<(u64, Vec<u8>)> {
    use base64::Engine;
    let (stream, rest) = id.trim().split_once('-')?;
    let (_, carried) = rest.split_once('.')?;
    let request = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(carried).ok()?;
    Some((stream.parse().ok()?, request))
}

impl Streams {
    /// Sends a message to the client's `GET` stream, or keeps it until one
    /// opens. A stream that falls behind (a client that does not read) by
    /// more than the session's share of `max_memory_mb`, or by
    /// [`STREAM_QUEUE`] messages, is ended: the client resumes it with
    /// `Last-Event-ID` and gets what the replay log still holds.
    pub(super) fn push(&mut self, message: Vec<u8>) {
        while let Some(stream) = self.open.last() {
            let (id, tx) = (stream.id, stream.tx.clone());
            let Some(event) = self.replay.record(id, &message, false, &self.tally) else {
                crate::limited!(
                    warn,
                    "session {}: mcpgate holds its limit of max_memory_mb; a message for it was dropped",
                    self.label
                );
                return;
            };
            if self.tally.load(Ordering::Relaxed) > memory::share() {
                let behind = self.open.iter().filter(|s| !s.tx.is_empty()).count();
                self.open.retain(|s| s.tx.is_empty());
                if behind > 0 {
                    crate::limited!(
                        warn,
                        "session {}: {behind} GET stream(s) fell more than its share of max_memory_mb ({} bytes) \
                         behind; ended (the client resumes with Last-Event-ID)",
                        self.label,
                        memory::share()
                    );
                }
            }
            if self.open.last().is_some_and(|s| s.id == id && s.tx.same_channel(&tx)) {
                match tx.try_send(event) {
                    Ok(()) => return,
                    Err(TrySendError::Full(_)) => {
                        crate::limited!(
                            warn,
                            "session {}: a GET stream fell {STREAM_QUEUE} messages behind; ended",
                            self.label
                        );
                        self.open.pop();
                    }
                    // Its writer ended (the client left) and has not detached yet.
                    Err(TrySendError::Disconnected(_)) => {
                        self.open.pop();
                    }
                }
            }
        }
        // No stream: keep it, within the count and the session's share.
        let share = memory::share();
        while !self.backlog.is_empty()
            && (self.backlog.len() >= BACKLOG || self.tally.load(Ordering::Relaxed) + message.len() > share)
        {
            self.backlog.pop_front();
            crate::limited!(
                warn,
                "session {}: no GET stream open and its backlog is full ({BACKLOG} messages or {share} bytes); \
                 the oldest is dropped",
                self.label
            );
        }
        self.replay.make_room(message.len(), share, &self.tally);
        match Held::new(message, &self.tally) {
            Ok(message) => self.backlog.push_back(message),
            Err(_) => crate::limited!(
                warn,
                "session {}: mcpgate holds its limit of max_memory_mb; a message for it was dropped",
                self.label
            ),
        }
    }

    /// Opens a `subscriptions/listen` stream (2026-07-28): its first event
    /// acknowledges what of `filter` mcpgate honors; then the list changes
    /// it asked for, each carrying the listen request's id.
    pub(super) fn listen(&mut self, subscription: &serde_json::Value, filter: ListenFilter) -> Attached {
        let (tx, rx) = bounded(STREAM_QUEUE);
        let params = serde_json::json!({ "notifications": filter.honored() });
        let ack = listener_event(subscription, "notifications/subscriptions/acknowledged", params);
        self.next_listener += 1;
        let id = self.next_listener;
        self.listeners.push(Listener { id, subscription: subscription.clone(), filter, tx });
        let first = Held::new(ack, &self.tally).ok().into_iter().collect();
        Attached { id: Some(id), first, rx }
    }

    /// A listen stream ended; true when no stream is left.
    pub(super) fn unlisten(&mut self, id: u64) -> bool {
        self.listeners.retain(|l| l.id != id);
        self.is_empty()
    }

    /// A notification for the listen streams that asked for its kind.
    pub(super) fn notify_listeners(&mut self, message: &[u8]) {
        let Ok(parsed) = jsonrpc::Message::parse(message) else { return };
        let method = parsed.method().to_string();
        self.listeners.retain(|listener| {
            if !listener.filter.wants(&method) {
                return true;
            }
            let event = listener_event(&listener.subscription, &method, serde_json::json!({}));
            match Held::new(event, &self.tally) {
                // A stream that does not keep up is ended; its client listens again and refetches.
                Ok(event) => !matches!(
                    listener.tx.try_send(event),
                    Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_))
                ),
                Err(_) => true,
            }
        });
    }

    /// Stream numbers start at `base` from now on (a holder's epoch): the
    /// ids of a session continued elsewhere never repeat another holder's.
    pub(super) fn number_from(&mut self, base: u64) {
        self.next = self.next.max(base);
    }

    /// Whether `stream` is one of another holder of the session: below this
    /// holder's numbers and unknown here.
    pub(super) fn is_foreign(&self, stream: u64, base: u64) -> bool {
        stream < base && !self.posts.contains_key(&stream) && self.replay.after(stream, 0).is_empty()
    }

    /// Starts the SSE answer of a `POST`: its stream number.
    pub(super) fn open_post(&mut self) -> u64 {
        self.next += 1;
        let id = self.next;
        self.posts.insert(id, None);
        id
    }

    /// One event of a `POST` stream as SSE bytes, kept for replay (when
    /// the session has room) and passed to a `GET` that resumed the stream.
    /// `last` (the response) ends it.
    pub(super) fn post_event(&mut self, stream: u64, message: &[u8], last: bool) -> Vec<u8> {
        let resumer =
            if last { self.posts.remove(&stream).flatten() } else { self.posts.get(&stream).cloned().flatten() };
        match self.replay.record(stream, message, last, &self.tally) {
            Some(event) => {
                let bytes = event.to_vec();
                if let Some(tx) = resumer {
                    let _ = tx.try_send(event);
                }
                bytes
            }
            // Not kept: this answer goes out, but cannot be resumed.
            None => self.replay.encode(stream, message),
        }
    }

    /// Ends a `POST` stream without a response (its request was
    /// cancelled): a `GET` that resumed it ends, and one that resumes it
    /// later gets what was sent and nothing more.
    pub(super) fn end_post(&mut self, stream: u64) {
        self.posts.remove(&stream);
        self.replay.record(stream, b"", true, &self.tally);
    }

    /// Attaches a `GET` stream. With `last_event_id` of an earlier stream,
    /// the events of that stream after it are replayed first, and only
    /// those; resuming a `POST` stream follows it to its response.
    /// `primes` when the session's protocol version wants a priming event.
    pub(super) fn attach(&mut self, last_event_id: Option<&str>, max_streams: usize, primes: bool) -> Attached {
        let resume = last_event_id.and_then(parse_event_id);
        let replay: Vec<Event> = match resume {
            Some((stream, seq)) => self.replay.after(stream, seq),
            None => Vec::new(),
        };
        if let Some((stream, _)) = resume {
            let finished = self.replay.finished(stream);
            if finished {
                let (_, rx) = bounded(0);
                return Attached { id: None, first: replay, rx };
            }
            if let Some(resumer) = self.posts.get_mut(&stream) {
                let (tx, rx) = bounded(STREAM_QUEUE);
                *resumer = Some(tx);
                return Attached { id: None, first: replay, rx };
            }
        }
        // Resuming a GET stream continues it: same stream number, so the ids
        // the client sees keep naming one stream. The connection it replaces
        // is taken as dead.
        let resumed = resume.map(|(stream, _)| stream).filter(|&stream| stream <= self.next);
        if let Some(stream) = resumed {
            self.open.retain(|s| s.id != stream);
        }
        // A client that reconnects after a network drop is the common case,
        // and the streams it lost may linger without a FIN until a write to
        // them fails: the oldest gives way (its writer ends the connection).
        while self.open.len() >= max_streams.max(1) {
            self.open.remove(0);
            crate::limited!(
                info,
                "session {}: a GET stream beyond max_streams_per_session ({max_streams}) ended its oldest one",
                self.label
            );
        }
        let id = match resumed {
            Some(stream) => stream,
            None => {
                self.next += 1;
                self.next
            }
        };
        // Replay first, then the priming event: its id must not be one a
        // client could resume from while replayed events are still unseen.
        let mut first = replay;
        if primes {
            first.extend(self.replay.record(id, b"", false, &self.tally));
        }
        let waiting: Vec<Event> = self.backlog.drain(..).collect();
        for message in waiting {
            // The message leaves the backlog as it enters the log: room for it is there.
            let len = message.len();
            let message = Arc::try_unwrap(message).map_or_else(|shared| shared.to_vec(), |held| held.to_vec());
            match self.replay.record(id, &message, false, &self.tally) {
                Some(event) => first.push(event),
                None => {
                    crate::limited!(warn, "session {}: a waiting message of {len} bytes was dropped", self.label)
                }
            }
        }
        let (tx, rx) = bounded(STREAM_QUEUE);
        self.next_attach += 1;
        let attach = self.next_attach;
        self.open.push(ClientStream { id, attach, tx, rx: rx.clone() });
        Attached { id: Some(attach), first, rx }
    }

    /// A `GET` stream ended (client gone, or the session closed); true
    /// when no `GET` stream is left.
    pub(super) fn detach(&mut self, attach: u64) -> bool {
        self.open.retain(|s| s.attach != attach);
        self.open.is_empty()
    }
}
