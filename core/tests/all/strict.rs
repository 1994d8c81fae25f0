//! The strict rule (`core/src/rule/strict.rs`) against the exact sliding log:
//! never more than `limit` in any interval of one window, on random and
//! adversarial traces; exact Remaining and Retry-After; and the admitted
//! rate under saturation, next to the estimate's.

use proptest::prelude::*;
use rate_limit_window_core::rule::strict::{self, State};
use rate_limit_window_core::testing::reference::{poisson, worst_interval, Model, SlidingLog};
use rate_limit_window_core::Window;

const T0: u64 = 1_767_225_600_000;

#[derive(Clone, Debug)]
enum Step {
    /// Move the clock by `dt` ms (may be negative: a step back).
    Jump(i64),
    /// Move to `off` ms after the next window boundary (off may be
    /// negative: just before it).
    Boundary(i64),
    /// Move to `off` ms after the next sub-window boundary.
    SubBoundary(i64),
    /// `n` requests at the current time.
    Burst(u32),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => prop_oneof![4 => 0i64..3_000, 1 => 0i64..40_000].prop_map(Step::Jump),
        1 => (-5_000i64..0).prop_map(Step::Jump),
        2 => (-300i64..300).prop_map(Step::Boundary),
        2 => (-50i64..50).prop_map(Step::SubBoundary),
        4 => (1u32..25).prop_map(Step::Burst),
    ]
}

struct Run {
    state: State,
    now: u64,
    /// Effective times of the admitted requests.
    admitted: Vec<u64>,
    /// Whether the clock ever stepped back.
    stepped_back: bool,
}

impl Run {
    fn apply(&mut self, s: &Step, w: u64, limit: u32) {
        match *s {
            Step::Jump(dt) => {
                self.stepped_back |= dt < 0;
                self.now = self.now.saturating_add_signed(dt);
            }
            Step::Boundary(off) => {
                let next = (self.now / w + 1) * w;
                self.stepped_back |= off < 0 && next.saturating_add_signed(off) < self.now;
                self.now = next.saturating_add_signed(off).max(self.now);
            }
            Step::SubBoundary(off) => {
                let next = strict::sub_start(strict::sub_index(self.now, w) + 1, w);
                self.now = next.saturating_add_signed(off).max(self.now);
            }
            Step::Burst(n) => {
                for _ in 0..n {
                    self.one(w, limit);
                }
            }
        }
    }

    fn one(&mut self, w: u64, limit: u32) {
        let v = strict::decide(self.state, self.now, w, limit);
        let eff = if v.backwards {
            strict::sub_start(v.state.index, w)
        } else {
            self.now
        };
        check_remaining(&v.state, self.now, w, limit, v.remaining);
        if v.admitted {
            assert_eq!(v.retry_after_ms, 0);
            self.admitted.push(eff);
        } else {
            check_retry(&v.state, self.now, w, limit, v.retry_after_ms);
            check_not_over_conservative(&self.admitted, eff, w, limit);
        }
        if v.admitted {
            // A rejection writes nothing.
            self.state = v.state;
        }
    }
}

/// Remaining is exactly how many back-to-back requests are admitted now.
fn check_remaining(s: &State, now: u64, w: u64, limit: u32, remaining: u32) {
    let mut s = *s;
    let mut n = 0;
    while n <= limit {
        let v = strict::decide(s, now, w, limit);
        if !v.admitted {
            break;
        }
        s = v.state;
        n += 1;
    }
    assert_eq!(n, remaining, "remaining at {now}");
}

/// A retry after exactly `retry` ms is admitted, one ms earlier is not;
/// the whole-seconds value rounded up is admitted too.
fn check_retry(s: &State, now: u64, w: u64, limit: u32, retry: u64) {
    if limit == 0 {
        return;
    }
    assert!(retry > 0);
    assert!(strict::decide(*s, now + retry, w, limit).admitted);
    assert!(!strict::decide(*s, now + retry - 1, w, limit).admitted);
    let secs = u64::from(strict::secs_ceil(retry));
    assert!(strict::decide(*s, now + secs * 1000, w, limit).admitted);
    assert!(secs == 0 || (secs - 1) * 1000 < retry);
}

