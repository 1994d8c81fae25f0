//! Exact models used by the tests and benchmarks (not used by the table).
//!
//! [`Model`] applies the same sliding-window-counter rule as
//! [`Table`](crate::Table) with a `HashMap` and full 64-bit window indices,
//! and no capacity limit. [`SlidingLog`] is the exact sliding log: a request
//! at `t` is admitted iff fewer than `limit` requests were admitted in
//! `(t - W, t]`.

use std::collections::{HashMap, VecDeque};

use crate::rule::window::{self, Counts, Window};

/// One key's state in the [`Model`]: the window index its counts belong to,
/// and the counts in requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counted {
    /// Full window index of `current`.
    pub index: u64,
    /// Requests admitted in window `index`.
    pub current: u32,
    /// Requests admitted in window `index - 1`.
    pub previous: u32,
}

/// The decision of the [`Model`], with the fields of
/// [`Answer`](crate::Answer) it can predict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelDecision {
    /// Admitted and counted.
    pub admitted: bool,
    /// Requests still admissible after this one.
    pub remaining: u32,
    /// Seconds until one more request would be admitted (0 if admitted).
    pub retry_after_s: u32,
    /// Seconds to the next window boundary.
    pub reset_s: u32,
    /// Estimate before this request, in requests.
    pub estimate: u32,
    /// The window index the request was counted in, if admitted.
    pub counted_in: Option<u64>,
    /// The key's stored window was later than `now` (clock went back).
    pub clock_backwards: bool,
}

/// Exact reference model of the table's rule, keyed by any `u64`.
#[derive(Clone, Debug)]
pub struct Model {
    window: Window,
    entries: HashMap<u64, Counted>,
}

impl Model {
    /// An empty model for `window`.
    pub fn new(window: Window) -> Model {
        Model {
            window,
            entries: HashMap::new(),
        }
    }

    /// The stored entry of `key`, if any.
    pub fn entry(&self, key: u64) -> Option<Counted> {
        self.entries.get(&key).copied()
    }

    /// `(counts, elapsed used for the decision, window index, backwards)`
    /// of `key` at `now_ms`.
    pub fn view(&self, key: u64, now_ms: u64) -> (Counts, u64, u64, bool) {
        let idx = self.window.index(now_ms);
        let e = self.window.elapsed_ms(now_ms);
        let fresh = (Counts::default(), e, idx, false);
        let Some(en) = self.entries.get(&key) else {
            return fresh;
        };
        if en.current == 0 && en.previous == 0 {
            return fresh;
        }
        let c = Counts {
            current: en.current,
            previous: en.previous,
        };
        if en.index == idx {
            (c, e, idx, false)
        } else if en.index + 1 == idx {
            (
                Counts {
                    current: 0,
                    previous: en.current,
                },
                e,
                idx,
                false,
            )
        } else if en.index < idx {
            fresh
        } else {
            (c, 0, en.index, true)
        }
    }

    /// Decides (and counts, if admitted) one request of `key` at `now_ms`.
    pub fn acquire(&mut self, key: u64, now_ms: u64, limit: u32) -> ModelDecision {
        let w = self.window.ms();
        let (c, e, idx, back) = self.view(key, now_ms);
        let reset_s = window::reset_secs(self.window.elapsed_ms(now_ms), w);
        let estimate = window::estimate(c, e, w);
        if !window::admits(c, e, w, limit) {
            // A clock behind the key's window: its counts hold until that
            // window starts, the lead included.
            let retry_after_s = match (back, limit) {
                (true, 1..) => {
                    let lead = self.window.start_ms(idx) - now_ms;
                    window::secs_ceil(lead + window::retry_after_ms(c, 0, w, limit))
                }
                _ => window::retry_after_secs(c, e, w, limit),
            };
            return ModelDecision {
                admitted: false,
                remaining: 0,
                retry_after_s,
                reset_s,
                estimate,
                counted_in: None,
                clock_backwards: back,
            };
        }
        let after = Counts {
            current: c.current + 1,
            previous: c.previous,
        };
        self.entries.insert(
            key,
            Counted {
                index: idx,
                current: after.current,
                previous: after.previous,
            },
        );
        ModelDecision {
            admitted: true,
            remaining: window::remaining(after, e, w, limit),
            retry_after_s: 0,
            reset_s,
            estimate,
            counted_in: Some(idx),
            clock_backwards: back,
        }
    }

    /// Takes back an admission of `key` counted in window `counted_in`.
    pub fn undo(&mut self, key: u64, counted_in: u64) {
        if let Some(en) = self.entries.get_mut(&key) {
            if en.index == counted_in {
                en.current = en.current.saturating_sub(1);
            } else if en.index == counted_in + 1 {
                en.previous = en.previous.saturating_sub(1);
            }
        }
    }
}

impl Model {
    /// Whether a request of `cost` (0 counts as 1) of `key` is admitted at
    /// `now_ms` under `limit`: `cost` single requests back to back would
    /// all be admitted (the rule spelled out one request at a time).
    pub fn fits(&self, key: u64, now_ms: u64, limit: u32, cost: u32) -> bool {
        let w = self.window.ms();
        let (c, e, _, _) = self.view(key, now_ms);
        (0..cost.max(1)).all(|k| {
            let c = Counts {
                current: c.current + k,
                previous: c.previous,
            };
            window::admits(c, e, w, limit)
        })
    }

    /// Counts `cost` requests of `key` at `now_ms`; returns the window
    /// index they were counted in.
    pub fn add(&mut self, key: u64, now_ms: u64, cost: u32) -> u64 {
        let (c, _, idx, _) = self.view(key, now_ms);
        let e = Counted {
            index: idx,
            current: c.current + cost,
            previous: c.previous,
        };
        self.entries.insert(key, e);
        idx
    }

