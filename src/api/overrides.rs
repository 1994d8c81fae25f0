//! The override API of `rate_limit_window_metrics write=on;` (see
//! docs/runtime-control.md):
//!
//! * `PUT ?zone=NAME&key=VALUE` (or `&addr=TEXT`, or `&cidr=ADDR/BITS`
//!   for a range of addresses in a `$binary_remote_addr` zone) with a JSON body
//!   `{"limit": N}`, `{"in_flight": N}`, `{"block": true}` or
//!   `{"exempt": true}`, optionally with `"ttl": SECONDS`, sets that
//!   client's override;
//! * `DELETE ?zone=NAME&key=VALUE&override` removes it (a DELETE without
//!   `&override` resets the counts: reset.rs);
//! * `GET ?zone=NAME&overrides[&from=SLOT][&count=N]` lists the zone's
//!   overrides, paged (any `rate_limit_window_metrics`: it changes nothing).
//!
//! Bad input changes nothing: 400 with `{"error": "…"}` (the body parser is
//! the core's `override_body`), 413 for a body over 4 KB, 404 for an
//! unknown zone, 409 when the zone's table is full. Every change is logged
//! at `notice` (zone, the operator's address, the action, the key's
//! fingerprint, never the key) and counted in
//! `rate_limit_window_overrides_total{zone,action}`.

use nginx_sys::{ngx_int_t, NGX_HTTP_INTERNAL_SERVER_ERROR, NGX_LOG_NOTICE};
use ngx::core::Status;
use ngx::http::{HTTPStatus, Request};
use ngx::ngx_log_error;
use rate_limit_window_core::conf::addr::{parse_cidr, Cidr};
use rate_limit_window_core::overrides::body::{parse_body, Body, MAX_BODY};
use rate_limit_window_core::overrides::range::{range_of_id, Addr, Range};
use rate_limit_window_core::overrides::remote::field;
use rate_limit_window_core::overrides::{Action, ChangeKind, Entry, Overrides, MAX_EXPIRY_MS};
use rate_limit_window_core::Table;

use crate::api::format::{json_str, percent_decode};
use crate::api::{arg, lookup_key, send, send_status};
use crate::ffi::process::{cycle_log, now_ms};
use crate::ffi::req::body_handler;
use crate::zone::ZoneConf;

/// Default and largest `count=` of a listing page.
const PAGE_DEFAULT: usize = 100;
const PAGE_MAX: usize = 1000;

/// Sends `status` with `{"error": msg}`.
pub(crate) fn error(r: &mut Request, status: u16, msg: &str) -> ngx_int_t {
    let body = format!("{{\"error\":{}}}\n", json_str(msg));
    let status = HTTPStatus::from_u16(status).unwrap_or(HTTPStatus::BAD_REQUEST);
    send_status(r, status, "application/json", &body)
}

/// The zone that `?zone=` names, or the error answer's status and text.
fn zone_of(r: &mut Request) -> Result<&'static ZoneConf, (u16, String)> {
    let name = arg(r, "zone").ok_or((400, "give zone=NAME".to_string()))?;
    let name = percent_decode(&name);
    // A zone of either block, http's or the stream's.
    crate::zone::by_name(&name).ok_or_else(|| {
        let n = String::from_utf8_lossy(&name);
        (404, format!("no zone \"{n}\""))
    })
}

/// What a query names: a client (its key's fingerprint) or a range of
/// addresses (its id).
#[derive(Clone, Copy)]
struct Target {
    id: u64,
    range: Option<Range>,
}

impl Target {
    /// `"fingerprint":"…"` (the id as the fleet's hash names it) and, for a
    /// range, `,"cidr":"…"`.
    fn json(&self) -> String {
        let cidr = self.range.map_or(String::new(), |r| {
            format!(",\"cidr\":{}", json_str(&r.text()))
        });
        format!("\"fingerprint\":\"{}\"{cidr}", field(self.id))
    }

    /// The target in words, for the log (never a client's key).
    fn describe(&self) -> String {
        match self.range {
            Some(r) => format!("range {}", r.text()),
            None => format!("client {:014x}", self.id),
        }
    }
}

