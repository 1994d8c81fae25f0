//! The strict sliding window: no interval of one window ever admits more
//! than `limit` requests, at constant memory per key.
//!
//! # Rule
//!
//! The window `W` (ms) is cut into [`K`] = 6 sub-windows aligned on the UTC
//! epoch: sub-window `j` covers `[ceil(j * W / 6), ceil((j + 1) * W / 6))`,
//! so `j = floor(t * 6 / W)` for an instant `t` in epoch ms. A key keeps the
//! counts of its last [`SPAN`] = `K + 1` = 7 sub-windows, and a request at
//! `t` in sub-window `j` is admitted iff the counts of sub-windows
//! `j - 6 ..= j` plus this request stay at or below `limit`.
//!
//! **Guarantee.** Take any interval of length `W` and the admitted request
//! `r` in it that was decided last, at `t` in sub-window `j`. Every other
//! admitted request of the interval lies in `(t - W, t]`, hence in one of
//! the sub-windows `j - 6 ..= j`, and was counted before `r` was decided,
//! so it was in the sum that admitted `r`: the interval holds at most
//! `limit` requests.
//!
//! **Efficiency.** A client that sends without pause gets `limit` in one
//! sub-window and then nothing until that sub-window leaves the span seven
//! sub-windows later: `limit` per `7/6 W`, i.e. `6/7 = 0.857 × limit` per
//! window on average.
//!
//! # Clock steps back
//!
//! A request whose sub-window is older than the key's newest one (another
//! worker's clock is ahead, or the clock stepped back) is decided and
//! counted as if at the start of the key's newest sub-window: the per-key
//! timeline never goes back, so the guarantee holds on these effective
//! times, which differ from the request's own clock by the clock skew only.
//!
//! # Compact counts
//!
//! The current sub-window's count is kept exactly in 16 bits (up to
//! [`MAX_STRICT_LIMIT`] = 65,535). When a sub-window closes, its count is
//! kept in 12 bits as a small float rounded **up** (exact up to 511, then
//! within 1/256): over-counting a past sub-window only rejects earlier, so
//! the guarantee is untouched and the rounding costs at most 0.4% of the
//! limit per window, and only for limits above 511 per sub-window. With a
//! 15-bit sub-window index and a 24-bit key fingerprint the whole state is
//! one 128-bit word, changed by one CAS (see [`pack`]).

use crate::rule::window::MIN_WINDOW_MS;

/// Sub-windows per window.
pub const K: u64 = 6;
/// Sub-windows whose counts a key keeps: the current one and the `K`
/// before it.
pub const SPAN: usize = K as usize + 1;
/// Largest limit of a strict zone, in requests per window.
pub const MAX_STRICT_LIMIT: u32 = 65_535;

/// Mantissa bits of a past sub-window's count (plus an implicit leading one
/// above 511).
const MANT_BITS: u32 = 8;
/// Bits of an encoded past count: 4 exponent bits and the mantissa.
pub const CODE_BITS: u32 = 4 + MANT_BITS;
const CODE_MASK: u64 = (1 << CODE_BITS) - 1;
/// Exactly representable below this.
const EXACT: u32 = 2 << MANT_BITS;

/// Bits of the sub-window index kept in a packed state.
pub const SUB_BITS: u32 = 15;
/// Mask of [`SUB_BITS`].
pub const SUB_MASK: u64 = (1 << SUB_BITS) - 1;
/// Bits of the key fingerprint kept in a packed state.
pub const FP_BITS: u32 = 24;

const CUR_BITS: u32 = 16;
const PAST_SHIFT: u32 = CUR_BITS;
const SUB_SHIFT: u32 = PAST_SHIFT + (SPAN as u32 - 1) * CODE_BITS;
/// The one bit between the sub-window index and the fingerprint (bit 103):
/// not part of the state, [`pack`] leaves it 0 and [`unpack`] ignores it;
/// the slot table keeps a flag there (`table/layout.rs`). A word packed
/// with a 16-bit index reads as its index mod 2^15 and this bit.
pub const SPARE_SHIFT: u32 = SUB_SHIFT + SUB_BITS;
const FP_SHIFT: u32 = SPARE_SHIFT + 1;
const _: () = assert!(FP_SHIFT + FP_BITS == 128);
const _: () = assert!(MIN_WINDOW_MS >= K);

