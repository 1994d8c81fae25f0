//! The per-request decision, kept where an internal redirect cannot erase it.
//!
//! An internal redirect (`try_files` to a named location, `error_page`,
//! `rewrite … last`) zeroes every module context of the request. limit_req
//! survives this with a field of its own in `ngx_http_request_t`, which a
//! dynamic module cannot add. We keep the decision in the data of a pool
//! cleanup entry on the *main* request's pool and recognise the entry by its
//! handler, read from [`DECISION_TAG`]. The module context caches the
//! pointer so that the common case (no redirect) does not walk the cleanup
//! list.

use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{AtomicUsize, Ordering};

use nginx_sys::{ngx_pool_cleanup_add, ngx_pool_cleanup_t, ngx_uint_t};
use ngx::http::{HttpModule, Request};
use rate_limit_window_core::Admission;

use crate::util::{self, CleanupTag};
use crate::zone::ZoneConf;
use crate::Module;

/// What happened to the request, as `$rate_limit_window_status` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    Rejected,
    RejectedDryRun,
    Exempt,
    /// Held on a timer (`delay=`), then admitted.
    Delayed,
    /// Dry run: would have been held.
    DelayedDryRun,
}

impl Verdict {
    /// The variable's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Passed => "PASSED",
            Verdict::Rejected => "REJECTED",
            Verdict::RejectedDryRun => "REJECTED_DRY_RUN",
            Verdict::Exempt => "EXEMPT",
            Verdict::Delayed => "DELAYED",
            Verdict::DelayedDryRun => "DELAYED_DRY_RUN",
        }
    }
}

/// One limit that applied to the request, for the RateLimit headers.
#[derive(Clone, Copy)]
pub struct Applied {
    pub zone: &'static ZoneConf,
    /// Limit in requests per window.
    pub limit: u32,
    /// Requests still admitted right now, after this one.
    pub remaining: u32,
    /// Seconds to the next window boundary.
    pub reset_s: u32,
    /// The admission to take back if a later limit rejects the request
    /// (None when this limit did not admit it).
    pub admission: Option<Admission>,
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
    /// Bit n set: the key of the location's limit n (n < 64) was empty when
    /// the request was decided, so that limit did not apply.
    pub empty_keys: u64,
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

/// Decisions of this worker, not freed yet, that recorded an empty key
/// (see `handler::warn_on_late_keys`): while there are none, the PRECONTENT
/// check has nothing to look for. Only the worker's event loop touches it
/// (commits, and pool cleanups), hence plain loads and stores.
static LATE_KEY_DECISIONS: AtomicUsize = AtomicUsize::new(0);

/// Whether some live decision of this worker recorded an empty key.
#[inline]
pub fn late_keys_pending() -> bool {
    LATE_KEY_DECISIONS.load(Ordering::Relaxed) != 0
}

/// Adds `n` (1 or `usize::MAX`, i.e. -1) to [`LATE_KEY_DECISIONS`].
fn count_late_keys(n: usize) {
    let v = LATE_KEY_DECISIONS.load(Ordering::Relaxed);
    LATE_KEY_DECISIONS.store(v.wrapping_add(n), Ordering::Relaxed);
}

/// The handler of our cleanup entry, run when the main request's pool is
/// destroyed: nothing to free; a decision that recorded an empty key is
/// no longer pending.
unsafe extern "C" fn marker(data: *mut c_void) {
    // SAFETY: the entry's data holds the committed Decision (see `commit`),
    // alive until the pool's memory is freed, after its cleanups.
    if unsafe { (*data.cast::<Decision>()).empty_keys } != 0 {
        count_late_keys(usize::MAX);
    }
}

/// [`marker`]'s one address, which tags a committed decision's entry (see
/// [`util::CleanupTag`]: naming `marker` itself in `commit` and in [`find`]
/// may give two addresses).
static DECISION_TAG: CleanupTag = marker;

/// The main request of `r` (itself for a main request).
fn main_of(r: &Request) -> &Request {
    // SAFETY: every request points at its main request, which outlives it
    // and shares the representation of `Request`.
    unsafe { &*r.as_ref().main.cast::<Request>() }
}

/// Finds the decision made for `r`'s main request, if any.
pub fn find(r: &Request) -> Option<&'static Decision> {
    let main = main_of(r);
    if let Some(d) = main.get_module_ctx::<Decision>(Module::module()) {
        // SAFETY: only `commit` sets this context, to a Decision in the
        // main request's pool, which outlives every use of it.
        return Some(unsafe { &*ptr::from_ref(d) });
    }
    // SAFETY: the main request's pool is valid.
    let data = unsafe { util::tagged_cleanup(main.as_ref().pool, DECISION_TAG) }?;
    main.set_module_ctx(data, Module::module());
    // SAFETY: entries tagged DECISION_TAG hold a committed Decision (see
    // `commit`) in the main request's pool, which outlives every use.
    Some(unsafe { &*data.cast::<Decision>() })
}

