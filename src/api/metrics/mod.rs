//! The `rate_limit_window_metrics` content handler. It never changes counts.
//!
//! * `GET /location` — Prometheus text exposition, format 0.0.4 (the
//!   families are a table in `metrics/families.rs`).
//! * `GET /location?zone=NAME&key=VALUE` — JSON for one client of one zone;
//!   VALUE is the key exactly as the zone's key evaluates, percent-decoded.
//! * `GET /location?zone=NAME&addr=TEXT` — the same for an address in text,
//!   in a zone keyed by `$binary_remote_addr` (400 with a JSON error
//!   otherwise, or for a `key=` that is no address's 4 or 16 bytes); its
//!   `"override"` is its own or the most specific range's.
//! * `GET /location?zone=NAME&cidr=ADDR/BITS` — a range's override.
//!
//! Access is controlled with the usual `allow`/`deny` in the location.

mod families;

use nginx_sys::{
    ngx_int_t, NGX_HTTP_GET, NGX_HTTP_HEAD, NGX_HTTP_INTERNAL_SERVER_ERROR, NGX_HTTP_NOT_ALLOWED,
};
use ngx::core::Status;
use ngx::http::{HttpModuleMainConf, Request};
use rate_limit_window_core::rule::strict;
use rate_limit_window_core::{estimate_scaled, Counts};

use crate::api::format::{json_str, local_offset_s, percent_decode, rfc3339};
use crate::api::{arg, bad_request, has_flag, lookup_key, send};
use crate::ffi::process::now_ms;
use crate::ffi::req::request_handler;
use crate::zone::ZoneConf;
use crate::Module;
use families::Live;

// Content handler installed by `rate_limit_window_metrics;`.
request_handler!(pub handler, handle);

/// The metrics page, or one key's JSON (GET and HEAD).
pub(crate) fn handle(r: &mut Request) -> ngx_int_t {
    let method = r.as_ref().method as u32;
    if method & (NGX_HTTP_GET | NGX_HTTP_HEAD) == 0 {
        return NGX_HTTP_NOT_ALLOWED as ngx_int_t;
    }
    if r.discard_request_body() != Status::NGX_OK {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    let Some(mcf) = Module::main_conf(r.as_ref()) else {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    };
    let now = now_ms();
    let Some(zone_name) = arg(r, "zone") else {
        // Every zone, http's and the stream's.
        let zones = crate::zone::running();
        let live: Vec<Live> = crate::zone::each(&zones)
            .filter_map(|zone| live(zone, now))
            .collect();
        let mut body = families::exposition(&mcf.tally, &live);
        let sheds: Vec<_> = mcf.sheds().collect();
        families::shed_exposition(&mut body, &sheds);
        return send(r, "text/plain; version=0.0.4; charset=utf-8", &body);
    };
    let zone_name = percent_decode(&zone_name);
    let Some(zone) = crate::zone::by_name(&zone_name) else {
        // JSON, as the writes answer it (src/api/overrides.rs).
        let n = String::from_utf8_lossy(&zone_name);
        return crate::api::overrides::error(r, 404, &format!("no zone \"{n}\""));
    };
    if has_flag(r, "overrides") {
        return crate::api::overrides::list(r, zone);
    }
    if arg(r, "cidr").is_some() {
        return crate::api::overrides::range_lookup(r, zone);
    }
    let key = match lookup_key(r, zone) {
        Ok(k) => k.unwrap_or_default(),
        Err(e) => return bad_request(r, &e),
    };
    let mut body = key_json(zone, &key, now);
    // The client's override, if any, as "override" (null: none).
    if body.ends_with("}\n") {
        body.truncate(body.len() - 2);
        let o = crate::api::overrides::lookup_json(zone, &key, now);
        // Its requests in flight now, holding an in_flight= place.
        let held = match (zone.table.as_ref(), zone.places.as_ref()) {
            (Some(t), Some(p)) => p.held(t.hash_key(&key).0),
            _ => 0,
        };
        body.push_str(&format!(",\"override\":{o},\"in_flight\":{held}}}\n"));
    }
    send(r, "application/json", &body)
}

/// The zone as the families read it; None before it is initialised.
fn live(zone: &ZoneConf, now: u64) -> Option<Live<'_>> {
    let (table, header) = zone.live()?;
    Some(Live {
        zone,
        table,
        header,
        now,
    })
}

/// JSON for one client of one zone.
fn key_json(zone: &ZoneConf, key: &[u8], now: u64) -> String {
    let Some(t) = zone.table.as_ref() else {
        return "{}".into();
    };
    let snap = t.peek(t.hash_key(key), now);
    if let Some(s) = snap.strict {
        return strict_key_json(zone, &s, now);
    }
    let start_ms = zone.window.start_ms(snap.window_index);
    // The estimate with three decimals (the decision compares it exactly).
    let w = zone.window.ms();
    let elapsed = now.saturating_sub(start_ms).min(w);
    let counts = Counts {
        current: snap.current,
        previous: snap.previous,
    };
    let estimate = estimate_scaled(counts, elapsed, w) as f64 / w as f64;
    format!(
        "{{\"zone\":{},\"window_seconds\":{},\"window_index\":{},\"window_start_utc\":{},\
         \"window_start_local\":{},\"current\":{},\"previous\":{},\"estimate\":{:.3}}}\n",
        json_str(&String::from_utf8_lossy(zone.name.as_bytes())),
        zone.window.secs() as f64,
        snap.window_index,
        json_str(&rfc3339(start_ms, 0)),
        json_str(&rfc3339(start_ms, local_offset_s(start_ms))),
        snap.current,
        snap.previous,
        estimate
    )
}

/// JSON for one client of a strict zone: the counts of its seven
/// sub-windows, newest first, with the start of the newest.
fn strict_key_json(zone: &ZoneConf, s: &strict::State, now: u64) -> String {
    let w = zone.window.ms();
    let start_ms = strict::sub_start(s.index, w);
    let counts: Vec<String> = s.counts.iter().map(|c| c.to_string()).collect();
    format!(
        "{{\"zone\":{},\"mode\":\"strict\",\"window_seconds\":{},\"sub_window_seconds\":{:.3},\
         \"sub_window_index\":{},\"sub_window_start_utc\":{},\"sub_window_counts\":[{}],\
         \"total\":{},\"now_utc\":{}}}\n",
        json_str(&String::from_utf8_lossy(zone.name.as_bytes())),
        w as f64 / 1000.0,
        w as f64 / 1000.0 / strict::K as f64,
        s.index,
        json_str(&rfc3339(start_ms, 0)),
        counts.join(","),
        s.total(),
        json_str(&rfc3339(now, 0))
    )
}
