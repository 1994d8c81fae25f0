//! Fixed windows on the UTC epoch timeline and the pure sliding-window-counter
//! arithmetic.
//!
//! Every function here is a pure function of integers: counts in requests,
//! times in milliseconds. Nothing reads a clock and nothing uses floats.
//!
//! The estimate of the number of requests in the sliding window that ends at
//! `now` is `current + previous * (W - elapsed) / W`, where `current` and
//! `previous` are the counts of the fixed window containing `now` and of the
//! one before it, `W` is the window length and `elapsed` is the time since the
//! current window began (all in ms). To stay exact the functions work with the
//! *scaled* estimate `current * W + previous * (W - elapsed)`, in units of
//! `1/W` request, and a request is admitted iff the scaled estimate is below
//! `limit * W`.

use core::fmt;

use crate::rule::calendar::Calendar;

/// Shortest accepted window, in ms (1 s).
pub const MIN_WINDOW_MS: u64 = 1_000;
/// Longest accepted window, in ms (31 days: a monthly quota). Windows of
/// `FAST_W` (2^31 ms, about 24.9 days) or more decide in u128 (see there).
pub const MAX_WINDOW_MS: u64 = 31 * 86_400_000;
/// Window used when the configuration names none, in ms (1 min).
pub const DEFAULT_WINDOW_MS: u64 = 60_000;
/// Largest accepted limit, in requests per window. The table stores counts in
/// 20 bits (up to 1_048_575), so any count up to this limit is exact.
pub const MAX_LIMIT: u32 = 1_000_000;

/// A validated window: a length in ms (between [`MIN_WINDOW_MS`] and
/// [`MAX_WINDOW_MS`] inclusive), or a calendar's periods
/// ([`Window::calendar`]).
///
/// Windows of a length are aligned on the UTC unix epoch: window `i` covers
/// `[i * ms, (i + 1) * ms)` in epoch milliseconds. Local time, time zones and
/// DST never enter the computation. A calendar's period `p` is window `2p`
/// (see [`crate::rule::calendar`]).
#[derive(Clone, Copy, Debug)]
pub struct Window {
    ms: u64,
    cal: Option<&'static Calendar>,
}

impl PartialEq for Window {
    /// The same length in ms: a calendar's encodes its period (see
    /// [`crate::rule::calendar::Period::table_ms`]), and its time zone may
    /// change on reload (the periods' indices are local dates: today's
    /// count stays today's).
    fn eq(&self, other: &Window) -> bool {
        self.ms == other.ms
    }
}

impl Eq for Window {}

impl core::hash::Hash for Window {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.ms.hash(state);
    }
}

/// The error returned by [`Window::from_ms`] for a length outside 1 s..=31 d.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowError {
    /// The rejected length, in ms.
    pub ms: u64,
}

impl fmt::Display for WindowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("window must be between 1s and 31d")
    }
}

impl std::error::Error for WindowError {}

impl Window {
    /// Validates a window length in ms: `1_000..=2_678_400_000` (1 s to 31 days).
    pub fn from_ms(ms: u64) -> Result<Window, WindowError> {
        if (MIN_WINDOW_MS..=MAX_WINDOW_MS).contains(&ms) {
            Ok(Window { ms, cal: None })
        } else {
            Err(WindowError { ms })
        }
    }

    /// A calendar's periods as windows: period `p` is window `2p`, and the
    /// odd windows between periods are never counted, so that a period's
    /// estimate is its exact count (its previous window is always empty).
    /// The length ([`Window::ms`]) is the period's
    /// [`table_ms`](crate::rule::calendar::Period::table_ms).
    pub fn calendar(cal: &'static Calendar) -> Window {
        Window {
            ms: cal.period().table_ms(),
            cal: Some(cal),
        }
    }

