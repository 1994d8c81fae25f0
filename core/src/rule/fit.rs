//! The one rule for "when does this request, whole cost included, fit?".
//!
//! A request of cost `c` fits when `c` requests sent back to back would all
//! be admitted: in the sliding-window estimate, when
//! `current*W + previous*(W - elapsed) + (c - 1)*W < limit*W`, i.e. when a
//! single request fits under the [`effective_limit`] `limit + 1 - c`; in a
//! strict zone, when the span's total plus `c` stays at or below `limit`.
//! The table's admission, Retry-After (headers and variables), and
//! `delay=`'s hold all ask this module, so they cannot drift apart.

use crate::rule::strict;
use crate::rule::window::{self, Counts, Window};

/// The limit under which one request is admitted exactly when a request
/// of `cost` (0 counts as 1) is admitted under `limit`: `limit + 1 - cost`
/// (0 when the cost is above the limit: it never fits).
#[inline(always)]
pub fn effective_limit(limit: u32, cost: u32) -> u32 {
    limit.saturating_add(1).saturating_sub(cost.max(1))
}

/// Wait in ms until a request of `cost` fits in a sliding-window key with
/// `counts` at `elapsed_ms` into a window of `window_ms`, with no other
/// traffic (`Some(0)`: it fits now); `None`: never (a limit of 0, or a
/// cost above the limit). Exact: it fits at `now + wait`, not a ms before.
pub fn wait_ms(
    counts: Counts,
    elapsed_ms: u64,
    window_ms: u64,
    limit: u32,
    cost: u32,
) -> Option<u64> {
    wait_ms_effective(counts, elapsed_ms, window_ms, effective_limit(limit, cost))
}

/// [`wait_ms`] for a limit already made [`effective_limit`].
pub fn wait_ms_effective(
    counts: Counts,
    elapsed_ms: u64,
    window_ms: u64,
    effective: u32,
) -> Option<u64> {
    (effective > 0).then(|| window::retry_after_ms(counts, elapsed_ms, window_ms, effective))
}

/// Wait in ms until a request of `cost` fits in a strict key in `state`
/// at `now_ms` under `limit` per `window_ms`; `None`: never.
pub fn strict_wait_ms(
    state: &strict::State,
    now_ms: u64,
    window_ms: u64,
    limit: u32,
    cost: u32,
) -> Option<u64> {
    strict::retry_after_cost_ms(state, now_ms, window_ms, limit, cost.max(1))
}

/// Wait in ms until the turn of a request of `cost` held behind `ahead`
/// requests of its client (each of the same cost), with no other traffic:
/// each one before it admitted at the first ms it fits, then this one
/// ([`wait_ms`] for `ahead = 0`); `None`: never.
pub fn turn_ms(
    counts: Counts,
    elapsed_ms: u64,
    window_ms: u64,
    limit: u32,
    cost: u32,
    ahead: u32,
) -> Option<u64> {
    let (mut c, mut e, mut t) = (counts, elapsed_ms.min(window_ms - 1), 0u64);
    for n in 0..=ahead {
        let w = wait_ms(c, e, window_ms, limit, cost)?;
        t += w;
        if n == ahead {
            break;
        }
        // Move `w` ms on, then count the admission.
        let to = e + w;
        (c, e) = match to / window_ms {
            0 => (c, to),
            1 => (
                Counts {
                    current: 0,
                    previous: c.current,
                },
                to - window_ms,
            ),
            _ => (Counts::default(), to % window_ms),
        };
        c.current = c.current.saturating_add(cost.max(1));
    }
    Some(t)
}

/// [`turn_ms`] for `counts` of the window that starts at `start_ms`, read
/// at `now_ms`: exact also when the clock is behind that window (another
/// worker's clock ahead, a step back), where the counts stay as they are
/// until the window starts; `None`: never.
pub fn turn_at(
    counts: Counts,
    start_ms: u64,
    now_ms: u64,
    window_ms: u64,
    limit: u32,
    cost: u32,
    ahead: u32,
) -> Option<u64> {
    let lead = start_ms.saturating_sub(now_ms);
    if lead == 0 {
        let e = (now_ms - start_ms).min(window_ms - 1);
        return turn_ms(counts, e, window_ms, limit, cost, ahead);
    }
    let mut c = counts;
    for n in 0..=ahead {
        if wait_ms(c, 0, window_ms, limit, cost)? > 0 {
            // The rest of the queue from the window's start.
            return turn_ms(c, 0, window_ms, limit, cost, ahead - n).map(|t| t + lead);
        }
        c.current = c.current.saturating_add(cost.max(1));
    }
    Some(0)
}

