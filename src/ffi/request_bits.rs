//! The request's bit-fields, through the C accessors of `request_bits.c`.
//!
//! bindgen misplaces `ngx_http_request_t`'s bit-fields when the run starts
//! after a member of smaller alignment, as it does from nginx 1.29 on
//! (`in_port_t port`): its `header_only()` reads `pipeline` there, and a
//! gRPC rejection's header-only answer was sent as a stream without an end.
//! The C accessors are compiled against the nginx tree the module is built
//! for (build.rs), so they read and write the bits where nginx has them.
//! Every bit-field of the request the module touches goes through here.

use nginx_sys::{ngx_http_request_t, ngx_uint_t};
use ngx::http::Request;

extern "C" {
    fn rlw_request_header_only(r: *mut ngx_http_request_t) -> ngx_uint_t;
    fn rlw_request_set_header_only(r: *mut ngx_http_request_t);
    fn rlw_request_internal(r: *mut ngx_http_request_t) -> ngx_uint_t;
    fn rlw_request_error_page(r: *mut ngx_http_request_t) -> ngx_uint_t;
    fn rlw_request_subrequest_filters(r: *mut ngx_http_request_t) -> ngx_uint_t;
    fn rlw_request_side_work(r: *mut ngx_http_request_t) -> ngx_uint_t;
    fn rlw_request_upstream_goes_on(r: *mut ngx_http_request_t) -> ngx_uint_t;
}

/// The request's raw pointer, for the C accessors (which only read or
/// write one bit of it).
fn raw(r: &Request) -> *mut ngx_http_request_t {
    core::ptr::from_ref(r.as_ref()).cast_mut()
}

/// Whether the response has no body (`r->header_only`).
pub fn header_only(r: &Request) -> bool {
    // SAFETY: `r` is a live request; the accessor reads one bit of it.
    unsafe { rlw_request_header_only(raw(r)) != 0 }
}

/// Marks the response as header only (`r->header_only = 1`).
pub fn set_header_only(r: &mut Request) {
    // SAFETY: `r` is a live request, borrowed mutably; the accessor writes
    // one bit of it and nothing else.
    unsafe { rlw_request_set_header_only(raw(r)) }
}

/// Whether the request went through an internal redirect (`r->internal`).
pub fn internal(r: &Request) -> bool {
    // SAFETY: `r` is a live request; the accessor reads one bit of it.
    unsafe { rlw_request_internal(raw(r)) != 0 }
}

/// Whether an `error_page` is answering the request (`r->error_page`).
pub fn error_page(r: &Request) -> bool {
    // SAFETY: `r` is a live request; the accessor reads one bit of it.
    unsafe { rlw_request_error_page(raw(r)) != 0 }
}

/// Whether a filter that may start subrequests after the main request's
/// own last buffer (SSI, `add_after_body`, `slice`) works on `r`'s
/// response.
pub fn subrequest_filters(r: &Request) -> bool {
    // SAFETY: `r` is a live request; the accessor reads its module
    // contexts (an array of `ngx_http_max_module` pointers).
    unsafe { rlw_request_subrequest_filters(raw(r)) != 0 }
}

/// Whether nginx still works for `r`'s location after its answer: a
/// `post_action`, or `mirror` subrequests.
pub fn side_work(r: &Request) -> bool {
    // SAFETY: `r` is a live request; the accessor reads its location's
    // core and mirror configurations.
    unsafe { rlw_request_side_work(raw(r)) != 0 }
}

/// Whether `r`'s upstream goes on after a header-only answer (it reads the
/// body into a cache or a store).
pub fn upstream_goes_on(r: &Request) -> bool {
    // SAFETY: `r` is a live request; the accessor reads its upstream's
    // bits when it has one.
    unsafe { rlw_request_upstream_goes_on(raw(r)) != 0 }
}