    /// Makes an admission of `cost` counted in window `counted_in` count
    /// `count` instead (0: given back), if its window is still current or
    /// previous.
    pub fn settle(&mut self, key: u64, counted_in: u64, cost: u32, count: u32) {
        if let Some(en) = self.entries.get_mut(&key) {
            let c = if en.index == counted_in {
                &mut en.current
            } else if en.index == counted_in + 1 {
                &mut en.previous
            } else {
                return;
            };
            *c = (*c + count).saturating_sub(cost);
        }
    }

    /// `(current, previous)` of `key` as seen at `now_ms`.
    pub fn counts(&self, key: u64, now_ms: u64) -> Counts {
        self.view(key, now_ms).0
    }
}

/// The exact log of a strict zone, per key: every admission with its
/// sub-window ([`crate::rule::strict`]), kept until it leaves the span. A request
/// in sub-window `j` (never before the key's newest admission's) is
/// admitted iff the costs of sub-windows `j - 6 ..= j` plus its own stay at
/// or below the limit.
#[derive(Clone, Debug)]
pub struct StrictLog {
    window_ms: u64,
    keys: HashMap<u64, (u64, Vec<(u64, u32)>)>,
}

impl StrictLog {
    /// An empty log for a window of `window_ms`.
    pub fn new(window_ms: u64) -> StrictLog {
        StrictLog {
            window_ms,
            keys: HashMap::new(),
        }
    }

    /// The sub-window a request of `key` at `now_ms` is decided in.
    fn sub(&self, key: u64, now_ms: u64) -> u64 {
        let j = crate::rule::strict::sub_index(now_ms, self.window_ms);
        match self.keys.get(&key) {
            Some((newest, log)) if !log.is_empty() => j.max(*newest),
            _ => j,
        }
    }

    /// Requests of `key` in the span of a request at `now_ms`.
    pub fn total(&self, key: u64, now_ms: u64) -> u32 {
        let j = self.sub(key, now_ms);
        let span = crate::rule::strict::SPAN as u64;
        self.keys.get(&key).map_or(0, |(_, log)| {
            log.iter()
                .filter(|(s, _)| *s + span > j && *s <= j)
                .map(|(_, c)| c)
                .sum()
        })
    }

    /// Whether a request of `cost` of `key` is admitted at `now_ms`.
    pub fn fits(&self, key: u64, now_ms: u64, limit: u32, cost: u32) -> bool {
        self.total(key, now_ms) + cost.max(1) <= limit
    }

    /// Counts `cost` requests of `key` at `now_ms`; returns the sub-window.
    pub fn add(&mut self, key: u64, now_ms: u64, cost: u32) -> u64 {
        let j = self.sub(key, now_ms);
        let e = self.keys.entry(key).or_default();
        e.0 = e.0.max(j);
        e.1.push((j, cost));
        j
    }

    /// A decision of `key` at `now_ms` that counted nothing: the key's
    /// state still moves on to its sub-window.
    pub fn seen(&mut self, key: u64, now_ms: u64) {
        let j = self.sub(key, now_ms);
        let e = self.keys.entry(key).or_default();
        if !e.1.is_empty() {
            e.0 = e.0.max(j);
        }
    }

    /// Gives back an admission of `cost` counted in sub-window `sub`.
    pub fn undo(&mut self, key: u64, sub: u64, cost: u32) {
        if let Some((_, log)) = self.keys.get_mut(&key) {
            if let Some(i) = log.iter().position(|&e| e == (sub, cost)) {
                log.swap_remove(i);
            }
        }
    }
}

/// The exact sliding log for one key: admits at `t` iff fewer than `limit`
/// admitted requests lie in `(t - W, t]` (times in ms, non-decreasing).
#[derive(Clone, Debug, Default)]
pub struct SlidingLog {
    admitted: VecDeque<u64>,
}

impl SlidingLog {
    /// An empty log.
    pub fn new() -> SlidingLog {
        SlidingLog::default()
    }

    /// Decides one request at `t_ms` and records it if admitted.
    pub fn acquire(&mut self, t_ms: u64, window_ms: u64, limit: u32) -> bool {
        while let Some(&front) = self.admitted.front() {
            if front + window_ms <= t_ms {
                self.admitted.pop_front();
            } else {
                break;
            }
        }
        if self.admitted.len() < limit as usize {
            self.admitted.push_back(t_ms);
            true
        } else {
            false
        }
    }
}

/// xorshift64*, deterministic (test and bench traces).
pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Poisson arrival times (ms, from `start_ms`) at `rate` requests per `w`
/// ms over `windows` windows, from a fixed `seed`.
pub fn poisson(seed: u64, start_ms: u64, rate: f64, w: u64, windows: u64) -> Vec<u64> {
    let mut st = seed | 1;
    let mut t = start_ms as f64;
    let end = (start_ms + w * windows) as f64;
    let mut out = vec![];
    loop {
        let u = ((xorshift(&mut st) >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        t += -u.ln() * w as f64 / rate;
        if t >= end {
            return out;
        }
        out.push(t as u64);
    }
}

/// The most times (ms, in any order) in any interval `(t - w, t]`: the
/// exact sliding log's count over `times`.
pub fn worst_interval(times: &[u64], w: u64) -> usize {
    let mut t = times.to_vec();
    t.sort_unstable();
    let mut worst = 0;
    let mut lo = 0;
    for hi in 0..t.len() {
        while t[lo] + w <= t[hi] {
            lo += 1;
        }
        worst = worst.max(hi - lo + 1);
    }
    worst
}
