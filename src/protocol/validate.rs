//! A server's answer checked as JSON, faster than serde_json checks it,
//! where the answer is large: mcpgate reads every answer whole and checks
//! it before any byte goes to the client (docs/ARCHITECTURE.md, "Large
//! answers"), and on a 1 MB result that check was the largest part of
//! mcpgate's CPU beyond the bare relay's (docs/PROFILE.md).
//!
//! serde_json finds the end of a string 8 bytes at a time, looking for a
//! quote, a backslash and a control character in one pass. Here `memchr`
//! finds the quote or backslash (16 or 32 bytes at a time, with the CPU's
//! vector instructions), and control characters are looked for in the run
//! before it 32 bytes at a time: 41 µs against serde_json's 85 µs for a
//! string of 1 MB, on the release profile and the benchmark's host.
//!
//! What this accepts, serde_json accepts: the grammar of RFC 8259 as
//! serde_json reads it (no trailing commas, no leading zeros, `\u` with
//! four hex digits and surrogates unchecked, space, tab, CR and LF as
//! whitespace). It is conservative: what it does not know for sure (a
//! member name with an escape, a second `result`, nesting deeper than
//! [`MAX_DEPTH`]) it leaves to serde_json, which then reads the answer as
//! before and gives the same error as before. The tests hold it to
//! serde_json on valid, broken and random text.

use std::ops::Range;

/// Containers open at once that this follows; deeper, serde_json reads
/// the answer (its own limit is 128).
const MAX_DEPTH: usize = 100;

