//! The session store's logic without a balancer: claims, leases, epochs,
//! and a store that fails. The files backend in a scratch `state_dir`; the
//! Redis backend against Debian's `redis-server`, started here on loopback
//! with a password when it is installed (skipped, saying so, when not:
//! `scripts/scale.sh` installs it).

use std::fs::File;
use std::path::{Path, PathBuf};
#[cfg(feature = "redis")]
use std::process::{Child, Command, Stdio};
#[cfg(feature = "redis")]
use std::time::{Duration, Instant};

use mcpgate::runtime::state::{Change, Mirror, SavedSession};
use mcpgate::runtime::store::files::{self, FileStore};
#[cfg(feature = "redis")]
use mcpgate::runtime::store::redis::RedisStore;
use mcpgate::runtime::store::{Claim, Holder, SessionStore};
use mcpgate_testkit::wait_until;

const ID: &str = "gw-a.0123456789abcdef0123456789abcdef";

fn session(id: &str) -> SavedSession {
    SavedSession {
        id: id.into(),
        protocol_version: "2025-11-25".into(),
        init_params: serde_json::json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}),
        client_name: "t".into(),
        last_active: 1,
        scope: None,
        principal_sha256: None,
        user_sha256: None,
        downstreams: Vec::new(),
    }
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("mcpgate-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The journal instance `instance` would have written, holding `sessions`.
fn journal(dir: &Path, instance: &str, sessions: &[SavedSession]) {
    let mut text = format!("{{\"format\":3,\"instance_id\":\"{instance}\"}}\n");
    for s in sessions {
        text.push_str(&serde_json::json!({ "session": s }).to_string());
        text.push('\n');
    }
    std::fs::write(dir.join(format!("{instance}.state.json")), text).unwrap();
}

/// Holds `instance`'s lock as a running instance does.
fn running(dir: &Path, instance: &str) -> File {
    let lock = files::open_lock(&files::lock_path(dir, instance)).unwrap();
    lock.try_lock().unwrap();
    lock
}

#[test]
fn a_session_of_a_live_instance_in_state_dir_cannot_be_claimed_and_of_a_dead_one_is_claimed_once() {
    let scratch = Scratch::new("files");
    let dir = &scratch.0;
    journal(dir, "gw-a", &[session(ID)]);
    let alive = running(dir, "gw-a");
    let b = FileStore::new(dir, "gw-b");
    let c = FileStore::new(dir, "gw-c");
    let found = b.find(ID).unwrap().expect("in gw-a's journal");
    assert_eq!(found.holder, Holder { instance: "gw-a".into(), epoch: 0 });
    assert!(found.alive, "gw-a holds its lock");
    let mut adopted = 0;
    let claim = b.claim(ID, &found.holder, &mut |_, _| {
        adopted += 1;
        true
    });
    assert!(matches!(claim, Ok(Claim::Held(_))), "a live holder keeps its session: {claim:?}");
    assert_eq!(adopted, 0);

    drop(alive); // gw-a dies: the kernel drops its lock
    // ...once no process holds the file open: a child another test of this
    // binary forks (redis-server) holds every descriptor until it execs, so
    // the lock may outlive the drop by that long (CI once saw it alive).
    let mut found = b.find(ID).unwrap().unwrap();
    let freed = wait_until(Duration::from_secs(10), || {
        found = b.find(ID).unwrap().unwrap();
        !found.alive
    });
    assert!(freed, "gw-a's lock outlived it by 10 s");
    let claim = b.claim(ID, &found.holder, &mut |s, epoch| {
        assert_eq!((s.id.as_str(), epoch), (ID, 1));
        adopted += 1;
        true
    });
    assert!(matches!(claim, Ok(Claim::Won { epoch: 1, .. })), "{claim:?}");
    assert_eq!(adopted, 1);
    assert!(files::moved_away(dir, "gw-a", ID), "gw-a's restart must not restore it");
    assert!(b.holds(ID, 1).unwrap());

    // A racer that saw the old holder loses, and is told who holds it now.
    match c.claim(ID, &found.holder, &mut |_, _| panic!("no second adoption")) {
        Ok(Claim::Held(now)) => assert_eq!(now.holder, Holder { instance: "gw-b".into(), epoch: 1 }),
        other => panic!("a stale claim must lose: {other:?}"),
    }
    // It ends at gw-b: nobody finds it any more, though gw-a's journal still names it.
    b.change(Change::Ended(ID.into()));
    assert_eq!(c.find(ID).unwrap(), None);
}

#[cfg(feature = "redis")]
/// A `redis-server` of this test's own, on loopback with a password,
/// stopped by its PID when dropped.
struct Redis {
    child: Child,
    port: u16,
    _dir: Scratch,
}

#[cfg(feature = "redis")]
impl Redis {
    fn start() -> Option<Redis> {
        if Command::new("redis-server").arg("--version").stdout(Stdio::null()).status().is_err() {
            eprintln!("SKIPPED: redis-server is not installed (apt-get install redis-server; scripts/scale.sh does)");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = Scratch::new(&format!("redis-{port}"));
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--requirepass", "pw", "--save", ""])
            .arg("--dir")
            .arg(&dir.0)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen within 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Redis { child, port, _dir: dir })
    }

    fn url(&self) -> String {
        format!("redis://:pw@127.0.0.1:{}/0", self.port)
    }
}

#[cfg(feature = "redis")]
impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(feature = "redis")]
const LEASE: Duration = Duration::from_millis(600);

