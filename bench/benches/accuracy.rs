//! Accuracy of the sliding window counter against the exact sliding log, on
//! synthetic traces (deterministic xorshift PRNG, fixed seeds; limit 100
//! requests per 60 s window, 30 minutes of traffic). Every scenario is
//! measured two ways and prints one machine-readable line per way:
//!
//! `accuracy scenario=... method=... wrong_pct=... worst_over=... decisions=... ...`
//!
//! Methods:
//!
//! * `independent`: the counter and an exact sliding log each decide every
//!   request and each keeps *its own* admitted history. Once the two have
//!   disagreed on a key, their histories differ and later disagreements
//!   follow from the first one, so traffic that hammers at the limit shows
//!   several % "wrong" even when each single decision is reasonable.
//! * `shared_history` (the measurement Cloudflare published for its own
//!   sliding window counter): for each request, the counter's decision is
//!   compared with what an exact sliding window would decide *given what
//!   was actually admitted* (the counter's admissions): admit iff fewer
//!   than `limit` requests admitted by the counter lie in `(t - W, t]`.
//!
//! Fields: `wrong_pct` = disagreements / all requests; `over_pct` /
//! `under_pct` = the counter admitted / rejected where the exact rule says
//! otherwise (% of all requests); `abuser_wrong_pct` = disagreements among
//! the abusers' requests / abusers' requests; `well_behaved_wrong` =
//! disagreements on the other clients' requests (a count); `worst_over` =
//! max over keys and over every W-long interval of (requests the counter
//! admitted in it) - limit (negative: never reached the limit);
//! `decisions` = requests.
//!
//! Traces:
//!
//! * `random_bursts`, `boundary_bursts` (the original stress traces): 300
//!   clients at ~60 requests/min with uniform random gaps (above the limit
//!   in some minutes), plus 30 abusers sending bursts of 150 requests, in
//!   2 s at random times (`random_bursts`) or in the last and first 500 ms
//!   around a window boundary (`boundary_bursts`), every 30-90 s. Most
//!   requests come from abusers hammering at the limit.
//! * `realistic`: 10,000 well-behaved clients, each a Poisson process with
//!   its own rate drawn uniformly from 1-50 requests/min (at most half the
//!   limit), plus 100 abusers (1% of clients), each alternating quiet gaps
//!   (exponential, mean 2 min) and bursts of 150-400 requests spread
//!   uniformly over 1-20 s. Parameters were chosen once to describe such a
//!   mix, not tuned to reach a figure.
//!
//! A second table, one line per mode and load:
//!
//! `saturation mode=... load=... worst=... mean_per_window=... mean_x_limit=...`
//!
//! One client, Poisson arrivals at 1x, 3x and 10x the limit (limit 10 per
//! 10 s window, 2,000 windows, fixed seeds, the traces of
//! `core/tests/all/strict.rs::saturation_figures`), decided by the table's
//! `acquire` in `mode=estimate` and in `mode=strict`. `worst` = the most
//! admitted requests in any interval of one window (exact sliding log);
//! `mean_per_window` = admitted / windows; `mean_x_limit` = that / limit.

use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::testing::reference::{poisson, worst_interval, SlidingLog};
use rate_limit_window_core::*;
use std::collections::{HashMap, VecDeque};

mod support;
use support::heap_table;

const W: u64 = 60_000;
const LIMIT: u32 = 100;
const T0: u64 = 1_767_225_600_000;
const DURATION: u64 = 30 * 60_000;
/// Keys from this value on are abusers.
const ABUSER: u32 = 1 << 30;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
    /// Exponential with the given mean.
    fn exp(&mut self, mean: f64) -> f64 {
        -self.unit().ln() * mean
    }
}

/// (time offset ms, key) pairs, sorted.
fn trace(scenario: &str, rng: &mut XorShift) -> Vec<(u64, u32)> {
    let mut ev = vec![];
    if scenario == "realistic" {
        for k in 0..10_000u32 {
            let per_min = 1.0 + 49.0 * rng.unit();
            let mean_gap = 60_000.0 / per_min;
            let mut t = rng.exp(mean_gap);
            while (t as u64) < DURATION {
                ev.push((t as u64, k));
                t += rng.exp(mean_gap);
            }
        }
        for a in 0..100u32 {
            let k = ABUSER + a;
            let mut t = rng.exp(120_000.0) as u64;
            while t < DURATION {
                let n = 150 + rng.below(251);
                let spread = 1_000 + rng.below(19_001);
                for _ in 0..n {
                    ev.push((t + rng.below(spread), k));
                }
                t += spread + rng.exp(120_000.0) as u64;
            }
        }
    } else {
        // 300 well-behaved clients: ~60 requests/min with random gaps (below
        // the limit of 100 on average, above it in some minutes).
        for k in 0..300u32 {
            let mut t = rng.below(2_000);
            while t < DURATION {
                ev.push((t, k));
                t += 1 + rng.below(1_999);
            }
        }
        // 30 abusers.
        for a in 0..30u32 {
            let k = ABUSER + a;
            let mut t = rng.below(W);
            while t < DURATION {
                let (start, n, spread) = match scenario {
                    // Bursts of 150 requests within 2 s at random times.
                    "random_bursts" => (t, 150, 2_000),
                    // Bursts of 150 within the last and first 500 ms of a window.
                    _ => ((t / W + 1) * W - 500, 150, 1_000),
                };
                for _ in 0..n {
                    ev.push((start + rng.below(spread), k));
                }
                t += W / 2 + rng.below(W);
            }
        }
    }
    ev.retain(|&(t, _)| t < DURATION);
    ev.sort_unstable();
    ev
}

