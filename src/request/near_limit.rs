//! `rate_limit_window_near_limit_total{zone}`: admitted requests whose
//! sliding estimate after admission is at or above 80% of their limit
//! (Envoy's `near_limit`), so that a limit about to bite shows before it
//! does.

use core::sync::atomic::Ordering;

use crate::request::record::Applied;

/// Whether an admission left the estimate at or above 80% of `limit`
/// (requests per window). `remaining` is what the table returned after
/// counting the request, `limit - floor(estimate after)`, so the test is
/// on the estimate rounded down, as the log and the metrics show it.
pub fn is_near(limit: u32, remaining: u32) -> bool {
    // With after = limit - remaining: 5 * after >= 4 * limit <=> limit >=
    // 5 * remaining (false whenever remaining > limit, as the old form).
    u64::from(limit) >= 5 * u64::from(remaining) && limit > 0
}

/// Counts an admitted request in its zone if it was near the limit.
/// Also notes the smallest limit admitted against in a Redis-backed zone
/// (the sync's flag threshold, see `hot.rs` in the core).
pub fn note(a: &Applied) {
    if a.zone.redis.is_some() {
        if let Some(header) = a.zone.header() {
            header.stats.note_limit(a.limit);
        }
    }
    if !is_near(a.limit, a.remaining) {
        return;
    }
    if let Some(header) = a.zone.header() {
        header.near_limit.fetch_add(1, Ordering::Relaxed);
    }
}