/// [`turn_at`] for a calendar window (`calendar=`): `current` requests
/// counted in the period of the table's window `window_index` of `window`,
/// read at `now_ms`, with `ahead` requests of the client's held before
/// this one (each of the same `cost`, each admitted at the first moment it
/// fits). A period takes `limit / cost` of them (the first one what its
/// count leaves room for), so the request fits now, or at the start of the
/// period that has room for it; never when `cost` is above `limit`.
pub fn calendar_turn(
    (window, window_index): (Window, u64),
    current: u32,
    now_ms: u64,
    limit: u32,
    cost: u32,
    ahead: u32,
) -> Option<u64> {
    let (cost, limit) = (u64::from(cost.max(1)), u64::from(limit));
    if cost > limit {
        return None;
    }
    let here = limit.saturating_sub(u64::from(current)) / cost;
    let i = u64::from(ahead);
    if i < here {
        return Some(0);
    }
    // The j-th period after this one (1: the next).
    let j = (i - here) / (limit / cost) + 1;
    let start = window.start_ms(window_index.saturating_add(2 * j));
    Some(start.saturating_sub(now_ms).max(1))
}

/// [`turn_ms`] for a strict key in `state` at `now_ms`.
pub fn strict_turn_ms(
    state: &strict::State,
    now_ms: u64,
    window_ms: u64,
    limit: u32,
    cost: u32,
    ahead: u32,
) -> Option<u64> {
    let (mut s, mut t) = (*state, now_ms);
    for n in 0..=ahead {
        t += strict_wait_ms(&s, t, window_ms, limit, cost)?;
        if n < ahead {
            s = strict::decide_cost(s, t, window_ms, limit, cost).state;
        }
    }
    Some(t - now_ms)
}

/// Retry-After in whole seconds (rounded up) for a wait: a request that
/// never fits is told to come back after a window, as before.
pub fn retry_after_secs(wait_ms: Option<u64>, window_ms: u64) -> u32 {
    let ms = wait_ms.unwrap_or(window_ms);
    u32::try_from(ms.div_ceil(1000)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::window::admits;

    /// Whether `cost` requests back to back are all admitted: the rule
    /// spelled out one request at a time.
    fn fits(c: Counts, e: u64, w: u64, limit: u32, cost: u32) -> bool {
        (0..cost.max(1)).all(|k| {
            let c = Counts {
                current: c.current + k,
                previous: c.previous,
            };
            admits(c, e, w, limit)
        })
    }

    #[test]
    fn whole_cost_in_a_sixty_second_window() {
        // limit=10 cost=4, 8 counted, 10 s into a 60 s window: the whole
        // cost fits x ms into the next window when 8*(W-x) + 3*W < 10*W,
        // i.e. x > W/8 = 7.5 s.
        let w = 60_000;
        let c = Counts {
            current: 8,
            previous: 0,
        };
        let wait = wait_ms(c, 10_000, w, 10, 4).unwrap();
        assert_eq!(wait, 50_000 + 7_501);
        assert!(fits(
            Counts {
                current: 0,
                previous: 8
            },
            7_501,
            w,
            10,
            4
        ));
        assert!(!fits(
            Counts {
                current: 0,
                previous: 8
            },
            7_500,
            w,
            10,
            4
        ));
        // One request fits now; the whole cost does not.
        assert_eq!(wait_ms(c, 10_000, w, 10, 1), Some(0));
        assert_eq!(wait_ms(c, 10_000, w, 10, 11), None);
        assert_eq!(wait_ms(c, 10_000, w, 0, 1), None);
        assert_eq!(retry_after_secs(None, w), 60);
        assert_eq!(retry_after_secs(Some(57_501), w), 58);
    }

    #[test]
    fn exact_against_the_rule_one_request_at_a_time() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            let r = crate::testing::reference::xorshift(&mut s);
            let w = [1_000, 2_000, 60_000, 7_919][(r % 4) as usize];
            let limit = (r >> 8) as u32 % 12;
            let cost = 1 + (r >> 16) as u32 % 13;
            let c = Counts {
                current: (r >> 24) as u32 % 14,
                previous: (r >> 32) as u32 % 14,
            };
            let e = (r >> 40) % w;
            match wait_ms(c, e, w, limit, cost) {
                None => assert!(limit == 0 || cost > limit),
                Some(0) => assert!(fits(c, e, w, limit, cost)),
                Some(d) => {
                    let at = |t: u64| {
                        // The counts seen `t` ms later, with no traffic.
                        let to = e + t;
                        match to / w {
                            0 => (c, to),
                            1 => (
                                Counts {
                                    current: 0,
                                    previous: c.current,
                                },
                                to - w,
                            ),
                            _ => (Counts::default(), to % w),
                        }
                    };
                    let (c1, e1) = at(d);
                    assert!(
                        fits(c1, e1, w, limit, cost),
                        "{c:?} {e} {w} {limit} {cost} {d}"
                    );
                    let (c0, e0) = at(d - 1);
                    assert!(
                        !fits(c0, e0, w, limit, cost),
                        "{c:?} {e} {w} {limit} {cost} {d}"
                    );
                }
            }
        }
    }
}
