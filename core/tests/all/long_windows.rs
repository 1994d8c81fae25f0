//! Windows up to 31 days (`window=31d`, a monthly quota): the table's
//! decisions, Retry-After and RateLimit-Reset are exact to the second, in
//! both modes, including windows of 2^31 ms or more (decided in u128).

use proptest::prelude::*;
use rate_limit_window_core::conf::parse;
use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::rule::strict::{self, State};
use rate_limit_window_core::*;

use rate_limit_window_core::testing::Region;

const DAY: u64 = 86_400_000;
/// 31 days, in ms: the longest window.
const MONTH: u64 = 31 * DAY;
/// 2026-01-01T00:00:00Z.
const T0: u64 = 1_767_225_600_000;

fn table(buf: &mut Region, window_ms: u64, mode: Mode) -> Table<'_> {
    buf.table(window_ms, [1, 2], mode)
}

/// The start of the window of `window_ms` that holds `t`, in epoch ms.
fn window_start(t: u64, window_ms: u64) -> u64 {
    t - t % window_ms
}

/// Uses up `limit` at `now` in a fresh table, then asks once more at
/// `at`: whether that request is admitted, and the decision at `now`.
fn probe(window_ms: u64, mode: Mode, limit: u32, now: u64, at: u64) -> (Answer, bool) {
    let mut buf = Region::new(Table::HEADER_BYTES + 64 * SLOT_BYTES);
    let t = table(&mut buf, window_ms, mode);
    let k = t.hash_key(b"client");
    for _ in 0..limit {
        assert_eq!(
            t.acquire(k, now, limit, FailPolicy::Open, 0).outcome,
            Outcome::Admitted
        );
    }
    let rejected = t.acquire(k, now, limit, FailPolicy::Open, 0);
    assert_eq!(rejected.outcome, Outcome::Rejected);
    let later = t.acquire(k, at, limit, FailPolicy::Open, 0).outcome == Outcome::Admitted;
    (rejected, later)
}

#[test]
fn month_window_is_accepted_and_longer_is_not() {
    assert_eq!(Window::from_ms(MONTH).unwrap().ms(), MAX_WINDOW_MS);
    assert!(Window::from_ms(MONTH + 1).is_err());
    let w = parse::parse_window(b"31d").unwrap();
    assert_eq!(w.ms(), MONTH);
    assert_eq!(parse::parse_window(b"2678400").unwrap().ms(), MONTH);
    let e = parse::parse_window(b"32d").unwrap_err().to_string();
    assert!(e.contains("between 1s and 31d"), "{e}");
}

/// Estimate zone, `window=31d`, limit 5, used up one day into a window:
/// RateLimit-Reset is the 30 days left, to the second, and Retry-After is
/// exact (the previous count's weight must fall below the limit: 1 ms into
/// the next window, so 30 days and 1 s rounded up).
#[test]
fn estimate_month_reset_and_retry_after_are_exact() {
    let start = window_start(T0, MONTH) + MONTH;
    let now = start + DAY;
    let (d, _) = probe(MONTH, Mode::Estimate, 5, now, now);
    assert_eq!(d.reset_s, 30 * 86_400);
    assert_eq!(d.retry_after_s, 30 * 86_400 + 1);
    let at = |s: u64| now + s * 1000;
    assert!(!probe(MONTH, Mode::Estimate, 5, now, at(30 * 86_400)).1);
    assert!(probe(MONTH, Mode::Estimate, 5, now, at(30 * 86_400 + 1)).1);
}

/// The same at `window=1d` (below 2^31 ms: the u64 path).
#[test]
fn estimate_day_reset_and_retry_after_are_exact() {
    let now = T0 + 5 * 3_600_000 + 17_000;
    let (d, _) = probe(DAY, Mode::Estimate, 3, now, now);
    let left = (DAY - 5 * 3_600_000 - 17_000) / 1000;
    assert_eq!(d.reset_s as u64, left);
    assert_eq!(d.retry_after_s as u64, left + 1);
    assert!(!probe(DAY, Mode::Estimate, 3, now, now + left * 1000).1);
    assert!(probe(DAY, Mode::Estimate, 3, now, now + (left + 1) * 1000).1);
}

/// Strict zone, `window=31d`: six sub-windows of 5 days 4 h; a client that
/// used up its limit gets in again when its sub-window leaves the span,
/// exactly when Retry-After says.
#[test]
fn strict_month_retry_after_is_exact() {
    let now = window_start(T0, MONTH) + MONTH + DAY + 123_000;
    let (d, _) = probe(MONTH, Mode::Strict, 4, now, now);
    let wait = strict::retry_after_ms(
        &State {
            index: strict::sub_index(now, MONTH),
            counts: [4, 0, 0, 0, 0, 0, 0],
        },
        now,
        MONTH,
        4,
    );
    // The count leaves the span 7 sub-windows after its own began.
    let sub = strict::sub_index(now, MONTH);
    assert_eq!(wait, strict::sub_start(sub + 7, MONTH) - now);
    assert_eq!(u64::from(d.retry_after_s), wait.div_ceil(1000));
    let s = u64::from(d.retry_after_s);
    assert!(!probe(MONTH, Mode::Strict, 4, now, now + wait - 1).1);
    assert!(probe(MONTH, Mode::Strict, 4, now, now + s * 1000).1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any window from 1 day to 31 days, any position, any counts: the
    /// estimate's Retry-After (ms) is exact, and the table's whole-second
    /// values agree with the pure ones.
    #[test]
    fn long_window_retry_after_is_exact(
        window_s in 86_400u64..=31 * 86_400,
        elapsed in 0u64..=1_000_000,
        current in 0u32..2_000,
        previous in 0u32..2_000,
        limit in 1u32..2_000,
    ) {
        let w = window_s * 1000;
        let e = elapsed * w / 1_000_000;
        let e = e.min(w - 1);
        let c = Counts { current, previous };
        let wait = retry_after_ms(c, e, w, limit);
        let fits = |d: u64| {
            let (c2, e2) = if e + d < w {
                (c, e + d)
            } else if e + d < 2 * w {
                (Counts { current: 0, previous: c.current }, e + d - w)
            } else {
                (Counts::default(), (e + d) % w)
            };
            admits(c2, e2, w, limit)
        };
        prop_assert!(fits(wait));
        if wait > 0 {
            prop_assert!(!fits(wait - 1));
        }
        prop_assert_eq!(reset_secs(e, w) as u64, (w - e).div_ceil(1000));
    }
}