#[cfg(feature = "redis")]
fn redis_store(url: &str, me: &str) -> std::sync::Arc<RedisStore> {
    std::sync::Arc::new(RedisStore::new(url, me, &format!("http://{me}"), LEASE).unwrap())
}

#[cfg(feature = "redis")]
/// Beats `stores` for `time`: each sees the others' heartbeats move.
fn beat_for(stores: &[&RedisStore], time: Duration) {
    let deadline = Instant::now() + time;
    while Instant::now() < deadline {
        for store in stores {
            store.beat(&[]).unwrap();
        }
        std::thread::sleep(LEASE / 4);
    }
}

#[cfg(feature = "redis")]
#[test]
fn in_redis_a_session_is_claimed_only_once_its_holder_stops_beating_and_by_one_instance() {
    let Some(redis) = Redis::start() else { return };
    let (a, b, c) =
        (redis_store(&redis.url(), "gw-a"), redis_store(&redis.url(), "gw-b"), redis_store(&redis.url(), "gw-c"));
    let writer = a.start_writer().unwrap();
    a.change(Change::Opened(session(ID)));
    Mirror::commit(&*a).expect("recorded before its client learns its id");
    beat_for(&[&a, &b, &c], LEASE * 2);

    let found = b.find(ID).unwrap().expect("recorded");
    assert_eq!(found.holder, Holder { instance: "gw-a".into(), epoch: 1 });
    assert!(found.alive, "gw-a beats");
    assert_eq!(found.peer.as_deref(), Some("http://gw-a"));

    // gw-a stops beating (dead or paused); the others see it for a lease.
    beat_for(&[&b, &c], LEASE * 2);
    let found = b.find(ID).unwrap().unwrap();
    assert!(!found.alive, "gw-a's heartbeat did not move for a whole lease");
    let won = b.claim(ID, &found.holder, &mut |s, epoch| s.id == ID && epoch == 2).unwrap();
    assert!(matches!(won, Claim::Won { epoch: 2, .. }), "{won:?}");
    let lost = c.claim(ID, &found.holder, &mut |_, _| panic!("no second adoption")).unwrap();
    assert!(matches!(&lost, Claim::Held(f) if f.holder == Holder { instance: "gw-b".into(), epoch: 2 }), "{lost:?}");

    // gw-a wakes: its hold is gone, and its writes to the session change nothing.
    assert!(!a.holds(ID, 1).unwrap(), "a paused holder must learn it lost the session");
    assert!(b.holds(ID, 2).unwrap());
    a.change(Change::Ended(ID.into()));
    Mirror::commit(&*a).unwrap();
    assert!(b.find(ID).unwrap().is_some(), "an old holder cannot end a session it lost");
    a.stop_writer(writer);

    // Nobody continues a dead instance's idle session: any live one finds it an orphan.
    let writer = b.start_writer().unwrap();
    b.leave();
    beat_for(&[&c], LEASE * 2);
    let orphans = c.orphans(Duration::ZERO).unwrap();
    assert_eq!(orphans, vec![(ID.to_string(), Holder { instance: "gw-b".into(), epoch: 2 })]);
    b.stop_writer(writer);
}

