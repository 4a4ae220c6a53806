//! Daylight-saving transitions: skipped wall times fire once at the end of the gap, repeated
//! wall times fire once (the earlier pass) unless the job selects every hour.

use super::{cron, firings, utcs};

#[test]
fn transitions() {
    let cases: &[(&str, &str, &str, &[&str])] = &[
        // New York springs forward 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z).
        ("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", &["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]),
        // The four skipped quarter hours collapse into one firing at 03:00 EDT.
        (
            "*/15 * * * *",
            "America/New_York",
            "2026-03-08T06:40:00Z",
            &["2026-03-08T06:45:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:15:00Z", "2026-03-08T07:30:00Z"],
        ),
        // New York falls back 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z): 01:30 happens twice.
        ("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", &["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]),
        // Asked again from inside the repeated hour, it does not fire in the second pass.
        ("30 1 * * *", "America/New_York", "2026-11-01T05:45:00Z", &["2026-11-02T06:30:00Z"]),
        // Every-hour jobs run every real hour, through both passes.
        (
            "0 * * * *",
            "America/New_York",
            "2026-11-01T03:30:00Z",
            &[
                "2026-11-01T04:00:00Z",
                "2026-11-01T05:00:00Z",
                "2026-11-01T06:00:00Z",
                "2026-11-01T07:00:00Z",
                "2026-11-01T08:00:00Z",
            ],
        ),
        ("0 * * * *", "America/New_York", "2026-11-01T05:10:00Z", &["2026-11-01T06:00:00Z"]),
        ("0 * * * *", "America/New_York", "2026-11-01T06:10:00Z", &["2026-11-01T07:00:00Z"]),
        (
            "*/30 * * * *",
            "America/New_York",
            "2026-11-01T04:50:00Z",
            &[
                "2026-11-01T05:00:00Z",
                "2026-11-01T05:30:00Z",
                "2026-11-01T06:00:00Z",
                "2026-11-01T06:30:00Z",
                "2026-11-01T07:00:00Z",
            ],
        ),
        // Berlin springs forward 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z).
        ("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", &["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]),
        ("0 9 * * *", "Europe/Berlin", "2026-03-28T00:00:00Z", &["2026-03-28T08:00:00Z", "2026-03-29T07:00:00Z"]),
        // Berlin falls back 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z).
        ("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", &["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]),
        ("0 9 * * *", "Europe/Berlin", "2026-10-24T00:00:00Z", &["2026-10-24T07:00:00Z", "2026-10-25T08:00:00Z"]),
        // Lord Howe falls back half an hour 2026-04-05 02:00 +11 -> 01:30 +10:30 (15:00Z).
        (
            "45 1 * * *",
            "Australia/Lord_Howe",
            "2026-04-04T00:00:00Z",
            &["2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"],
        ),
        (
            "0,30 * * * *",
            "Australia/Lord_Howe",
            "2026-04-04T14:10:00Z",
            &["2026-04-04T14:30:00Z", "2026-04-04T15:00:00Z", "2026-04-04T15:30:00Z", "2026-04-04T16:00:00Z"],
        ),
        // Lord Howe springs forward half an hour 2026-10-04 02:00 +10:30 -> 02:30 +11 (15:30Z).
        (
            "15 2 * * *",
            "Australia/Lord_Howe",
            "2026-10-03T00:00:00Z",
            &["2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"],
        ),
    ];
    for (expr, tz, after, expected) in cases {
        let schedule = cron(expr, tz);
        assert_eq!(firings(&schedule, after, expected.len()), utcs(expected), "{expr} in {tz} after {after}");
    }
}
