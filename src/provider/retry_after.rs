//! The `Retry-After` header: a number of seconds or an HTTP date (RFC 9110 §10.2.3).
//! Parsed by hand: the one date format servers must send is simple, and it saves a crate.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, RETRY_AFTER};

/// The wait a provider asked for: `retry-after-ms` (OpenAI, Azure) or `Retry-After` as
/// seconds or as an HTTP date.
pub(crate) fn parse_retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    let value = header(RETRY_AFTER.as_str())?;
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let date = parse_http_date(value)?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the one HTTP date format servers must send.
fn parse_http_date(text: &str) -> Option<SystemTime> {
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (_weekday, rest) = text.split_once(", ")?;
    let fields: Vec<&str> = rest.split(' ').collect();
    let [day, month, year, time, "GMT"] = fields.as_slice() else {
        return None;
    };
    let day: u32 = day.parse().ok()?;
    let month = u32::try_from(MONTHS.iter().position(|m| m == month)? + 1).ok()?;
    let year: i64 = year.parse().ok()?;
    let hms: Vec<u64> = time.split(':').map(str::parse).collect::<Result<_, _>>().ok()?;
    let [hour, minute, second] = hms.as_slice() else {
        return None;
    };
    if !(1..=31).contains(&day) || *hour > 23 || *minute > 59 || *second > 60 {
        return None;
    }
    let days = u64::try_from(days_since_epoch(year, month, day)).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(days * 86_400 + hour * 3600 + minute * 60 + second))
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_since_epoch(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_index + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use reqwest::header::{HeaderName, HeaderValue};

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v))).collect()
    }

    #[test]
    fn retry_after_in_seconds_and_milliseconds() {
        let now = SystemTime::now();
        assert_eq!(parse_retry_after(&headers(&[("retry-after", "7")]), now), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after(&headers(&[("retry-after", " 1.5 ")]), now), Some(Duration::from_millis(1500)));
        let both = headers(&[("retry-after", "2"), ("retry-after-ms", "250")]);
        assert_eq!(parse_retry_after(&both, now), Some(Duration::from_millis(250)));
        assert_eq!(parse_retry_after(&headers(&[("retry-after", "-3")]), now), None);
        assert_eq!(parse_retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(parse_retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn retry_after_as_http_date() {
        let date = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(date.duration_since(UNIX_EPOCH).unwrap().as_secs(), 784_111_777);
        let leap = parse_http_date("Thu, 29 Feb 2024 00:00:00 GMT").unwrap();
        assert_eq!(leap.duration_since(UNIX_EPOCH).unwrap().as_secs(), 1_709_164_800);
        let now = date - Duration::from_secs(30);
        let h = headers(&[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")]);
        assert_eq!(parse_retry_after(&h, now), Some(Duration::from_secs(30)));
        // A date in the past means "now".
        assert_eq!(parse_retry_after(&h, date + Duration::from_secs(5)), Some(Duration::ZERO));
        for bad in [
            "06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:00:00 GMT",
            "Sun, 06 Nov 1994 08:49:37 PST",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad}");
        }
    }
}
