//! Per-client overrides on the request path, and their place in the zone.
//!
//! Each zone has an override table (the core's `Overrides`) after its slot
//! table, in memory added to the zone's size (`overrides=N`, default 1024
//! entries: [`extra_bytes`]), so that it lives and is adopted with the
//! zone across reloads. Every worker reads it at each request: a change
//! made through the API (override_api.rs) applies at every worker's next
//! request.
//!
//! The request path pays one relaxed load of the table's live count when
//! the zone has no override ([`apply`]); otherwise one lookup.

use nginx_sys::{ngx_log_t, NGX_LOG_NOTICE};
use ngx::http::Request;
use ngx::{ngx_log_debug_http, ngx_log_error};
use rate_limit_window_core::overrides::{Action, Entry, Overrides};
use rate_limit_window_core::{Counter, Decision, Events, KeyHash, Outcome, Table};

use crate::conf::Limit;
use crate::handler::Judge;
use crate::zone::ZoneConf;

/// Retry-After of a `block` without `ttl`, in seconds: the zone's window
/// (a client that retries is judged again one window later), at least 1.
fn block_retry_s(zone: &ZoneConf) -> u32 {
    (zone.window.ms() / 1000).max(1) as u32
}

/// What an override makes of one limit for one request.
pub(crate) enum Applies {
    /// No override: judge the request against the configured limit.
    Limit(u32),
    /// Judge it against the override's limit instead.
    Replace(u32),
    /// Admit it without counting it.
    Exempt,
    /// Reject it: a block or a ban (the decision to answer).
    Reject(Decision),
}

/// The override of `hash` in `zone` applied to `limit` at `now` (epoch
/// ms). A zone without overrides costs one relaxed load.
#[inline(always)]
pub(crate) fn apply(zone: &ZoneConf, hash: KeyHash, limit: u32, now: u64) -> Applies {
    match zone.overrides.as_ref() {
        Some(o) if o.live() != 0 => {
            core::hint::cold_path();
            apply_slow(zone, o, hash, limit, now)
        }
        _ => Applies::Limit(limit),
    }
}

#[inline(never)]
fn apply_slow(zone: &ZoneConf, o: &Overrides, hash: KeyHash, limit: u32, now: u64) -> Applies {
    let Some(e) = o.get_hash(hash, now) else {
        return Applies::Limit(limit);
    };
    match e.action {
        Action::Limit(n) => Applies::Replace(n),
        Action::Exempt => Applies::Exempt,
        Action::Block | Action::Ban => Applies::Reject(rejection(zone, &e, now)),
    }
}

/// A limit judged off the admission path (Retry-After of the limits after
/// a rejecting one, `delay=`'s waits), with the client's override: its
/// limit, exempt (the limit does not apply), or a block or ban as a limit
/// of 0.
pub(crate) fn judged(zone: &ZoneConf, j: Judge) -> Judge {
    let Judge::Limit { hash, limit, .. } = j else {
        return j;
    };
    let limit = match apply(zone, hash, limit, crate::util::now_ms()) {
        Applies::Limit(_) => return j,
        Applies::Replace(n) => n,
        Applies::Exempt => return Judge::Exempt,
        Applies::Reject(_) => 0,
    };
    Judge::Limit {
        hash,
        limit,
        invalid: false,
    }
}

/// The decision that rejects a blocked or banned client: Retry-After is
/// the time left (rounded up), or [`block_retry_s`] without an expiry.
pub(crate) fn rejection(zone: &ZoneConf, e: &Entry, now: u64) -> Decision {
    let retry = match e.secs_left(now) {
        Some(s) => u32::try_from(s).unwrap_or(u32::MAX).max(1),
        None => block_retry_s(zone),
    };
    let w = zone.window.ms();
    Decision {
        outcome: Outcome::Rejected,
        remaining: 0,
        retry_after_s: retry,
        reset_s: (w - now % w).div_ceil(1000) as u32,
        estimate: 0,
        admission: None,
        events: Events::default(),
    }
}

/// An override that exempts (None: counted as exempt, the limit skipped)
/// or rejects (the decision) the request.
#[cold]
#[inline(never)]
pub(crate) fn overridden(
    r: &Request,
    zone: &ZoneConf,
    table: &Table<'static>,
    a: Applies,
    shard: usize,
) -> Option<Decision> {
    let d = match a {
        Applies::Reject(d) => Some(d),
        _ => {
            table.add(shard, Counter::Exempt, 1);
            None
        }
    };
    let what = if d.is_some() { "rejected" } else { "exempt" };
    ngx_log_debug_http!(
        r,
        "rate_limit_window: zone \"{}\": {} by an override",
        zone.name,
        what
    );
    d
}

/// After `limit` rejected client `hash`: with `ban=`, and when `bans`
/// (the count rejected it: not a full zone, an invalid limit, an
/// override's block, nor a dry run), records the ban (an operator's
/// override wins), logs it at `notice`, and returns its Retry-After in
/// seconds (the ban's length). None: no ban recorded.
pub(crate) fn ban(
    limit: &Limit,
    hash: KeyHash,
    bans: bool,
    now: u64,
    log: *mut ngx_log_t,
) -> Option<u32> {
    if limit.ban_ms == 0 || !bans {
        return None;
    }
    core::hint::cold_path();
    ban_slow(limit, hash, now, log)
}

#[cold]
#[inline(never)]
fn ban_slow(limit: &Limit, hash: KeyHash, now: u64, log: *mut ngx_log_t) -> Option<u32> {
    let zone = limit.zone();
    let o = zone.overrides.as_ref()?;
    let until = now.saturating_add(limit.ban_ms);
    if !o.ban(hash.fingerprint(), until, now) {
        return None;
    }
    let secs = limit.ban_ms.div_ceil(1000);
    crate::override_sync::share(zone, hash.fingerprint());
    ngx_log_error!(
        NGX_LOG_NOTICE,
        log,
        "rate_limit_window: client {:014x} of zone \"{}\" banned for {}s (ban= of the limit in {}:{})",
        hash.fingerprint(),
        zone.name,
        secs,
        limit.file,
        limit.line
    );
    Some(u32::try_from(secs).unwrap_or(u32::MAX))
}

/// Bytes the override table takes at the end of the zone's region (a
/// multiple of 64).
pub fn region_bytes(capacity: usize) -> usize {
    Overrides::bytes_for(capacity).next_multiple_of(64)
}

/// A resized zone (new memory on reload): copies `old`'s overrides when
/// the new table kept its hash seed, and logs how many.
pub fn carry(zone: &ZoneConf, old: &ZoneConf, log: *mut ngx_log_t) {
    let (Some(new_o), Some(old_o)) = (zone.overrides.as_ref(), old.overrides.as_ref()) else {
        return;
    };
    let (Some(nt), Some(ot)) = (zone.table.as_ref(), old.table.as_ref()) else {
        return;
    };
    if old_o.live() == 0 || nt.seed() != ot.seed() {
        return;
    }
    let now = crate::util::now_ms();
    let (mut kept, mut dropped) = (0, 0);
    for e in old_o.iter(now) {
        match new_o.restore(e, now) {
            Ok(_) => kept += 1,
            Err(_) => dropped += 1,
        }
    }
    ngx_log_error!(
        NGX_LOG_NOTICE,
        log,
        "rate_limit_window_zone \"{}\": {} overrides carried over, {} dropped (overrides={})",
        zone.name,
        kept,
        dropped,
        new_o.capacity()
    );
}