    /// The calendar of a calendar window.
    #[inline(always)]
    pub fn calendar_of(self) -> Option<&'static Calendar> {
        self.cal
    }

    /// The window length, in ms (a calendar's: see [`Window::calendar`]).
    pub fn ms(self) -> u64 {
        self.ms
    }

    /// The UTC epoch window index of the instant `now_ms` (epoch ms):
    /// `floor(now_ms / ms)`; a calendar's, twice its period's index.
    pub fn index(self, now_ms: u64) -> u64 {
        match self.cal {
            None => now_ms / self.ms,
            Some(c) => Calendar::window_index(c.span(now_ms).index),
        }
    }

    /// Time since the start of the window containing `now_ms`, in ms
    /// (`now_ms % ms`, always `< ms`; a calendar's, counted back from its
    /// period's end: see [`Calendar::locate`]).
    pub fn elapsed_ms(self, now_ms: u64) -> u64 {
        match self.cal {
            None => now_ms % self.ms,
            Some(c) => c.locate(now_ms, self.ms).1,
        }
    }

    /// The epoch ms at which window `index` begins (saturating).
    pub fn start_ms(self, index: u64) -> u64 {
        match self.cal {
            None => index.saturating_mul(self.ms),
            Some(c) => c.window_start_ms(index),
        }
    }

    /// Time from `now_ms` to the start of the next window (ms, at least
    /// 1): a calendar's, to the next period's start.
    pub fn left_ms(self, now_ms: u64) -> u64 {
        match self.cal {
            None => self.ms - now_ms % self.ms,
            Some(c) => c.span(now_ms).end_ms.saturating_sub(now_ms).max(1),
        }
    }

    /// The window's length in seconds as the headers and metrics tell it
    /// (a calendar's nominal period: 1, 7, 30 or 365 days).
    pub fn secs(self) -> u64 {
        match self.cal {
            None => self.ms / 1000,
            Some(c) => c.period().nominal_secs(),
        }
    }

    /// How long a window's counts are worth keeping elsewhere (the Redis
    /// fleet's keys), in ms: two windows, or two of a calendar's longest
    /// periods.
    pub fn keep_ms(self) -> u64 {
        match self.cal {
            None => self.ms * 2,
            Some(c) => c.period().longest_ms() * 2,
        }
    }
}

/// Request counts of a key in two consecutive fixed windows, in requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counts {
    /// Requests admitted in the window that contains `now`.
    pub current: u32,
    /// Requests admitted in the window just before it.
    pub previous: u32,
}

/// `current * W + previous * (W - elapsed)` in u128; `elapsed` is clamped to
/// `W`.
fn scaled128(c: Counts, elapsed_ms: u64, window_ms: u64) -> u128 {
    let w = u128::from(window_ms);
    let rest = u128::from(window_ms.saturating_sub(elapsed_ms));
    u128::from(c.current) * w + u128::from(c.previous) * rest
}

/// Windows below this length (2^31 ms, about 24.9 days: every valid
/// [`Window`] up to 24 days) keep every product in u64: `count * W < 2^32 *
/// 2^31 = 2^63`, and the sum of two such products, or `limit * W`, stays
/// below 2^64. Longer windows (up to [`MAX_WINDOW_MS`], 31 days) take the
/// u128 versions; both give identical results.
const FAST_W: u64 = 1 << 31;

/// [`scaled128`] in u64 when `window_ms < FAST_W` (no overflow, see there).
#[inline]
fn scaled64(c: Counts, elapsed_ms: u64, window_ms: u64) -> u64 {
    debug_assert!(window_ms < FAST_W);
    u64::from(c.current) * window_ms + u64::from(c.previous) * window_ms.saturating_sub(elapsed_ms)
}

/// Division by a fixed `d >= 1` without a `div` instruction, exact for every
/// u64 dividend: with `m = floor((2^64 - 1) / d)`, `2^64/d - 1 <= m <= 2^64/d`,
/// so `q' = floor(n * m / 2^64)` is `floor(n / d)` or one less, and one
/// compare fixes it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastDiv {
    d: u64,
    m: u64,
}

impl FastDiv {
    pub(crate) fn new(d: u64) -> FastDiv {
        assert!(d > 0);
        FastDiv { d, m: u64::MAX / d }
    }

    /// `(n / d, n % d)`.
    #[inline(always)]
    pub(crate) fn divrem(self, n: u64) -> (u64, u64) {
        let mut q = ((u128::from(n) * u128::from(self.m)) >> 64) as u64;
        let mut r = n - q * self.d;
        if r >= self.d {
            q += 1;
            r -= self.d;
        }
        (q, r)
    }
}

