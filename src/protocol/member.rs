//! One member at the top level of a JSON object's text that serde_json has
//! checked already (a result kept as it came, [`super::jsonrpc::Json`]),
//! found without parsing it again: the bytes of the other members' values
//! are skipped, their strings with `memchr`.
//!
//! A 2026-07-28 answer is looked at for its `resultType`. Through serde, each
//! look was a second validating pass over the whole result (skipping a 1 MB
//! string checks every byte of it), and `is_task` a substring search
//! besides: 16% of mcpgate's CPU with 1 MB results, where the pass that
//! checked the answer took 22%.

use super::validate::skip_ws;

/// The text of the value of `key` at the top level of `object`, if it is an
/// object with that member (the first, if written twice). `object` is JSON
/// checked before; text that is not gives `None`, never a panic.
pub(crate) fn top_level<'a>(object: &'a str, key: &str) -> Option<&'a str> {
    let b = object.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return None;
    }
    loop {
        let name_end = string_end(b, i)?;
        let named = name_is(&object[i..name_end], key);
        i = skip_ws(b, name_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = skip_ws(b, i + 1);
        let end = value_end(b, start)?;
        if named {
            return Some(&object[start..end]);
        }
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            _ => return None,
        }
    }
}

/// Whether a member's name (its text, quotes included) is `key`; a name
/// with escapes is decoded first.
fn name_is(name: &str, key: &str) -> bool {
    let bare = &name[1..name.len() - 1];
    if !bare.contains('\\') {
        return bare == key;
    }
    serde_json::from_str::<String>(name).is_ok_and(|decoded| decoded == key)
}

/// Just past the string that starts at `i`.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut at = i + 1;
    loop {
        at += memchr::memchr2(b'"', b'\\', b.get(at..)?)?;
        if b[at] == b'"' {
            return Some(at + 1);
        }
        at += 2;
    }
}

/// Just past the value that starts at `i`.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut at = i;
            loop {
                match *b.get(at)? {
                    b'"' => at = string_end(b, at)?,
                    b'{' | b'[' => {
                        depth += 1;
                        at += 1;
                    }
                    b'}' | b']' => {
                        depth -= 1;
                        at += 1;
                        if depth == 0 {
                            return Some(at);
                        }
                    }
                    _ => at += 1,
                }
            }
        }
        // A number, true, false or null: up to what follows it.
        _ => {
            let rest = b.get(i..)?;
            let len = rest.iter().position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'));
            Some(i + len.unwrap_or(rest.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::top_level;

    #[test]
    fn a_member_is_found_at_the_top_level_only() {
        let text = r#"{"content":[{"type":"text","text":"\"resultType\": \"task\" } { ["}],
            "nested":{"resultType":"inner","list":[1,[2,{"a":"}"}]]},"n":-1.5e3,"ok":true,"none":null,
            "resultType":"complete"}"#;
        assert!(serde_json::from_str::<Value>(text).is_ok());
        assert_eq!(top_level(text, "resultType"), Some("\"complete\""));
        assert_eq!(top_level(text, "n"), Some("-1.5e3"));
        assert_eq!(top_level(text, "none"), Some("null"));
        assert_eq!(top_level(text, "list"), None, "a member of a nested object");
        assert_eq!(top_level(text, "missing"), None);
    }

    #[test]
    fn spaces_escapes_and_what_is_no_object_are_read_as_json_says() {
        let spaced = "\n { \"a\" :\t\"x\\\"y\\\\\" ,\r\n \"res\\u0075ltType\" : \"task\" } ";
        assert!(serde_json::from_str::<Value>(spaced).is_ok());
        assert_eq!(top_level(spaced, "a"), Some("\"x\\\"y\\\\\""));
        assert_eq!(top_level(spaced, "resultType"), Some("\"task\""), "an escaped name");
        assert_eq!(top_level("{}", "a"), None);
        assert_eq!(top_level("[{\"a\": 1}]", "a"), None);
        assert_eq!(top_level("\"a\"", "a"), None);
        for broken in ["", "{", "{\"a\"", "{\"a\":", "{\"a\": \"x", "{\"a\": [1, 2", "{\"b\": 1 \"a\": 2}", "{\"a\\"] {
            assert_eq!(top_level(broken, "a"), None, "{broken:?}");
        }
    }

    #[test]
    fn a_member_after_a_large_string_is_found() {
        let text =
            format!(r#"{{"content":[{{"type":"text","text":"{}"}}],"resultType":"complete"}}"#, "x".repeat(1 << 20));
        assert_eq!(top_level(&text, "resultType"), Some("\"complete\""));
    }
}
