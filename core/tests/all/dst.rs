//! Daylight saving time cannot confuse the windows: they are indices on the
//! UTC epoch timeline.

use chrono::{LocalResult, TimeZone};
use chrono_tz::America::New_York;
use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::*;

use rate_limit_window_core::testing::Region;

fn ambiguous_0147() -> (u64, u64) {
    // 2026-11-01: clocks go from 01:59:59 EDT back to 01:00:00 EST.
    match New_York.with_ymd_and_hms(2026, 11, 1, 1, 47, 0) {
        LocalResult::Ambiguous(edt, est) => {
            (edt.timestamp_millis() as u64, est.timestamp_millis() as u64)
        }
        other => panic!("01:47 should be ambiguous, got {other:?}"),
    }
}

#[test]
fn repeated_hour_has_distinct_windows() {
    let w = Window::from_ms(60_000).unwrap();
    let (edt, est) = ambiguous_0147();
    assert_eq!(est - edt, 3_600_000);
    assert_ne!(w.index(edt), w.index(est));
    assert_eq!(w.index(est) - w.index(edt), 60);
    // During the repeated hour, the previous window is the one 60 real
    // seconds earlier (01:46 EST), not 01:46 EDT.
    let now = est + 30_000;
    assert_eq!(w.index(now) - 1, w.index(now - 60_000));
    let prev_start = w.start_ms(w.index(now) - 1);
    let local = New_York.timestamp_millis_opt(prev_start as i64).unwrap();
    assert_eq!(local.format("%H:%M %Z").to_string(), "01:46 EST");
    // The first 01:59 EDT and the following 01:00 EST are consecutive
    // windows in real time.
    let last_edt = New_York
        .with_ymd_and_hms(2026, 11, 1, 1, 59, 0)
        .earliest()
        .unwrap();
    let first_est = New_York
        .with_ymd_and_hms(2026, 11, 1, 1, 0, 0)
        .latest()
        .unwrap();
    assert_eq!(
        w.index(first_est.timestamp_millis() as u64),
        w.index(last_edt.timestamp_millis() as u64) + 1
    );
}

#[test]
fn replay_bursts_across_the_repeated_hour() {
    let (edt, est) = ambiguous_0147();
    let w = Window::from_ms(60_000).unwrap();
    let mut buf = Region::new(2_000 * 64);
    let t = buf.table(w.ms(), [3, 4], Mode::Estimate);
    let k = t.hash_key(b"198.51.100.9");
    let burst = |at: u64| {
        (0..550)
            .filter(|_| t.acquire(k, at, 600, FailPolicy::Closed, 0).outcome == Outcome::Admitted)
            .count()
    };
    // First pass of 01:47 (EDT): 550 at :55, all admitted. A limiter keyed
    // on local time would still hold them an hour later.
    assert_eq!(burst(edt + 55_000), 550);
    // Second pass (EST): minute M at :55, then M+1 at :05.
    assert_eq!(burst(est + 55_000), 550);
    let second = burst(est + 65_000);
    // estimate at :05 = 550 * 55/60 = 504.17 -> 96 more below 600.
    assert!(
        (90..=96).contains(&second),
        "second burst admitted {second}"
    );
    assert_eq!(second, 96);
}
