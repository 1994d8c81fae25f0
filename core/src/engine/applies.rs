//! The client's override applied to one limit: what it makes of the
//! limit in force ([`Applies`]), looked up by [`override_of`] (the
//! client's own, else the most specific range holding its address).

use super::{LimitConf, LimitRead, Request};
use crate::overrides::range::Family;
use crate::overrides::{Action, Entry, Overrides};
use crate::rule::strict::MAX_STRICT_LIMIT;
use crate::table::{Answer, Events, KeyHash, Outcome};

/// The limit in force for one client: the override's, else the value's.
pub(crate) enum Applies {
    /// Judge against this limit (requests per window).
    Limit(u32),
    /// Admitted without being counted (an override).
    Exempt,
    /// A block or a ban: the decision to answer.
    Reject(Blocked),
    /// No override, and the limit variable is empty: exempt.
    EmptyLimit,
    /// No override, and the limit value is invalid: `fail=` decides.
    InvalidLimit,
    /// An override of the client's places: the `in_flight=` in force
    /// (requests in flight at once) on a line that has one; a rate is its
    /// value's ([`Applies::for_rate`]).
    Places(u32),
}

impl Applies {
    /// The limit in force without an override.
    #[inline(always)]
    pub(super) fn of_value(value: LimitRead) -> Applies {
        match value {
            LimitRead::Set(n) => Applies::Limit(n),
            LimitRead::Empty => Applies::EmptyLimit,
            LimitRead::Invalid => Applies::InvalidLimit,
        }
    }

    /// What a rate makes of it (its limit `value`, read): an override of
    /// places leaves the rate to its value; any other holds.
    #[inline(always)]
    pub(super) fn for_rate(self, value: LimitRead) -> Applies {
        match self {
            Applies::Places(_) => Applies::of_value(value),
            a => a,
        }
    }
}

/// A block or a ban of the client by an override.
#[derive(Clone, Copy)]
pub(crate) struct Blocked {
    /// Seconds until the override ends (or a window, when it has no end).
    pub(super) retry_after_s: u32,
    /// Seconds until the next window boundary (rounded up).
    pub(super) reset_s: u32,
}

impl Blocked {
    /// The table decision an override's rejection answers with.
    pub(super) fn decision(self) -> Answer {
        Answer {
            outcome: Outcome::Rejected,
            remaining: 0,
            retry_after_s: self.retry_after_s,
            reset_s: self.reset_s,
            estimate: 0,
            admission: None,
            events: Events::default(),
        }
    }
}

/// The limit in force for `hash` at `now` (epoch ms): its override (its
/// own, else the most specific range holding its address), else its limit
/// `value`; an override of places is [`Applies::Places`], whatever the
/// line (a rate reads it with [`Applies::for_rate`]). A zone without
/// overrides costs one relaxed load.
#[inline(always)]
pub(crate) fn override_of<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'_>,
    hash: KeyHash,
    value: LimitRead,
    now: u64,
) -> Applies {
    match c.overrides {
        Some(o) if o.live() != 0 => {
            core::hint::cold_path();
            override_slow(r, n, c, o, hash, value, now)
        }
        _ => Applies::of_value(value),
    }
}

#[inline(never)]
fn override_slow<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'_>,
    o: &Overrides,
    hash: KeyHash,
    value: LimitRead,
    now: u64,
) -> Applies {
    let Some(e) = o.get_hash(hash, now).or_else(|| range_of(r, n, c, o, now)) else {
        return Applies::of_value(value);
    };
    match e.action {
        // A strict zone counts at most MAX_STRICT_LIMIT: the limit in force
        // (and the headers') is what it counts.
        Action::Limit(n) if c.table.is_strict() => Applies::Limit(n.min(MAX_STRICT_LIMIT)),
        Action::Limit(n) => Applies::Limit(n),
        Action::InFlight(k) => Applies::Places(k),
        Action::Exempt => Applies::Exempt,
        Action::Block | Action::Ban => {
            let w = c.table.window();
            // The time left (rounded up), or a window without an expiry.
            let retry = match e.secs_left(now) {
                Some(s) => u32::try_from(s).unwrap_or(u32::MAX).max(1),
                None => w.secs().max(1) as u32,
            };
            Applies::Reject(Blocked {
                retry_after_s: retry,
                reset_s: u32::try_from(w.left_ms(now).div_ceil(1000)).unwrap_or(u32::MAX),
            })
        }
    }
}

/// The override of the most specific range holding limit `n`'s client's
/// address, when the zone holds ranges (one load of their bitmap, else one
/// lookup per prefix length in use).
pub(super) fn range_of<'t, R: Request<'t>>(
    r: &mut R,
    n: usize,
    c: &LimitConf<'_>,
    o: &Overrides,
    now: u64,
) -> Option<Entry> {
    if !o.has_ranges(Family::V4) && !o.has_ranges(Family::V6) {
        return None;
    }
    let addr = r.key_addr(n)?;
    o.range_get(addr, |k| c.table.hash_key(k), now)
        .map(|(e, _)| e)
}
