//! What the HTTP API locations (`rate_limit_window_metrics`, with
//! `write=on` its PUT and DELETE) share: query arguments, the key a query
//! names, and JSON answers; [`format`](mod@format) formats their text. Below the
//! locations' handlers, which import it and not one another's helpers: the
//! metrics page and one client's lookup ([`metrics`]), `write=on`'s
//! DELETE of one client's counts ([`reset`]) and the overrides' PUT,
//! DELETE and list ([`overrides`]).

pub(crate) mod format;
pub mod metrics;
pub mod overrides;
pub mod reset;

use core::ptr;

use nginx_sys::{ngx_chain_t, ngx_int_t, ngx_str_t, NGX_HTTP_INTERNAL_SERVER_ERROR};
use ngx::core::{Buffer, Status};
use ngx::http::{HTTPStatus, Request};
use rate_limit_window_core::conf::addr::{addr_key, mask_ipv6};

use crate::ffi::request_bits;
use crate::zone::ZoneConf;
use format::{json_str, percent_decode};

/// Whether the query has the bare flag `name` (`&override`, no value).
pub(crate) fn has_flag(r: &Request, name: &str) -> bool {
    let args = r.as_ref().args.as_bytes();
    args.split(|&c| c == b'&')
        .any(|a| a == name.as_bytes() || a.strip_prefix(name.as_bytes()) == Some(b"="))
}

/// The key a lookup names (GET, or DELETE with `reset=on`): `key=` as the
/// zone's key evaluates, percent-decoded, or `addr=` as an address in text
/// (a `$binary_remote_addr` zone only), both masked like the zone
/// (`ipv6_prefix=`). Ok(None): neither is given. Err: the 400's message.
pub(crate) fn lookup_key(r: &Request, zone: &ZoneConf) -> Result<Option<Vec<u8>>, String> {
    let binary = zone.key_src.as_bytes() == crate::zone::BINARY_REMOTE_ADDR;
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

/// A query argument's raw (still percent-encoded) value.
pub(crate) fn arg(r: &Request, name: &str) -> Option<Vec<u8>> {
    crate::ffi::req::arg(r, name).map(<[u8]>::to_vec)
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
    if rc == Status::NGX_ERROR || rc.0 > Status::NGX_OK.0 || request_bits::header_only(r) {
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
