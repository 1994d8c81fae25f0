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
//! the zone has no override; otherwise one lookup (the core's engine
//! applies them, and `ban=`).

use nginx_sys::{ngx_log_t, ngx_pagesize, NGX_LOG_NOTICE};
use ngx::ngx_log_error;
use rate_limit_window_core::KeyHash;

use crate::conf::Limit;

/// A client that `limit` has just banned (the engine recorded the ban,
/// `secs` long): shared with the fleet (a `redis=` zone) and logged at
/// `notice`.
#[cold]
#[inline(never)]
pub(crate) fn banned(limit: &Limit, hash: KeyHash, secs: u32, log: *mut ngx_log_t) {
    let zone = limit.zone();
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
}

/// Bytes `overrides=N` adds to a zone's shared memory: the table, 64-byte
/// aligned, plus one page for the slab pool's own bookkeeping.
pub fn extra_bytes(capacity: usize) -> usize {
    // SAFETY: ngx_pagesize is set by nginx at startup, before any parsing.
    let page = unsafe { ngx_pagesize };
    region_bytes(capacity).next_multiple_of(page) + page
}

/// Bytes the override table takes at the end of the zone's region (a
/// multiple of 64).
pub fn region_bytes(capacity: usize) -> usize {
    crate::zone::override_region_bytes(capacity)
}
