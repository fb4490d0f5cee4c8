//! `/metrics`: the table in Prometheus' text exposition format, version
//! 0.0.4. Each family (the readings of one name) comes once, with its
//! `# HELP` and `# TYPE` lines and all its samples together.

use std::fmt::Write;

use crate::stats::{Reading, Sample};

pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The readings as Prometheus reads them.
pub(crate) fn render(readings: &[Reading]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for reading in readings {
        if !names.contains(&reading.entry.name) {
            names.push(reading.entry.name);
        }
    }
    let mut out = String::with_capacity(readings.len() * 96);
    for name in names {
        let family: Vec<&Reading> = readings.iter().filter(|r| r.entry.name == name).collect();
        let _ = writeln!(out, "# HELP {name} {}", escape_help(&help(&family)));
        let _ = writeln!(out, "# TYPE {name} {}", family[0].entry.kind.prometheus());
        for reading in family {
            sample(&mut out, reading);
        }
    }
    out
}

/// A family's help: its entry's, or, for entries told apart by a label,
/// each one's with its label value.
fn help(family: &[&Reading]) -> String {
    let mut seen: Vec<(Option<(&str, &str)>, &str)> = Vec::new();
    for r in family {
        let this = (r.entry.variant, r.entry.help());
        if !seen.contains(&this) {
            seen.push(this);
        }
    }
    if let [(_, help)] = seen[..] {
        return help.to_string();
    }
    seen.iter()
        .map(|(variant, help)| match variant {
            Some((label, value)) => format!("{label}=\"{value}\": {help}"),
            None => help.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn sample(out: &mut String, r: &Reading) {
    let name = r.entry.name;
    match &r.sample {
        Sample::Number(n) => {
            let _ = writeln!(out, "{name}{} {n}", labels(&r.labels, None));
        }
        Sample::Info(_) => {
            let _ = writeln!(out, "{name}{} 1", labels(&r.labels, None));
        }
        Sample::Histogram { buckets, sum } => {
            for (bound, n) in buckets {
                let le = if bound.is_finite() { bound.to_string() } else { "+Inf".to_string() };
                let _ = writeln!(out, "{name}_bucket{} {n}", labels(&r.labels, Some(&le)));
            }
            let count = buckets.last().map_or(0, |b| b.1);
            let _ = writeln!(out, "{name}_sum{} {sum}", labels(&r.labels, None));
            let _ = writeln!(out, "{name}_count{} {count}", labels(&r.labels, None));
        }
    }
}

/// `{a="x",le="0.5"}`, or nothing without labels.
fn labels(labels: &[(&str, String)], le: Option<&str>) -> String {
    let mut all: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape_label(v))).collect();
    if let Some(le) = le {
        all.push(format!("le=\"{le}\""));
    }
    if all.is_empty() { String::new() } else { format!("{{{}}}", all.join(",")) }
}

fn escape_label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Family, Info, Now, ServerStats, Stats};
    use std::time::Duration;

    fn rendered() -> String {
        let mut readings = Vec::new();
        let now = Now {
            build_info: Info::new("0.1.0"),
            threads_by_role: Family::new(vec![("conn".into(), 2), ("reader".into(), 1)]),
            ..Now::default()
        };
        now.read(None, &mut readings);
        let stats = Stats::default();
        stats.sessions_evicted_idle.inc();
        stats.read(None, &mut readings);
        for server in ["alpha", "be\"ta"] {
            let s = ServerStats::default();
            s.request_duration.observe(Duration::from_millis(20));
            s.errors_connect.inc();
            s.read(Some(server), &mut readings);
        }
        render(&readings)
    }

    #[test]
    fn families_come_once_with_help_type_and_their_samples_together() {
        let text = rendered();
        assert!(text.contains("# TYPE mcpgate_build_info gauge\nmcpgate_build_info{version=\"0.1.0\"} 1\n"), "{text}");
        assert!(text.contains("mcpgate_threads{role=\"conn\"} 2\nmcpgate_threads{role=\"reader\"} 1\n"), "{text}");
        assert!(text.contains(
            "# TYPE mcpgate_sessions_closed_total counter\nmcpgate_sessions_closed_total{reason=\"idle\"} 1\n\
             mcpgate_sessions_closed_total{reason=\"client_delete\"} 0\n"
        ));
        let help = text.lines().find(|l| l.starts_with("# HELP mcpgate_sessions_closed_total ")).unwrap();
        assert!(help.contains("reason=\"idle\": Client sessions closed after"), "{help}");
        assert!(help.contains("reason=\"client_delete\": Client sessions ended by the client's `DELETE`."), "{help}");
        // Samples of a family are together: a name's lines form one run.
        let mut runs: Vec<&str> = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            let family = ["_bucket", "_sum", "_count"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
            if runs.last() != Some(&family) {
                assert!(!runs.contains(&family), "{family} split in two runs");
                runs.push(family);
            }
        }
        assert_eq!(text.matches("# TYPE mcpgate_server_errors_total counter").count(), 1);
    }

    #[test]
    fn a_histogram_has_cumulative_buckets_sum_and_count_per_server() {
        let text = rendered();
        for line in [
            "# TYPE mcpgate_server_request_duration_seconds histogram",
            "mcpgate_server_request_duration_seconds_bucket{server=\"alpha\",le=\"0.01\"} 0",
            "mcpgate_server_request_duration_seconds_bucket{server=\"alpha\",le=\"0.025\"} 1",
            "mcpgate_server_request_duration_seconds_bucket{server=\"alpha\",le=\"60\"} 1",
            "mcpgate_server_request_duration_seconds_bucket{server=\"alpha\",le=\"+Inf\"} 1",
            "mcpgate_server_request_duration_seconds_sum{server=\"alpha\"} 0.02",
            "mcpgate_server_request_duration_seconds_count{server=\"alpha\"} 1",
            "mcpgate_server_errors_total{server=\"alpha\",kind=\"connect\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        assert!(rendered().contains("mcpgate_server_requests_total{server=\"be\\\"ta\"} 0"));
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(escape_help("a\\b\nc"), "a\\\\b\\nc");
    }
}
