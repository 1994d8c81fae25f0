//! Queue or drop: the pure part of `rate_limit_window ... delay=TIME`.
//!
//! A request that a limit rejects, but that would be admitted after a wait
//! of at most `delay`, is held (on an nginx timer, in the glue) and decided
//! again when the wait is over. This module computes that wait and the
//! plan (admit, hold, reject) from the limits' counts; it never reads a
//! clock and holds no state.
//!
//! With several limits the request waits for the longest of their waits,
//! and each limit that rejects it bounds the total wait by its own `delay`:
//! `waited + wait_i <= delay_i` for every limit `i` with a wait. Nothing is
//! counted while a request waits: the glue acquires every limit only when
//! the plan is [`Plan::Admit`], and gives back the ones it took if a later
//! limit rejects.

/// Longest accepted `delay=` (ms): one hour. A held request keeps a client
/// connection open, so a longer wait is better answered with a 429 and
/// Retry-After.
pub const MAX_DELAY_MS: u64 = 3_600_000;

/// Held requests per location and worker when `delay_max_held=` is not
/// given. A held request keeps its client connection (and, once admitted,
/// opens an upstream one); 128 is a quarter of nginx's default
/// `worker_connections` (512), so a flood held in one location leaves most
/// of a worker's connections to everyone else.
pub const DEFAULT_MAX_HELD: u32 = 128;

/// Largest accepted `delay_max_held=` (held requests per worker).
pub const MAX_MAX_HELD: u32 = 1_000_000;

/// One limit of the location as seen now, for the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitWait {
    /// Wait (ms) until this limit admits the request, whole cost included
    /// ([`crate::rule::fit`]); `None`: never (a limit of 0, a cost above the
    /// limit, or a zone full under `fail=closed`).
    pub wait_ms: Option<u64>,
    /// The limit's `delay=` (ms).
    pub delay_ms: u64,
}

impl LimitWait {
    /// A limit whose exact wait until the request, whole cost included,
    /// fits is `wait_ms` (ms; `None`: never), as [`crate::rule::fit`] computes it
    /// in either mode. `rejected_now`: the table has just rejected the
    /// request under this limit, so it waits at least 1 ms even if the
    /// counts, read a moment later, say otherwise (another worker's request
    /// took the room, or gave it back, in between).
    pub fn from_wait(wait_ms: Option<u64>, delay_ms: u64, rejected_now: bool) -> LimitWait {
        let wait_ms = wait_ms.map(|w| if rejected_now { w.max(1) } else { w });
        LimitWait { wait_ms, delay_ms }
    }

    /// A limit that can never admit the request (limit 0, zone full).
    pub fn never(delay_ms: u64) -> LimitWait {
        LimitWait {
            wait_ms: None,
            delay_ms,
        }
    }
}

/// The fair queue of held requests, per client (a limit's key):
///
/// * a request newly held behind `ahead` requests of its client that are
///   held already waits for its own turn ([`crate::rule::fit::turn_ms`]: each
///   one before it admitted at the first ms it fits), so held requests wake
///   in order and about once per admission, not all at the same ms;
/// * a request whose turn does not come within `delay` is refused at once:
///   a client holds at most what can be admitted within `delay` (as
///   `limit_req`'s per-key `burst`), so one client's flood leaves the rest
///   of `delay_max_held` to others' delayable requests (a client whose
///   share is larger than the cap can still fill it);
/// * a request woken and held again (another request took the room) goes
///   back with `ahead = 0`: it has waited longest.
///
/// What to do with a request, given every limit's wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Every limit admits it now: acquire them.
    Admit,
    /// Hold it and decide again after `wait_ms` ms (the longest wait).
    Hold {
        /// Time to wait before deciding again (ms, at least 1).
        wait_ms: u64,
    },
    /// A limit never admits it, or its wait does not fit in that limit's
    /// `delay` after `waited_ms`: reject with the usual status.
    Reject,
}

