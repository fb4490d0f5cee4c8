//! Wall-clock time as the wire and the state file write it: seconds since
//! the epoch, and the HTTP date of RFC 9110. A clock set before 1970 reads
//! as 0 rather than failing. And when a socket timeout already set still
//! fits a deadline.

use std::time::{Duration, SystemTime};

/// Whether a socket timeout already `set` may bound an operation that has
/// `left` until its deadline: at least as long, and at most 1/16 longer, so
/// it may end that much late. Every read and write is bounded by what is
/// left of its deadline, a new value almost every time; setting it again
/// is a system call per read and per write, which this saves for clients'
/// connections and servers' alike.
pub(crate) fn timeout_fits(set: Duration, left: Duration) -> bool {
    set >= left && set - left <= left / 16
}

/// Seconds since the Unix epoch, now.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Days since 1970-01-01 as a civil date: (year, month 1-12, day 1-31)
/// (Howard Hinnant's algorithm).
fn civil(days: u64) -> (i64, usize, i64) {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month as usize, day)
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` (RFC 9110 §5.6.7).
pub(crate) fn http_date(at: SystemTime) -> String {
    let secs = at.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let (year, month, day) = civil(days);
    let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"][month - 1];
    format!("{weekday}, {day:02} {month} {year} {:02}:{:02}:{:02} GMT", rest / 3600, rest % 3600 / 60, rest % 60)
}

/// `1994-11-06T08:49:37.250Z` (RFC 3339, UTC, milliseconds): the log's
/// timestamps when no journal adds its own.
pub fn rfc3339(at: SystemTime) -> String {
    let since = at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil(days);
    format!(
        "{year}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn http_dates_are_imf_fixdate() {
        let at = |secs| http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(at(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(at(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(at(1_796_083_199), "Mon, 30 Nov 2026 23:59:59 GMT");
    }

    #[test]
    fn log_timestamps_are_rfc3339_in_utc() {
        let at = |ms| rfc3339(SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        assert_eq!(at(784_111_777_250), "1994-11-06T08:49:37.250Z");
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400_007), "2000-02-29T00:00:00.007Z");
    }
}
