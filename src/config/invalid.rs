//! What is wrong with a configuration ([`Invalid`]: the key and the
//! problem), and how a problem names what a value it found is ([`kind`]).

use std::fmt;

use serde_json::Value;

/// What is wrong with a configuration: the key (`mcpServers.files.url`;
/// empty for the file as a whole) and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub(crate) key: String,
    pub problem: String,
}

impl Invalid {
    pub fn new(key: impl Into<String>, problem: impl Into<String>) -> Invalid {
        Invalid { key: key.into(), problem: problem.into() }
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() { f.write_str(&self.problem) } else { write!(f, "{}: {}", self.key, self.problem) }
    }
}

impl std::error::Error for Invalid {}

/// What `value` is, as a problem says it found it: "a string", "an array"...
pub(super) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