/// Where the top-level `result` of a JSON-RPC message lies in `text`, if
/// `text` is one JSON object with one member named `result` and every
/// value in it is valid JSON; `None` in any other case, and whenever this
/// is not sure (see the module's text).
pub(crate) fn result_span(text: &str) -> Option<Range<usize>> {
    let b = text.as_bytes();
    let mut i = skip_ws(b, 0);
    if *b.get(i)? != b'{' {
        return None;
    }
    i = skip_ws(b, i + 1);
    let mut found = None;
    if b.get(i) == Some(&b'}') {
        i += 1;
    } else {
        loop {
            if *b.get(i)? != b'"' {
                return None;
            }
            let end = string_end(b, i + 1)?;
            let name = &b[i + 1..end - 1];
            if name.contains(&b'\\') {
                return None;
            }
            i = skip_ws(b, end);
            if *b.get(i)? != b':' {
                return None;
            }
            let start = skip_ws(b, i + 1);
            let value_end = value_end(b, start)?;
            if name == b"result" {
                if found.is_some() {
                    return None;
                }
                found = Some(start..value_end);
            }
            i = skip_ws(b, value_end);
            match *b.get(i)? {
                b',' => i = skip_ws(b, i + 1),
                b'}' => {
                    i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    if skip_ws(b, i) != b.len() {
        return None;
    }
    found
}

/// The end of the one JSON value that starts at `i` (after whitespace).
fn value_end(b: &[u8], mut i: usize) -> Option<usize> {
    // The containers open around the value being read: `true` for an object.
    let mut open: Vec<bool> = Vec::new();
    loop {
        // A value starts at `i`.
        i = skip_ws(b, i);
        match *b.get(i)? {
            opening @ (b'{' | b'[') => {
                let (object, closing) = if opening == b'{' { (true, b'}') } else { (false, b']') };
                i = skip_ws(b, i + 1);
                if b.get(i) == Some(&closing) {
                    i += 1;
                } else {
                    open.push(object);
                    if open.len() > MAX_DEPTH {
                        return None;
                    }
                    if object {
                        i = member_name(b, i)?;
                    }
                    continue;
                }
            }
            b'"' => i = string_end(b, i + 1)?,
            b't' => i = literal(b, i, b"true")?,
            b'f' => i = literal(b, i, b"false")?,
            b'n' => i = literal(b, i, b"null")?,
            b'-' | b'0'..=b'9' => i = number_end(b, i)?,
            _ => return None,
        }
        // A value ended at `i`: close what it ends, up to the next value.
        loop {
            let Some(&object) = open.last() else { return Some(i) };
            i = skip_ws(b, i);
            match (*b.get(i)?, object) {
                (b',', true) => {
                    i = member_name(b, skip_ws(b, i + 1))?;
                    break;
                }
                (b',', false) => {
                    i += 1;
                    break;
                }
                (b'}', true) | (b']', false) => {
                    open.pop();
                    i += 1;
                }
                _ => return None,
            }
        }
    }
}

/// Past a member's name and its colon, from the name's opening quote.
fn member_name(b: &[u8], i: usize) -> Option<usize> {
    if *b.get(i)? != b'"' {
        return None;
    }
    let i = skip_ws(b, string_end(b, i + 1)?);
    (*b.get(i)? == b':').then_some(i + 1)
}

/// Past JSON's whitespace (space, tab, LF, CR) from `i`.
pub(super) fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

fn literal(b: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    (b.get(i..i + word.len())? == word).then_some(i + word.len())
}

/// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, from its first byte.
fn number_end(b: &[u8], mut i: usize) -> Option<usize> {
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match *b.get(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => i = digits_end(b, i),
        _ => return None,
    }
    if b.get(i) == Some(&b'.') {
        let end = digits_end(b, i + 1);
        if end == i + 1 {
            return None;
        }
        i = end;
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        let end = digits_end(b, i);
        if end == i {
            return None;
        }
        i = end;
    }
    // `01` and `1x` end here too: what follows is not a digit of this
    // number, and the caller refuses it as the next token.
    Some(i)
}

fn digits_end(b: &[u8], mut i: usize) -> usize {
    while let Some(b'0'..=b'9') = b.get(i) {
        i += 1;
    }
    i
}

/// Past a string's closing quote, from the byte after its opening one.
/// `b` is UTF-8 already (it was a `str`): only escapes and control
/// characters are looked at.
fn string_end(b: &[u8], mut i: usize) -> Option<usize> {
    loop {
        let rest = b.get(i..)?;
        let at = memchr::memchr2(b'"', b'\\', rest)?;
        if has_control(&rest[..at]) {
            return None;
        }
        i += at;
        if b[i] == b'"' {
            return Some(i + 1);
        }
        match *b.get(i + 1)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
            b'u' => {
                if !b.get(i + 2..i + 6)?.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                i += 6;
            }
            _ => return None,
        }
    }
}

const ONES: u64 = u64::MAX / 255;
const HIGH_BITS: u64 = ONES * 0x80;

/// Whether a byte of `run` is below 0x20 (a control character, which JSON
/// allows in a string only escaped). Word by word: a byte below 0x20 sets
/// its top bit in `(x - 0x20..) & !x`, and only such a word sets any.
fn has_control(run: &[u8]) -> bool {
    let below = |word: &[u8]| {
        let x = u64::from_le_bytes(word.try_into().unwrap_or([0xff; 8]));
        x.wrapping_sub(ONES * 0x20) & !x
    };
    let mut chunks = run.chunks_exact(32);
    let mut seen = 0;
    for chunk in &mut chunks {
        seen |= below(&chunk[..8]) | below(&chunk[8..16]) | below(&chunk[16..24]) | below(&chunk[24..]);
    }
    seen & HIGH_BITS != 0 || chunks.remainder().iter().any(|&byte| byte < 0x20)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::IgnoredAny;
    use serde_json::Value;

    /// Whether this and serde_json agree that `text` is one JSON value;
    /// this may refuse what serde_json takes only past its depth.
    fn agrees(text: &str) {
        let ours = value_end(text.as_bytes(), 0).map(|end| skip_ws(text.as_bytes(), end) == text.len());
        let serde = serde_json::from_str::<IgnoredAny>(text).is_ok();
        match ours {
            Some(true) => assert!(serde, "taken here, refused by serde_json: {text:?}"),
            _ => assert!(!serde, "refused here, taken by serde_json: {text:?}"),
        }
    }

    #[test]
    fn values_are_read_as_serde_json_reads_them() {
        let texts = [
            "0",
            "-0",
            "01",
            "-",
            "1.",
            "1.5",
            ".5",
            "1e5",
            "1E+5",
            "1e-",
            "1e",
            "-12.5e-3",
            "1x",
            "[1x]",
            "true",
            "tru",
            "truex",
            "null",
            "nul",
            "false",
            r#""""#,
            r#""a"#,
            r#""\u00e9""#,
            r#""\u00g9""#,
            r#""\ud800""#,
            r#""\x""#,
            r#""\/\b\f\n\r\t\"\\""#,
            "\"a\nb\"",
            "\"a\u{1f}b\"",
            "\"a\u{7f}b\"",
            "\"é ✓\"",
            "[]",
            "[1,]",
            "[,1]",
            "[1 2]",
            "{}",
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            r#"{"a":}"#,
            r#"{1:2}"#,
            r#"{"a":1 "b":2}"#,
            r#"{"a":[{"b":{}}]}"#,
            " [ 1 , { \"a\" : [ ] } ] ",
            "[1]]",
            "{}}",
            "[",
            "{",
            r#"{"a""#,
            "\t\r\n1\n",
            "",
            "  ",
            "[1,\"x\u{0}\"]",
        ];
        for text in texts {
            agrees(text);
        }
    }

    #[test]
    fn control_characters_are_found_at_every_place_in_a_long_string() {
        for len in [0, 1, 7, 8, 31, 32, 33, 64, 100] {
            for at in 0..len {
                for bad in [0u8, b'\n', 0x1f] {
                    let mut inner = vec![b'x'; len];
                    inner[at] = bad;
                    let text = format!("\"{}\"", String::from_utf8(inner).unwrap());
                    assert_eq!(value_end(text.as_bytes(), 0), None, "{len} {at} {bad}");
                }
            }
            let text = format!("\"{}\"", "y".repeat(len));
            assert_eq!(value_end(text.as_bytes(), 0), Some(text.len()));
        }
    }

    #[test]
    fn nesting_past_the_depth_is_left_to_serde_json() {
        let deep = format!("{}1{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(value_end(deep.as_bytes(), 0), None);
        let within = format!("{}1{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(value_end(within.as_bytes(), 0), Some(within.len()));
    }

    #[test]
    fn the_result_is_found_at_the_top_level_only() {
        let text = r#" {"jsonrpc":"2.0","id":{"result":1},"result" : {"content":[{"result":2}]} } "#;
        let span = result_span(text).unwrap();
        assert_eq!(&text[span], r#"{"content":[{"result":2}]}"#);
        assert_eq!(result_span(r#"{"result":1,"result":2}"#), None, "a second result: serde_json's error");
        assert_eq!(result_span(r#"{"res\u0075lt":{}}"#), None, "an escaped name: serde_json's reading");
        assert_eq!(result_span(r#"{"error":{}}"#), None);
        assert_eq!(result_span(r#"{"result":{}} x"#), None);
        assert_eq!(result_span(r#"[{"result":{}}]"#), None);
        assert_eq!(result_span(r#"{"result":{},"id":"#), None);
        assert_eq!(result_span("{}"), None);
    }

    #[derive(serde::Deserialize)]
    struct Read<'a> {
        #[serde(borrow)]
        result: &'a serde_json::value::RawValue,
    }

    /// A small generator of JSON, valid and then broken, for the two
    /// readers to be compared on; xorshift, seeded, so a failure repeats.
    struct Random(u64);

    impl Random {
        fn next(&mut self, below: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % below as u64) as usize
        }

        fn value(&mut self, depth: usize) -> Value {
            match self.next(if depth > 4 { 4 } else { 6 }) {
                0 => Value::Null,
                1 => Value::Bool(self.next(2) == 0),
                2 => serde_json::json!(self.next(100_000) as f64 / 7.0 - 50.0),
                3 => {
                    let pieces = ["a", "\"", "\\", "\n", "é", "✓", "\u{1}", "x y", "/", "\u{7f}"];
                    Value::String((0..self.next(40)).map(|_| pieces[self.next(pieces.len())]).collect())
                }
                4 => Value::Array((0..self.next(4)).map(|_| self.value(depth + 1)).collect()),
                _ => Value::Object((0..self.next(4)).map(|k| (format!("k{k}"), self.value(depth + 1))).collect()),
            }
        }
    }

    #[test]
    fn random_values_and_their_breakages_are_read_as_serde_json_reads_them() {
        let mut random = Random(0x9e37_79b9_7f4a_7c15);
        let junk = [" ", ",", "]", "}", "[", "{", "\"", "\\", ":", "0", "-", ".", "e", "\u{0}", "\n", "x", "null"];
        for _ in 0..4000 {
            let text = random.value(0).to_string();
            assert!(value_end(text.as_bytes(), 0) == Some(text.len()), "refused valid JSON: {text:?}");
            let mut broken = text.clone();
            for _ in 0..1 + random.next(3) {
                let mut at = random.next(broken.len() + 1);
                while !broken.is_char_boundary(at) {
                    at -= 1;
                }
                match random.next(3) {
                    0 => broken.insert_str(at, junk[random.next(junk.len())]),
                    1 => broken.truncate(at),
                    _ => {
                        let mut end = (at + 1 + random.next(3)).min(broken.len());
                        while !broken.is_char_boundary(end) {
                            end += 1;
                        }
                        broken.replace_range(at..end, "");
                    }
                }
            }
            agrees(&broken);
            let message = format!(r#"{{"jsonrpc":"2.0","id":7,"result":{broken}}}"#);
            if let Some(span) = result_span(&message) {
                let read: Result<Read, _> = serde_json::from_str(&message);
                assert_eq!(read.expect("serde_json takes what was found").result.get(), &message[span]);
            }
        }
    }
}