/// A rejection at `t` means at least `limit` admissions in the 7 sub-windows
/// ending at `t` (less than `7/6` of a window), counts being exact below 512.
fn check_not_over_conservative(admitted: &[u64], t: u64, w: u64, limit: u32) {
    let j = strict::sub_index(t, w);
    let n = admitted
        .iter()
        .filter(|&&a| (j.saturating_sub(6)..=j).contains(&strict::sub_index(a, w)))
        .count();
    assert!(
        n >= limit as usize,
        "rejected at {t} with {n} < {limit} in span"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn never_more_than_limit_in_any_window(
        window_ms in prop_oneof![Just(1_000u64), Just(10_000u64), Just(60_000), 1_000u64..100_000],
        limit in prop_oneof![0u32..12, 1u32..200],
        steps in proptest::collection::vec(step(), 1..200),
    ) {
        let mut run = Run { state: State::default(), now: T0, admitted: vec![], stepped_back: false };
        for s in &steps {
            run.apply(s, window_ms, limit);
        }
        prop_assert!(worst_interval(&run.admitted, window_ms) <= limit as usize);
        if !run.stepped_back {
            // Without a step back every effective time is the request's own.
            let mut log = SlidingLog::new();
            for &t in &run.admitted {
                prop_assert!(log.acquire(t, window_ms, limit));
            }
        }
    }
}

/// `(worst interval, mean per window)` of the estimate and strict rules.
fn saturate(times: &[u64], w: u64, limit: u32, windows: u64) -> [(usize, f64); 2] {
    let mut model = Model::new(Window::from_ms(w).unwrap());
    let mut est = vec![];
    let mut st = State::default();
    let mut strict_adm = vec![];
    for &t in times {
        if model.acquire(1, t, limit).admitted {
            est.push(t);
        }
        let v = strict::decide(st, t, w, limit);
        if v.admitted {
            st = v.state;
            strict_adm.push(t);
        }
    }
    let mean = |n: usize| n as f64 / windows as f64;
    [
        (worst_interval(&est, w), mean(est.len())),
        (worst_interval(&strict_adm, w), mean(strict_adm.len())),
    ]
}

/// Poisson traffic at 1x, 3x and 10x the limit and a steady stream at 10x:
/// strict never exceeds the limit and keeps at least 0.85 x limit per
/// window under saturation. Prints the figures (`--nocapture`).
#[test]
fn saturation_figures() {
    for (w, limit, windows) in [
        (10_000u64, 10u32, 2_000u64),
        (60_000, 100, 500),
        (10_000, 10_000, 30),
    ] {
        for factor in [1.0f64, 3.0, 10.0] {
            let times = poisson(
                42 + factor as u64,
                T0,
                factor * f64::from(limit),
                w,
                windows,
            );
            let [e, s] = saturate(&times, w, limit, windows);
            eprintln!(
                "w={w}ms limit={limit} poisson {factor}x: estimate worst {} mean {:.3}; strict worst {} mean {:.3} ({:.3} x limit)",
                e.0, e.1, s.0, s.1, s.1 / f64::from(limit)
            );
            assert!(s.0 <= limit as usize);
            if factor >= 3.0 {
                assert!(s.1 >= 0.85 * f64::from(limit), "{s:?}");
            }
        }
        // Steady: evenly spaced at 10x.
        let n = u64::from(limit) * 10 * windows;
        let times: Vec<u64> = (0..n).map(|i| T0 + i * w * windows / n).collect();
        let [e, s] = saturate(&times, w, limit, windows);
        eprintln!(
            "w={w}ms limit={limit} steady 10x: estimate worst {} mean {:.3}; strict worst {} mean {:.3}",
            e.0, e.1, s.0, s.1
        );
        assert!(s.0 <= limit as usize);
        assert!(s.1 >= 0.85 * f64::from(limit));
    }
}

/// The scenario: 10 requests 0.5 s before a boundary, 10 more 9.5 s
/// later. The estimate admits 19 of the 20 in 9.5 s (the 10 early ones
/// weigh only 1 by then); strict admits 10 then none.
#[test]
fn boundary_scenario_estimate_vs_strict() {
    let (w, limit) = (10_000u64, 10u32);
    let b = T0 + 10 * w;
    let times: Vec<u64> = (0..10)
        .map(|_| b - 500)
        .chain((0..10).map(|_| b + 9_000))
        .collect();
    let [e, s] = saturate(&times, w, limit, 1);
    assert_eq!(e.0, 19);
    assert_eq!(s.0, 10);
    assert_eq!(s.1, 10.0);
}
