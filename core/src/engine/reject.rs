//! A limit rejected the request: its Retry-After over every limit (never
//! shortened by a ban or a block: [`blocked_wait`]), a hold for `delay=`
//! or the rejection ([`rejected`]), and the ban `ban=` sets.

use super::{
    charged, plan, undo_all, Ask, Bad, Blocked, Cost, LimitConf, LimitRead, Rejection, Request,
    Verdict,
};
use crate::table::{Answer, Counter, KeyHash, Outcome};

/// Whole seconds until a client blocked or banned by an override (as
/// `blocked`) may be admitted by limit `n`: the override's end, and never
/// earlier than its count alone would admit it (a ban never shortens the
/// wait); its limit `value`, read.
pub(super) fn blocked_wait<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    (hash, value): (KeyHash, LimitRead),
    blocked: Blocked,
    now: u64,
) -> u32 {
    let LimitRead::Set(limit) = value else {
        return blocked.retry_after_s;
    };
    let cost = match r.cost(n) {
        Ok(Cost::Count(k)) => k,
        Ok(Cost::Invalid) => charged(limit),
        Err(_) => 1,
    };
    let count = c.table.retry_after_secs(hash, now, limit, cost);
    blocked.retry_after_s.max(count)
}

/// The limit that has just rejected the request.
pub(crate) struct Rejecting {
    pub(super) index: usize,
    pub(super) limit: u32,
    pub(super) cost: u32,
    pub(super) d: Answer,
    pub(super) hash: KeyHash,
    /// An invalid value under `fail=closed` (never held, never a ban).
    pub(super) invalid: bool,
    /// Its cost was invalid, charged the whole limit (never a ban).
    pub(super) charged: bool,
    pub(super) overridden: bool,
    /// `in_flight=` refused it (never held, never a ban).
    pub(super) in_flight: bool,
}

impl Rejecting {
    /// Limit `n` refused a request of `hash` by its count.
    pub(super) fn counted(
        n: usize,
        (limit, cost): (u32, u32),
        d: Answer,
        hash: KeyHash,
        bad: Bad,
    ) -> Self {
        Rejecting {
            index: n,
            limit,
            cost,
            d,
            hash,
            invalid: bad == Bad::Closed,
            charged: bad == Bad::Charged,
            overridden: false,
            in_flight: false,
        }
    }

    /// An override of limit `n`'s zone blocks or bans `hash`.
    pub(super) fn blocked(n: usize, hash: KeyHash, blocked: Blocked) -> Self {
        Rejecting {
            index: n,
            limit: 0,
            cost: 1,
            d: blocked.decision(),
            hash,
            invalid: false,
            charged: false,
            overridden: true,
            in_flight: false,
        }
    }
}

/// A limit rejected the request: hold it (`delay=`), or reject it, counted
/// by none. Out of line: the admitting path's code stays together.
#[cold]
#[inline(never)]
// `ask` by value: the request path need not keep a copy of it in memory.
pub(super) fn rejected<'t, R: Request<'t>>(
    r: &mut R,
    ask: Ask,
    rej: Rejecting,
    now: u64,
) -> Verdict {
    // A retry must fit under every limit: the ones before this one
    // admitted the whole cost (they fit now), so the longest wait among
    // the limits not judged yet.
    let retry = rej
        .d
        .retry_after_s
        .max(plan::longest_wait(r, rej.index + 1, now));
    undo_all(r, ask.shard);
    let mut out = Rejection {
        index: rej.index,
        limit: rej.limit,
        cost: rej.cost,
        decision: rej.d,
        hash: rej.hash,
        invalid: rej.invalid,
        overridden: rej.overridden,
        retry_after_s: retry,
        banned: None,
        share_full: None,
        // A held request rejected after all, however: its hold ends.
        unheld: r.held_since().is_some(),
        in_flight: rej.in_flight,
        dry_run: ask.dry_run,
    };
    // An override's rejection, or an invalid value's (fail=closed), is
    // never held: no wait makes it fit; nor a full client's in-flight
    // places, which no wait can tell.
    if !(rej.overridden || rej.invalid || rej.in_flight) && ask.holdable {
        match plan::on_reject(r, &ask, &rej, now) {
            plan::OnReject::Hold(h) => return Verdict::Hold(h),
            plan::OnReject::WouldHold(h) => return Verdict::WouldHold(h),
            plan::OnReject::Reject { share_full } => {
                if let Some((ahead, turn_s)) = share_full {
                    // Its turn comes after its own held requests'.
                    out.share_full = Some(ahead);
                    out.retry_after_s = out.retry_after_s.max(turn_s);
                }
            }
        }
    }
    ban_rejected(r, &ask, &rej, &mut out, now);
    count_rejected(r, &ask, &rej);
    Verdict::Reject(out)
}

/// `ban=` of a refusal by the count: a cost that fits the limit in force
/// and was refused because the client's count leaves no room for it. Not
/// a dry run's, an override's, an invalid value's, one for places, nor a
/// cost above the limit (it never fits, whatever the count). The ban is
/// recorded in `out`, and lengthens its Retry-After if need be.
fn ban_rejected<'t, R: Request<'t>>(
    r: &R,
    ask: &Ask,
    rej: &Rejecting,
    out: &mut Rejection,
    now: u64,
) {
    let bans = rej.d.outcome == Outcome::Rejected
        && rej.cost <= rej.limit
        && !(rej.invalid || rej.charged || rej.overridden || rej.in_flight || ask.dry_run);
    if let (true, Some(c)) = (bans, r.conf(rej.index)) {
        if let Some(secs) = ban(&c, rej.hash, now) {
            // A ban never shortens Retry-After: the count may keep the
            // client out longer than the ban.
            out.retry_after_s = out.retry_after_s.max(secs);
            out.banned = Some(secs);
        }
    }
}

/// Counts the rejection in the rejecting limit's table (a dry run's as
/// such; an invalid value's under `fail=closed` too).
fn count_rejected<'t, R: Request<'t>>(r: &R, ask: &Ask, rej: &Rejecting) {
    if let Some(c) = r.conf(rej.index) {
        let counter = if ask.dry_run {
            Counter::RejectedDryRun
        } else {
            Counter::Rejected
        };
        c.table.add(ask.shard, counter, 1);
        if rej.invalid {
            c.table.add(ask.shard, Counter::FailClosed, 1);
        }
    }
}

/// `ban=`: records the ban of `hash` (an operator's override wins) and
/// returns its length in whole seconds; None: no ban recorded.
fn ban(c: &LimitConf<'_>, hash: KeyHash, now: u64) -> Option<u32> {
    if c.ban_ms == 0 {
        return None;
    }
    let o = c.overrides?;
    if !o.ban(hash.fingerprint(), now.saturating_add(c.ban_ms), now) {
        return None;
    }
    Some(u32::try_from(c.ban_ms.div_ceil(1000)).unwrap_or(u32::MAX))
}
