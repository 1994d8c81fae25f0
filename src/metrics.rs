//! The `rate_limit_window_metrics` content handler. It never changes counts.
//!
//! * `GET /location` — Prometheus text exposition, format 0.0.4.
//! * `GET /location?zone=NAME&key=VALUE` — JSON for one client of one zone;
//!   VALUE is the key exactly as the zone's key evaluates, percent-decoded.
//!
//! Access is controlled with the usual `allow`/`deny` in the location.

use core::fmt::Write as _;
use core::ptr;
use core::sync::atomic::{AtomicU64, Ordering};

use nginx_sys::{
    ngx_chain_t, ngx_create_temp_buf, ngx_http_arg, ngx_http_discard_request_body,
    ngx_http_output_filter, ngx_http_request_t, ngx_http_send_header, ngx_int_t, ngx_str_t,
    NGX_HTTP_GET, NGX_HTTP_HEAD, NGX_HTTP_INTERNAL_SERVER_ERROR, NGX_HTTP_NOT_ALLOWED,
    NGX_HTTP_NOT_FOUND,
};
use ngx::core::Status;
use ngx::http::HttpModuleMainConf;
use rate_limit_window_core::{estimate_scaled, strict, Counter, Counts};

use crate::util::now_ms;
use crate::zone::{ZoneConf, ZoneHeader};
use crate::Module;

/// Content handler installed by `rate_limit_window_metrics;`.
pub extern "C" fn handler(r: *mut ngx_http_request_t) -> ngx_int_t {
    // SAFETY: nginx calls content handlers with a valid request.
    unsafe { handle(r) }
}

