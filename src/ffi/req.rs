//! The request crossing the C boundary, once: the variable and body
//! handlers' entry macros (each turns nginx's raw arguments into
//! `&mut Request` and a `&mut` value), and safe request helpers (query
//! arguments, the client's address, the request body, pool memory) so that
//! feature code never touches the raw `ngx_http_request_t`.

use nginx_sys::{
    ngx_http_client_body_handler_pt, ngx_http_read_client_request_body, ngx_http_request_t,
    ngx_http_variable_value_t, ngx_int_t,
};
use ngx::core::Status;
use ngx::http::Request;

/// The request and the value of a variable getter's call.
///
/// # Safety
/// `r` and `v` must be what nginx passes to a variable's get handler.
pub unsafe fn args<'a>(
    r: *mut ngx_http_request_t,
    v: *mut ngx_http_variable_value_t,
) -> (&'a mut Request, &'a mut ngx_http_variable_value_t) {
    // SAFETY: nginx passes a valid request, which shares the representation
    // of `Request`, and a valid value for us to fill.
    unsafe { (Request::from_ngx_http_request(r), &mut *v) }
}

/// Defines `extern "C" fn $name` (with visibility `$vis`), a phase,
/// content or header filter handler, over `$handle: fn(&mut Request) ->
/// ngx_int_t`. As ngx's `http_request_handler!`, whose function is private
/// (conf/mod.rs installs the content handlers).
macro_rules! request_handler {
    ($vis:vis $name:ident, $handle:expr) => {
        $vis extern "C" fn $name(r: *mut nginx_sys::ngx_http_request_t) -> nginx_sys::ngx_int_t {
            // SAFETY: nginx calls a handler with a valid request, which
            // shares the representation of `Request`.
            $handle(unsafe { ngx::http::Request::from_ngx_http_request(r) })
        }
    };
}
pub(crate) use request_handler;

/// Defines `extern "C" fn $name`, a body filter, over `$filter:
/// fn(&mut Request, *mut ngx_chain_t) -> ngx_int_t`.
macro_rules! body_filter {
    ($name:ident, $filter:expr) => {
        extern "C" fn $name(
            r: *mut nginx_sys::ngx_http_request_t,
            chain: *mut nginx_sys::ngx_chain_t,
        ) -> nginx_sys::ngx_int_t {
            // SAFETY: nginx calls a body filter with a valid request, which
            // shares the representation of `Request`, and its chain.
            let r = unsafe { ngx::http::Request::from_ngx_http_request(r) };
            $filter(r, chain)
        }
    };
}
pub(crate) use body_filter;

/// The request as nginx's C functions and its raw fields take it (the
/// same address: `Request` is `repr(transparent)` over nginx's request).
/// nginx's request is shared with its own C code, which writes it through
/// this very pointer.
#[inline(always)]
pub fn ptr(r: &Request) -> *mut ngx_http_request_t {
    core::ptr::from_ref(r).cast_mut().cast()
}

/// Defines `extern "C" fn $name` (with visibility `$vis`), a variable's
/// get handler, over `$get`:
/// `fn(&mut Request, &mut ngx_http_variable_value_t) -> ngx_int_t`.
macro_rules! variable_get {
    ($vis:vis $name:ident, $get:expr) => {
        $vis extern "C" fn $name(
            r: *mut nginx_sys::ngx_http_request_t,
            v: *mut nginx_sys::ngx_http_variable_value_t,
            _data: usize,
        ) -> nginx_sys::ngx_int_t {
            // SAFETY: nginx calls a get handler with a valid request and a
            // value to fill (see `args`).
            let (r, v) = unsafe { $crate::ffi::req::args(r, v) };
            $get(r, v)
        }
    };
}
pub(crate) use variable_get;

