//! `${...}` in a value, filled in from mcpgate's environment: mcpgate's
//! `${NAME}` and the forms clients write (`${env:NAME}`, `${NAME:-default}`,
//! VS Code's `${input:ID}`), the values that came from the environment
//! recorded as secrets.

/// Expands `${NAME}` (and the forms of [`variable`]) from the
/// environment; the values it gave are recorded as secrets.
pub(super) fn expand(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    secrets: &mut Vec<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| format!("unterminated `${{` in `{}`", redact_vars(text)))?;
        let (value, secret) = variable(&after[..end], env)?;
        if secret && !value.is_empty() {
            secrets.push(value.clone());
        }
        out.push_str(&value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn redact_vars(text: &str) -> String {
    if text.len() > 80 { format!("{}...", &text[..text.floor_char_boundary(80)]) } else { text.to_string() }
}

/// The environment variable that stands for VS Code's input `id`:
/// `perplexity-key` is `PERPLEXITY_KEY`.
pub(super) fn input_variable(id: &str) -> String {
    let var: String =
        id.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
    if var.starts_with(|c: char| c.is_ascii_digit()) { format!("_{var}") } else { var }
}

pub(super) fn input_unset(id: &str, var: &str, description: Option<&str>) -> String {
    let asks = description.map(|d| format!(" (\"{d}\")")).unwrap_or_default();
    format!(
        "`${{input:{id}}}` is a value VS Code asks the user for{asks}, and mcpgate asks no one: set `{var}` in \
         mcpgate's environment (`{var}=... mcpgate --config FILE`, or `Environment={var}=...` in its systemd \
         unit), or write `${{env:{var}}}` here, which VS Code reads too"
    )
}

/// The value of `${name}` and whether it is a secret (it came from the
/// environment): `${NAME}`, `${env:NAME}` (Cursor, VS Code, Windsurf),
/// `${NAME:-default}` (Claude Code), `${input:ID}` (VS Code, from the
/// variable [`input_variable`] names).
fn variable(name: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<(String, bool), String> {
    if let Some(id) = name.strip_prefix("input:") {
        let var = input_variable(id);
        return env(&var).map(|v| (v, true)).ok_or_else(|| input_unset(id, &var, None));
    }
    let (var, default) = match name.split_once(":-") {
        Some((var, default)) => (var, Some(default)),
        None => (name, None),
    };
    let var = var.strip_prefix("env:").unwrap_or(var);
    let valid = !var.is_empty()
        && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !var.starts_with(|c: char| c.is_ascii_digit());
    if !valid && name.contains(':') {
        return Err(format!(
            "`${{{name}}}` is an editor's variable mcpgate does not know: write the value, or `${{NAME}}` for an \
             environment variable"
        ));
    }
    if !valid {
        return Err(format!("`${{{name}}}` is not a variable name"));
    }
    match (env(var), default) {
        (Some(value), _) => Ok((value, true)),
        (None, Some(default)) => Ok((default.to_string(), false)),
        (None, None) => Err(format!("environment variable `{var}` is not set")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "GITHUB_TOKEN" => Some("ghp_0123456789".into()),
            "PERPLEXITY_KEY" => Some("pplx-0123456789".into()),
            _ => None,
        }
    }

    #[test]
    fn variables_of_each_client_are_read_from_the_environment() {
        assert_eq!(variable("GITHUB_TOKEN", &env), Ok(("ghp_0123456789".into(), true)));
        assert_eq!(variable("env:GITHUB_TOKEN", &env), Ok(("ghp_0123456789".into(), true)));
        assert_eq!(variable("input:perplexity-key", &env), Ok(("pplx-0123456789".into(), true)));
        assert_eq!(variable("NOPE:-fallback", &env), Ok(("fallback".into(), false)), "a default is no secret");
        assert_eq!(variable("GITHUB_TOKEN:-x", &env), Ok(("ghp_0123456789".into(), true)));
        assert_eq!(variable("env:NOPE", &env).unwrap_err(), "environment variable `NOPE` is not set");
        assert!(variable("config:editor.tabSize", &env).unwrap_err().contains("an editor's variable"));
        assert!(variable("9X", &env).unwrap_err().contains("is not a variable name"));
        let unset = variable("input:api-key", &env).unwrap_err();
        assert!(
            unset.contains("set `API_KEY` in mcpgate's environment") && unset.contains("${env:API_KEY}"),
            "{unset}"
        );
        assert_eq!(input_variable("perplexity-key"), "PERPLEXITY_KEY");
        assert_eq!(input_variable("1st.token"), "_1ST_TOKEN");
    }
}
