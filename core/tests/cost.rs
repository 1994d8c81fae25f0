//! `Table::acquire_cost`: a request that counts `cost` requests is admitted
//! iff `cost` single requests sent back to back would all be, and is then
//! counted `cost` times; Remaining, Retry-After and undo follow the cost.

use rate_limit_window_core::*;

#[repr(C, align(64))]
struct Line([u8; 64]);

const W: u64 = 60_000;
/// A window boundary (2026-01-01T00:00:00Z).
const T0: u64 = 1_767_225_600_000;

fn with_table(f: impl FnOnce(&Table)) {
    let mut buf: Vec<Line> = (0..(1 << 16) / 64).map(|_| Line([0; 64])).collect();
    // SAFETY: exclusive, aligned 64 KiB buffer that outlives the table.
    let t = unsafe {
        Table::init(
            buf.as_mut_ptr().cast(),
            1 << 16,
            Window::from_ms(W).unwrap(),
            [1, 2],
        )
    }
    .unwrap();
    f(&t);
}

fn cost(t: &Table, key: &str, now: u64, limit: u32, cost: u32) -> Decision {
    t.acquire_cost(
        t.hash_key(key.as_bytes()),
        now,
        limit,
        cost,
        FailPolicy::Open,
        0,
    )
}

#[test]
fn costs_exhaust_the_limit_in_fewer_requests() {
    with_table(|t| {
        // limit 100, cost 30: three admitted (90), the fourth does not fit.
        let now = T0 + 1_000;
        let rem: Vec<u32> = (0..3)
            .map(|_| cost(t, "bulk", now, 100, 30).remaining)
            .collect();
        assert_eq!(rem, [70, 40, 10]);
        let d = cost(t, "bulk", now, 100, 30);
        assert_eq!(d.outcome, Outcome::Rejected);
        assert_eq!(d.estimate, 90);
        assert_eq!(t.peek(t.hash_key(b"bulk"), now).current, 90);
        // What is left still fits a cost of 10, then nothing.
        assert_eq!(cost(t, "bulk", now, 100, 10).remaining, 0);
        assert_eq!(cost(t, "bulk", now, 100, 1).outcome, Outcome::Rejected);
        assert_eq!(t.peek(t.hash_key(b"bulk"), now).current, 100);
    });
}

#[test]
fn cost_one_is_the_single_request_rule() {
    with_table(|t| {
        // Mid-window with a previous count: a fractional estimate.
        let prev = T0 - W + 10;
        for _ in 0..10 {
            assert_eq!(cost(t, "a", prev, 10, 1).outcome, Outcome::Admitted);
            let k = t.hash_key(b"b");
            assert_eq!(
                t.acquire(k, prev, 10, FailPolicy::Open, 0).outcome,
                Outcome::Admitted
            );
        }
        let now = T0 + W / 4; // previous weighs 7.5
        let seen = |d: Decision| (d.outcome, d.remaining, d.retry_after_s, d.estimate);
        let a: Vec<_> = (0..4).map(|_| seen(cost(t, "a", now, 10, 1))).collect();
        let b: Vec<_> = (0..4)
            .map(|_| seen(t.acquire(t.hash_key(b"b"), now, 10, FailPolicy::Open, 0)))
            .collect();
        assert_eq!(a, b);
        assert_eq!(a.iter().filter(|d| d.0 == Outcome::Admitted).count(), 3);
    });
}

#[test]
fn a_cost_fits_only_where_that_many_single_requests_would() {
    with_table(|t| {
        let prev = T0 - W + 10;
        for _ in 0..10 {
            cost(t, "k", prev, 10, 1);
        }
        // At a quarter of the window the estimate is 7.5: 2.5 left, so
        // requests at 7.5 and 8.5 and 9.5 fit one by one (three), a cost of
        // 3 fits, a cost of 4 does not.
        let now = T0 + W / 4;
        let d = cost(t, "k", now, 10, 4);
        assert_eq!(d.outcome, Outcome::Rejected);
        // Retry-After for the whole cost: once the estimate is below 7
        // (4 more fit under 10), just after 0.3 W: 3.001 s from now, 4 s.
        assert_eq!(d.retry_after_s, 4);
        let one = cost(t, "k", now, 10, 1).retry_after_s;
        assert_eq!(one, 0, "a single request fits now");
        let d = cost(t, "k", now, 10, 2);
        assert_eq!((d.outcome, d.remaining), (Outcome::Admitted, 0));
    });
}

