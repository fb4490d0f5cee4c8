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
pub fn timeout_fits(set: Duration, left: Duration) -> bool {
    set >= left && set - left <= left / 16
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` (RFC 9110 §5.6.7).
pub fn http_date(at: SystemTime) -> String {
    let secs = at.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let month =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"][month as usize - 1];
    format!("{weekday}, {day:02} {month} {year} {:02}:{:02}:{:02} GMT", rest / 3600, rest % 3600 / 60, rest % 60)
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
}
