//! Requests in flight to one server, and what bounds them.
//!
//! A server has `calls_per_server` lanes. A request to the server holds a
//! lane for as long as it runs, so a server that hangs uses up its own
//! lanes and never another server's. The request is a [`Flight`]: whoever
//! must end it early (the client's cancel, the close path, the deadline pass
//! of the reaper) stops it, which runs the stopper its transport armed it
//! with: over HTTP the lane's connection is shut down (the thread blocked
//! reading it returns at once); over stdio the waiting thread is woken.
//!
//! A flight is silent while the server sends no JSON-RPC message: waiting
//! for the response head, or between two messages of an SSE answer.
//! Keep-alive comments and partial bytes do not count, so a server that
//! trickles them cannot hold a lane past `request_timeout_secs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::stats::Gauge;

/// Why a flight was ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The client cancelled the request.
    Cancelled,
    /// Its downstream session (or mcpgate) is closing.
    Closing,
    /// The server sent no message within the request timeout.
    Silent,
}

/// One request to a server.
pub(crate) struct Flight {
    id: u64,
    /// The downstream session it belongs to (its address), for the close path.
    owner: usize,
    /// Guards the stopper while the request runs and why it stopped; held
    /// only to set or read them.
    state: Mutex<FlightState>,
    /// Milliseconds since the lanes' epoch of the last message (or the start).
    heard: AtomicU64,
    epoch: Instant,
}

/// What ends a request at once: it must not block.
pub(crate) type Stopper = Box<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct FlightState {
    stopper: Option<Arc<Stopper>>,
    stopped: Option<Stop>,
    /// Its transport took it: the server may have it.
    sent: bool,
}

impl Flight {
    /// Ends the request: the first reason given wins. Whether its transport
    /// had taken it: if not, the server never sees it, and needs no cancel.
    pub(crate) fn stop(&self, why: Stop) -> bool {
        let (stopper, sent) = {
            let mut st = self.state.lock();
            if st.stopped.is_some() {
                return st.sent;
            }
            st.stopped = Some(why);
            (st.stopper.clone(), st.sent)
        };
        if let Some(stop) = stopper {
            stop();
        }
        sent
    }

    pub(crate) fn stopped(&self) -> Option<Stop> {
        self.state.lock().stopped
    }

    /// The server sent a message: the silence starts again.
    pub(crate) fn heard(&self) {
        self.heard.store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn silent_for(&self, now: Instant) -> Duration {
        let heard = Duration::from_millis(self.heard.load(Ordering::Relaxed));
        now.saturating_duration_since(self.epoch + heard)
    }

    /// The request is over: its stopper is dropped, so a stop that comes
    /// later (a cancel racing the answer) touches nothing the next request
    /// uses. Whether it was stopped before: its transport is then spent.
    pub(crate) fn disarm(&self) -> bool {
        let mut st = self.state.lock();
        st.stopper = None;
        st.stopped.is_some()
    }

    /// Gives the flight what ends its request, as its transport takes it
    /// to send; refused if it stopped already.
    pub(crate) fn arm(&self, stopper: Stopper) -> Result<(), Stop> {
        self.set_stopper(stopper, true)
    }

    fn set_stopper(&self, stopper: Stopper, sending: bool) -> Result<(), Stop> {
        let mut st = self.state.lock();
        match st.stopped {
            Some(why) => Err(why),
            None => {
                st.stopper = Some(Arc::new(stopper));
                st.sent |= sending;
                Ok(())
            }
        }
    }
}

/// The lanes of one server and its flights.
pub(crate) struct Lanes {
    idle: Arc<Idle>,
    count: usize,
    /// Guards the flights running now, by id; held only to add, remove or list.
    flights: Mutex<HashMap<u64, Arc<Flight>>>,
    next: AtomicU64,
    epoch: Instant,
    pub(crate) in_flight: Gauge,
}

/// The number of idle lanes, and the signal that one came back or that a
/// flight waiting for one was stopped (its stopper signals it meanwhile).
struct Idle {
    count: Mutex<usize>,
    freed: Condvar,
}

/// A lane taken for one request; given back when dropped.
pub(crate) struct Lane<'a> {
    lanes: &'a Lanes,
    flight: Arc<Flight>,
}

impl Lanes {
    pub(crate) fn new(count: usize) -> Lanes {
        Lanes {
            idle: Arc::new(Idle { count: Mutex::new(count), freed: Condvar::new() }),
            count,
            flights: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            epoch: Instant::now(),
            in_flight: Gauge::default(),
        }
    }

    /// A new flight for a request of the downstream session `owner`; it is
    /// counted from now, and may be stopped before it gets a lane.
    pub(crate) fn flight(&self, owner: usize) -> Arc<Flight> {
        let flight = Arc::new(Flight {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            owner,
            state: Mutex::new(FlightState::default()),
            heard: AtomicU64::new(0),
            epoch: self.epoch,
        });
        flight.heard();
        flight
    }