#[test]
fn undo_gives_the_whole_cost_back() {
    with_table(|t| {
        let now = T0 + 5_000;
        let d = cost(t, "u", now, 50, 20);
        assert_eq!(d.remaining, 30);
        cost(t, "u", now, 50, 5);
        t.undo(&d.admission.unwrap());
        assert_eq!(t.peek(t.hash_key(b"u"), now).current, 5);
        // An undo after the window moved on takes it from the previous count.
        let d = cost(t, "u", now, 50, 7);
        cost(t, "u", now + W, 50, 1);
        t.undo(&d.admission.unwrap());
        let s = t.peek(t.hash_key(b"u"), now + W);
        assert_eq!((s.previous, s.current), (5, 1));
    });
}

#[test]
fn costs_above_the_limit_never_fit_nor_wrap() {
    with_table(|t| {
        let now = T0 + 1_000;
        for (limit, c) in [(10, 11), (0, 1), (1, u32::MAX), (MAX_LIMIT, u32::MAX)] {
            let d = cost(t, &format!("big{limit}"), now, limit, c);
            assert_eq!(d.outcome, Outcome::Rejected, "limit {limit} cost {c}");
            assert!(d.admission.is_none());
        }
        // The largest cost that fits is the limit itself, on a fresh key
        // (new-key path) and on a known one (fast path).
        assert_eq!(cost(t, "whole", now, MAX_LIMIT, MAX_LIMIT).remaining, 0);
        assert_eq!(t.peek(t.hash_key(b"whole"), now).current, MAX_LIMIT);
        cost(t, "known", now, 10, 1);
        t.undo(&cost(t, "known", now, 10, 1).admission.unwrap());
        assert_eq!(cost(t, "known", now, 10, 9).remaining, 0);
        assert_eq!(t.peek(t.hash_key(b"known"), now).current, 10);
    });
}

/// `Table::clear`: an operator's reset of one key (current and previous).
#[test]
fn clear_resets_one_key_only() {
    with_table(|t| {
        let (a, b) = (t.hash_key(b"a"), t.hash_key(b"b"));
        for _ in 0..5 {
            t.acquire(a, T0 - 1_000, 10, FailPolicy::Open, 0);
        }
        for _ in 0..6 {
            t.acquire(a, T0 + 1_000, 10, FailPolicy::Open, 0);
            t.acquire(b, T0 + 1_000, 10, FailPolicy::Open, 0);
        }
        let now = T0 + 2_000;
        assert_eq!(
            t.acquire(a, now, 10, FailPolicy::Open, 0).outcome,
            Outcome::Rejected
        );
        let s = t.clear(a, now);
        assert_eq!((s.current, s.previous), (6, 5));
        assert_eq!(
            t.peek(a, now),
            Snapshot {
                window_index: now / W,
                ..Snapshot::default()
            }
        );
        assert_eq!(t.peek(b, now).current, 6, "another key is untouched");
        // Cleared again: nothing left; an absent key: nothing.
        assert_eq!(t.clear(a, now).current, 0);
        assert_eq!(
            t.clear(t.hash_key(b"nobody"), now),
            Snapshot {
                window_index: now / W,
                ..Snapshot::default()
            }
        );
        // The key starts over: the whole limit again.
        let rem: Vec<u32> = (0..10)
            .map(|_| t.acquire(a, now, 10, FailPolicy::Open, 0).remaining)
            .collect();
        assert_eq!(rem, (0..10).rev().collect::<Vec<u32>>());
    });
}
