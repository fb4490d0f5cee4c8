//! A server's `envFile` (Cursor, VS Code): a dotenv file whose variables go
//! to the stdio server's environment, beneath its `env`.
//!
//! The format as dotenv and the clients read it: `NAME=value` lines, blank
//! lines and `#` comments, an optional `export ` before the name; a value in
//! double quotes may hold `#`, and `\n`, `\"` and `\\` in it are a line
//! break, a quote and a backslash; one in single quotes is taken as it is;
//! an unquoted one ends at ` #`. Values are never expanded (`${X}` stays as
//! written), and a value over several lines is refused, naming its line.

/// The variables of a dotenv file, in order (a later line wins); an error names the line.
pub(crate) fn parse(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut vars: Vec<(String, String)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").map(str::trim_start).unwrap_or(line);
        let at = n + 1;
        let Some((name, value)) = line.split_once('=') else {
            return Err(format!("line {at}: expected NAME=value"));
        };
        let name = name.trim();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-') {
            return Err(format!("line {at}: `{name}` is not a variable name"));
        }
        let value = unquote(value.trim()).map_err(|why| format!("line {at} ({name}): {why}"))?;
        vars.retain(|(n, _)| n != name);
        vars.push((name.to_string(), value));
    }
    Ok(vars)
}

fn unquote(raw: &str) -> Result<String, &'static str> {
    let unclosed = "a quoted value must end on its line";
    if let Some(rest) = raw.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return Ok(out),
                '\\' => match chars.next() {
                    Some('n') => out.push('\n'),
                    Some(other) => out.push(other),
                    None => return Err(unclosed),
                },
                c => out.push(c),
            }
        }
        return Err(unclosed);
    }
    if let Some(rest) = raw.strip_prefix('\'') {
        return rest.split_once('\'').map(|(v, _)| v.to_string()).ok_or(unclosed);
    }
    let end = raw.find(" #").unwrap_or(raw.len());
    Ok(raw[..end].trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dotenv_file_gives_its_variables_in_order() {
        let text = "# secrets\n\nGITHUB_TOKEN=ghp_abc123\nexport API_URL = https://api.example.com/v1 # prod\n\
                    QUOTED=\"a # b\\n\\\"c\\\"\"\nRAW='${NOT_EXPANDED}'\nEMPTY=\nGITHUB_TOKEN=ghp_later\n";
        let vars = parse(text).unwrap();
        let expected = [
            ("API_URL", "https://api.example.com/v1"),
            ("QUOTED", "a # b\n\"c\""),
            ("RAW", "${NOT_EXPANDED}"),
            ("EMPTY", ""),
            ("GITHUB_TOKEN", "ghp_later"),
        ];
        let got: Vec<(&str, &str)> = vars.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn a_line_that_is_not_a_variable_is_refused_with_its_number() {
        assert_eq!(parse("A=1\njust words\n").unwrap_err(), "line 2: expected NAME=value");
        assert_eq!(parse("A B=1").unwrap_err(), "line 1: `A B` is not a variable name");
        assert_eq!(parse("\nKEY=\"open\n").unwrap_err(), "line 2 (KEY): a quoted value must end on its line");
    }
}