    /// Takes a lane for `flight`, waiting at most `wait` for one; the
    /// flight counts as running (and may be stopped) from then.
    pub(crate) fn take(&self, flight: &Arc<Flight>, wait: Duration) -> Result<Lane<'_>, LaneError> {
        self.wait_for_idle(flight, wait)?;
        let lane = Lane { lanes: self, flight: flight.clone() };
        self.flights.lock().insert(flight.id, flight.clone());
        self.in_flight.inc();
        if let Some(why) = flight.stopped() {
            return Err(LaneError::Stopped(why));
        }
        Ok(lane)
    }

    /// Takes an idle lane, waiting at most `wait` for one; a stop of
    /// `flight` (the client's cancel, the session's close) ends the wait at
    /// once, as it ends a request.
    fn wait_for_idle(&self, flight: &Flight, wait: Duration) -> Result<(), LaneError> {
        let deadline = Instant::now() + wait;
        let (mut armed, mut timed_out) = (false, false);
        let mut count = self.idle.count.lock();
        let taken = loop {
            if let Some(why) = flight.stopped() {
                // It may have been woken for a lane come back: another waiter takes it.
                if *count > 0 {
                    self.idle.freed.notify_one();
                }
                break Err(LaneError::Stopped(why));
            }
            if *count > 0 {
                *count -= 1;
                break Ok(());
            }
            if timed_out {
                break Err(LaneError::Busy(self.count));
            }
            // Armed only to wait: most find a lane idle. The stopper takes
            // the count's lock, held here until the wait, so its signal
            // cannot fall between this check and the wait.
            if !armed {
                let idle = self.idle.clone();
                let wake = Box::new(move || {
                    let _held = idle.count.lock();
                    idle.freed.notify_all();
                });
                if let Err(why) = flight.set_stopper(wake, false) {
                    break Err(LaneError::Stopped(why));
                }
                armed = true;
            }
            timed_out = self.idle.freed.wait_until(&mut count, deadline).timed_out();
        };
        drop(count);
        if armed {
            flight.disarm();
        }
        taken
    }

    /// Stops the flights silent for longer than `timeout`; the reaper's job.
    pub(crate) fn expire(&self, timeout: Duration) {
        let now = Instant::now();
        let late: Vec<Arc<Flight>> =
            self.flights.lock().values().filter(|f| f.silent_for(now) > timeout).cloned().collect();
        for flight in late {
            flight.stop(Stop::Silent);
        }
    }

    /// Stops every flight of the downstream session `owner` (it is closing).
    pub(crate) fn stop_owned_by(&self, owner: usize) {
        let owned: Vec<Arc<Flight>> = self.flights.lock().values().filter(|f| f.owner == owner).cloned().collect();
        for flight in owned {
            flight.stop(Stop::Closing);
        }
    }

    /// Stops every flight (mcpgate is stopping).
    pub(crate) fn stop_all(&self) {
        let all: Vec<Arc<Flight>> = self.flights.lock().values().cloned().collect();
        for flight in all {
            flight.stop(Stop::Closing);
        }
    }
}

impl Drop for Lane<'_> {
    fn drop(&mut self) {
        self.lanes.flights.lock().remove(&self.flight.id);
        self.lanes.in_flight.dec();
        *self.lanes.idle.count.lock() += 1;
        self.lanes.idle.freed.notify_one();
    }
}