/// One request decided with a single division, for the table's hot path:
/// `(admits, estimate, remaining after counting it if admitted)`, equal to
/// `(admits(..), estimate(..), remaining(current + 1, ..))`.
///
/// Uses `ceil((limit*W - s) / W) = limit - floor(s / W)`, so the remaining
/// count after one more request is `limit - (estimate + 1)`.
#[inline]
pub(crate) fn decide(c: Counts, elapsed_ms: u64, w: FastDiv, limit: u32) -> (bool, u32, u32) {
    let window_ms = w.d;
    if window_ms >= FAST_W {
        return decide_wide(c, elapsed_ms, window_ms, limit);
    }
    let s = scaled64(c, elapsed_ms, window_ms);
    let est = w.divrem(s).0;
    let ok = s < u64::from(limit) * window_ms;
    // ok implies est < limit, so est + 1 <= limit.
    let rem = if ok { limit - (est as u32 + 1) } else { 0 };
    (ok, u32::try_from(est).unwrap_or(u32::MAX), rem)
}

/// [`decide`] for windows of `FAST_W` or more (25 to 31 days), in u128;
/// out of line so that its code stays off the hot path's cache lines.
#[cold]
#[inline(never)]
fn decide_wide(c: Counts, elapsed_ms: u64, window_ms: u64, limit: u32) -> (bool, u32, u32) {
    let after = Counts {
        current: c.current.saturating_add(1),
        previous: c.previous,
    };
    let ok = admits(c, elapsed_ms, window_ms, limit);
    let rem = if ok {
        remaining(after, elapsed_ms, window_ms, limit)
    } else {
        0
    };
    (ok, estimate(c, elapsed_ms, window_ms), rem)
}

/// The scaled sliding estimate `current * W + previous * (W - elapsed)`, in
/// units of `1/W` request (`W = window_ms`, `elapsed_ms` clamped to `W`).
/// Saturates at `u64::MAX` (unreachable for the counts a table stores, at
/// most 2^20, with `W <= MAX_WINDOW_MS`).
pub fn estimate_scaled(c: Counts, elapsed_ms: u64, window_ms: u64) -> u64 {
    if window_ms < FAST_W {
        return scaled64(c, elapsed_ms, window_ms);
    }
    u64::try_from(scaled128(c, elapsed_ms, window_ms)).unwrap_or(u64::MAX)
}

/// The sliding estimate rounded down, in requests.
pub fn estimate(c: Counts, elapsed_ms: u64, window_ms: u64) -> u32 {
    if window_ms == 0 {
        return c.current;
    }
    if window_ms < FAST_W {
        let e = scaled64(c, elapsed_ms, window_ms) / window_ms;
        return u32::try_from(e).unwrap_or(u32::MAX);
    }
    let e = scaled128(c, elapsed_ms, window_ms) / u128::from(window_ms);
    u32::try_from(e).unwrap_or(u32::MAX)
}

/// Whether one more request is admitted now: exactly
/// `current * W + previous * (W - elapsed) < limit * W`, in integers.
pub fn admits(c: Counts, elapsed_ms: u64, window_ms: u64, limit: u32) -> bool {
    if window_ms < FAST_W {
        return scaled64(c, elapsed_ms, window_ms) < u64::from(limit) * window_ms;
    }
    scaled128(c, elapsed_ms, window_ms) < u128::from(limit) * u128::from(window_ms)
}