/// The sub-window index of the instant `now_ms` (epoch ms) for a window of
/// `window_ms` ms: `floor(now_ms * K / window_ms)`.
#[inline]
pub fn sub_index(now_ms: u64, window_ms: u64) -> u64 {
    let w = window_ms.max(1);
    match now_ms.checked_mul(K) {
        // Every epoch time before year 10^6 takes this u64 path.
        Some(x) => x / w,
        None => ((u128::from(now_ms) * u128::from(K)) / u128::from(w)) as u64,
    }
}

/// The epoch ms at which sub-window `j` begins: `ceil(j * window_ms / K)`.
#[inline]
pub fn sub_start(j: u64, window_ms: u64) -> u64 {
    if let Some(x) = j.checked_mul(window_ms) {
        return x.div_ceil(K);
    }
    let s = (u128::from(j) * u128::from(window_ms)).div_ceil(u128::from(K));
    u64::try_from(s).unwrap_or(u64::MAX)
}

/// A past sub-window's count as stored: the smallest representable value
/// at or above `c` (exact below 512, within 1/256 above).
pub fn quantize(c: u32) -> u32 {
    decode_count(encode_count(c))
}

/// 12-bit code of the smallest representable value at or above `c`
/// (`c <= 65_535`, as every stored count is): a code below 512 is its own
/// value; a code with exponent field `e >= 2` (bits 8..12) and mantissa `m`
/// (bits 0..8) stands for `(256 + m) << (e - 1)`.
pub fn encode_count(c: u32) -> u16 {
    if c < EXACT {
        return c as u16;
    }
    debug_assert!(c <= 1 << 20);
    let c = c.min(1 << 20);
    // c >= 512: shift s >= 1 so that ceil(c / 2^s) lies in [256, 512].
    let mut s = (32 - c.leading_zeros()) - (MANT_BITS + 1);
    let mut m = c.div_ceil(1 << s);
    if m == EXACT {
        m >>= 1;
        s += 1;
    }
    (((s + 1) << MANT_BITS) | (m - (1 << MANT_BITS))) as u16
}

/// The value of a 12-bit count code (see [`encode_count`]).
pub fn decode_count(code: u16) -> u32 {
    let code = u32::from(code);
    let e = code >> MANT_BITS;
    if e <= 1 {
        return code;
    }
    ((1 << MANT_BITS) + (code & ((1 << MANT_BITS) - 1))) << (e - 1)
}

/// A key's strict state: the counts of its last [`SPAN`] sub-windows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct State {
    /// Full sub-window index of `counts[0]` (0 with all counts 0: none).
    pub index: u64,
    /// `counts[i]`: requests admitted in sub-window `index - i`, in requests
    /// (exact for `i = 0`, rounded up as [`quantize`] does for `i > 0`).
    pub counts: [u32; SPAN],
}

impl State {
    /// No request counted.
    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|&c| c == 0)
    }

    /// The sum of the counts, in requests (requests in sub-windows
    /// `index - 6 ..= index`).
    pub fn total(&self) -> u32 {
        self.counts.iter().fold(0u32, |a, &c| a.saturating_add(c))
    }

    /// The state seen from sub-window `j >= index`: counts shifted by
    /// `j - index`, those leaving the span dropped, past counts rounded up.
    /// A `j` before `index` returns the state unchanged.
    pub fn at(&self, j: u64) -> State {
        if self.is_empty() {
            return State {
                index: j,
                counts: [0; SPAN],
            };
        }
        if j <= self.index {
            return *self;
        }
        let d = j - self.index;
        let mut counts = [0; SPAN];
        if d < SPAN as u64 {
            let d = d as usize;
            for (to, &from) in counts[d..].iter_mut().zip(&self.counts) {
                *to = quantize(from);
            }
        }
        State { index: j, counts }
    }
}

