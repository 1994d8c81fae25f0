//! `rate_limit_window_near_limit_total{zone}`: admitted requests whose
//! sliding estimate after admission is at or above 80% of their limit
//! (Envoy's `near_limit`), so that a limit about to bite shows before it
//! does.

use core::sync::atomic::Ordering;

use crate::request::record::Applied;
use crate::zone::ZoneConf;

/// Whether an admission left the estimate at or above 80% of `limit`
/// (requests per window). `remaining` is what the table returned after
/// counting the request, `limit - floor(estimate after)`, so the test is
/// on the estimate rounded down, as the log and the metrics show it.
#[inline(always)]
pub fn is_near(limit: u32, remaining: u32) -> bool {
    // With after = limit - remaining: 5 * after >= 4 * limit <=> limit >=
    // 5 * remaining (false whenever remaining > limit, as the old form).
    u64::from(limit) >= 5 * u64::from(remaining) && limit > 0
}

/// Notes, in a Redis-backed zone, the limit value (configured, or a
/// `map`'s: before any override) a request is judged against, per window:
/// the sync's flag threshold (see `hot.rs` in the core).
#[inline]
pub fn note_limit(zone: &ZoneConf, limit: u32) {
    if zone.redis.is_none() {
        return;
    }
    if let Some(header) = zone.header() {
        let index = zone.window.index(crate::ffi::process::now_ms());
        header.stats.note_limit(limit, index);
    }
}

/// Counts an admitted request in each zone of `applied` where it was near
/// the limit (out of line: called only when one was).
#[inline(never)]
pub fn note_all(applied: &[Applied]) {
    for a in applied {
        note(a);
    }
}

/// Counts an admitted request in its zone if it was near the limit.
fn note(a: &Applied) {
    if !is_near(a.limit, a.remaining) {
        return;
    }
    if let Some(header) = a.zone.header() {
        header.near_limit.fetch_add(1, Ordering::Relaxed);
    }
}