/// Why no lane was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LaneError {
    /// Every lane stayed taken while the request waited.
    Busy(usize),
    /// The flight was stopped before it got its lane.
    Stopped(Stop),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lanes(count: usize) -> Lanes {
        Lanes::new(count)
    }

    /// Many threads racing for few lanes never hold more than there are,
    /// and none waits in vain: a lost wake-up would leave a thread waiting
    /// out its 60 s and refused (the whole race takes well under a second).
    #[test]
    fn racing_threads_never_hold_more_lanes_than_there_are_and_none_is_left_waiting() {
        use std::sync::atomic::AtomicUsize;
        let lanes = lanes(3);
        let (holding, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|s| {
            for owner in 0..12 {
                let (lanes, holding, most) = (&lanes, &holding, &most);
                s.spawn(move || {
                    for _ in 0..2_000 {
                        let lane = lanes.take(&lanes.flight(owner), Duration::from_secs(60)).expect("a lane");
                        let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::yield_now();
                        holding.fetch_sub(1, Ordering::SeqCst);
                        drop(lane);
                    }
                });
            }
        });
        assert!(most.load(Ordering::SeqCst) <= 3, "{} lanes held at once", most.load(Ordering::SeqCst));
        assert_eq!(lanes.in_flight.get(), 0);
        assert_eq!(*lanes.idle.count.lock(), 3, "every lane came back");
        assert!(lanes.flights.lock().is_empty());
    }

    #[test]
    fn a_busy_server_refuses_after_the_wait_and_a_freed_lane_is_taken() {
        let lanes = lanes(1);
        let first = lanes.flight(1);
        let held = lanes.take(&first, Duration::ZERO).unwrap();
        assert_eq!(lanes.in_flight.get(), 1);
        let second = lanes.flight(1);
        let started = Instant::now();
        assert_eq!(lanes.take(&second, Duration::from_millis(50)).err(), Some(LaneError::Busy(1)));
        assert!(started.elapsed() >= Duration::from_millis(50));
        drop(held);
        assert!(lanes.take(&second, Duration::ZERO).is_ok());
        assert_eq!(lanes.in_flight.get(), 0);
    }

    #[test]
    fn stopping_ends_a_flight_once_and_its_lane_is_replaced() {
        let lanes = lanes(1);
        let flight = lanes.flight(7);
        let lane = lanes.take(&flight, Duration::ZERO).unwrap();
        lanes.stop_owned_by(8);
        assert_eq!(flight.stopped(), None);
        lanes.stop_owned_by(7);
        flight.stop(Stop::Silent);
        assert_eq!(flight.stopped(), Some(Stop::Closing), "the first reason wins");
        drop(lane);
        let next = lanes.flight(7);
        assert!(lanes.take(&next, Duration::ZERO).is_ok(), "the lane is free again");
        let woken = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let armed = lanes.flight(7);
        let seen = woken.clone();
        armed.arm(Box::new(move || seen.store(true, Ordering::Relaxed))).unwrap();
        armed.stop(Stop::Cancelled);
        assert!(woken.load(Ordering::Relaxed), "stopping runs the stopper");
        assert_eq!(armed.arm(Box::new(|| {})), Err(Stop::Cancelled), "a stopped flight takes no stopper");
        let stopped = lanes.flight(7);
        stopped.stop(Stop::Cancelled);
        assert_eq!(lanes.take(&stopped, Duration::ZERO).err(), Some(LaneError::Stopped(Stop::Cancelled)));
        assert_eq!(lanes.in_flight.get(), 0);
    }

    #[test]
    fn a_stop_ends_the_wait_for_a_lane_at_once_and_the_lane_goes_to_the_next_waiter() {
        let lanes = lanes(1);
        let held = lanes.take(&lanes.flight(1), Duration::ZERO).unwrap();
        let (waiting, next) = (lanes.flight(1), lanes.flight(1));
        std::thread::scope(|s| {
            let stopped = s.spawn(|| {
                let started = Instant::now();
                (lanes.take(&waiting, Duration::from_secs(20)).err(), started.elapsed())
            });
            let other = s.spawn(|| lanes.take(&next, Duration::from_secs(20)).is_ok());
            std::thread::sleep(Duration::from_millis(100));
            waiting.stop(Stop::Cancelled);
            let (refused, took) = stopped.join().unwrap();
            assert_eq!(refused, Some(LaneError::Stopped(Stop::Cancelled)));
            assert!(took < Duration::from_secs(10), "the stopped flight waited {took:?}");
            drop(held);
            assert!(other.join().unwrap(), "the lane given back went to the flight still waiting");
        });
        assert_eq!(lanes.in_flight.get(), 0);
    }

    #[test]
    fn a_stop_after_the_request_ended_runs_no_stopper() {
        let lanes = lanes(1);
        let woken = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = woken.clone();
        let flight = lanes.flight(1);
        flight.arm(Box::new(move || seen.store(true, Ordering::Relaxed))).unwrap();
        assert!(!flight.disarm(), "not stopped while it ran");
        flight.stop(Stop::Cancelled);
        assert!(!woken.load(Ordering::Relaxed), "the late cancel shut nothing down");
        let stopped = lanes.flight(1);
        stopped.arm(Box::new(|| {})).unwrap();
        stopped.stop(Stop::Cancelled);
        assert!(stopped.disarm(), "stopped while it ran: its transport is spent");
    }

    #[test]
    fn only_silent_flights_expire() {
        let lanes = lanes(2);
        let (quiet, chatty) = (lanes.flight(1), lanes.flight(1));
        let _a = lanes.take(&quiet, Duration::ZERO).unwrap();
        let _b = lanes.take(&chatty, Duration::ZERO).unwrap();
        std::thread::sleep(Duration::from_millis(60));
        chatty.heard();
        lanes.expire(Duration::from_millis(40));
        assert_eq!(quiet.stopped(), Some(Stop::Silent));
        assert_eq!(chatty.stopped(), None);
    }
}