/// The answer of [`decide`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Judgement {
    /// Admitted (and counted in `state`).
    pub admitted: bool,
    /// The key's state after the decision.
    pub state: State,
    /// Requests in the span before this one.
    pub total: u32,
    /// Requests that would still be admitted right now, back to back.
    pub remaining: u32,
    /// Smallest delay in ms after which one more request is admitted, with
    /// no other traffic (0 when admitted; see [`retry_after_ms`]).
    pub retry_after_ms: u64,
    /// Delay in ms until every counted request has left the span, so that
    /// the full limit is available again.
    pub reset_ms: u64,
    /// The request's sub-window was older than the key's newest one: it
    /// was decided at the start of that one.
    pub backwards: bool,
}

/// The effective sub-window and time of a request at `now_ms` for `state`:
/// never before the key's newest sub-window.
fn effective(state: &State, now_ms: u64, window_ms: u64) -> (u64, u64, bool) {
    let j = sub_index(now_ms, window_ms);
    if !state.is_empty() && j < state.index {
        (state.index, sub_start(state.index, window_ms), true)
    } else {
        (j, now_ms, false)
    }
}

/// Decides one request at `now_ms` (epoch ms) against `limit` requests per
/// `window_ms`, counting it in the returned state if admitted.
pub fn decide(state: State, now_ms: u64, window_ms: u64, limit: u32) -> Judgement {
    decide_cost(state, now_ms, window_ms, limit, 1)
}

/// [`decide`] for a request that counts `cost` requests (0 counts as 1):
/// admitted iff the span plus `cost` stays at or below `limit`, then
/// counted `cost` times; Retry-After is the wait until the whole cost fits
/// (a window when it never can: `cost > limit`).
pub fn decide_cost(state: State, now_ms: u64, window_ms: u64, limit: u32, cost: u32) -> Judgement {
    let (j, t, backwards) = effective(&state, now_ms, window_ms);
    let mut s = state.at(j);
    let total = s.total();
    let limit = limit.min(MAX_STRICT_LIMIT);
    let cost = cost.max(1);
    let admitted = u64::from(total) + u64::from(cost) <= u64::from(limit);
    if admitted {
        s.counts[0] += cost;
    }
    let remaining = limit.saturating_sub(s.total());
    let retry = if admitted {
        0
    } else {
        retry_after_at(&s, j, t, window_ms, limit, cost).saturating_add(t - now_ms.min(t))
    };
    Judgement {
        admitted,
        state: s,
        total,
        remaining,
        retry_after_ms: retry,
        reset_ms: reset_at(&s, t, window_ms).saturating_add(t - now_ms.min(t)),
        backwards,
    }
}

/// The smallest delay in ms after `now_ms` at which one more request is
/// admitted, with no other traffic (0 if admitted now). Exact: admission
/// is monotone in the delay (counts only leave the span). With
/// `limit == 0` nothing is ever admitted: returns the window length.
pub fn retry_after_ms(state: &State, now_ms: u64, window_ms: u64, limit: u32) -> u64 {
    let (j, t, _) = effective(state, now_ms, window_ms);
    let s = state.at(j);
    let limit = limit.min(MAX_STRICT_LIMIT);
    if s.total() < limit {
        return 0;
    }
    retry_after_at(&s, j, t, window_ms, limit, 1).saturating_add(t - now_ms.min(t))
}

/// The wait in ms after `now_ms` until `cost` more requests fit, with no
/// other traffic (`Some(0)`: now); `None` when they never can (a limit of
/// 0, or a cost above it). Exact, as [`retry_after_ms`]; the rule of
/// [`decide_cost`]'s Retry-After.
pub fn retry_after_cost_ms(
    state: &State,
    now_ms: u64,
    window_ms: u64,
    limit: u32,
    cost: u32,
) -> Option<u64> {
    let limit = limit.min(MAX_STRICT_LIMIT);
    let cost = cost.max(1);
    if limit == 0 || cost > limit {
        return None;
    }
    let (j, t, _) = effective(state, now_ms, window_ms);
    let s = state.at(j);
    if s.total() + cost <= limit {
        return Some(0);
    }
    Some(retry_after_at(&s, j, t, window_ms, limit, cost).saturating_add(t - now_ms.min(t)))
}

