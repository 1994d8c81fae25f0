//! Small helpers shared by the handler, the filter and the metrics page:
//! the clock, strings in pool memory, and output headers.

use core::ptr;

use nginx_sys::{
    ngx_cached_time, ngx_list_push, ngx_palloc, ngx_pool_t, ngx_str_t, ngx_table_elt_t, ngx_worker,
};

/// Current time as UTC unix epoch milliseconds, from nginx's cached clock
/// (updated once per event-loop iteration). The core never reads a clock
/// itself: this is the one place where time enters the module.
pub fn now_ms() -> u64 {
    // SAFETY: ngx_cached_time always points at a valid ngx_time_t slot once
    // nginx has started (ngx_time_init runs before any configuration).
    let tp = unsafe { &*ngx_cached_time };
    (tp.sec.max(0) as u64) * 1000 + tp.msec as u64
}

/// The counter shard of this worker process (the table takes it modulo its
/// shard count).
pub fn shard() -> usize {
    // SAFETY: ngx_worker is written once when the worker starts.
    unsafe { ngx_worker }
}

/// Copies `bytes` into `pool`; None if the pool is out of memory.
///
/// # Safety
/// `pool` must be a valid nginx pool.
pub unsafe fn pool_str(pool: *mut ngx_pool_t, bytes: &[u8]) -> Option<ngx_str_t> {
    if bytes.is_empty() {
        return Some(ngx_str_t::empty());
    }
    // SAFETY: the caller guarantees a valid pool.
    let p = unsafe { ngx_palloc(pool, bytes.len()) }.cast::<u8>();
    if p.is_null() {
        return None;
    }
    // SAFETY: p has room for bytes.len() bytes and does not overlap bytes.
    unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
    Some(ngx_str_t {
        len: bytes.len(),
        data: p,
    })
}

/// Appends an output header `name: value` to the response.
///
/// # Safety
/// `r` must be a valid request whose headers have not been sent.
pub unsafe fn add_header(
    r: *mut nginx_sys::ngx_http_request_t,
    name: &'static str,
    value: &[u8],
) -> Option<()> {
    // SAFETY: r is valid; its pool lives as long as the request.
    let value = unsafe { pool_str((*r).pool, value) }?;
    // SAFETY: r is valid; value is in its pool.
    unsafe { add_pooled_header(r, name, value) }
}

/// Appends an output header whose value already lives in the request's
/// pool (no copy).
///
/// # Safety
/// `r` must be a valid request whose headers have not been sent, and
/// `value` must live as long as its pool.
pub unsafe fn add_pooled_header(
    r: *mut nginx_sys::ngx_http_request_t,
    name: &'static str,
    value: ngx_str_t,
) -> Option<()> {
    // SAFETY: headers_out.headers is an initialised ngx_list_t of ngx_table_elt_t.
    let h = unsafe { ngx_list_push(&mut (*r).headers_out.headers) }.cast::<ngx_table_elt_t>();
    if h.is_null() {
        return None;
    }
    // SAFETY: h is a fresh list element; zero it (this also clears `next`,
    // which exists from nginx 1.23 on) and fill the fields we use.
    unsafe {
        ptr::write_bytes(h, 0, 1);
        (*h).hash = 1;
        (*h).key = ngx_str_t {
            len: name.len(),
            data: name.as_ptr() as *mut u8,
        };
        (*h).value = value;
    }
    Some(())
}