/// Defines `extern "C" fn $name`, a request body's post handler, over
/// `$then: fn(&mut Request) -> ngx_int_t`: the answer, with which the
/// request is then finalized (ending the read that [`read_body`] started).
macro_rules! body_handler {
    ($name:ident, $then:expr) => {
        extern "C" fn $name(r: *mut nginx_sys::ngx_http_request_t) {
            // SAFETY: nginx calls it with the request whose body it read,
            // which shares the representation of `Request`; finalizing it
            // once ends the read.
            unsafe {
                let rc = $then(ngx::http::Request::from_ngx_http_request(r));
                nginx_sys::ngx_http_finalize_request(r, rc);
            }
        }
    };
}
pub(crate) use body_handler;

/// Starts reading the request body (in a content handler); nginx calls
/// `then` (made with [`body_handler!`]) once it is in. NGX_DONE, or the
/// error status nginx answered.
pub fn read_body(r: &mut Request, then: ngx_http_client_body_handler_pt) -> ngx_int_t {
    // SAFETY: a valid request in its content handler; nginx counts the
    // request while the body is read, and calls `then` once.
    let rc = unsafe { ngx_http_read_client_request_body(r.into(), then) };
    if rc >= nginx_sys::NGX_HTTP_SPECIAL_RESPONSE as ngx_int_t {
        return rc;
    }
    Status::NGX_DONE.into()
}

/// The bytes of the request body read by [`read_body`], or None when over
/// `max` bytes (or in a temporary file, which only a larger body is).
pub fn body_bytes(r: &Request, max: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    // SAFETY: request_body is null or nginx's, and so are the links of its
    // chain and their buffers, valid while the request is; pos..last are a
    // buffer's valid bytes.
    unsafe {
        let mut cl = r
            .as_ref()
            .request_body
            .as_ref()
            .map_or(core::ptr::null_mut(), |b| b.bufs);
        while let Some(link) = cl.as_ref() {
            let b = &*link.buf;
            let in_memory = b.temporary() != 0 || b.memory() != 0 || b.mmap() != 0;
            if (b.in_file() != 0 && !in_memory) || out.len() > max {
                return None;
            }
            if !b.pos.is_null() && b.last > b.pos {
                let n = b.last.offset_from(b.pos) as usize;
                out.extend_from_slice(core::slice::from_raw_parts(b.pos, n));
            }
            cl = link.next;
        }
    }
    (out.len() <= max).then_some(out)
}

/// A query argument's raw (still percent-encoded) value.
pub fn arg<'r>(r: &'r Request, name: &str) -> Option<&'r [u8]> {
    query_arg(r.as_ref().args.as_bytes(), name.as_bytes())
}

/// `ngx_http_arg`'s rule over a query string `args`: the value of the first
/// `name=` (ASCII case-insensitive) that starts the string or follows a
/// `&`, up to the next `&`. `name` holds no `&`.
fn query_arg<'a>(args: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let n = name.len();
    (0..args.len().saturating_sub(n)).find_map(|i| {
        let starts = i == 0 || args[i - 1] == b'&';
        if !starts || args[i + n] != b'=' || !args[i..i + n].eq_ignore_ascii_case(name) {
            return None;
        }
        let value = &args[i + n + 1..];
        Some(&value[..value.iter().position(|&c| c == b'&').unwrap_or(value.len())])
    })
}

/// The client's address in text (the connection's `addr_text`).
pub fn addr_text(r: &Request) -> &[u8] {
    // SAFETY: the request's connection is valid while the request runs.
    unsafe { &*r.connection() }.addr_text.as_bytes()
}

/// Defines `extern "C" fn $name`, a request's read or write event handler
/// (`r->write_event_handler`), over `$handle: fn(&mut Request)`.
macro_rules! event_handler {
    ($name:ident, $handle:expr) => {
        extern "C" fn $name(r: *mut nginx_sys::ngx_http_request_t) {
            // SAFETY: nginx calls a request's event handler with that valid
            // request, which shares the representation of `Request`.
            $handle(unsafe { ngx::http::Request::from_ngx_http_request(r) })
        }
    };
}
pub(crate) use event_handler;
