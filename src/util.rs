//! Small helpers shared by the handler, the filter and the metrics page:
//! the clock, strings in pool memory, and output headers.

use core::alloc::Layout;
use core::cell::UnsafeCell;
use core::ptr;

use nginx_sys::{
    ngx_add_timer, ngx_cached_time, ngx_cycle, ngx_cycle_t, ngx_event_handler_pt, ngx_event_t,
    ngx_exiting, ngx_http_get_flushed_variable, ngx_http_get_indexed_variable, ngx_http_request_t,
    ngx_list_push, ngx_log_t, ngx_msec_t, ngx_quit, ngx_str_t, ngx_table_elt_t, ngx_terminate,
    ngx_uint_t, ngx_variable_value_t, ngx_worker,
};
use ngx::allocator::Allocator;
use ngx::core::Pool;
use ngx::http::Request;

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

/// nginx's running cycle (`ngx_cycle`), if one is set: while a
/// configuration loads, the cycle that runs now (the previous one).
pub fn cycle() -> Option<&'static ngx_cycle_t> {
    // SAFETY: ngx_cycle is null or points at the running cycle, which this
    // process's event loop thread (the only caller) keeps alive while it
    // runs, and a loading configuration until its cycle replaces it.
    unsafe { ngx_cycle.as_ref() }
}

/// The running cycle's log (null before there is one). Messages that must
/// not carry the request line (it may hold a key) go there.
pub fn cycle_log() -> *mut ngx_log_t {
    cycle().map_or(ptr::null_mut(), |c| c.log)
}

/// A timer event of this process (the sweep's, the state writer's): only
/// ever touched by the event loop thread, so it lives in a thread-local
/// (`thread_local! { static T: Timer = const { Timer::new() } }`), at an
/// address that stays put while nginx's timer tree holds it.
pub struct Timer(UnsafeCell<ngx_event_t>);

impl Timer {
    /// An idle event (all zero, as nginx allocates its own with ngx_pcalloc).
    pub const fn new() -> Self {
        // SAFETY: an all-zero ngx_event_t is a valid idle event.
        Timer(UnsafeCell::new(unsafe { core::mem::zeroed() }))
    }

    /// Arms the timer to call `handler` in `ms` ms, logging to `log`.
    pub fn arm(&self, handler: ngx_event_handler_pt, log: *mut ngx_log_t, ms: ngx_msec_t) {
        let ev = self.0.get();
        // SAFETY: the event is this thread's own (see `Timer`), not borrowed
        // elsewhere; nginx keeps a pointer to it in its timer tree, which
        // only this thread's event loop reads.
        unsafe {
            (*ev).handler = handler;
            (*ev).log = log;
            (*ev).set_cancelable(1);
            ngx_add_timer(ev, ms);
        }
    }

    /// Arms the timer again (from its handler) in `ms` ms, unless the
    /// process is exiting, quitting or terminating.
    pub fn rearm(&self, ms: ngx_msec_t) {
        // SAFETY: process-wide flags, written by the signal handler or the
        // event loop of this same process; the event is as in `arm`.
        unsafe {
            if ngx_exiting == 0 && ngx_quit == 0 && ngx_terminate == 0 {
                ngx_add_timer(self.0.get(), ms);
            }
        }
    }
}

/// A copy of `bytes` in `pool` (alignment 1), or None when the pool is out
/// of memory. The copy lives as long as the pool, which outlives any
/// handle of it (a request's `r.pool()`, say): nothing else refers to it.
pub fn pool_copy<'p>(pool: &'p mut Pool, bytes: &[u8]) -> Option<&'p mut [u8]> {
    let len = bytes.len();
    let at = Allocator::allocate(&*pool, Layout::array::<u8>(len).ok()?).ok()?;
    let at = at.cast::<u8>().as_ptr();
    // SAFETY: `allocate` gave `len` fresh bytes of the pool (a dangling,
    // aligned pointer when `len` is 0), which no one else refers to and
    // which live as long as the pool; the copy initialises all of them.
    unsafe {
        ptr::copy_nonoverlapping(bytes.as_ptr(), at, len);
        Some(core::slice::from_raw_parts_mut(at, len))
    }
}