/// How many more requests (in requests) would be admitted right now if sent
/// back to back: the number of `i >= 0` with
/// `(current + i) * W + previous * (W - elapsed) < limit * W`.
pub fn remaining(c: Counts, elapsed_ms: u64, window_ms: u64, limit: u32) -> u32 {
    if window_ms == 0 {
        return 0;
    }
    if window_ms < FAST_W {
        let s = scaled64(c, elapsed_ms, window_ms);
        let cap = u64::from(limit) * window_ms;
        // ceil((cap - s) / W) = limit - floor(s / W) since cap = limit * W.
        return if s >= cap {
            0
        } else {
            limit - (s / window_ms) as u32
        };
    }
    let w = u128::from(window_ms);
    let cap = u128::from(limit) * w;
    let s = scaled128(c, elapsed_ms, window_ms);
    if s >= cap {
        return 0;
    }
    // i * W < cap - s  <=>  i < ceil((cap - s) / W)
    let n = (cap - s).div_ceil(w);
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Smallest `x` in `1..=max_x` with `previous * x < budget` seen from the
/// largest side: returns the largest admissible `x` (`previous * x < budget`),
/// capped at `max_x`, or `None` if even `x = 1` is not admissible.
fn largest_weight(previous: u128, budget: u128, max_x: u128) -> Option<u128> {
    if budget == 0 {
        return None;
    }
    if previous == 0 {
        return Some(max_x);
    }
    let x = (budget - 1) / previous;
    if x == 0 {
        None
    } else {
        Some(x.min(max_x))
    }
}

/// The smallest delay in ms after which one more request would be admitted,
/// assuming no other traffic for the key (0 if it is admitted now).
///
/// The estimate never increases while no request arrives (the previous count
/// decays, then the current count becomes the previous one with full weight,
/// then both are forgotten), so admission is monotone in the delay and the
/// result is exact: at `now + result` the request is admitted, at
/// `now + result - 1` it is not.
///
/// With `limit == 0` nothing is ever admitted; the function then returns
/// `(W - elapsed) + W` (the start of the window after next) as a finite
/// stand-in for "never", which the caller should cap or replace.
pub fn retry_after_ms(c: Counts, elapsed_ms: u64, window_ms: u64, limit: u32) -> u64 {
    let e = elapsed_ms.min(window_ms.saturating_sub(1));
    let w = window_ms;
    if admits(c, e, w, limit) {
        return 0;
    }
    let to_next = w - e;
    if limit == 0 {
        return to_next + w;
    }
    let w128 = u128::from(w);
    let cap = u128::from(limit) * w128;
    // Later in this window: delay d in [0, W - e) gives weight x = W - e - d
    // in [1, W - e] on `previous`; need current*W + previous*x < cap.
    let cur_w = u128::from(c.current) * w128;
    if cur_w < cap {
        if let Some(x) = largest_weight(u128::from(c.previous), cap - cur_w, u128::from(to_next)) {
            // x < W - e here, since the request is not admitted now.
            return to_next - x as u64;
        }
    }
    // Next window: current becomes previous, delay d = (W - e) + t, weight
    // x = W - t in [1, W]; need current * x < cap.
    if let Some(x) = largest_weight(u128::from(c.current), cap, w128) {
        return to_next + (w - x as u64);
    }
    // The window after next: nothing is remembered.
    to_next + w
}

/// [`retry_after_ms`] rounded up to whole seconds: the smallest whole number
/// of seconds `s` such that a request at `now + s * 1000` ms is admitted.
/// With `limit == 0` it is the window length in seconds (rounded up).
pub fn retry_after_secs(c: Counts, elapsed_ms: u64, window_ms: u64, limit: u32) -> u32 {
    if limit == 0 {
        return secs_ceil(window_ms);
    }
    secs_ceil(retry_after_ms(c, elapsed_ms, window_ms, limit))
}

/// Seconds (rounded up) until the next window boundary: `ceil((W - elapsed) /
/// 1000)`.
pub fn reset_secs(elapsed_ms: u64, window_ms: u64) -> u32 {
    secs_ceil(window_ms.saturating_sub(elapsed_ms))
}

/// [`reset_secs`] for `elapsed_ms < window_ms <= 400 days` (the
/// remainder of a division by the window): nothing to saturate or clamp,
/// for the table's admitting path.
#[inline(always)]
// Not `div_ceil`: its remainder test costs more than the add (as in
// `secs_ceil`); equal to it here, where nothing overflows.
#[allow(clippy::manual_div_ceil)]
pub(crate) fn reset_secs_in(elapsed_ms: u64, window_ms: u64) -> u32 {
    // A calendar's table windows are longer (a year's: 367 days).
    debug_assert!(elapsed_ms < window_ms && window_ms <= 400 * 86_400_000);
    ((window_ms - elapsed_ms + 999) / 1000) as u32
}

/// Milliseconds to whole seconds, rounded up.
pub fn secs_ceil(ms: u64) -> u32 {
    // Not `div_ceil`: its remainder test costs more than the add. Equal to
    // it everywhere (near u64::MAX both are far above u32::MAX).
    u32::try_from(ms.saturating_add(999) / 1000).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = 60_000;

    fn cs(current: u32, previous: u32) -> Counts {
        Counts { current, previous }
    }

    #[test]
    fn window_bounds() {
        assert!(Window::from_ms(999).is_err());
        assert!(Window::from_ms(0).is_err());
        assert!(Window::from_ms(31 * 86_400_000 + 1).is_err());
        assert_eq!(Window::from_ms(1_000).unwrap().ms(), 1_000);
        assert_eq!(Window::from_ms(86_400_000).unwrap().ms(), 86_400_000);
        assert_eq!(
            Window::from_ms(2_678_400_000).unwrap().ms(),
            MAX_WINDOW_MS,
            "31 days"
        );
        assert_eq!(
            Window::from_ms(5).unwrap_err().to_string(),
            "window must be between 1s and 31d"
        );
    }

    #[test]
    fn index_and_elapsed() {
        let w = Window::from_ms(W).unwrap();
        assert_eq!(w.index(0), 0);
        assert_eq!(w.index(59_999), 0);
        assert_eq!(w.index(60_000), 1);
        assert_eq!(w.elapsed_ms(60_000), 0);
        assert_eq!(w.elapsed_ms(119_999), 59_999);
        assert_eq!(w.start_ms(2), 120_000);
        let day = Window::from_ms(86_400_000).unwrap();
        // 2026-01-01T00:00:00Z
        let t = 1_767_225_600_000;
        assert_eq!(day.elapsed_ms(t), 0);
        assert_eq!(day.index(t - 1) + 1, day.index(t));
    }

    #[test]
    fn estimate_values() {
        assert_eq!(estimate_scaled(cs(3, 10), 15_000, W), 3 * W + 10 * 45_000);
        assert_eq!(estimate(cs(3, 10), 15_000, W), 10); // 3 + 7.5
        assert_eq!(estimate(cs(0, 10), 0, W), 10);
        assert_eq!(estimate(cs(0, 10), 59_999, W), 0);
    }

    #[test]
    fn admits_is_strict() {
        assert!(admits(cs(4, 0), 0, W, 5));
        assert!(!admits(cs(5, 0), 0, W, 5));
        // 0 + 10 * 30000/60000 = 5 exactly: not below 5.
        assert!(!admits(cs(0, 10), 30_000, W, 5));
        assert!(admits(cs(0, 10), 30_001, W, 5));
        assert!(!admits(cs(0, 0), 0, W, 0));
    }

    #[test]
    fn remaining_countdown() {
        let mut got = vec![];
        for cur in 1..=5 {
            got.push(remaining(cs(cur, 0), 0, W, 5));
        }
        assert_eq!(got, vec![4, 3, 2, 1, 0]);
        // previous weight 45_000 of 60_000 * 4 = 3 requests.
        assert_eq!(remaining(cs(0, 4), 15_000, W, 5), 2);
        assert_eq!(remaining(cs(0, 4), 15_001, W, 5), 3);
    }

    /// xorshift64*, for deterministic pseudo-random inputs.
    fn rng(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    #[test]
    fn fast_div_is_exact() {
        let mut st = 7u64;
        let ds = [
            1,
            2,
            3,
            7,
            1_000,
            1_024,
            60_000,
            86_400_000,
            1 << 31,
            u64::MAX,
        ];
        let random: Vec<u64> = (0..200).map(|_| 1 + rng(&mut st) % 100_000_000).collect();
        for d in ds.into_iter().chain(random) {
            let f = FastDiv::new(d);
            let edge = [0, 1, d - 1, d, d.saturating_add(1), u64::MAX, u64::MAX - 1];
            let mult = [
                d.wrapping_mul(12345),
                (u64::MAX / d) * d,
                (u64::MAX / d) * d - 1,
            ];
            for n in edge
                .into_iter()
                .chain(mult)
                .chain((0..500).map(|_| rng(&mut st)))
            {
                assert_eq!(f.divrem(n), (n / d, n % d), "{n} / {d}");
            }
        }
    }

    #[test]
    fn u64_fast_paths_match_u128() {
        let mut st = 11u64;
        for _ in 0..20_000 {
            let w = MIN_WINDOW_MS + rng(&mut st) % (MAX_WINDOW_MS - MIN_WINDOW_MS + 1);
            let small = !rng(&mut st).is_multiple_of(4);
            let count = |st: &mut u64| {
                if small {
                    (rng(st) % 2_000_000) as u32
                } else {
                    rng(st) as u32
                }
            };
            let c = cs(count(&mut st), count(&mut st));
            let e = rng(&mut st) % (w + 2);
            let limit = if small {
                (rng(&mut st) % 1_100_000) as u32
            } else {
                rng(&mut st) as u32
            };
            let s = scaled128(c, e, w);
            // Saturates only for counts far above what a table stores.
            assert_eq!(
                u128::from(estimate_scaled(c, e, w)),
                s.min(u128::from(u64::MAX))
            );
            assert_eq!(
                u128::from(estimate(c, e, w)),
                (s / u128::from(w)).min(u128::from(u32::MAX))
            );
            let ok = s < u128::from(limit) * u128::from(w);
            assert_eq!(admits(c, e, w, limit), ok);
            let rem = if ok {
                (u128::from(limit) * u128::from(w) - s).div_ceil(u128::from(w))
            } else {
                0
            };
            assert_eq!(u128::from(remaining(c, e, w, limit)), rem);
            if c.current < u32::MAX {
                let after = cs(c.current + 1, c.previous);
                assert_eq!(
                    decide(c, e, FastDiv::new(w), limit),
                    (
                        ok,
                        estimate(c, e, w),
                        if ok { remaining(after, e, w, limit) } else { 0 }
                    )
                );
            }
        }
    }

    #[test]
    fn decide_beyond_fast_windows_matches_u128() {
        // Windows of 2^31 ms or more take the out-of-line u128 path.
        let mut st = 5u64;
        for _ in 0..5_000 {
            let w = FAST_W + rng(&mut st) % (1 << 40);
            let c = cs(rng(&mut st) as u32 >> 1, rng(&mut st) as u32);
            let e = rng(&mut st) % (w + 2);
            let limit = rng(&mut st) as u32;
            let s = scaled128(c, e, w);
            let cap = u128::from(limit) * u128::from(w);
            let ok = s < cap;
            let after = scaled128(cs(c.current + 1, c.previous), e, w);
            let rem = if ok && after < cap {
                (cap - after).div_ceil(u128::from(w))
            } else {
                0
            };
            let est = (s / u128::from(w)).min(u128::from(u32::MAX));
            assert_eq!(
                decide(c, e, FastDiv::new(w), limit),
                (ok, est as u32, rem as u32),
                "{c:?} e={e} w={w} limit={limit}"
            );
        }
    }

    #[test]
    fn retry_after_examples() {
        assert_eq!(retry_after_ms(cs(0, 0), 0, W, 5), 0);
        // Full, no previous: next window.
        assert_eq!(retry_after_ms(cs(5, 0), 10_000, W, 5), 50_000 + 1);
        assert_eq!(retry_after_secs(cs(5, 0), 10_000, W, 5), 51);
        // Full previous window, empty current: previous must decay below 5/10.
        assert_eq!(retry_after_ms(cs(0, 10), 0, W, 5), 30_001);
        assert_eq!(retry_after_ms(cs(0, 0), 0, W, 0), 120_000);
        assert_eq!(retry_after_secs(cs(0, 0), 0, W, 0), 60);
        assert_eq!(reset_secs(0, W), 60);
        assert_eq!(reset_secs(59_001, W), 1);
        assert_eq!(reset_secs(59_000, W), 1);
        assert_eq!(reset_secs(58_999, W), 2);
        for e in [0, 1, 999, 1_000, 58_999, 59_000, 59_001, 59_999] {
            assert_eq!(reset_secs_in(e, W), reset_secs(e, W));
        }
        assert_eq!(
            reset_secs_in(0, MAX_WINDOW_MS),
            reset_secs(0, MAX_WINDOW_MS)
        );
    }
}
