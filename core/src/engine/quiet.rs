//! A limit judged off the admission path, for the waits and Retry-After
//! of the other limits ([`plan`](super::plan)): logging and counting
//! nothing.

use super::{blocked_wait, charged, override_of, Applies, Cost, Key, LimitConf, Line, Request};
use crate::table::{FailPolicy, KeyHash};

/// Limit `n` as judged off the admission path (the waits and Retry-After
/// of the other limits), logging and counting nothing.
pub(crate) enum Quiet {
    /// Judge the client against `limit` (0: it never fits: an invalid
    /// value under `fail=closed`) with the cost.
    Limit(KeyHash, u32, u32),
    /// An override blocks it for this many seconds (see [`blocked_wait`]).
    Blocked(u32),
}

/// [`Quiet`] for limit `n`, or None when it does not apply.
pub(super) fn quiet_limit<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'t>,
    now: u64,
) -> Option<Quiet> {
    let Ok(Key::Client { hash, limit: value }) = r.key(n) else {
        return None;
    };
    if R::PLACES && c.line == Line::InFlight {
        // No rate: an in-flight place has no wait to compute.
        return match override_of(r, n, c, hash, value, now) {
            Applies::Reject(b) => Some(Quiet::Blocked(b.retry_after_s)),
            _ => None,
        };
    }
    let closed = c.fail == FailPolicy::Closed;
    let limit = match override_of(r, n, c, hash, value, now).for_rate(value) {
        Applies::Limit(l) => l,
        Applies::Reject(b) => {
            return Some(Quiet::Blocked(blocked_wait(r, n, c, (hash, value), b, now)))
        }
        Applies::InvalidLimit if closed => return Some(Quiet::Limit(hash, 0, 1)),
        Applies::Exempt | Applies::EmptyLimit | Applies::InvalidLimit | Applies::Places(_) => {
            return None
        }
    };
    match r.cost(n) {
        // `redis_outage=` as the decision applies it (`decide::judge`).
        Ok(Cost::Count(k)) => Some(match c.outage.limit(limit) {
            Some(limit) => Quiet::Limit(hash, limit, k),
            None => Quiet::Limit(hash, 0, 1),
        }),
        _ if closed => Some(Quiet::Limit(hash, 0, 1)),
        // The whole limit in force (`decide::invalid_cost`).
        Ok(Cost::Invalid) => Some(match c.outage.limit(limit) {
            Some(limit) => Quiet::Limit(hash, limit, charged(limit)),
            None => Quiet::Limit(hash, 0, 1),
        }),
        Err(_) => None,
    }
}