/// `bytes` copied into `pool`, as an nginx string (None: out of memory).
pub fn pool_str(pool: &mut Pool, bytes: &[u8]) -> Option<ngx_str_t> {
    let copy = pool_copy(pool, bytes)?;
    Some(ngx_str_t {
        len: copy.len(),
        data: copy.as_mut_ptr(),
    })
}

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

/// The bytes of a variable's value; empty when the variable was not found.
///
/// nginx declares the value's flags as C bitfields, `unsigned len:28;
/// valid:1; no_cacheable:1; not_found:1; escape:1;`, first in the struct.
/// bindgen's getters assemble such fields one bit at a time (about 60
/// instructions for `len` and `not_found`, on every request); on
/// little-endian targets the C ABIs (x86_64, AArch64 ELF) allocate the
/// fields from the least significant bit of the first 32-bit word, so both
/// are read here with one load.
///
/// # Safety
/// `v` must be a value nginx filled in, whose data lives as long as `v`.
pub unsafe fn variable_bytes(v: &ngx_variable_value_t) -> &[u8] {
    #[cfg(target_endian = "little")]
    let (len, not_found) = {
        // SAFETY: the struct is repr(C) and starts with the 32-bit
        // bitfield unit (checked at compile time below).
        let word = unsafe { ptr::from_ref(v).cast::<u32>().read() };
        ((word & 0x0fff_ffff) as usize, word & (1 << 30) != 0)
    };
    #[cfg(not(target_endian = "little"))]
    let (len, not_found) = (v.len() as usize, v.not_found() != 0);
    if not_found || len == 0 || v.data.is_null() {
        return &[];
    }
    // SAFETY: data holds len bytes for as long as the value lives.
    unsafe { core::slice::from_raw_parts(v.data, len) }
}

/// `ngx_http_get_flushed_variable(r, index)` with its test of the cached
/// value made here (the flag bits `variable_bytes` reads, bit 28 `valid`,
/// 29 `no_cacheable`, 30 `not_found`): a value not evaluated yet goes
/// straight to `ngx_http_get_indexed_variable`, as nginx's function does,
/// a cacheable cached one is returned, and a non-cacheable cached one is
/// left to nginx's function to reset and evaluate again. Null on an
/// nginx error.
///
/// # Safety
/// `r` is a valid request and `index` a variable index obtained at
/// configuration time (within its variables array).
#[cfg(target_endian = "little")]
#[inline]
pub unsafe fn flushed_variable(
    r: *mut ngx_http_request_t,
    index: ngx_uint_t,
) -> *mut ngx_variable_value_t {
    const VALID: u32 = 1 << 28;
    const NO_CACHEABLE: u32 = 1 << 29;
    const NOT_FOUND: u32 = 1 << 30;
    // SAFETY: per the contract, `variables[index]` is the request's value,
    // whose first 32-bit word is the bitfield unit (see variable_bytes).
    unsafe {
        let v = (*r).variables.add(index);
        let word = v.cast::<u32>().read();
        if word & (VALID | NOT_FOUND) == 0 {
            return ngx_http_get_indexed_variable(r, index);
        }
        if word & NO_CACHEABLE == 0 {
            return v;
        }
        ngx_http_get_flushed_variable(r, index)
    }
}

/// Big-endian targets: nginx's own function.
///
/// # Safety
/// As the little-endian version.
#[cfg(not(target_endian = "little"))]
#[inline]
pub unsafe fn flushed_variable(
    r: *mut ngx_http_request_t,
    index: ngx_uint_t,
) -> *mut ngx_variable_value_t {
    // SAFETY: per the contract.
    unsafe { ngx_http_get_flushed_variable(r, index) }
}

// The layout `variable_bytes` reads: a 4-byte bitfield unit, then (after
// padding) the data pointer.
const _: () = assert!(size_of::<ngx_variable_value_t>() == 2 * size_of::<usize>());
const _: () = assert!(core::mem::offset_of!(ngx_variable_value_t, data) == size_of::<usize>());

/// Queues fingerprint `fp` (never 0) in `slots`, lock-free, for the sync
/// thread: true when it is there (already queued, or put in a free slot,
/// 0), false when every slot holds another one.
pub fn enqueue(slots: &[core::sync::atomic::AtomicU64], fp: u64) -> bool {
    use core::sync::atomic::Ordering;
    slots.iter().any(|e| {
        e.load(Ordering::Relaxed) == fp
            || e.compare_exchange(0, fp, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    })
}
