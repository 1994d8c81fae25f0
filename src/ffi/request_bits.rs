//! The request's bit-fields, through the C accessors of `request_bits.c`.
//!
//! bindgen misplaces the bit-fields of nginx's request struct when the run starts
//! after a member of smaller alignment, as it does from nginx 1.29 on
//! (`in_port_t port`): its `header_only()` reads `pipeline` there, and a
//! gRPC rejection's header-only answer was sent as a stream without an end.
//! The C accessors are compiled against the nginx tree the module is built
//! for (build.rs), so they read and write the bits where nginx has them.
//! Every bit-field of the request the module touches goes through here.

use nginx_sys::ngx_uint_t;
use ngx::http::Request;

// Each accessor takes the request as a reference: `Request` is
// `repr(transparent)` over nginx's request, so C receives its address.
extern "C" {
    fn rlw_request_header_only(r: &Request) -> ngx_uint_t;
    fn rlw_request_set_header_only(r: &mut Request);
    fn rlw_request_internal(r: &Request) -> ngx_uint_t;
    fn rlw_request_error_page(r: &Request) -> ngx_uint_t;
    fn rlw_subrequest_filter_indexes(out: *mut ngx_uint_t) -> ngx_uint_t;
    fn rlw_request_side_work(r: &Request) -> ngx_uint_t;
    fn rlw_request_upstream_goes_on(r: &Request) -> ngx_uint_t;
}

/// Whether the response has no body (`r->header_only`).
pub fn header_only(r: &Request) -> bool {
    // SAFETY: `r` is a live request; the accessor reads one bit of it.
    unsafe { rlw_request_header_only(r) != 0 }
}

/// Marks the response as header only (`r->header_only = 1`).
pub fn set_header_only(r: &mut Request) {
    // SAFETY: `r` is a live request, borrowed mutably; the accessor writes
    // one bit of it and nothing else.
    unsafe { rlw_request_set_header_only(r) }
}

/// Whether the request went through an internal redirect (`r->internal`).
pub fn internal(r: &Request) -> bool {
    // SAFETY: `r` is a live request; the accessor reads one bit of it.
    unsafe { rlw_request_internal(r) != 0 }
}

/// Whether an `error_page` is answering the request (`r->error_page`).
pub fn error_page(r: &Request) -> bool {
    // SAFETY: `r` is a live request; the accessor reads one bit of it.
    unsafe { rlw_request_error_page(r) != 0 }
}

/// The filters that may start subrequests of a main request after its own
/// last buffer went by (SSI includes, `add_after_body`, the next slice)
/// that this nginx has: their module context indexes, read once (at
/// postconfiguration: a static module's `ctx_index` is the same in every
/// cycle), so that a body filter reads the request's contexts itself,
/// without a call per buffer.
#[derive(Clone, Copy)]
pub struct SubrequestFilters {
    index: [ngx_uint_t; 3],
    len: usize,
}

impl SubrequestFilters {
    /// None of them (before postconfiguration).
    pub const NONE: SubrequestFilters = SubrequestFilters {
        index: [0; 3],
        len: 0,
    };

    /// This nginx's.
    pub fn read() -> SubrequestFilters {
        let mut index = [0; 3];
        // SAFETY: the accessor writes at most 3 indexes into `index`.
        let len = unsafe { rlw_subrequest_filter_indexes(index.as_mut_ptr()) } as usize;
        SubrequestFilters {
            index,
            len: len.min(3),
        }
    }

    /// Whether one of them works on `r`'s response (each sets its context
    /// in its header filter, or its variable for slice, only then).
    #[inline(always)]
    pub fn work_on(&self, r: &Request) -> bool {
        let ctx = r.as_ref().ctx;
        self.index[..self.len].iter().any(|&i| {
            // SAFETY: `ctx` is the request's array of `ngx_http_max_module`
            // context pointers, and `i` a module's context index in it.
            !unsafe { *ctx.add(i) }.is_null()
        })
    }
}

/// Whether nginx still works for `r`'s location after its answer: a
/// `post_action`, or `mirror` subrequests.
pub fn side_work(r: &Request) -> bool {
    // SAFETY: `r` is a live request; the accessor reads its location's
    // core and mirror configurations.
    unsafe { rlw_request_side_work(r) != 0 }
}

/// Whether `r`'s upstream goes on after a header-only answer (it reads the
/// body into a cache or a store).
pub fn upstream_goes_on(r: &Request) -> bool {
    // SAFETY: `r` is a live request; the accessor reads its upstream's
    // bits when it has one.
    unsafe { rlw_request_upstream_goes_on(r) != 0 }
}
