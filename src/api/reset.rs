//! `rate_limit_window_metrics write=on;` (or `reset=on`): PUT and
//! `DELETE …&override` go to overrides.rs; `DELETE /location?zone=NAME&key=VALUE`
//! (or `&addr=TEXT`, as for GET) clears one client's counts (current and previous window) and answers
//! the JSON of what was cleared, with the client's fingerprint (errors:
//! `{"error": …}`, as the overrides'). Other methods go to the metrics handler;
//! without `reset=on` the metrics handler answers DELETE with 405.
//!
//! The location's `allow`/`deny` protect it as they protect the metrics.
//! Every reset is logged at `notice` with the zone and the operator's
//! address, never the key (it may be an API key).
//!
//! For a Redis-backed zone the key's fingerprint is also queued in the zone
//! header (`resets`, one CAS, never a wait on Redis); worker 0's sync
//! thread, at its next round, deletes the key's store hashes for the
//! current and previous window and zeroes its share here (see `sync/mod.rs`).
//! The answer says `"cluster":"scheduled"` (`"not cleared"` when the queue
//! is full). The other gateways' own counts stay theirs: their next rounds
//! write them again.

use nginx_sys::{
    ngx_int_t, NGX_HTTP_DELETE, NGX_HTTP_INTERNAL_SERVER_ERROR, NGX_HTTP_PUT, NGX_LOG_NOTICE,
};
use ngx::core::Status;
use ngx::http::Request;
use ngx::ngx_log_error;
use rate_limit_window_core::Snapshot;

use crate::api::format::{json_str, percent_decode};
use crate::api::overrides;
use crate::api::{arg, bad_request, has_flag, lookup_key, send};
use crate::ffi::process::{cycle_log, now_ms};
use crate::ffi::req::request_handler;
use crate::zone::ZoneConf;

// Content handler installed by `rate_limit_window_metrics reset=on;`.
request_handler!(pub handler, write);

/// PUT, DELETE (an override, or a reset), or the metrics handler's methods.
fn write(r: &mut Request) -> ngx_int_t {
    let method = r.as_ref().method as u32;
    if method & (NGX_HTTP_DELETE | NGX_HTTP_PUT) == 0 {
        return crate::api::metrics::handle(r);
    }
    if method & NGX_HTTP_PUT != 0 {
        return overrides::put(r);
    }
    if has_flag(r, "override") {
        return overrides::remove(r);
    }
    reset(r)
}

fn reset(r: &mut Request) -> ngx_int_t {
    if r.discard_request_body() != Status::NGX_OK {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    // The errors are JSON, as the overrides' are.
    let Some(zone_name) = arg(r, "zone") else {
        return overrides::error(r, 400, "give zone=NAME");
    };
    let zone_name = percent_decode(&zone_name);
    // A zone of either block, http's or the stream's.
    let Some(zone) = crate::zone::by_name(&zone_name) else {
        let n = String::from_utf8_lossy(&zone_name).into_owned();
        return overrides::error(r, 404, &format!("no zone \"{n}\""));
    };
    if arg(r, "cidr").is_some() {
        return bad_request(
            r,
            "a reset clears one client's counts: give key= or addr= (a range's override is \
             removed with DELETE ?zone=NAME&cidr=ADDR/BITS&override)",
        );
    }
    // key= or addr= (see metrics::lookup_key).
    let key = match lookup_key(r, zone) {
        Ok(Some(k)) => k,
        Ok(None) => return overrides::error(r, 400, "give key= or addr="),
        Err(e) => return bad_request(r, &e),
    };
    let Some(table) = zone.table.as_ref() else {
        return overrides::error(r, 404, "the zone is not initialised");
    };
    let now = now_ms();
    let hash = table.hash_key(&key);
    let cleared = table.clear(hash, now);
    let cluster = cluster_reset(zone, hash.fingerprint());
    let lifted = overrides::lift_ban(zone, hash.fingerprint(), now);
    let fp = hash.fingerprint();
    log_reset(r, zone, fp, &cleared, lifted);
    send(
        r,
        "application/json",
        &answer(zone, fp, &cleared, cluster, lifted),
    )
}

/// Queues the cluster reset of fingerprint `fp` for the sync thread:
/// `"scheduled"`, `"not cleared"` when the queue is full, `null` for a
/// zone without `redis=`.
fn cluster_reset(zone: &ZoneConf, fp: u64) -> &'static str {
    if zone.redis.is_none() {
        return "null";
    }
    let Some(header) = zone.header() else {
        return "\"not cleared\"";
    };
    if crate::sync::enqueue(&header.resets, fp) {
        "\"scheduled\""
    } else {
        "\"not cleared\""
    }
}

/// The JSON of what was cleared for the client of fingerprint `fp` (as
/// the overrides' answers and the log lines give it).
fn answer(zone: &ZoneConf, fp: u64, s: &Snapshot, cluster: &str, ban_lifted: bool) -> String {
    format!(
        "{{\"zone\":{},\"fingerprint\":\"{fp:014x}\",\"window_index\":{},\"cleared\":{{\
         \"current\":{},\"previous\":{},\"estimate\":{}}},\"cluster\":{},\"ban_lifted\":{}}}\n",
        json_str(&zone.name_str()),
        s.window_index,
        s.current,
        s.previous,
        s.estimate,
        cluster,
        ban_lifted
    )
}

/// The notice line: the zone, what was cleared, the operator's address.
/// Written to the cycle's log, not the request's: nginx would append the
/// request line, whose query holds the key.
fn log_reset(r: &mut Request, zone: &ZoneConf, fp: u64, s: &Snapshot, ban_lifted: bool) {
    let addr = crate::ffi::req::addr_text(r);
    ngx_log_error!(
        NGX_LOG_NOTICE,
        cycle_log(),
        "rate_limit_window: counts of client {:014x} of zone \"{}\" reset by {} (cleared: \
         current {}, previous {}){}",
        fp,
        zone.name_str(),
        String::from_utf8_lossy(addr),
        s.current,
        s.previous,
        if ban_lifted { ", ban lifted" } else { "" }
    );
}
