//! `Table::acquire_cost`: a request that counts `cost` requests is admitted
//! iff `cost` single requests sent back to back would all be, and is then
//! counted `cost` times; Remaining, Retry-After and undo follow the cost.

use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::*;

use rate_limit_window_core::testing::Region;

const W: u64 = 60_000;
/// A window boundary (2026-01-01T00:00:00Z).
const T0: u64 = 1_767_225_600_000;

fn with_table(f: impl FnOnce(&Table)) {
    let mut buf = Region::new(1 << 16);
    let t = buf.table(W, [1, 2], Mode::Estimate);
    f(&t);
}

fn cost(t: &Table, key: &str, now: u64, limit: u32, cost: u32) -> Answer {
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
        let seen = |d: Answer| (d.outcome, d.remaining, d.retry_after_s, d.estimate);
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

mod held {
    //! `delay=` with `cost=`: a held request is admitted at the first ms its
    //! whole cost fits, or rejected at once when that is later than `delay`
    //! (issue 31), checked against the reference model.
    use proptest::prelude::*;
    use rate_limit_window_core::rule::delay::{plan, LimitWait, Plan};
    use rate_limit_window_core::rule::fit;
    use rate_limit_window_core::rule::strict::{self, State};
    use rate_limit_window_core::testing::reference::Model;
    use rate_limit_window_core::Window;

    /// Whether `cost` requests of key 0 at `t` would all be admitted by
    /// the model (tried on a copy).
    fn fits(m: &Model, t: u64, limit: u32, cost: u32) -> bool {
        let mut m = m.clone();
        (0..cost).all(|_| m.acquire(0, t, limit).admitted)
    }

    /// The wait the glue plans for key 0 at `t`, by the one rule.
    fn wait(m: &Model, w: u64, t: u64, limit: u32, cost: u32) -> Option<u64> {
        let (c, e, _, _) = m.view(0, t);
        fit::wait_ms(c, e, w, limit, cost)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn held_request_admitted_at_first_fit_or_rejected_at_once(
            w in prop_oneof![Just(1_000u64), Just(2_000u64), Just(60_000u64), 1_000u64..100_000],
            limit in 1u32..15,
            cost in 1u32..18,
            delay_w in 0u64..300,
            history in proptest::collection::vec(0u64..4_000, 0..40),
            start in 0u64..1_000_000,
        ) {
            let mut m = Model::new(Window::from_ms(w).unwrap());
            let mut t = super::T0 + start;
            for dt in history {
                t += dt * w / 1_000;
                m.acquire(0, t, limit);
            }
            let t0 = t + 1;
            let delay = delay_w * w / 100;
            if fits(&m, t0, limit, cost) {
                // Not rejected: never held.
                prop_assert_eq!(wait(&m, w, t0, limit, cost), Some(0));
                return Ok(());
            }
            // The hold loop of the glue, with no other traffic.
            let (mut now, mut holds) = (t0, 0u32);
            loop {
                let lw = LimitWait::from_wait(wait(&m, w, now, limit, cost), delay, holds == 0);
                match plan(&[lw], now - t0) {
                    Plan::Admit => {
                        prop_assert!(fits(&m, now, limit, cost));
                        prop_assert!(!fits(&m, now - 1, limit, cost), "admitted late");
                        break;
                    }
                    Plan::Hold { wait_ms } => {
                        holds += 1;
                        now += wait_ms;
                        prop_assert!(now - t0 <= delay);
                    }
                    Plan::Reject => {
                        prop_assert_eq!(holds, 0, "rejected after holding");
                        prop_assert!(cost > limit || !fits(&m, t0 + delay, limit, cost));
                        break;
                    }
                }
                prop_assert!(holds <= 1, "held {} times", holds);
            }
        }

        #[test]
        fn strict_wait_is_the_first_fit(
            w in prop_oneof![Just(1_000u64), Just(60_000u64), 1_000u64..100_000],
            limit in 1u32..15,
            cost in 1u32..18,
            history in proptest::collection::vec((0u64..3_000, 1u32..4), 0..40),
        ) {
            let mut s = State::default();
            let mut t = super::T0;
            for (dt, c) in history {
                t += dt * w / 1_000;
                s = strict::decide_cost(s, t, w, limit, c).state;
            }
            let fits = |at: u64| strict::decide_cost(s, at, w, limit, cost).admitted;
            match fit::strict_wait_ms(&s, t, w, limit, cost) {
                None => prop_assert!(cost > limit),
                Some(d) => {
                    prop_assert!(fits(t + d));
                    prop_assert!(d == 0 || !fits(t + d - 1));
                    let v = strict::decide_cost(s, t, w, limit, cost);
                    prop_assert_eq!(strict::secs_ceil(v.retry_after_ms), fit::retry_after_secs(Some(d), w));
                }
            }
        }
    }
}
