//! The per-request decision, kept where an internal redirect cannot erase it.
//!
//! An internal redirect (`try_files` to a named location, `error_page`,
//! `rewrite … last`) zeroes every module context of the request. limit_req
//! survives this with a field of its own in `ngx_http_request_t`, which a
//! dynamic module cannot add. We keep the decision in the data of a pool
//! cleanup entry on the *main* request's pool and recognise the entry by its
//! handler, [`marker`]. The module context caches the pointer so that the
//! common case (no redirect) does not walk the cleanup list.

use core::ffi::c_void;
use core::ptr;

use nginx_sys::{ngx_http_request_t, ngx_pool_cleanup_add, ngx_uint_t};

use crate::zone::ZoneConf;

/// What happened to the request, as `$rate_limit_window_status` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    Rejected,
    RejectedDryRun,
    Exempt,
}

impl Verdict {
    /// The variable's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Passed => "PASSED",
            Verdict::Rejected => "REJECTED",
            Verdict::RejectedDryRun => "REJECTED_DRY_RUN",
            Verdict::Exempt => "EXEMPT",
        }
    }
}

/// One limit that applied to the request, for the RateLimit headers.
#[derive(Clone, Copy)]
pub struct Applied {
    pub zone: *const ZoneConf,
    /// Limit in requests per window.
    pub limit: u32,
    /// Requests still admitted right now, after this one.
    pub remaining: u32,
    /// Seconds to the next window boundary.
    pub reset_s: u32,
}

/// The decision for a main request. Plain data: it lives in pool memory.
#[derive(Clone, Copy)]
pub struct Decision {
    pub verdict: Verdict,
    /// `rate_limit_window_headers` of the location that decided.
    pub headers: ngx_uint_t,
    /// Whole seconds for Retry-After on a rejection.
    pub retry_after_s: u32,
    /// Limits that applied (pool array of `n_applied` entries).
    pub applied: *const Applied,
    pub n_applied: usize,
}

impl Decision {
    /// The limits that applied.
    pub fn applied(&self) -> &[Applied] {
        if self.applied.is_null() {
            return &[];
        }
        // SAFETY: `applied` points at n_applied entries in the main request's
        // pool, which outlives every use of the decision.
        unsafe { core::slice::from_raw_parts(self.applied, self.n_applied) }
    }

    /// The applied limit with the fewest requests remaining.
    pub fn tightest(&self) -> Option<&Applied> {
        self.applied().iter().min_by_key(|a| a.remaining)
    }
}

/// Recognises our cleanup entry; it has nothing to free.
unsafe extern "C" fn marker(_data: *mut c_void) {}

/// Index of this module's context slot.
fn ctx_index() -> usize {
    // SAFETY: ctx_index is assigned by nginx before any request runs.
    unsafe { (*ptr::addr_of!(crate::ngx_http_rate_limit_window_module)).ctx_index }
}

/// Finds the decision made for `r`'s main request, if any.
///
/// # Safety
/// `r` must be a valid request.
pub unsafe fn find(r: *mut ngx_http_request_t) -> Option<&'static Decision> {
    // SAFETY: r is valid, and so is its main request.
    let main = unsafe { (*r).main };
    // SAFETY: ctx has ngx_http_max_module slots.
    let cached = unsafe { *(*main).ctx.add(ctx_index()) };
    if !cached.is_null() {
        // SAFETY: only `store` writes this slot, with a Decision pointer.
        return Some(unsafe { &*cached.cast::<Decision>() });
    }
    // SAFETY: walking the main pool's cleanup list; entries are valid until
    // the pool is destroyed.
    let mut c = unsafe { (*(*main).pool).cleanup };
    while !c.is_null() {
        // SAFETY: c is a live cleanup entry.
        unsafe {
            // Both the store and this comparison name `marker` from this
            // one module, so they see the same address.
            #[allow(unpredictable_function_pointer_comparisons)]
            let ours = (*c).handler == Some(marker as unsafe extern "C" fn(*mut c_void));
            if ours {
                *(*main).ctx.add(ctx_index()) = (*c).data;
                return Some(&*(*c).data.cast::<Decision>());
            }
            c = (*c).next;
        }
    }
    None
}

/// Records the decision for `r`'s main request. Copies `applied` into the
/// main pool, next to the decision. Returns None if the pool is out of memory.
///
/// # Safety
/// `r` must be a valid request. Call only after every shared-memory
/// operation for the request is finished.
pub unsafe fn store(
    r: *mut ngx_http_request_t,
    verdict: Verdict,
    headers: ngx_uint_t,
    retry_after_s: u32,
    applied: &[Applied],
) -> Option<()> {
    // SAFETY: r and its main request are valid.
    let main = unsafe { (*r).main };
    // SAFETY: as above.
    let pool = unsafe { (*main).pool };
    // One allocation: the Decision, then its `applied` entries.
    const _: () = assert!(size_of::<Decision>() % align_of::<Applied>() == 0);
    let size = size_of::<Decision>() + size_of_val(applied);
    // SAFETY: pool is valid; the entry's data is sized for both parts.
    let cln = unsafe { ngx_pool_cleanup_add(pool, size) };
    if cln.is_null() {
        return None;
    }
    // SAFETY: cln->data has room for a Decision followed by the entries;
    // ngx_palloc's alignment (NGX_ALIGNMENT) suits the Decision, and the
    // Decision's size keeps the entries aligned (asserted above).
    unsafe {
        let data = (*cln).data.cast::<Decision>();
        let arr = data.add(1).cast::<Applied>();
        ptr::copy_nonoverlapping(applied.as_ptr(), arr, applied.len());
        ptr::write(
            data,
            Decision {
                verdict,
                headers,
                retry_after_s,
                applied: if applied.is_empty() { ptr::null() } else { arr },
                n_applied: applied.len(),
            },
        );
        (*cln).handler = Some(marker);
        *(*main).ctx.add(ctx_index()) = (*cln).data;
    }
    Some(())
}