/// The zone and the client or range a query names.
fn target(
    r: &mut Request,
) -> Result<(&'static ZoneConf, Overrides<'static>, Target), (u16, String)> {
    let zone = zone_of(r)?;
    let (Some(t), Some(o)) = (zone.table.as_ref(), zone.overrides) else {
        return Err((404, "zone not initialised".into()));
    };
    if let Some(c) = arg(r, "cidr") {
        return cidr_target(r, zone, t, &c).map(|tg| (zone, o, tg));
    }
    let key = match lookup_key(r, zone) {
        Ok(Some(k)) => k,
        Ok(None) => {
            return Err((
                400,
                "give key=VALUE, addr=ADDRESS or cidr=ADDRESS/BITS".into(),
            ))
        }
        Err(e) => return Err((400, e)),
    };
    let id = t.hash_key(&key).fingerprint();
    Ok((zone, o, Target { id, range: None }))
}

/// The range `cidr=` names (`raw`: its value, percent-encoded), in a zone
/// keyed by `$binary_remote_addr`; a prefix as long as the zone's keys is
/// that address's own override.
fn cidr_target(
    r: &Request,
    zone: &ZoneConf,
    t: &Table,
    raw: &[u8],
) -> Result<Target, (u16, String)> {
    if arg(r, "key").is_some() || arg(r, "addr").is_some() {
        return Err((400, "give one of key=, addr= or cidr=".into()));
    }
    if zone.key_src.as_bytes() != crate::zone::BINARY_REMOTE_ADDR {
        return Err((
            400,
            format!(
                "cidr= needs a zone keyed by $binary_remote_addr; zone \"{}\" is keyed by \"{}\"",
                zone.name_str(),
                String::from_utf8_lossy(zone.key_src.as_bytes())
            ),
        ));
    }
    match parse_cidr(&percent_decode(raw), zone.ipv6_prefix) {
        Err(e) => Err((400, e.0)),
        Ok(Cidr::Key(k)) => Ok(Target {
            id: t.hash_key(&k).fingerprint(),
            range: None,
        }),
        Ok(Cidr::Range(rg)) => Ok(Target {
            id: rg.id(|k| t.hash_key(k)),
            range: Some(rg),
        }),
    }
}

/// `PUT`: reads the body (at most [`MAX_BODY`] bytes), then sets the
/// override in [`put_body`].
pub(crate) fn put(r: &mut Request) -> ngx_int_t {
    if r.as_ref().headers_in.content_length_n > MAX_BODY as i64 {
        if r.discard_request_body() != Status::NGX_OK {
            return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
        }
        return error(r, 413, &format!("body over {MAX_BODY} bytes"));
    }
    crate::ffi::req::read_body(r, Some(body_read))
}

// The body's post handler: answers, then finalizes the request.
body_handler!(body_read, put_body);

/// Sets the override a PUT's body asks for, and answers.
fn put_body(r: &mut Request) -> ngx_int_t {
    let Some(bytes) = crate::ffi::req::body_bytes(r, MAX_BODY) else {
        return error(r, 413, &format!("body over {MAX_BODY} bytes"));
    };
    let (zone, o, tg) = match target(r) {
        Ok(t) => t,
        Err((status, msg)) => return error(r, status, &msg),
    };
    let body = match parse_body(&bytes) {
        Ok(b) => b,
        Err(e) => return error(r, 400, &e),
    };
    let now = now_ms();
    let entry = Entry {
        fp: tg.id,
        action: body.action,
        expires_ms: body
            .ttl_s
            .map_or(0, |t| now.saturating_add(t * 1000).min(MAX_EXPIRY_MS)),
    };
    let previous = match o.set(entry, now) {
        Ok(p) => p,
        Err(full) => {
            let msg = format!(
                "zone \"{}\" holds {} overrides already (overrides={}): remove some, or raise overrides=",
                zone.name_str(),
                full.capacity,
                full.capacity
            );
            return error(r, 409, &msg);
        }
    };
    o.count_change(change_kind(&body));
    log_change(r, zone, &tg, &describe(&entry, now));
    let cluster = crate::sync::fleet_overrides::share(zone, tg.id);
    let answer = format!(
        "{{\"zone\":{},{},\"override\":{},\"previous\":{},\"cluster\":{cluster}}}\n",
        json_str(&zone.name_str()),
        tg.json(),
        entry_json(&entry, now),
        previous.map_or("null".into(), |p| entry_json(&p, now))
    );
    send(r, "application/json", &answer)
}

