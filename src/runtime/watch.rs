//! Reload on save (`watch_config`): the configuration file and the servers'
//! `envFile`s are looked at every second, and a change that has held for
//! one look reloads the configuration exactly as SIGHUP does.
//!
//! A look is a `stat` of each file: its size, modification time, device and
//! inode. An editor that saves in place changes the first two, one that
//! writes a new file and renames it over the old changes the inode, and a
//! file that is gone (between the two steps of such a save) is a change of
//! its own. Waiting one look before reloading lets a save that takes two
//! writes finish: reading it half-written would refuse a file the user
//! never meant.
//!
//! Why polling, from the main thread, and not inotify: a `stat` of two or
//! three files a second costs nothing measurable, works the same on every
//! filesystem (inotify misses changes on NFS and some container mounts, and
//! loses a watch when an editor renames over the file), and needs no
//! dependency or thread. The main thread already waits for SIGHUP and runs
//! its reload: it now waits at most a second at a time and looks in
//! between, so a save and a SIGHUP reload through the same code on the same
//! thread, one at a time, with systemd told `RELOADING=1` both ways. The
//! reaper's thread was the other candidate; a reload there would hold up
//! idle eviction and request deadlines while it runs.
//!
//! Every reload (SIGHUP, `POST /reload`, a save) records what the files
//! looked like just before it read them, so a file reloaded by hand is not
//! reloaded again, and a broken save is refused once, not every second.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

/// How often the files are looked at.
pub const EVERY: Duration = Duration::from_secs(1);

/// What a file looked like: `None` when it could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    dev: u64,
    inode: u64,
}

/// The files and what each looked like at one moment.
pub type Looked = Vec<(PathBuf, Option<Stamp>)>;

/// What `path` looks like now.
pub(crate) fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp { len: meta.len(), modified: meta.modified().ok(), dev: meta.dev(), inode: meta.ino() })
}

/// What `files` look like now.
pub fn look<'a>(files: impl IntoIterator<Item = &'a Path>) -> Looked {
    files.into_iter().map(|f| (f.to_path_buf(), stamp(f))).collect()
}

/// The watch of one configuration's files.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// Guards what the files looked like at the last reload, and a change
    /// seen once since; only compared under it (the looks are taken before).
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// What the files looked like just before the configuration in force (or refused) read them.
    seen: Looked,
    /// A look that differed from `seen`: a change waiting to hold for one more look.
    pending: Option<Looked>,
}

impl Watch {
    /// A reload read the files as `before` shows them; `now` are the files
    /// of the configuration in force after it (a new `envFile` is looked at now).
    pub(crate) fn reloaded(&self, mut before: Looked, now: &[PathBuf]) {
        let new: Vec<&Path> =
            now.iter().filter(|f| !before.iter().any(|(b, _)| b == *f)).map(PathBuf::as_path).collect();
        before.extend(look(new));
        before.retain(|(f, _)| now.contains(f));
        *self.state.lock() = State { seen: before, pending: None };
    }

    /// Whether `files` changed since the last reload, and have looked the
    /// same for the last two looks: time to reload.
    pub(crate) fn changed(&self, files: &[PathBuf]) -> bool {
        let now = look(files.iter().map(PathBuf::as_path));
        let mut state = self.state.lock();
        let differs = now.iter().any(|(f, s)| state.seen.iter().find(|(g, _)| g == f).is_none_or(|(_, t)| t != s));
        if !differs {
            state.pending = None;
            return false;
        }
        if state.pending.as_ref() == Some(&now) {
            return true;
        }
        state.pending = Some(now);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_reloads_once_it_holds_and_a_reload_by_hand_settles_it() {
        let dir = std::env::temp_dir().join(format!("mcpgate-watch-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (config, env) = (dir.join("mcpgate.json"), dir.join(".env"));
        std::fs::write(&config, "{}").unwrap();
        let files = vec![config.clone()];
        let watch = Watch::default();
        watch.reloaded(look([config.as_path()]), &files);
        assert!(!watch.changed(&files), "nothing changed");

        std::fs::write(&config, "{\"a\": 1}").unwrap();
        assert!(!watch.changed(&files), "a change is first seen...");
        assert!(watch.changed(&files), "...and reloads once it held for a look");
        let before = look([config.as_path()]);
        watch.reloaded(before, &files);
        assert!(!watch.changed(&files) && !watch.changed(&files), "reloaded: no change now");

        // A save that renames a new file over the old one (same size, new inode).
        let tmp = dir.join("mcpgate.json.tmp");
        std::fs::write(&tmp, "{\"a\": 2}").unwrap();
        std::fs::rename(&tmp, &config).unwrap();
        assert!(!watch.changed(&files));
        // A reload by hand (SIGHUP) before the look that would reload: nothing left to do.
        watch.reloaded(look([config.as_path()]), &files);
        assert!(!watch.changed(&files) && !watch.changed(&files));

        // An envFile a reload brought in is watched from then on; one that is gone, too.
        std::fs::write(&env, "A=1\n").unwrap();
        let both = vec![config.clone(), env.clone()];
        watch.reloaded(look([config.as_path()]), &both);
        assert!(!watch.changed(&both));
        std::fs::remove_file(&env).unwrap();
        assert!(!watch.changed(&both) && watch.changed(&both), "a file that is gone is a change");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
