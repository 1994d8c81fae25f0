//! Accuracy of the sliding window counter against the exact sliding log on
//! a synthetic trace (deterministic xorshift PRNG). Prints one
//! machine-readable line per scenario:
//!
//! `accuracy scenario=... wrong_pct=... worst_over=... decisions=...`
//!
//! * wrong_pct: % of requests decided differently than by the exact log
//!   (each limiter sees the same requests; each keeps its own admissions);
//! * worst_over: max over keys and over every W-long interval of
//!   (requests the counter admitted in it) - limit;
//! * decisions: requests decided.

use rate_limit_window_core::reference::SlidingLog;
use rate_limit_window_core::*;
use std::collections::HashMap;

const W: u64 = 60_000;
const LIMIT: u32 = 100;
const T0: u64 = 1_767_225_600_000;
const DURATION: u64 = 30 * 60_000;

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
}

#[repr(C, align(64))]
struct Line([u8; 64]);

/// (time offset ms, key) pairs.
fn trace(scenario: &str, rng: &mut XorShift) -> Vec<(u64, u32)> {
    let mut ev = vec![];
    // 300 well-behaved clients: ~60 requests/min with random gaps (below the
    // limit of 100 on average, above it in some minutes).
    for k in 0..300u32 {
        let mut t = rng.below(2_000);
        while t < DURATION {
            ev.push((t, k));
            t += 1 + rng.below(1_999);
        }
    }
    // 30 abusers.
    for a in 0..30u32 {
        let k = 10_000 + a;
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

fn main() {
    for scenario in ["random_bursts", "boundary_bursts"] {
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let ev = trace(scenario, &mut rng);
        let slots = 4_096;
        let mut buf: Vec<Line> = (0..(Table::HEADER_BYTES + slots * SLOT_BYTES) / 64)
            .map(|_| Line([0; 64]))
            .collect();
        let len = buf.len() * 64;
        // SAFETY: exclusive, aligned buffer that outlives the table.
        let table = unsafe {
            Table::init(
                buf.as_mut_ptr().cast(),
                len,
                Window::from_ms(W).unwrap(),
                [1, 1],
            )
        }
        .unwrap();
        let mut logs: HashMap<u32, SlidingLog> = HashMap::new();
        let mut admitted: HashMap<u32, Vec<u64>> = HashMap::new();
        let mut log_admitted: HashMap<u32, Vec<u64>> = HashMap::new();
        let (mut wrong, mut over, mut under) = (0u64, 0u64, 0u64);
        for &(t, k) in &ev {
            let now = T0 + t;
            let h = table.hash_key(&k.to_le_bytes());
            let a = table.acquire(h, now, LIMIT, FailPolicy::Open, 0).outcome == Outcome::Admitted;
            let b = logs.entry(k).or_default().acquire(now, W, LIMIT);
            if a {
                admitted.entry(k).or_default().push(now);
            }
            if b {
                log_admitted.entry(k).or_default().push(now);
            }
            if a != b {
                wrong += 1;
                if a {
                    over += 1;
                } else {
                    under += 1;
                }
            }
        }
        assert_eq!(table.counter(Counter::EvictLive), 0);
        let n = ev.len() as u64;
        println!(
            "accuracy scenario={scenario} wrong_pct={:.3} admitted_not_by_log_pct={:.3} rejected_but_log_admits_pct={:.3} worst_over={} log_worst_over={} decisions={n}",
            wrong as f64 * 100.0 / n as f64,
            over as f64 * 100.0 / n as f64,
            under as f64 * 100.0 / n as f64,
            worst_over(&admitted),
            worst_over(&log_admitted),
        );
    }
}
