//! Reading one JSON object of the configuration ([`Keys`]): each key as
//! what [`KEYS`](super::KEYS) says it holds, and the keys left unread
//! refused as unknown, with the known one nearest ([`suggest`](super::suggest)).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use super::invalid::{Invalid, kind};
use super::keys::{self, Key, Kind};
use super::suggest;

/// Reads the keys of one JSON object, remembering which were used so the
/// rest can be refused as unknown. Numbers and flags take their default and
/// range from [`KEYS`], where `doc` (the object's documented path, e.g.
/// `mcpServers.<name>`) finds them; a key read that is not in [`KEYS`] is
/// refused as a bug, so the reference cannot miss one.
pub(super) struct Keys<'a> {
    map: &'a Map<String, Value>,
    path: &'a str,
    doc: &'static str,
    used: BTreeMap<&'a str, ()>,
    undocumented: Vec<String>,
}

impl<'a> Keys<'a> {
    pub(super) fn new(map: &'a Map<String, Value>, path: &'a str, doc: &'static str) -> Keys<'a> {
        Keys { map, path, doc, used: BTreeMap::new(), undocumented: Vec::new() }
    }

    pub(super) fn name(&self, key: &str) -> String {
        if self.path.is_empty() { key.to_string() } else { format!("{}.{key}", self.path) }
    }

    pub(super) fn spec(&self, key: &str) -> Option<&'static Key> {
        if self.doc.is_empty() { keys::key(key) } else { keys::key(&format!("{}.{key}", self.doc)) }
    }

    pub(super) fn take(&mut self, key: &'a str) -> Option<&'a Value> {
        self.used.insert(key, ());
        if self.spec(key).is_none() {
            self.undocumented.push(self.name(key));
        }
        self.map.get(key)
    }

    pub(super) fn present(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    pub(super) fn string(&mut self, key: &'a str) -> Result<Option<String>, Invalid> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Invalid::new(self.name(key), format!("expected a string, found {}", kind(other)))),
        }
    }

    /// A number within its documented range; its default when absent.
    pub(super) fn number(&mut self, key: &'a str) -> Result<Option<u64>, Invalid> {
        let Some(Key { kind: Kind::Number { default, min, max }, .. }) = self.spec(key) else {
            return Err(Invalid::new(self.name(key), "bug: not a number in the configuration reference"));
        };
        let Some(value) = self.take(key) else { return Ok(*default) };
        match value.as_u64() {
            Some(n) if (*min..=*max).contains(&n) => Ok(Some(n)),
            Some(n) => Err(Invalid::new(self.name(key), format!("{n} is out of range {min} to {max}"))),
            None => Err(Invalid::new(self.name(key), format!("expected a whole number, found {}", kind(value)))),
        }
    }

    /// A number that has a default.
    pub(super) fn count(&mut self, key: &'a str) -> Result<usize, Invalid> {
        match self.number(key)? {
            Some(n) => usize::try_from(n).map_err(|_| Invalid::new(self.name(key), format!("{n} is too large here"))),
            None => Err(Invalid::new(self.name(key), "bug: no default in the configuration reference")),
        }
    }

    pub(super) fn secs(&mut self, key: &'a str) -> Result<Duration, Invalid> {
        Ok(Duration::from_secs(self.count(key)? as u64))
    }

    pub(super) fn flag(&mut self, key: &'a str) -> Result<bool, Invalid> {
        let Some(Key { kind: Kind::Flag(default), .. }) = self.spec(key) else {
            return Err(Invalid::new(self.name(key), "bug: not a flag in the configuration reference"));
        };
        match self.take(key) {
            None => Ok(*default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(Invalid::new(self.name(key), format!("expected true or false, found {}", kind(other)))),
        }
    }

    pub(super) fn strings(&mut self, key: &'a str) -> Result<Vec<String>, Invalid> {
        match self.take(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string).ok_or_else(|| Invalid::new(self.name(key), "expected strings")))
                .collect(),
            Some(other) => {
                Err(Invalid::new(self.name(key), format!("expected an array of strings, found {}", kind(other))))
            }
        }
    }

    pub(super) fn refuse_unknown(&self) -> Result<(), Invalid> {
        if let Some(name) = self.undocumented.first() {
            return Err(Invalid::new(name.clone(), "bug: read, but not in the configuration reference"));
        }
        match self.map.keys().find(|k| !self.used.contains_key(k.as_str())) {
            None => Ok(()),
            Some(k) => Err(Invalid::new(self.name(k), suggest::unknown_key(k, self.doc))),
        }
    }
}