#[cfg(feature = "redis")]
#[test]
fn a_store_that_does_not_answer_refuses_new_sessions_by_name_and_recovers_when_it_answers() {
    let Some(redis) = Redis::start() else { return };
    let port = redis.port;
    let store = redis_store(&redis.url(), "gw-a");
    let writer = store.start_writer().unwrap();
    drop(redis); // stopped
    store.change(Change::Opened(session(ID)));
    let e = Mirror::commit(&*store).expect_err("nothing stored");
    assert!(e.to_string().contains(&format!("redis redis://127.0.0.1:{port}/0")), "{e}");
    assert!(!e.to_string().contains("pw"), "never the password: {e}");
    assert!(store.find(ID).is_err());
    assert!(store.beat(&[]).is_err());

    // The same port again: the writer's retry gets through, no restart.
    let mut again = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--requirepass", "pw", "--save", ""])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let recorded = loop {
        if let Ok(Some(found)) = store.find(ID) {
            break Some(found);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Mirror::commit(&*store).expect("written once it answers");
    store.stop_writer(writer);
    let _ = again.kill();
    let _ = again.wait();
    assert_eq!(recorded.map(|f| f.holder.epoch), Some(1), "the session queued in the outage is recorded after it");
}

#[cfg(feature = "redis")]
#[test]
fn an_instance_waking_from_a_pause_does_not_count_its_live_peers_dead() {
    let Some(redis) = Redis::start() else { return };
    let (b, c) = (redis_store(&redis.url(), "gw-b"), redis_store(&redis.url(), "gw-c"));
    let writer = c.start_writer().unwrap();
    c.change(Change::Opened(session(ID.replace("gw-a", "gw-c").as_str())));
    Mirror::commit(&*c).unwrap();
    beat_for(&[&b, &c], LEASE * 2);
    // gw-b is paused for three leases while gw-c goes on beating.
    beat_for(&[&c], LEASE * 3);
    let found = b.find(&ID.replace("gw-a", "gw-c")).unwrap().unwrap();
    assert!(found.alive, "gw-b's view of gw-c is three leases old: it cannot call gw-c dead");
    c.stop_writer(writer);
}

#[cfg(feature = "redis")]
#[test]
fn sessions_a_restarted_redis_lost_are_written_again_with_their_epoch_and_others_are_left_alone() {
    let Some(redis) = Redis::start() else { return };
    let a = redis_store(&redis.url(), "gw-a");
    let writer = a.start_writer().unwrap();
    a.change(Change::Opened(session(ID)));
    Mirror::commit(&*a).unwrap();
    assert_eq!(a.reassert(&[(session(ID), 1)]).unwrap(), 0, "still there: untouched");
    // Redis comes back without its data.
    let flushed = Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "-a", "pw", "--no-auth-warning", "FLUSHALL"])
        .status()
        .unwrap();
    assert!(flushed.success());
    assert_eq!(a.find(ID).unwrap(), None);
    assert_eq!(a.reassert(&[(session(ID), 3)]).unwrap(), 1);
    let found = a.find(ID).unwrap().expect("written again");
    assert_eq!(found.holder, Holder { instance: "gw-a".into(), epoch: 3 });
    assert!(a.holds(ID, 3).unwrap(), "the holder's epoch, not a new one");
    a.stop_writer(writer);
}

