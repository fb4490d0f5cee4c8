//! JSON with comments and trailing commas (JSONC), as VS Code allows in
//! `.vscode/mcp.json` and users write in any editor that colours the file
//! as JSONC: `//` and `/* */` comments and a comma before `}` or `]` become
//! spaces, and serde_json reads the rest.
//!
//! Every file gets this, not only a VS Code one: mcpgate cannot tell which
//! client wrote a file, a comment outside a string means nothing else, and
//! JSON is JSONC without them. `mcpgate import` writes plain JSON, for the
//! clients whose parser takes nothing else (Claude Desktop's).
//!
//! Written here rather than taken from a crate: it is one pass over the
//! bytes that knows strings and their escapes, and by replacing in place
//! (line breaks kept) it leaves serde_json's line and column numbers
//! pointing into the file as the user sees it. The crates that do this
//! (json_comments and its fork json-strip-comments) also take `#` comments,
//! which no client writes.

/// The text with its comments and trailing commas as spaces; an unclosed
/// `/*` is an error naming its line.
pub(crate) fn strip(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    // A comma with only space and comments after it so far: trailing, if `}` or `]` comes next.
    let mut comma: Option<usize> = None;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                comma = None;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    out[i] = b' ';
                    i += 1;
                }
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                let start = i;
                let Some(len) = text[i + 2..].find("*/") else {
                    let line = text[..start].matches('\n').count() + 1;
                    return Err(format!("a `/*` comment at line {line} is never closed with `*/`"));
                };
                let end = i + 2 + len + 2;
                for at in start..end {
                    if bytes[at] != b'\n' {
                        out[at] = b' ';
                    }
                }
                i = end;
                continue;
            }
            b',' => comma = Some(i),
            b'}' | b']' => {
                if let Some(at) = comma.take() {
                    out[at] = b' ';
                }
            }
            b if b.is_ascii_whitespace() => {}
            _ => comma = None,
        }
        i += 1;
    }
    // Only whole characters (all of a comment's bytes) became spaces: still UTF-8.
    Ok(String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_trailing_commas_become_spaces_and_strings_are_kept() {
        let text = "{\n  // the servers\n  \"servers\": { /* none */\n    \"a\": {\"url\": \"http://x//y/*z*/\", \"q\": \"a\\\"//b\",},\n  },\n}\n";
        let stripped = strip(text).unwrap();
        assert_eq!(stripped.len(), text.len(), "in place: line and column numbers hold");
        assert_eq!(stripped.lines().count(), text.lines().count());
        let value: serde_json::Value = serde_json::from_str(&stripped).unwrap_or_else(|e| panic!("{e}: {stripped}"));
        assert_eq!(value["servers"]["a"]["url"], "http://x//y/*z*/");
        assert_eq!(value["servers"]["a"]["q"], "a\"//b");
        assert_eq!(strip("[1, 2, /* c */ ]").unwrap(), format!("[1, 2{}]", " ".repeat(10)));
        let unicode = "{\"é\": 1} // ünïcode";
        assert_eq!(strip(unicode).unwrap(), format!("{{\"é\": 1}}{}", " ".repeat(unicode.len() - 9)));
    }

    #[test]
    fn an_unclosed_block_comment_names_its_line_and_an_error_after_a_comment_keeps_its_position() {
        assert_eq!(strip("{\n\n /* x").unwrap_err(), "a `/*` comment at line 3 is never closed with `*/`");
        let stripped = strip("{\n  // fine\n  \"a\": [1 2]\n}").unwrap();
        let e = serde_json::from_str::<serde_json::Value>(&stripped).unwrap_err();
        assert_eq!(e.line(), 3, "{e}");
    }
}