fn change_kind(b: &Body) -> ChangeKind {
    match b.action {
        Action::Limit(_) => ChangeKind::Limit,
        Action::InFlight(_) => ChangeKind::InFlight,
        Action::Exempt => ChangeKind::Exempt,
        Action::Block | Action::Ban => ChangeKind::Block,
    }
}

/// `DELETE …&override`: removes the client's override (ban included).
pub(crate) fn remove(r: &mut Request) -> ngx_int_t {
    if r.discard_request_body() != Status::NGX_OK {
        return NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    let (zone, o, tg) = match target(r) {
        Ok(t) => t,
        Err((status, msg)) => return error(r, status, &msg),
    };
    let now = now_ms();
    let removed = o.remove(tg.id, now);
    if let Some(e) = removed.as_ref() {
        o.count_change(ChangeKind::Remove);
        log_change(r, zone, &tg, &format!("removed ({})", describe(e, now)));
    }
    // Removed on every gateway, even if this one had none.
    let cluster = crate::sync::fleet_overrides::share(zone, tg.id);
    let answer = format!(
        "{{\"zone\":{},{},\"removed\":{},\"cluster\":{cluster}}}\n",
        json_str(&zone.name_str()),
        tg.json(),
        removed.map_or("null".into(), |e| entry_json(&e, now))
    );
    send(r, "application/json", &answer)
}

/// A reset (`DELETE` without `&override`) of `fp` lifts its ban, if any:
/// returns whether it did.
pub(crate) fn lift_ban(zone: &ZoneConf, fp: u64, now: u64) -> bool {
    let Some(o) = zone.overrides.as_ref() else {
        return false;
    };
    if o.get(fp, now).is_none_or(|e| e.action != Action::Ban) {
        return false;
    }
    let lifted = o.remove(fp, now).is_some();
    if lifted {
        o.count_change(ChangeKind::Remove);
        crate::sync::fleet_overrides::share(zone, fp);
    }
    lifted
}

/// `GET ?zone=NAME&overrides[&from=SLOT][&count=N]`: one page of the
/// zone's live overrides, with `next` (the `from=` of the next page, null
/// on the last).
pub(crate) fn list(r: &mut Request, zone: &ZoneConf) -> ngx_int_t {
    let Some(o) = zone.overrides else {
        return error(r, 404, "zone not initialised");
    };
    let num = |r: &mut Request, name: &str| {
        arg(r, name).map(|v| {
            std::str::from_utf8(&v)
                .ok()
                .and_then(|s| s.parse::<usize>().ok())
        })
    };
    let from = match num(r, "from") {
        None => 0,
        Some(Some(n)) => n,
        Some(None) => return error(r, 400, "from= must be a slot number (a page's \"next\")"),
    };
    let count = match num(r, "count") {
        None => PAGE_DEFAULT,
        Some(Some(n)) if (1..=PAGE_MAX).contains(&n) => n,
        _ => return error(r, 400, &format!("count= must be from 1 to {PAGE_MAX}")),
    };
    let now = now_ms();
    let (page, next) = o.page(from, count, now);
    let items: Vec<String> = page
        .iter()
        .map(|e| format!("{{{},{}", id_json(e.fp), &entry_json(e, now)[1..]))
        .collect();
    let body = format!(
        "{{\"zone\":{},\"capacity\":{},\"live\":{},\"overrides\":[{}],\"next\":{}}}\n",
        json_str(&zone.name_str()),
        o.capacity(),
        o.live(),
        items.join(","),
        next.map_or("null".into(), |n| n.to_string())
    );
    send(r, "application/json", &body)
}

/// How a listing names an entry: `"fingerprint":"…"` (a range's
/// prefixed `r`), and for a range its `"cidr"` (null when its id does not
/// hold the address: IPv6 prefixes over /48) and `"prefix"`.
fn id_json(id: u64) -> String {
    match range_of_id(id) {
        None => format!("\"fingerprint\":\"{}\"", field(id)),
        Some((_, len, range)) => format!(
            "\"fingerprint\":\"{}\",\"cidr\":{},\"prefix\":{len}",
            field(id),
            range.map_or("null".into(), |r| json_str(&r.text()))
        ),
    }
}

/// The `"override"` of a lookup: the client's live override, else (a
/// `$binary_remote_addr` zone) that of the most specific range holding its
/// address, with its `"cidr"`; or null.
pub(crate) fn lookup_json(zone: &ZoneConf, key: &[u8], now: u64) -> String {
    let (Some(t), Some(o)) = (zone.table.as_ref(), zone.overrides.as_ref()) else {
        return "null".into();
    };
    if let Some(e) = o.get_hash(t.hash_key(key), now) {
        return entry_json(&e, now);
    }
    let addr = (zone.key_src.as_bytes() == crate::zone::BINARY_REMOTE_ADDR)
        .then(|| Addr::of_key(key))
        .flatten();
    match addr.and_then(|a| o.range_get(a, |k| t.hash_key(k), now)) {
        Some((e, rg)) => {
            let j = entry_json(&e, now);
            format!("{},\"cidr\":{}}}", &j[..j.len() - 1], json_str(&rg.text()))
        }
        None => "null".into(),
    }
}

/// `GET ?zone=NAME&cidr=ADDR/BITS`: the range's own override (not those
/// of the ranges around it).
pub(crate) fn range_lookup(r: &mut Request, zone: &ZoneConf) -> ngx_int_t {
    let (Some(t), Some(o)) = (zone.table.as_ref(), zone.overrides) else {
        return error(r, 404, "zone not initialised");
    };
    let raw = arg(r, "cidr").unwrap_or_default();
    let tg = match cidr_target(r, zone, t, &raw) {
        Ok(tg) => tg,
        Err((status, msg)) => return error(r, status, &msg),
    };
    let now = now_ms();
    let body = format!(
        "{{\"zone\":{},{},\"override\":{}}}\n",
        json_str(&zone.name_str()),
        tg.json(),
        o.get(tg.id, now)
            .map_or("null".into(), |e| entry_json(&e, now))
    );
    send(r, "application/json", &body)
}

/// One entry as JSON: its action, its limit or places, and seconds left
/// (`expires_in`, null: never).
fn entry_json(e: &Entry, now: u64) -> String {
    let limit = match e.action {
        Action::Limit(n) => format!(",\"limit\":{n}"),
        Action::InFlight(n) => format!(",\"in_flight\":{n}"),
        _ => String::new(),
    };
    let left = if e.expires_ms == 0 {
        "null".to_string()
    } else {
        format!("{:.3}", e.expires_ms.saturating_sub(now) as f64 / 1000.0)
    };
    format!(
        "{{\"action\":\"{}\"{limit},\"expires_in\":{left}}}",
        e.action.name()
    )
}

/// An entry in words, for the log.
fn describe(e: &Entry, now: u64) -> String {
    let what = match e.action {
        Action::Limit(n) => format!("limit {n}"),
        Action::InFlight(n) => format!("in_flight {n}"),
        a => a.name().to_string(),
    };
    match e.secs_left(now) {
        Some(s) => format!("{what}, for {s}s"),
        None => what,
    }
}

/// The `notice` of a change: zone, the operator's address, the action and
/// the key's fingerprint (or the range). Written to the cycle's log, not
/// the request's: nginx would append the request line, whose query holds
/// the key.
fn log_change(r: &mut Request, zone: &ZoneConf, tg: &Target, what: &str) {
    let addr = crate::ffi::req::addr_text(r);
    ngx_log_error!(
        NGX_LOG_NOTICE,
        cycle_log(),
        "rate_limit_window: override of {} in zone \"{}\" changed by {}: {}",
        tg.describe(),
        zone.name_str(),
        String::from_utf8_lossy(addr),
        what
    );
}