/// # Safety
/// `r` must be a valid request in the content phase.
unsafe fn handle(r: *mut ngx_http_request_t) -> ngx_int_t {
    // SAFETY: r is valid.
    let method = unsafe { (*r).method } as u32;
    if method & (NGX_HTTP_GET | NGX_HTTP_HEAD) == 0 {
        return NGX_HTTP_NOT_ALLOWED as ngx_int_t;
    }
    // SAFETY: r is valid.
    if unsafe { ngx_http_discard_request_body(r) } != Status::NGX_OK.into() {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    // SAFETY: r is valid; main conf is set up for every http request.
    let Some(mcf) = Module::main_conf(unsafe { &*r }) else {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    };
    // SAFETY: zones live as long as the cycle.
    let zones: Vec<&ZoneConf> = mcf.zones.iter().map(|&z| unsafe { &*z }).collect();
    let now = now_ms();

    // SAFETY: r is valid.
    let zone_arg = unsafe { arg(r, "zone") };
    if let Some(zone_name) = zone_arg {
        let zone_name = percent_decode(&zone_name);
        let Some(zone) = zones
            .iter()
            .find(|z| z.name.as_bytes() == zone_name.as_slice())
        else {
            return NGX_HTTP_NOT_FOUND as ngx_int_t;
        };
        // SAFETY: r is valid.
        let key = unsafe { arg(r, "key") }
            .map(|k| percent_decode(&k))
            .unwrap_or_default();
        let body = key_json(zone, &key, now);
        // SAFETY: r is valid.
        return unsafe { send(r, "application/json", body.as_bytes()) };
    }
    let body = exposition(&zones, now);
    // SAFETY: r is valid.
    unsafe {
        send(
            r,
            "text/plain; version=0.0.4; charset=utf-8",
            body.as_bytes(),
        )
    }
}

/// A query argument's raw (still percent-encoded) value.
///
/// # Safety
/// `r` must be valid.
unsafe fn arg(r: *mut ngx_http_request_t, name: &str) -> Option<Vec<u8>> {
    let mut v = ngx_str_t::empty();
    // SAFETY: ngx_http_arg only reads `name` and points `v` into r->args.
    let rc = unsafe { ngx_http_arg(r, name.as_ptr() as *mut u8, name.len(), &mut v) };
    (rc == Status::NGX_OK.into()).then(|| v.as_bytes().to_vec())
}

/// Percent-decoding as in RFC 3986 (`+` stays `+`; send a space as `%20`).
pub fn percent_decode(s: &[u8]) -> Vec<u8> {
    fn hex(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' && i + 2 < s.len() {
            if let (Some(h), Some(l)) = (hex(s[i + 1]), hex(s[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// Escapes a Prometheus label value.
fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Escapes a JSON string.
fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// The Prometheus text exposition for every zone.
fn exposition(zones: &[&ZoneConf], now: u64) -> String {
    let mut o = String::with_capacity(512 + zones.len() * 1024);
    let family = |o: &mut String,
                  name: &str,
                  kind: &str,
                  help: &str,
                  samples: &dyn Fn(&mut String, &str, &ZoneConf)| {
        let _ = writeln!(o, "# HELP {name} {help}");
        let _ = writeln!(o, "# TYPE {name} {kind}");
        for z in zones {
            if z.table.is_some() {
                samples(o, &label(&z.name_str()), z);
            }
        }
    };
    let counter = |z: &ZoneConf, c: Counter| z.table.as_ref().map_or(0, |t| t.counter(c));

    family(
        &mut o,
        "rate_limit_window_requests_total",
        "counter",
        "Requests judged by the zone, by result.",
        &|o, n, z| {
            for (res, c) in [
                ("passed", Counter::Passed),
                ("rejected", Counter::Rejected),
                ("rejected_dry_run", Counter::RejectedDryRun),
                ("exempt", Counter::Exempt),
            ] {
                let _ = writeln!(
                    o,
                    "rate_limit_window_requests_total{{zone=\"{n}\",result=\"{res}\"}} {}",
                    counter(z, c)
                );
            }
        },
    );
    family(
        &mut o,
        "rate_limit_window_evictions_total",
        "counter",
        "Slots taken over for a new client: idle (no traffic for 2+ windows) or live (the zone is too small).",
        &|o, n, z| {
            for (kind, c) in [("idle", Counter::EvictIdle), ("live", Counter::EvictLive)] {
                let _ = writeln!(o, "rate_limit_window_evictions_total{{zone=\"{n}\",kind=\"{kind}\"}} {}", counter(z, c));
            }
        },
    );
    family(
        &mut o,
        "rate_limit_window_fail_closed_total",
        "counter",
        "Requests rejected by fail=closed: a new client while the zone was full, or an invalid limit value.",
        &|o, n, z| {
            let _ = writeln!(
                o,
                "rate_limit_window_fail_closed_total{{zone=\"{n}\"}} {}",
                counter(z, Counter::FailClosed)
            );
        },
    );
    family(
        &mut o,
        "rate_limit_window_clock_backwards_total",
        "counter",
        "Times a worker saw the clock older than a client's window (an NTP step back); counts were kept.",
        &|o, n, z| {
            let _ = writeln!(
                o,
                "rate_limit_window_clock_backwards_total{{zone=\"{n}\"}} {}",
                counter(z, Counter::ClockBackwards)
            );
        },
    );
    family(
        &mut o,
        "rate_limit_window_slots",
        "gauge",
        "Client slots the zone can hold.",
        &|o, n, z| {
            let cap = z.table.as_ref().map_or(0, |t| t.capacity());
            let _ = writeln!(o, "rate_limit_window_slots{{zone=\"{n}\"}} {cap}");
        },
    );
    family(
        &mut o,
        "rate_limit_window_slots_used",
        "gauge",
        "Estimate of slots holding a client active in the current or previous window (a scan without locks).",
        &|o, n, z| {
            let used = z.table.as_ref().map_or(0, |t| t.slots_used(now));
            let _ = writeln!(o, "rate_limit_window_slots_used{{zone=\"{n}\"}} {used}");
        },
    );
    family(
        &mut o,
        "rate_limit_window_invalid_limit_total",
        "counter",
        "Requests whose limit variable held something other than an integer in range (the zone's fail policy applied).",
        &|o, n, z| {
            let v = header_count(z, |h| &h.invalid_limits);
            let _ = writeln!(o, "rate_limit_window_invalid_limit_total{{zone=\"{n}\"}} {v}");
        },
    );
    family(
        &mut o,
        "rate_limit_window_swept_total",
        "counter",
        "Slots of clients silent for 2+ windows whose counts the sweep cleared (harmless; it keeps long-idle clients from coming back with old counts).",
        &|o, n, z| {
            let v = header_count(z, |h| &h.swept);
            let _ = writeln!(o, "rate_limit_window_swept_total{{zone=\"{n}\"}} {v}");
        },
    );
    let redis_zones: Vec<&ZoneConf> = zones
        .iter()
        .copied()
        .filter(|z| z.redis.is_some() && !z.header.is_null())
        .collect();
    if !redis_zones.is_empty() {
        let sync_family = |o: &mut String,
                           name: &str,
                           kind: &str,
                           help: &str,
                           value: &dyn Fn(&ZoneHeader) -> String| {
            let _ = writeln!(o, "# HELP {name} {help}");
            let _ = writeln!(o, "# TYPE {name} {kind}");
            for z in &redis_zones {
                // SAFETY: zone headers live in the zone for the cycle.
                let h = unsafe { &*z.header };
                let _ = writeln!(
                    o,
                    "{name}{{zone=\"{}\"}} {}",
                    label(&z.name_str()),
                    value(h)
                );
            }
        };
        sync_family(
            &mut o,
            "rate_limit_window_sync_errors_total",
            "counter",
            "Failed Redis sync rounds (connect, I/O or protocol errors).",
            &|h| h.sync_errors.load(Ordering::Relaxed).to_string(),
        );
        sync_family(
            &mut o,
            "rate_limit_window_sync_rounds_total",
            "counter",
            "Completed Redis sync rounds.",
            &|h| h.sync_rounds.load(Ordering::Relaxed).to_string(),
        );
        sync_family(
            &mut o,
            "rate_limit_window_sync_lag_seconds",
            "gauge",
            "Seconds since the last completed Redis sync round (-1: none yet).",
            &|h| match h.last_sync_ms.load(Ordering::Relaxed) {
                0 => "-1".into(),
                t => format!("{:.3}", now.saturating_sub(t) as f64 / 1000.0),
            },
        );
    }
    family(
        &mut o,
        "rate_limit_window_window_seconds",
        "gauge",
        "Window length of the zone in seconds.",
        &|o, n, z| {
            let _ = writeln!(
                o,
                "rate_limit_window_window_seconds{{zone=\"{n}\"}} {}",
                z.window.ms() as f64 / 1000.0
            );
        },
    );
    o
}

/// A counter of the zone header (0 before the zone is initialised).
fn header_count(z: &ZoneConf, counter: impl Fn(&ZoneHeader) -> &AtomicU64) -> u64 {
    if z.header.is_null() {
        return 0;
    }
    // SAFETY: the header lives in the zone for the cycle.
    counter(unsafe { &*z.header }).load(Ordering::Relaxed)
}

/// JSON for one client of a strict zone: the counts of its seven
/// sub-windows, newest first, with the start of the newest.
fn strict_key_json(zone: &ZoneConf, s: &strict::State, now: u64) -> String {
    let w = zone.window.ms();
    let start_ms = strict::sub_start(s.index, w);
    let counts: Vec<String> = s.counts.iter().map(|c| c.to_string()).collect();
    format!(
        "{{\"zone\":{},\"mode\":\"strict\",\"window_seconds\":{},\"sub_window_seconds\":{:.3},         \"sub_window_index\":{},\"sub_window_start_utc\":{},\"sub_window_counts\":[{}],         \"total\":{},\"now_utc\":{}}}\n",
        json_str(&zone.name_str()),
        w as f64 / 1000.0,
        w as f64 / 1000.0 / strict::K as f64,
        s.index,
        json_str(&rfc3339(start_ms, 0)),
        counts.join(","),
        s.total(),
        json_str(&rfc3339(now, 0))
    )
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
        json_str(&zone.name_str()),
        zone.window.ms() as f64 / 1000.0,
        snap.window_index,
        json_str(&rfc3339(start_ms, 0)),
        json_str(&rfc3339(start_ms, local_offset_s(start_ms))),
        snap.current,
        snap.previous,
        estimate
    )
}

/// The server's UTC offset (seconds) at the instant `ms`, from the C library
/// (honours TZ). A human-readable label only: it never keys anything.
fn local_offset_s(ms: u64) -> i64 {
    let t = (ms / 1000) as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`.
    let mut tm: libc::tm = unsafe { core::mem::zeroed() };
    // SAFETY: t and tm are valid for the call.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return 0;
    }
    tm.tm_gmtoff
}

/// Formats epoch `ms` as RFC 3339 at UTC offset `offset_s`.
pub fn rfc3339(ms: u64, offset_s: i64) -> String {
    let local = (ms / 1000) as i64 + offset_s;
    let days = local.div_euclid(86_400);
    let secs = local.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let mut s = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    );
    if ms % 1000 != 0 {
        let _ = write!(s, ".{:03}", ms % 1000);
    }
    if offset_s == 0 {
        s.push('Z');
    } else {
        let sign = if offset_s < 0 { '-' } else { '+' };
        let a = offset_s.abs();
        let _ = write!(s, "{sign}{:02}:{:02}", a / 3600, a / 60 % 60);
    }
    s
}

/// Sends a 200 response with `body`.
///
/// # Safety
/// `r` must be a valid request in the content phase.
unsafe fn send(r: *mut ngx_http_request_t, content_type: &'static str, body: &[u8]) -> ngx_int_t {
    // SAFETY: r is valid; we own the response.
    unsafe {
        (*r).headers_out.status = 200;
        (*r).headers_out.content_length_n = body.len() as i64;
        (*r).headers_out.content_type = ngx_str_t {
            len: content_type.len(),
            data: content_type.as_ptr() as *mut u8,
        };
        (*r).headers_out.content_type_len = content_type.len();
        (*r).headers_out.content_type_lowcase = ptr::null_mut();
        let rc = ngx_http_send_header(r);
        if rc == Status::NGX_ERROR.into() || rc > Status::NGX_OK.into() || (*r).header_only() != 0 {
            return rc;
        }
        let b = ngx_create_temp_buf((*r).pool, body.len().max(1));
        if b.is_null() {
            return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
        }
        ptr::copy_nonoverlapping(body.as_ptr(), (*b).last, body.len());
        (*b).last = (*b).last.add(body.len());
        (*b).set_last_buf(1);
        (*b).set_last_in_chain(1);
        let mut out = ngx_chain_t {
            buf: b,
            next: ptr::null_mut(),
        };
        ngx_http_output_filter(r, &mut out)
    }
}
