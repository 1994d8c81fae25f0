//! gRPC-native rejections (`rate_limit_window_grpc on`, the default).
//!
//! gRPC clients map an HTTP 429 or 503 to `UNAVAILABLE` and retry at once.
//! A rejected request whose `content-type` is `application/grpc…` is
//! therefore answered the gRPC way, with a trailers-only response: HTTP 200,
//! `content-type: application/grpc`, `grpc-status: 8`
//! (RESOURCE_EXHAUSTED), a percent-encoded `grpc-message` and
//! `grpc-retry-pushback-ms`, the Retry-After wait in ms, which a client's
//! retry policy honours (gRFC A6). The response has no body: over HTTP/2
//! nginx sends one HEADERS frame with END_STREAM. The header filter adds
//! Retry-After and the RateLimit headers as to any rejection, and the
//! decision (`$rate_limit_window_status`, the log line, the metrics) is the
//! same; only the access log's `$status` reads 200, the status sent.
//!
//! Both phases and `delay=` reach [`reject`]: a held request that is finally
//! rejected is decided again by the phase handler, which answers it here.
//! See docs/grpc.md.

use core::ptr;

use nginx_sys::{ngx_http_finalize_request, ngx_int_t, ngx_str_t, ngx_uint_t, NGX_HTTP_VERSION_20};
use ngx::core::Status;
use ngx::http::Request;
use ngx::ngx_log_debug_http;
use rate_limit_window_core::grpc::{
    is_grpc_content_type, message, pushback_ms, CONTENT_TYPE, STATUS_RESOURCE_EXHAUSTED,
};

use crate::conf::LocConf;
use crate::ffi::headers::add_header;
use crate::ffi::request_bits;

/// Answers a request the location's limits have just rejected (Retry-After
/// `retry_after_s` seconds, already committed in its decision): a gRPC
/// call gets the trailers-only answer and NGX_DONE (the request is
/// finalized here); any other request, or with `rate_limit_window_grpc
/// off`, gets `rate_limit_window_status` for the phase to finalize.
pub fn reject(r: &mut Request, lcf: &LocConf, retry_after_s: u32) -> ngx_int_t {
    if lcf.grpc == 0 || !r.is_main() || !is_grpc_call(r) {
        return lcf.status;
    }
    ngx_log_debug_http!(
        r,
        "rate_limit_window: gRPC call: RESOURCE_EXHAUSTED, pushback {} ms",
        pushback_ms(retry_after_s)
    );
    let rc = send(r, retry_after_s);
    // SAFETY: the request is valid; after this call it may be freed, and
    // nothing below touches it.
    unsafe { ngx_http_finalize_request(r.into(), rc) };
    Status::NGX_DONE.into()
}

/// Whether the request's `content-type` is `application/grpc…`.
fn is_grpc_call(r: &Request) -> bool {
    // SAFETY: a non-null content_type header is a valid element of the
    // request's header list, alive as long as the request.
    let Some(h) = (unsafe { r.as_ref().headers_in.content_type.as_ref() }) else {
        return false;
    };
    is_grpc_content_type(h.value.as_bytes())
}

/// Sends the trailers-only answer's header (there is no body) and returns
/// what `ngx_http_send_header` returned, or an HTTP error status.
fn send(r: &mut Request, retry_after_s: u32) -> ngx_int_t {
    // The call's messages are not read: dropped as they come (over HTTP/2
    // the stream's DATA frames are skipped).
    let rc: ngx_int_t = r.discard_request_body().into();
    if rc != Status::NGX_OK.into() {
        return rc;
    }
    set_status_line(r);
    let pushback = pushback_ms(retry_after_s).to_string();
    let added = add_header(r, "grpc-status", STATUS_DIGITS.as_bytes())
        .and_then(|()| add_header(r, "grpc-message", message(retry_after_s).as_bytes()))
        .and_then(|()| add_header(r, "grpc-retry-pushback-ms", pushback.as_bytes()));
    if added.is_none() {
        return nginx_sys::NGX_HTTP_INTERNAL_SERVER_ERROR as ngx_int_t;
    }
    r.send_header().into()
}

/// `grpc-status` as sent: RESOURCE_EXHAUSTED.
const STATUS_DIGITS: &str = "8";
const _: () = assert!(STATUS_RESOURCE_EXHAUSTED == 8);

/// HTTP 200, `content-type: application/grpc`, header only. Over HTTP/2
/// without a content-length, so that the one HEADERS frame ends the
/// stream as gRPC's trailers-only form; over HTTP/1.x with
/// `Content-Length: 0`, so that a keep-alive client sees the end.
fn set_status_line(r: &mut Request) {
    request_bits::set_header_only(r);
    let raw = r.as_mut();
    let http2 = raw.http_version >= NGX_HTTP_VERSION_20 as ngx_uint_t;
    let out = &mut raw.headers_out;
    out.status = 200;
    out.status_line = ngx_str_t::empty();
    out.content_length_n = if http2 { -1 } else { 0 };
    if !out.content_length.is_null() {
        // SAFETY: a non-null content_length is an element of the
        // response's header list; hash 0 removes it from the output.
        unsafe { (*out.content_length).hash = 0 };
        out.content_length = ptr::null_mut();
    }
    out.content_type = ngx_str_t {
        len: CONTENT_TYPE.len(),
        data: CONTENT_TYPE.as_ptr().cast_mut(),
    };
    out.content_type_len = CONTENT_TYPE.len();
    out.content_type_lowcase = ptr::null_mut();
    out.charset = ngx_str_t::empty();
}
