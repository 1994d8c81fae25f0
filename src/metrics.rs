//! The `rate_limit_window_metrics` content handler. It never changes counts.
//!
//! * `GET /location` — Prometheus text exposition, format 0.0.4 (the
//!   families are a table in `metrics/families.rs`).
//! * `GET /location?zone=NAME&key=VALUE` — JSON for one client of one zone;
//!   VALUE is the key exactly as the zone's key evaluates, percent-decoded.
//! * `GET /location?zone=NAME&addr=TEXT` — the same for an address in text,
//!   in a zone keyed by `$binary_remote_addr` (400 with a JSON error
//!   otherwise, or for a `key=` that is no address's 4 or 16 bytes).
//!
//! Access is controlled with the usual `allow`/`deny` in the location.

mod families;
pub(crate) mod format;

use core::ptr;

use nginx_sys::{
    ngx_chain_t, ngx_http_arg, ngx_http_request_t, ngx_int_t, ngx_str_t, NGX_HTTP_GET,
    NGX_HTTP_HEAD, NGX_HTTP_INTERNAL_SERVER_ERROR, NGX_HTTP_NOT_ALLOWED, NGX_HTTP_NOT_FOUND,
};
use ngx::core::{Buffer, Status};
use ngx::http::{HTTPStatus, HttpModuleMainConf, Request};
use rate_limit_window_core::addr::{addr_key, mask_ipv6};
use rate_limit_window_core::{estimate_scaled, strict, Counts};

use crate::util::now_ms;
use crate::zone::ZoneConf;
use crate::Module;
use families::Live;
use format::{json_str, local_offset_s, percent_decode, rfc3339};

/// Content handler installed by `rate_limit_window_metrics;`.
pub extern "C" fn handler(r: *mut ngx_http_request_t) -> ngx_int_t {
    // SAFETY: nginx calls content handlers with a valid request, which
    // shares the representation of `Request`.
    let r = unsafe { Request::from_ngx_http_request(r) };
    handle(r)
}

fn handle(r: &mut Request) -> ngx_int_t {
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
        let live: Vec<Live> = mcf.zones().filter_map(|zone| live(zone, now)).collect();
        let body = families::exposition(&live);
        return send(r, "text/plain; version=0.0.4; charset=utf-8", &body);
    };
    let zone_name = percent_decode(&zone_name);
    let Some(zone) = mcf.zones().find(|z| z.name.as_bytes() == zone_name) else {
        return NGX_HTTP_NOT_FOUND as ngx_int_t;
    };
    if crate::override_api::has_flag(r, "overrides") {
        return crate::override_api::list(r, zone);
    }
    let key = match lookup_key(r, zone) {
        Ok(k) => k.unwrap_or_default(),
        Err(e) => return bad_request(r, &e),
    };
    let mut body = key_json(zone, &key, now);
    // The client's override, if any, as "override" (null: none).
    if body.ends_with("}\n") {
        body.truncate(body.len() - 2);
        let o = crate::override_api::lookup_json(zone, &key, now);
        body.push_str(&format!(",\"override\":{o}}}\n"));
    }
    send(r, "application/json", &body)
}

/// The key a lookup names (GET, or DELETE with `reset=on`): `key=` as the
/// zone's key evaluates, percent-decoded, or `addr=` as an address in text
/// (a `$binary_remote_addr` zone only), both masked like the zone
/// (`ipv6_prefix=`). Ok(None): neither is given. Err: the 400's message.
pub(crate) fn lookup_key(r: &mut Request, zone: &ZoneConf) -> Result<Option<Vec<u8>>, String> {
    let binary = zone.key_src.as_bytes() == crate::conf::BINARY_REMOTE_ADDR;
    match (arg(r, "key"), arg(r, "addr")) {
        (Some(_), Some(_)) => Err("give key= or addr=, not both".into()),
        (None, Some(_)) if !binary => Err(format!(
            "addr= needs a zone keyed by $binary_remote_addr; zone \"{}\" is keyed by \"{}\": use key=",
            zone.name_str(),
            String::from_utf8_lossy(zone.key_src.as_bytes())
        )),
        (None, Some(addr)) => addr_key(&percent_decode(&addr), zone.ipv6_prefix)
            .map(Some)
            .map_err(|e| e.0),
        (Some(key), None) => {
            let key = percent_decode(&key);
            if binary && key.len() != 4 && key.len() != 16 {
                return Err(format!(
                    "zone \"{}\" is keyed by $binary_remote_addr, 4 or 16 bytes, and key= has {}: \
                     look an address up with addr= (addr=192.0.2.1, addr=2001:db8::1)",
                    zone.name_str(),
                    key.len()
                ));
            }
            Ok(Some(match mask_ipv6(&key, zone.ipv6_prefix) {
                Some(m) if binary => m.to_vec(),
                _ => key,
            }))
        }
        (None, None) => Ok(None),
    }
}

/// A 400 with a JSON error.
pub(crate) fn bad_request(r: &mut Request, msg: &str) -> ngx_int_t {
    let body = format!("{{\"error\":{}}}\n", json_str(msg));
    send_status(r, HTTPStatus::BAD_REQUEST, "application/json", &body)
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

/// A query argument's raw (still percent-encoded) value.
pub(crate) fn arg(r: &mut Request, name: &str) -> Option<Vec<u8>> {
    let mut v = ngx_str_t::empty();
    // SAFETY: the request is valid; ngx_http_arg only reads `name` and
    // points `v` into r->args.
    let rc = unsafe { ngx_http_arg(r.into(), name.as_ptr().cast_mut(), name.len(), &mut v) };
    (rc == Status::NGX_OK.into()).then(|| v.as_bytes().to_vec())
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
        zone.window.ms() as f64 / 1000.0,
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

/// Sends a 200 response with `body`.
pub(crate) fn send(r: &mut Request, content_type: &'static str, body: &str) -> ngx_int_t {
    send_status(r, HTTPStatus::OK, content_type, body)
}

/// Sends a `status` response with `body`.
pub(crate) fn send_status(
    r: &mut Request,
    status: HTTPStatus,
    content_type: &'static str,
    body: &str,
) -> ngx_int_t {
    r.set_status(status);
    r.set_content_length_n(body.len());
    let out = &mut r.as_mut().headers_out;
    out.content_type = ngx_str_t {
        len: content_type.len(),
        data: content_type.as_ptr().cast_mut(),
    };
    out.content_type_len = content_type.len();
    out.content_type_lowcase = ptr::null_mut();
    let rc = r.send_header();
    if rc == Status::NGX_ERROR || rc.0 > Status::NGX_OK.0 || r.header_only() {
        return rc.0;
    }
    let Some(mut buf) = r.pool().create_buffer_from_str(body) else {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    };
    buf.set_last_buf(true);
    buf.set_last_in_chain(true);
    let mut out = ngx_chain_t {
        buf: buf.as_ngx_buf_mut(),
        next: ptr::null_mut(),
    };
    r.output_filter(&mut out).0
}