/// [`retry_after_ms`] for a state already at sub-window `j`, from time `t`,
/// until `cost` more requests fit.
fn retry_after_at(s: &State, j: u64, t: u64, window_ms: u64, limit: u32, cost: u32) -> u64 {
    if limit == 0 || cost > limit {
        return window_ms;
    }
    for d in 1..=SPAN as u64 {
        if s.at(j + d).total() + cost <= limit {
            return sub_start(j + d, window_ms).saturating_sub(t);
        }
    }
    unreachable!("an empty span admits any positive limit")
}

/// Delay in ms from `t` until every count of `s` has left the span (the
/// full limit is available again); a window when nothing is counted.
fn reset_at(s: &State, t: u64, window_ms: u64) -> u64 {
    match s.counts.iter().position(|&c| c != 0) {
        Some(i) => sub_start(s.index - i as u64 + SPAN as u64, window_ms).saturating_sub(t),
        None => window_ms,
    }
}

/// Two states of one key added up (a key found in two slots after a racing
/// insert), at the later of their sub-windows: each count is the sum of the
/// two counts of its sub-window (the current one saturating at 65,535,
/// past ones rounded up).
pub fn merge(a: &State, b: &State) -> State {
    let index = a.index.max(b.index);
    let (a, b) = (a.at(index), b.at(index));
    let mut s = State {
        index,
        counts: [0; SPAN],
    };
    for (i, c) in s.counts.iter_mut().enumerate() {
        let sum = a.counts[i].saturating_add(b.counts[i]);
        *c = if i == 0 {
            sum.min(u32::from(u16::MAX))
        } else {
            quantize(sum.min(MAX_STRICT_LIMIT))
        };
    }
    s
}

/// Whole seconds, rounded up.
pub fn secs_ceil(ms: u64) -> u32 {
    u32::try_from(ms.div_ceil(1000)).unwrap_or(u32::MAX)
}

/// Packs a fingerprint (low [`FP_BITS`] bits of `fp`, nonzero for a used
/// slot) and a state into one 128-bit word:
///
/// ```text
/// bits 104..128 fingerprint (24 bits)   bit 103 spare (0, see [`SPARE_SHIFT`])
/// bits 88..103  sub-window index mod 2^15
/// bits 16..88   counts[1..7], 12-bit codes (counts[1] lowest)
/// bits 0..16    counts[0], exact (saturating at 65,535)
/// ```
pub fn pack(fp: u64, s: &State) -> u128 {
    let mut v = u128::from(fp & ((1 << FP_BITS) - 1)) << FP_SHIFT;
    v |= u128::from(s.index & SUB_MASK) << SUB_SHIFT;
    for i in 1..SPAN {
        let code = u128::from(encode_count(s.counts[i]));
        v |= code << (PAST_SHIFT + (i as u32 - 1) * CODE_BITS);
    }
    v | u128::from(s.counts[0].min(u32::from(u16::MAX)))
}

/// The fingerprint of a packed word (0: never used).
#[inline]
pub fn packed_fp(v: u128) -> u64 {
    (v >> FP_SHIFT) as u64
}

/// The sub-window index of a packed word, mod 2^15.
#[inline]
pub fn packed_sub(v: u128) -> u64 {
    (v >> SUB_SHIFT) as u64 & SUB_MASK
}

/// Whether a packed word holds no count.
#[inline]
pub fn packed_empty(v: u128) -> bool {
    v & ((1u128 << SUB_SHIFT) - 1) == 0
}