/// A decision being made: its record in the main request's pool, with room
/// for one [`Applied`] per limit of the location. [`find`] cannot see it
/// until [`commit`].
pub struct Pending {
    cln: *mut ngx_pool_cleanup_t,
    applied: *mut Applied,
    capacity: usize,
    len: usize,
    empty_keys: u64,
}

impl Pending {
    /// Records a limit that applied.
    pub fn push(&mut self, a: Applied) {
        if self.len < self.capacity {
            // SAFETY: `applied` has room for `capacity` entries (reserve).
            unsafe { self.applied.add(self.len).write(a) };
            self.len += 1;
        }
    }

    /// Records that the key of the location's limit `n` was empty.
    pub fn key_empty(&mut self, n: usize) {
        if n < 64 {
            self.empty_keys |= 1 << n;
        }
    }

    /// Where the Decision goes in the reserved entry.
    fn cln_data(&self) -> *mut Decision {
        // SAFETY: `cln` is the live cleanup entry `reserve` added.
        unsafe { (*self.cln).data.cast::<Decision>() }
    }

    /// The limits recorded so far.
    pub fn applied(&self) -> &[Applied] {
        // SAFETY: the first `len` entries were written by `push`.
        unsafe { core::slice::from_raw_parts(self.applied, self.len) }
    }
}

/// Reserves the record of a decision for `r`'s main request, with room for
/// `limits` applied limits, in one pool allocation. Call it before any
/// shared-memory operation: it allocates. None if the pool is out of memory.
pub fn reserve(r: &Request, limits: usize) -> Option<Pending> {
    let pool = main_of(r).as_ref().pool;
    // The Decision, then its `applied` entries.
    const _: () = assert!(size_of::<Decision>().is_multiple_of(align_of::<Applied>()));
    let size = size_of::<Decision>() + limits * size_of::<Applied>();
    // SAFETY: pool is valid. The entry's handler stays NULL (nginx skips
    // it) until `commit`, so an abandoned reservation is inert.
    let cln = unsafe { ngx_pool_cleanup_add(pool, size) };
    if cln.is_null() {
        return None;
    }
    Some(Pending {
        cln,
        // SAFETY: the data has room for a Decision followed by `limits`
        // entries; ngx_palloc's alignment (NGX_ALIGNMENT) suits the
        // Decision, and its size keeps the entries aligned (asserted above).
        applied: unsafe { (*cln).data.cast::<Decision>().add(1).cast::<Applied>() },
        capacity: limits,
        len: 0,
        empty_keys: 0,
    })
}

/// Completes the record reserved for `r`'s main request: from now on
/// [`find`] returns it, for this request and every internal redirect or
/// subrequest of it. `r` is the request `p` was reserved for.
pub fn commit(r: &Request, p: Pending, verdict: Verdict, headers: ngx_uint_t, retry_after_s: u32) {
    let data = p.cln_data();
    // SAFETY: the entry's data has room for a Decision (reserve); the
    // entry is ours until its handler is set.
    unsafe {
        ptr::write(
            data,
            Decision {
                verdict,
                headers,
                retry_after_s,
                applied: if p.len == 0 { ptr::null() } else { p.applied },
                n_applied: p.len,
                empty_keys: p.empty_keys,
            },
        );
        (*p.cln).handler = Some(DECISION_TAG);
    }
    if p.empty_keys != 0 {
        count_late_keys(1);
    }
    main_of(r).set_module_ctx(data.cast(), Module::module());
}
