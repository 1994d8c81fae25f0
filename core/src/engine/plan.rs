//! What follows a rejection: the longest wait of the other limits
//! (Retry-After), and `delay=`'s plan (hold until the whole cost fits,
//! refuse a client over its share, or reject), all by the one rule of
//! [`crate::rule::fit`].

use super::{quiet_limit, Ask, Hold, Quiet, Rejecting, Request};
use crate::rule::delay::{plan, LimitWait, Plan};
use crate::rule::fit;
use crate::rule::window::Counts;
use crate::table::{KeyHash, Outcome, Table};

/// The longest Retry-After (whole seconds) among the limits from `from`
/// on, read without counting anything: the retry must fit under them too.
pub(super) fn longest_wait<'t, R: Request<'t>>(r: &mut R, from: usize, now: u64) -> u32 {
    let mut longest = 0;
    for n in from..r.limits() {
        let Some(c) = r.conf(n) else {
            continue;
        };
        match quiet_limit(r, n, &c, now) {
            Some(Quiet::Limit(hash, limit, cost)) => {
                longest = longest.max(c.table.retry_after_secs(hash, now, limit, cost));
            }
            Some(Quiet::Blocked(secs)) => longest = longest.max(secs),
            None => {}
        }
    }
    longest
}

/// What becomes of a rejected request under `delay=`.
pub(super) enum OnReject {
    /// Held (the glue armed its timer).
    Hold(Hold),
    /// Dry run: it would have been held.
    WouldHold(Hold),
    /// Rejected: `share_full` when its client's share of the queue is full
    /// (requests held before it, and the whole seconds until its turn
    /// behind them under every limit).
    Reject { share_full: Option<(u32, u32)> },
}

/// Plans a rejected request whose admissions were given back: each
/// limit's wait until its turn (behind `ahead` requests of its client held
/// before it; none for one held again, it has waited longest), bounded by
/// each limit's `delay`.
pub(super) fn on_reject<'t, R: Request<'t>>(
    r: &mut R,
    ask: &Ask,
    rej: &Rejecting,
    now: u64,
) -> OnReject {
    let reject = OnReject::Reject { share_full: None };
    let delays = (0..r.limits()).any(|n| r.conf(n).is_some_and(|c| c.delay_ms > 0));
    if !delays {
        return reject;
    }
    let since = r.held_since();
    let waited = since.map_or(0, |s| now.saturating_sub(s));
    let client = rej.hash.0;
    // A request held for the first time takes its turn in the zone's queue
    // now, shared by every worker: the ticket is how many of its client's
    // requests are held before it. One held again has waited longest: none.
    // Turns are held under this process's owner (its pid), as places are.
    let turns = r.shared(rej.index).turns.zip(r.owner(rej.index));
    let (ahead, taken) = match (since, turns) {
        (None, Some((t, o))) if !ask.dry_run => match t.take(o, client) {
            Some((turn, ahead)) => (ahead, Some((t, turn))),
            None => return reject,
        },
        (None, Some((t, _))) => (t.held(client), None),
        _ => (0, None),
    };
    let give_back = || {
        if let Some((t, turn)) = taken {
            t.give(turn);
        }
    };
    let waits = waits(r, rej, now, ahead);
    let hold = |wait_ms| Hold {
        index: rej.index,
        wait_ms,
        client,
        turn: taken.map(|(_, turn)| turn),
    };
    match plan(&waits, waited) {
        Plan::Hold { wait_ms } if ask.dry_run => OnReject::WouldHold(hold(wait_ms)),
        Plan::Hold { wait_ms } => {
            let h = hold(wait_ms);
            if r.hold(&h, ask.now_ms) {
                OnReject::Hold(h)
            } else {
                give_back();
                reject
            }
        }
        Plan::Reject if since.is_none() && ahead > 0 && !ask.dry_run => {
            give_back();
            let turn_ms = waits.iter().filter_map(|w| w.wait_ms).max().unwrap_or(0);
            let turn_s = u32::try_from(turn_ms.div_ceil(1000)).unwrap_or(u32::MAX);
            OnReject::Reject {
                share_full: Some((ahead, turn_s)),
            }
        }
        Plan::Admit | Plan::Reject => {
            give_back();
            reject
        }
    }
}

/// Each limit's wait until the request's turn, whole cost included, read
/// without counting anything (the request's own admissions were given
/// back). The rejecting limit waits at least 1 ms; one that rejected it for
/// another reason than the count (a full zone) never admits it.
fn waits<'t, R: Request<'t>>(r: &mut R, rej: &Rejecting, now: u64, ahead: u32) -> Vec<LimitWait> {
    let mut out = Vec::with_capacity(r.limits());
    for n in 0..r.limits() {
        let Some(c) = r.conf(n) else {
            continue;
        };
        if n == rej.index && rej.d.outcome != Outcome::Rejected {
            out.push(LimitWait::never(c.delay_ms));
            continue;
        }
        let (hash, limit, cost) = match quiet_limit(r, n, &c, now) {
            Some(Quiet::Limit(hash, limit, cost)) => (hash, limit, cost),
            // No wait makes a blocked client fit.
            Some(Quiet::Blocked(_)) => {
                out.push(LimitWait::never(c.delay_ms));
                continue;
            }
            None => continue,
        };
        let t = c.table;
        let w = t.window();
        let snap = t.peek(hash, now);
        let wait = match snap.strict {
            Some(s) => fit::strict_turn_ms(&s, now, w.ms(), limit, cost, ahead),
            None if w.calendar_of().is_some() => {
                let at = (w, snap.window_index);
                fit::calendar_turn(at, snap.current, now, limit, cost, ahead)
            }
            None => {
                let counts = Counts {
                    current: snap.current,
                    previous: snap.previous,
                };
                let start = w.start_ms(snap.window_index);
                fit::turn_at(counts, start, now, w.ms(), limit, cost, ahead)
            }
        };
        out.push(LimitWait::from_wait(wait, c.delay_ms, n == rej.index));
    }
    out
}

/// Whole seconds from `now_ms` until the client `hash` of `table` has one
/// more request left than `remaining` under `limit` (the draft's `t` of an
/// admission): the first moment a cost of `remaining + 1` fits, by the one
/// rule ([`Table::wait_ms`]); 0 when `remaining` is the whole limit.
pub fn grows_in_s(
    table: &Table<'_>,
    hash: KeyHash,
    now_ms: u64,
    limit: u32,
    remaining: u32,
) -> u32 {
    if remaining >= limit {
        return 0;
    }
    let w = table.window().ms();
    let ms = table
        .wait_ms(hash, now_ms, limit, remaining + 1)
        .unwrap_or(w);
    u32::try_from(ms.div_ceil(1000)).unwrap_or(u32::MAX)
}