/// The state of a packed word whose full sub-window index is `index`
/// (the caller resolves the stored index mod 2^15 against its clock).
pub fn unpack(v: u128, index: u64) -> State {
    let mut counts = [0u32; SPAN];
    counts[0] = (v & 0xffff) as u32;
    for (i, c) in counts.iter_mut().enumerate().skip(1) {
        let code = (v >> (PAST_SHIFT + (i as u32 - 1) * CODE_BITS)) as u64 & CODE_MASK;
        *c = decode_count(code as u16);
    }
    State { index, counts }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_up_within_bounds() {
        let mut last = 0;
        for c in 0..=200_000u32 {
            let q = quantize(c);
            assert!(q >= c, "{c} -> {q}");
            assert!(q >= last, "monotone at {c}");
            last = q;
            if c < 512 {
                assert_eq!(q, c);
            } else {
                assert!(u64::from(q - c) * 256 <= u64::from(c), "{c} -> {q}");
            }
            assert_eq!(quantize(q), q, "representable values are fixed points");
            assert!(u64::from(encode_count(c)) <= CODE_MASK);
        }
    }

    #[test]
    fn sub_windows_tile_the_timeline() {
        for w in [1_000u64, 1_001, 7_777, 10_000, 60_000, 86_400_000] {
            for j in [0u64, 1, 5, 6, 7, 1_000_003, 2_000_000_000] {
                let s = sub_start(j, w);
                assert_eq!(sub_index(s, w), j, "w={w} j={j}");
                assert_eq!(sub_index(s - u64::from(j > 0), w), j - u64::from(j > 0));
                assert!(sub_start(j + 6, w) - s <= w);
            }
        }
    }

    #[test]
    fn u64_paths_match_u128() {
        for (t, w) in [
            (u64::MAX, 1_000u64),
            (u64::MAX / 6 + 1, 7_777),
            (1_767_225_600_123, 10_000),
        ] {
            let exact = (u128::from(t) * 6 / u128::from(w)) as u64;
            assert_eq!(sub_index(t, w), exact);
        }
        for (j, w) in [(u64::MAX / 3, 86_400_000u64), (12_345, 10_000)] {
            let exact = (u128::from(j) * u128::from(w)).div_ceil(6);
            assert_eq!(u128::from(sub_start(j, w)), exact.min(u128::from(u64::MAX)));
        }
    }

    #[test]
    fn pack_round_trip() {
        let s = State {
            index: 0x1_2345,
            counts: [65_535, 511, 512, 1_000, 65_535, 0, 7],
        };
        let v = pack(0xab_cdef, &s);
        assert_eq!(packed_fp(v), 0xab_cdef);
        assert_eq!(packed_sub(v), 0x2345);
        // Index bit 15 does not reach the spare bit.
        let high = pack(0xab_cdef, &State { index: 0xa345, ..s });
        assert_eq!((packed_sub(high), high >> SPARE_SHIFT & 1), (0x2345, 0));
        let back = unpack(v, s.index);
        for i in 0..SPAN {
            assert_eq!(
                back.counts[i],
                if i == 0 {
                    65_535
                } else {
                    quantize(s.counts[i])
                }
            );
        }
        assert!(!packed_empty(v));
        assert!(packed_empty(pack(5, &State::default())));
    }

    #[test]
    fn boundary_burst_gets_ten_then_zero() {
        let w = 10_000;
        let b = 1_767_225_600_000; // a window boundary
        let mut s = State::default();
        let mut n = 0;
        for _ in 0..10 {
            let v = decide(s, b - 500, w, 10);
            n += u32::from(v.admitted);
            s = v.state;
        }
        assert_eq!(n, 10);
        let mut retry = 0;
        for _ in 0..10 {
            let v = decide(s, b + 9_000, w, 10);
            assert!(!v.admitted);
            assert_eq!(v.remaining, 0);
            retry = v.retry_after_ms;
            s = v.state;
        }
        assert_eq!(retry, 1_000);
        assert!(!decide(s, b + 9_999, w, 10).admitted);
        assert!(decide(s, b + 9_000 + retry, w, 10).admitted);
    }

    #[test]
    fn clock_behind_is_counted_in_the_newest_sub_window() {
        let w = 6_000;
        let s = decide(State::default(), 60_000, w, 3).state;
        let v = decide(s, 58_000, w, 3);
        assert!(v.backwards && v.admitted);
        assert_eq!(v.state.index, 60);
        assert_eq!(v.state.counts[0], 2);
        let full = decide(v.state, 60_500, w, 3).state;
        let r = decide(full, 59_000, w, 3);
        assert!(!r.admitted);
        // Leaves the span at sub-window 67 = 67_000 ms: 8 s from 59_000.
        assert_eq!(r.retry_after_ms, 8_000);
    }

    #[test]
    fn limit_zero_never_admits() {
        let v = decide(State::default(), 5_000, 1_000, 0);
        assert!(!v.admitted);
        assert_eq!(v.retry_after_ms, 1_000);
    }
}