/// The plan for a request that has already waited `waited_ms` ms (0 on its
/// first decision): hold it for the longest wait if every limit that makes
/// it wait allows the total (`waited + wait <= delay`), admit it if none
/// does, reject it otherwise.
pub fn plan(limits: &[LimitWait], waited_ms: u64) -> Plan {
    let mut longest = 0;
    for l in limits {
        match l.wait_ms {
            None => return Plan::Reject,
            Some(0) => {}
            Some(w) if waited_ms.saturating_add(w) > l.delay_ms => return Plan::Reject,
            Some(w) => longest = longest.max(w),
        }
    }
    if longest == 0 {
        Plan::Admit
    } else {
        Plan::Hold { wait_ms: longest }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::fit;
    use crate::rule::window::{admits, Counts};

    /// A limit's wait for a request of cost 1, by the one rule.
    fn of(c: Counts, e: u64, w: u64, limit: u32, delay: u64, rejected_now: bool) -> LimitWait {
        LimitWait::from_wait(fit::wait_ms(c, e, w, limit, 1), delay, rejected_now)
    }

    const W: u64 = 2_000;

    fn counts(current: u32, previous: u32) -> Counts {
        Counts { current, previous }
    }

    fn wait(w: u64, delay: u64) -> LimitWait {
        LimitWait {
            wait_ms: Some(w),
            delay_ms: delay,
        }
    }

    #[test]
    fn admitted_now_means_no_wait() {
        let l = of(counts(3, 0), 100, W, 5, 0, false);
        assert_eq!(l.wait_ms, Some(0));
        assert_eq!(plan(&[l], 0), Plan::Admit);
    }

    #[test]
    fn full_window_waits_for_the_next_one() {
        // 5 of 5 at 300 ms into a 2 s window: the next window starts in
        // 1700 ms, and 1 ms into it the previous 5 weigh 5*(W-1)/W < 5.
        let l = of(counts(5, 0), 300, W, 5, 2_000, true);
        assert_eq!(l.wait_ms, Some(1_701));
        assert_eq!(plan(&[l], 0), Plan::Hold { wait_ms: 1_701 });
        // The wait is exact: admitted then, not 1 ms before.
        assert!(!admits(counts(0, 5), 0, W, 5));
        assert!(admits(counts(0, 5), 1, W, 5));
    }

    #[test]
    fn delay_bounds_the_wait() {
        let l = of(counts(5, 0), 300, W, 5, 1_700, true);
        assert_eq!(plan(&[l], 0), Plan::Reject);
        let l = of(counts(5, 0), 300, W, 5, 1_701, true);
        assert_eq!(plan(&[l], 0), Plan::Hold { wait_ms: 1_701 });
        // delay=0 (the default) never holds.
        let l = of(counts(5, 0), 300, W, 5, 0, true);
        assert_eq!(plan(&[l], 0), Plan::Reject);
    }

    #[test]
    fn time_already_waited_counts_against_the_delay() {
        // Held 1701 ms, then another request took the room: the next room
        // is W/5 later; it fits a 2 s delay only if waited + wait <= 2000.
        let again = wait(299, 2_000);
        assert_eq!(plan(&[again], 1_701), Plan::Hold { wait_ms: 299 });
        let again = wait(400, 2_000);
        assert_eq!(plan(&[again], 1_701), Plan::Reject);
    }

    #[test]
    fn several_limits_wait_for_the_longest() {
        let limits = [wait(0, 0), wait(300, 1_000), wait(900, 5_000)];
        assert_eq!(plan(&limits, 0), Plan::Hold { wait_ms: 900 });
        // The total is bounded by each waiting limit's own delay.
        let limits = [wait(300, 1_000), wait(1_200, 5_000)];
        assert_eq!(plan(&limits, 0), Plan::Hold { wait_ms: 1_200 });
        assert_eq!(plan(&limits, 800), Plan::Reject);
        // One limit without a delay that must wait: rejected at once.
        let limits = [wait(100, 0), wait(900, 5_000)];
        assert_eq!(plan(&limits, 0), Plan::Reject);
        // Every limit admits: admit.
        assert_eq!(plan(&[wait(0, 0), wait(0, 9)], 5_000), Plan::Admit);
        assert_eq!(plan(&[], 0), Plan::Admit);
    }

    #[test]
    fn waits_computed_elsewhere_plan_the_same_way() {
        let strict = LimitWait::from_wait(Some(0), 2_000, true);
        assert_eq!(strict.wait_ms, Some(1));
        let strict = LimitWait::from_wait(Some(1_500), 2_000, false);
        assert_eq!(plan(&[strict], 0), Plan::Hold { wait_ms: 1_500 });
        assert_eq!(plan(&[strict], 600), Plan::Reject);
        let never = LimitWait::from_wait(None, 2_000, true);
        assert_eq!(plan(&[never], 0), Plan::Reject);
    }

    #[test]
    fn never_is_rejected_whatever_the_delay() {
        let zero = of(counts(0, 0), 0, W, 0, MAX_DELAY_MS, true);
        assert_eq!(zero.wait_ms, None);
        assert_eq!(plan(&[wait(10, 1_000), zero], 0), Plan::Reject);
        assert_eq!(plan(&[LimitWait::never(MAX_DELAY_MS)], 0), Plan::Reject);
    }

    #[test]
    fn a_rejection_waits_at_least_one_ms() {
        // Counts read after the table rejected say "admitted now" (another
        // worker gave the room back in between): retry in 1 ms, not spin.
        let l = of(counts(4, 0), 0, W, 5, 10, true);
        assert_eq!(l.wait_ms, Some(1));
        assert_eq!(plan(&[l], 0), Plan::Hold { wait_ms: 1 });
    }

    #[test]
    fn a_queue_wakes_once_per_admission_and_refuses_past_the_delay() {
        // limit=2 per 2 s, delay=10s: 2 admitted at 100 ms, then 28 more
        // of one client at once. Each is planned for its turn behind the
        // ones held before it; those whose turn is past the delay are
        // refused at once.
        let (limit, delay, start) = (2u32, 10_000u64, 100u64);
        let mut turns = vec![];
        for ahead in 0..28 {
            let c = counts(limit, 0);
            let w = fit::turn_ms(c, start % W, W, limit, 1, ahead);
            match plan(&[LimitWait::from_wait(w, delay, true)], 0) {
                Plan::Hold { wait_ms } => turns.push(start + wait_ms),
                Plan::Reject => break,
                Plan::Admit => panic!("a full window admits nothing"),
            }
        }
        // The share: what can be admitted within the delay.
        assert!(
            (8..=11).contains(&turns.len()),
            "{} turns: {turns:?}",
            turns.len()
        );
        // Woken in order, each at the first ms it fits once those before
        // it were admitted: one wake per admission, none held again.
        let mut log: Vec<u64> = vec![start, start];
        for (k, &t) in turns.iter().enumerate() {
            assert!(k == 0 || t > turns[k - 1], "{turns:?}");
            let (idx, e) = (t / W, t % W);
            let count_in = |i: u64| log.iter().filter(|&&a| a / W == i).count() as u32;
            let c = Counts {
                current: count_in(idx),
                previous: count_in(idx.wrapping_sub(1)),
            };
            assert_eq!(fit::wait_ms(c, e, W, limit, 1), Some(0), "turn {k} at {t}");
            log.push(t);
        }
    }

    #[test]
    fn held_requests_are_admitted_at_the_algorithms_pace() {
        // A burst of limit + 3 at 100 ms into a window: the three extra
        // requests, each re-planned when woken, are admitted at the earliest
        // moments the sliding window allows, and never more than the limit.
        let (limit, start) = (5u32, 100u64);
        let mut c = counts(limit, 0);
        let mut now = start;
        let mut admitted_at = vec![];
        for _ in 0..3 {
            let (idx, e) = (now / W, now % W);
            let l = of(c, e, W, limit, 5_000, true);
            let Plan::Hold { wait_ms } = plan(&[l], now - start) else {
                panic!("expected a hold at {now}");
            };
            now += wait_ms;
            if now / W != idx {
                c = counts(0, c.current);
            }
            assert!(admits(c, now % W, W, limit));
            assert!(!admits(c, now % W - 1, W, limit) || wait_ms == 0);
            c.current += 1;
            admitted_at.push(now);
        }
        // W/limit = 400 ms apart after the boundary at 2000 (+1 ms).
        assert_eq!(admitted_at, [2_001, 2_401, 2_801]);
    }
}