#[cfg(feature = "redis")]
#[test]
fn a_close_a_dead_instance_had_under_way_is_finished_by_one_live_instance() {
    let Some(redis) = Redis::start() else { return };
    let (a, b, c) =
        (redis_store(&redis.url(), "gw-a"), redis_store(&redis.url(), "gw-b"), redis_store(&redis.url(), "gw-c"));
    let writer = a.start_writer().unwrap();
    let downstream = mcpgate::runtime::state::SavedDownstream {
        server: "alpha".into(),
        url: "http://127.0.0.1:9/mcp".into(),
        session_id: Some("s1".into()),
        protocol_version: "2025-11-25".into(),
        capabilities: serde_json::json!({}),
        instructions: None,
        client: Some(ID.into()),
        user: None,
        ends_with_process: false,
    };
    a.change(Change::Closing(7, downstream.clone()));
    Mirror::commit(&*a).unwrap();
    beat_for(&[&a, &b, &c], LEASE * 2);
    assert!(b.dead_closing().unwrap().is_empty(), "gw-a is alive: its closes are its own");
    a.stop_writer(writer);
    beat_for(&[&b, &c], LEASE * 2); // gw-a died with its DELETE under way
    let dead = b.dead_closing().unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].1, downstream);
    assert!(b.take_closing(&dead[0].0).unwrap(), "one live instance takes it");
    assert!(!c.take_closing(&dead[0].0).unwrap(), "and only one");
    assert!(c.dead_closing().unwrap().is_empty());
}

/// The claim's script names the claimer holder at once; its adoption (the
/// session into the table, its journal written) comes after. Another
/// request for the session on the claimer, or one a peer forwards to it,
/// that asks the store in between must not be told "held here" while the
/// table does not have it yet: mcpgate answered such a request 404
/// (`scripts/scale.sh --smoke`, haproxy-redis-kill: a TypeScript client's
/// call after the kill got "unknown or ended session"). A find on the
/// claimer waits for its adoption to end.
#[cfg(feature = "redis")]
#[test]
fn a_find_on_the_instance_adopting_a_session_answers_once_the_adoption_ended() {
    let Some(redis) = Redis::start() else { return };
    let (a, b) = (redis_store(&redis.url(), "gw-a"), redis_store(&redis.url(), "gw-b"));
    let writer = a.start_writer().unwrap();
    a.change(Change::Opened(session(ID)));
    Mirror::commit(&*a).unwrap();
    a.stop_writer(writer);
    beat_for(&[&b], LEASE * 2);
    let found = b.find(ID).unwrap().unwrap();
    assert!(!found.alive, "gw-a stopped beating");

    let adopted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (claimer, flag) = (b.clone(), adopted.clone());
    let holder = found.holder.clone();
    let claim = std::thread::spawn(move || {
        claimer.claim(ID, &holder, &mut |_, _| {
            std::thread::sleep(Duration::from_millis(800)); // a slow adoption: journal, readers
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            true
        })
    });
    // Asked while the claim runs: each answer "held by gw-b" must come after the adoption.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut early = 0;
    let mut asked = 0;
    while !claim.is_finished() && Instant::now() < deadline {
        if let Some(now) = b.find(ID).unwrap()
            && now.holder.instance == "gw-b"
        {
            asked += 1;
            if !adopted.load(std::sync::atomic::Ordering::SeqCst) {
                early += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let won = claim.join().unwrap().unwrap();
    assert!(matches!(won, Claim::Won { .. }), "{won:?}");
    assert_eq!(early, 0, "{early} of {asked} finds said gw-b holds it before gw-b had adopted it");
    assert!(b.find(ID).unwrap().is_some_and(|f| f.alive && f.holder.instance == "gw-b"));
}