fn worst_over(admitted: &HashMap<u32, Vec<u64>>) -> i64 {
    let mut worst = i64::MIN;
    for times in admitted.values() {
        let mut lo = 0;
        for hi in 0..times.len() {
            while times[lo] + W <= times[hi] {
                lo += 1;
            }
            worst = worst.max((hi - lo + 1) as i64 - i64::from(LIMIT));
        }
    }
    worst
}

#[derive(Default)]
struct Tally {
    wrong: u64,
    over: u64,
    under: u64,
    abuser_wrong: u64,
}

impl Tally {
    fn note(&mut self, k: u32, counter: bool, exact: bool) {
        if counter != exact {
            self.wrong += 1;
            self.abuser_wrong += u64::from(k >= ABUSER);
            if counter {
                self.over += 1;
            } else {
                self.under += 1;
            }
        }
    }
}

fn pct(n: u64, d: u64) -> f64 {
    n as f64 * 100.0 / d.max(1) as f64
}

/// Window (ms), limit (requests) and windows of the saturation table.
const SAT_W: u64 = 10_000;
const SAT_LIMIT: u32 = 10;
const SAT_WINDOWS: u64 = 2_000;

/// Admission times of `times` (ms, sorted) through a `mode` table.
fn admit_all(times: &[u64], mode: Mode) -> Vec<u64> {
    let owned = heap_table(1_024, SAT_W, [2, 3], mode);
    let table = &owned.table;
    let h = table.hash_key(b"client");
    times
        .iter()
        .copied()
        .filter(|&t| {
            table.acquire(h, t, SAT_LIMIT, FailPolicy::Open, 0).outcome == Outcome::Admitted
        })
        .collect()
}

/// One line per mode and load: worst one-window interval and mean per window.
fn saturation() {
    for factor in [1u32, 3, 10] {
        let rate = f64::from(factor * SAT_LIMIT);
        let times = poisson(42 + u64::from(factor), T0, rate, SAT_W, SAT_WINDOWS);
        for (name, mode) in [("estimate", Mode::Estimate), ("strict", Mode::Strict)] {
            let adm = admit_all(&times, mode);
            let mean = adm.len() as f64 / SAT_WINDOWS as f64;
            println!(
                "saturation mode={name} load={factor}x worst={} mean_per_window={mean:.3} mean_x_limit={:.3} requests={}",
                worst_interval(&adm, SAT_W),
                mean / f64::from(SAT_LIMIT),
                times.len(),
            );
        }
    }
}

fn main() {
    for scenario in ["random_bursts", "boundary_bursts", "realistic"] {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let ev = trace(scenario, &mut rng);
        let slots = 65_536;
        let owned = heap_table(slots, W, [1, 1], Mode::Estimate);
        let table = &owned.table;
        // Independent histories: the exact log keeps its own admissions.
        let mut logs: HashMap<u32, SlidingLog> = HashMap::new();
        let mut log_admitted: HashMap<u32, Vec<u64>> = HashMap::new();
        // Shared history: the counter's admissions in (t - W, t].
        let mut window_of: HashMap<u32, VecDeque<u64>> = HashMap::new();
        let mut admitted: HashMap<u32, Vec<u64>> = HashMap::new();
        let (mut indep, mut shared) = (Tally::default(), Tally::default());
        let mut abuser_requests = 0u64;
        for &(t, k) in &ev {
            let now = T0 + t;
            abuser_requests += u64::from(k >= ABUSER);
            let h = table.hash_key(&k.to_le_bytes());
            let a = table.acquire(h, now, LIMIT, FailPolicy::Open, 0).outcome == Outcome::Admitted;
            let b = logs.entry(k).or_default().acquire(now, W, LIMIT);
            if b {
                log_admitted.entry(k).or_default().push(now);
            }
            indep.note(k, a, b);
            let q = window_of.entry(k).or_default();
            while q.front().is_some_and(|&f| f + W <= now) {
                q.pop_front();
            }
            shared.note(k, a, q.len() < LIMIT as usize);
            if a {
                q.push_back(now);
                admitted.entry(k).or_default().push(now);
            }
        }
        assert_eq!(table.counter(Counter::EvictLive), 0);
        let n = ev.len() as u64;
        let worst = worst_over(&admitted);
        for (method, tl) in [("independent", &indep), ("shared_history", &shared)] {
            let extra = if method == "independent" {
                format!(" log_worst_over={}", worst_over(&log_admitted))
            } else {
                String::new()
            };
            println!(
                "accuracy scenario={scenario} method={method} wrong_pct={:.4} over_pct={:.4} under_pct={:.4} abuser_wrong_pct={:.4} well_behaved_wrong={} worst_over={worst} decisions={n} abuser_decisions={abuser_requests}{extra}",
                pct(tl.wrong, n),
                pct(tl.over, n),
                pct(tl.under, n),
                pct(tl.abuser_wrong, abuser_requests),
                tl.wrong - tl.abuser_wrong,
            );
        }
    }
    saturation();
}
