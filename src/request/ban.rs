//! Per-client overrides on the request path, and their place in the zone.
//!
//! Each zone has an override table (the core's `Overrides`) after its slot
//! table, in memory added to the zone's size (`overrides=N`, default 1024
//! entries), so that it lives and is adopted with the
//! zone across reloads. Every worker reads it at each request: a change
//! made through the API (api/overrides.rs) applies at every worker's next
//! request.
//!
//! The request path pays one relaxed load of the table's live count when
//! the zone has no override; otherwise one lookup (the core's engine
//! applies them, and `ban=`).

use nginx_sys::{ngx_log_t, NGX_LOG_NOTICE};
use ngx::ngx_log_error;
use rate_limit_window_core::KeyHash;

use crate::conf::Limit;

/// A client that `limit` has just banned (the engine recorded the ban,
/// `secs` long): shared with the fleet (a `redis=` zone) and logged at
/// `notice`.
#[cold]
#[inline(never)]
pub(crate) fn banned<C: Copy>(limit: &Limit<C>, hash: KeyHash, secs: u32, log: *mut ngx_log_t) {
    let zone = limit.zone();
    crate::sync::fleet_overrides::share(zone, hash.fingerprint());
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
