//! A zone whose size changes on reload: nginx gives it new memory (and
//! calls `init_zone` with no old data), while the running cycle's zone is
//! still mapped. The live clients are copied into the new table (the
//! core's `Table::carry_from`), with one `notice` of the numbers; a change
//! that makes counts start over instead is logged at `warn`. The requests
//! in flight (`in_flight=` places, `delay=` turns and held requests) are
//! carried too, each under the process that holds it ([`carry_runtime`]).

use nginx_sys::{ngx_log_t, NGX_LOG_NOTICE, NGX_LOG_WARN};
use ngx::ngx_log_error;

use crate::ffi::process::now_ms;
use crate::zone::ZoneConf;

/// The running cycle's zone of the same name, if it has a table: called
/// while the master loads a new configuration (`ngx_cycle` is still the
/// running cycle then; at startup it has no configuration).
pub fn previous(zone: &ZoneConf) -> Option<&'static ZoneConf> {
    // nginx's current cycle, valid while it loads the next one; its
    // configuration (and zones) live until it is released.
    let cycle = crate::ffi::process::cycle()?;
    if cycle.conf_ctx.is_null() {
        return None;
    }
    // Either block's: a stream zone is carried as an http one.
    let zones = crate::zone::all_of(cycle);
    let found = crate::zone::each(&zones)
        .find(|z| z.name.as_bytes() == zone.name.as_bytes() && z.table.is_some())
        .filter(|z| !core::ptr::eq(*z, zone));
    found
}

/// Why the previous zone's counts cannot be carried into `zone`, if so.
fn reset_reason(zone: &ZoneConf, old: &ZoneConf) -> Option<String> {
    if old.key_src.as_bytes() != zone.key_src.as_bytes() {
        return Some(format!(
            "the key changed from \"{}\" to \"{}\"",
            old.key_src, zone.key_src
        ));
    }
    if old.window != zone.window {
        return Some(format!(
            "the window changed from {}ms to {}ms",
            old.window.ms(),
            zone.window.ms()
        ));
    }
    if old.mode != zone.mode {
        return Some(format!(
            "the mode changed from {} to {}",
            old.mode, zone.mode
        ));
    }
    if old.redis.is_some() || zone.redis.is_some() {
        return Some("a zone with redis= is not carried over".into());
    }
    if zone.table.as_ref().is_some_and(|t| t.is_strict()) {
        return Some("a mode=strict zone is not carried over".into());
    }
    None
}

/// The seed the new table must use to take `old`'s clients: the old
/// table's, when they can be carried.
pub fn seed_for(zone: &ZoneConf, old: Option<&ZoneConf>) -> Option<[u64; 2]> {
    let old = old?;
    if old.key_src.as_bytes() != zone.key_src.as_bytes()
        || old.window != zone.window
        || old.mode != zone.mode
        || old.redis.is_some()
        || zone.redis.is_some()
    {
        return None;
    }
    old.table.as_ref().map(|t| t.seed())
}

/// After the new table of `zone` was formatted (with [`seed_for`]'s seed):
/// carries `old`'s live clients over and logs the outcome.
pub fn carry(zone: &ZoneConf, old: &ZoneConf, log: *mut ngx_log_t) {
    let (Some(new_t), Some(old_t)) = (zone.table.as_ref(), old.table.as_ref()) else {
        return;
    };
    let carried = match reset_reason(zone, old) {
        Some(why) => Err(why),
        None => new_t
            .carry_from(old_t, now_ms())
            .ok_or_else(|| "the tables do not match".to_string()),
    };
    match carried {
        Ok(c) => {
            ngx_log_error!(
            NGX_LOG_NOTICE,
            log,
            "rate_limit_window_zone \"{}\" resized from {} to {} bytes ({} to {} slots): {} live \
             clients carried over with their counts, {} dropped (the least recently seen)",
            zone.name,
            old.size,
            zone.size,
            old_t.capacity(),
            new_t.capacity(),
            c.carried,
            c.dropped
        );
        }
        Err(why) => {
            ngx_log_error!(
                NGX_LOG_WARN,
                log,
                "rate_limit_window_zone \"{}\" resized from {} to {} bytes: {}, so every client's \
             counts start over",
                zone.name,
                old.size,
                zone.size,
                why
            );
        }
    }
    warn_prefix_change(zone, old, log);
}

/// After the new zone was formatted: counts in it the requests the old
/// zone's processes have in flight (places) and hold (`delay=` turns and
/// the gauge), each under its process, so that a limit holds through the
/// resize; they are taken back once that process exits (the old workers,
/// when their last request ends). Only when the keys hash alike (the same
/// seed); logged when anything was in flight.
pub fn carry_runtime(zone: &ZoneConf, old: &ZoneConf, log: *mut ngx_log_t) {
    let (Some(nt), Some(ot)) = (zone.table.as_ref(), old.table.as_ref()) else {
        return;
    };
    if nt.seed() != ot.seed() {
        return;
    }
    let places = match (zone.places.as_ref(), old.places.as_ref()) {
        (Some(n), Some(o)) => {
            o.retire(Some(now_ms()));
            n.carry_from(o)
        }
        _ => Default::default(),
    };
    let (turns, turns_dropped) = match (zone.turns.as_ref(), old.turns.as_ref()) {
        (Some(n), Some(o)) => n.carry_from(o),
        _ => (0, 0),
    };
    if places.carried + places.dropped + turns + turns_dropped == 0 {
        return;
    }
    ngx_log_error!(
        NGX_LOG_NOTICE,
        log,
        "rate_limit_window_zone \"{}\" resized: {} requests in flight carried over ({} \
         dropped), {} entries of held requests ({} dropped), each counted until its worker exits",
        zone.name,
        places.carried,
        places.dropped,
        turns,
        turns_dropped
    );
}

/// A reload that changes `ipv6_prefix=` (any size): IPv6 clients get new
/// keys, so their counts start over.
pub fn warn_prefix_change(zone: &ZoneConf, old: &ZoneConf, log: *mut ngx_log_t) {
    if old.ipv6_prefix != zone.ipv6_prefix {
        ngx_log_error!(
            NGX_LOG_WARN,
            log,
            "rate_limit_window_zone \"{}\": ipv6_prefix changed from {} to {}, so the counts of \
             IPv6 clients start over",
            zone.name,
            old.ipv6_prefix,
            zone.ipv6_prefix
        );
    }
}
