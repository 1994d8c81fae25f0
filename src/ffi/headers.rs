//! Output headers: appended to the response in its pool, one by one or
//! several at once, without nginx's lowercase copy and hash.

use core::ptr;

use nginx_sys::{ngx_list_push, ngx_str_t, ngx_table_elt_t};
use ngx::http::Request;

use super::pool::pool_str;

/// Appends an output header `name: value` to the response, the value
/// copied into the request's pool.
pub fn add_header(r: &mut Request, name: &'static str, value: &[u8]) -> Option<()> {
    let value = pool_str(&mut r.pool(), value)?;
    add_pooled_header(r, name, value)
}

/// Appends an output header whose value already lives in the request's
/// pool (no copy). Hand-written rather than `Request::add_header_out`,
/// which copies the name as well, allocates and hashes its lowercase copy
/// (three pool allocations and a pass over the name on every limited
/// response) and leaves the element's `next` field (nginx 1.23+)
/// uninitialised.
pub fn add_pooled_header(r: &mut Request, name: &'static str, value: ngx_str_t) -> Option<()> {
    // SAFETY: headers_out.headers is an initialised ngx_list_t of
    // ngx_table_elt_t, allocated from the request's pool. A non-null h is
    // a fresh list element, ours to fill; zeroing it also clears `next`,
    // which exists from nginx 1.23 on. `name` is static and `value` lives
    // in the request's pool.
    unsafe {
        let h = ngx_list_push(&mut r.as_mut().headers_out.headers).cast::<ngx_table_elt_t>();
        if h.is_null() {
            return None;
        }
        fill_header(h, name, value);
    }
    Some(())
}

/// Fills the fresh output header element `h` with `name: value`, every
/// other field zeroed (`next` too, from nginx 1.23 on).
///
/// # Safety
/// `h` points to an element of the request's `headers_out.headers` that
/// nobody else uses yet; `value` lives in the request's pool.
#[inline(always)]
unsafe fn fill_header(h: *mut ngx_table_elt_t, name: &'static str, value: ngx_str_t) {
    // SAFETY: as the caller promises.
    unsafe {
        ptr::write_bytes(h, 0, 1);
        (*h).hash = 1;
        (*h).key = ngx_str_t {
            len: name.len(),
            data: name.as_ptr().cast_mut(),
        };
        (*h).value = value;
    }
}

/// Appends the output headers `name: value` of `headers`, in order, as
/// [`add_pooled_header`] does one by one: the list elements are taken at
/// once when its last part has room for all of them (what as many
/// `ngx_list_push` calls would hand out), else pushed one by one.
pub fn add_pooled_headers<const N: usize>(
    r: &mut Request,
    headers: [(&'static str, ngx_str_t); N],
) -> Option<()> {
    let list = &mut r.as_mut().headers_out.headers;
    // SAFETY: headers_out.headers is an initialised ngx_list_t of
    // ngx_table_elt_t (its `size`, checked), allocated from the request's
    // pool; its last part holds `nelts` of `nalloc` elements, so with room
    // for N more, elements nelts..nelts+N are unused memory of that part,
    // ours to fill once counted, as `ngx_list_push` would hand them out.
    // Each is zeroed first (also `next`, from nginx 1.23 on); the names are
    // static and the values live in the request's pool.
    unsafe {
        let last = list.last;
        let used = (*last).nelts;
        if list.size == size_of::<ngx_table_elt_t>() && used + N <= list.nalloc {
            (*last).nelts = used + N;
            let first = (*last).elts.cast::<ngx_table_elt_t>().add(used);
            for (k, (name, value)) in headers.into_iter().enumerate() {
                fill_header(first.add(k), name, value);
            }
            return Some(());
        }
    }
    for (name, value) in headers {
        add_pooled_header(r, name, value)?;
    }
    Some(())
}
