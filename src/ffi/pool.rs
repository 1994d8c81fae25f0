//! Pool memory: copies of bytes ([`pool_copy`], [`pool_str`]), and this
//! module's record of a main request, kept where an internal redirect
//! cannot erase it.
//!
//! An internal redirect (`try_files` to a named location, `error_page`,
//! `rewrite … last`) zeroes every module context of the request. limit_req
//! survives this with a field of its own in nginx's request structure, which a
//! dynamic module cannot add. The record therefore lives in the main
//! request's pool, and its address in one slot of the request's variables
//! array, for a hidden variable of our own
//! (`$rate_limit_window_internal_record`): nginx keeps that array through
//! internal redirects, and a subrequest shares its parent's. A record with
//! something to settle when the request ends is dropped by a cleanup entry
//! of the pool ([`drop_with_pool`]); the common one has none and is not
//! dropped at all.

use core::alloc::Layout;
use core::cell::Cell;
use core::ffi::c_void;
use core::mem::MaybeUninit;
use core::ptr::{self, NonNull};
use core::slice;

use nginx_sys::{ngx_palloc, ngx_pool_cleanup_add, ngx_pool_cleanup_t, ngx_str_t};
use ngx::allocator::Allocator;
use ngx::core::Pool;
use ngx::http::{HttpModuleMainConf, Request};

use crate::ffi::hidden;
use crate::Module;

/// Room for values of `E` in pool memory, written one by one.
pub type Room<E> = [Cell<MaybeUninit<E>>];

/// nginx's pool alignment (`NGX_ALIGNMENT`, `sizeof(unsigned long)`).
const POOL_ALIGN: usize = align_of::<core::ffi::c_ulong>();

/// The type whose address the hidden variable's slot holds.
///
/// # Safety
/// Only one type implements it: the slot is read back as that type.
pub unsafe trait Slotted: Sized + 'static {}

/// The slot of a request's variables array that holds its main request's
/// record address (a subrequest shares its parent's array).
#[derive(Clone, Copy)]
pub struct Slot(NonNull<*mut c_void>);

/// `r`'s slot, or None for a configuration without the variable.
#[inline]
pub fn slot(r: &Request) -> Option<Slot> {
    let index = Module::main_conf(r.as_ref())?.record_index?;
    let v = hidden::slot(r, index);
    // SAFETY: v is the request's value (see hidden::slot), not null. Only
    // `Slot::add` writes its data: no directive can set the variable, and
    // evaluating it only sets `not_found` (see hidden.rs).
    NonNull::new(unsafe { &raw mut (*v).data }.cast()).map(Slot)
}

/// A [`Slotted`]'s cleanup handler: drops it when its pool is destroyed.
///
/// # Safety
/// `data` is a live `T` that [`add`] wrote, dropped this once.
unsafe extern "C" fn drop_entry<T>(data: *mut c_void) {
    // SAFETY: as the caller guarantees.
    unsafe { data.cast::<T>().drop_in_place() }
}

/// The main request of `r` (itself for a main request).
pub fn main_of(r: &Request) -> &Request {
    // SAFETY: every request points at its main request, which outlives it
    // and shares the representation of `Request`.
    unsafe { &*r.as_ref().main.cast::<Request>() }
}

/// The record of `r`'s main request, if one was added.
#[inline]
pub fn find<T: Slotted>(r: &Request) -> Option<&'static T> {
    slot(r)?.get()
}

impl Slot {
    /// The record in the slot, if one was added.
    #[inline]
    pub fn get<T: Slotted>(self) -> Option<&'static T> {
        // SAFETY: the slot is null (nginx zeroes the array) or the address
        // of the one Slotted type's value `add` wrote, alive until the pool
        // (which outlives every use by the request) is destroyed.
        unsafe { self.0.read().cast::<T>().as_ref() }
    }

    /// Adds the record of `r`'s main request (whose slot this is), made in
    /// place by `init`, then `GAP` bytes left uninitialised for its owner
    /// ([`gap`]), then room for `n` values of `E`, in one pool
    /// allocation. None: out of memory. It is not dropped unless
    /// [`drop_with_pool`] is called. `init` writes each field where it
    /// lies (not a value built aside and copied, with its padding).
    ///
    /// # Safety
    /// `init` initialises every field of the `T` it is given.
    pub unsafe fn add<T: Slotted, E, const GAP: usize>(
        self,
        r: &Request,
        init: impl FnOnce(*mut T),
        n: usize,
    ) -> Option<(&'static T, &'static Room<E>)> {
        const {
            assert!(align_of::<T>() <= POOL_ALIGN && align_of::<E>() <= POOL_ALIGN);
            assert!(size_of::<T>().is_multiple_of(align_of::<E>()));
            assert!(GAP.is_multiple_of(align_of::<E>()));
        }
        let size = (size_of::<T>() + GAP).checked_add(n.checked_mul(size_of::<E>())?)?;
        // SAFETY: the pool is valid. The allocation has room for a T and n
        // values of E, each aligned (pool alignment, and the asserts
        // above); both live until the pool is destroyed. `init` initialises
        // the T (the caller's contract). The slot is the request's.
        unsafe {
            let data = ngx_palloc(main_of(r).as_ref().pool, size).cast::<T>();
            if data.is_null() {
                return None;
            }
            init(data);
            self.0.write(data.cast());
            let room = data
                .add(1)
                .cast::<u8>()
                .add(GAP)
                .cast::<Cell<MaybeUninit<E>>>();
            Some((&*data, slice::from_raw_parts(room, n)))
        }
    }
}

/// The `GAP` bytes [`Slot::add`] left after `rec`, the record it made
/// with them (uninitialised until their owner writes them).
///
/// # Safety
/// `rec` was made by [`Slot::add`] with this `GAP`.
pub unsafe fn gap<T: Slotted, const GAP: usize>(rec: &'static T) -> *mut [MaybeUninit<u8>; GAP] {
    // SAFETY: per the contract, the GAP bytes after the record are part of
    // its allocation.
    unsafe { ptr::from_ref(rec).add(1).cast_mut().cast() }
}

/// Has `rec`, the record [`add`] made for `r`'s main request, dropped when
/// that request's pool is destroyed (call it once). False: out of memory.
pub fn drop_with_pool<T: Slotted>(r: &Request, rec: &'static T) -> bool {
    // SAFETY: the pool is valid; a non-null entry is linked into its
    // cleanups, ours to fill; `rec` lives in that pool until its cleanups
    // have run, and is dropped only by this entry.
    unsafe {
        let Some(cln) = ngx_pool_cleanup_add(main_of(r).as_ref().pool, 0).as_mut() else {
            return false;
        };
        cln.handler = Some(drop_entry::<T>);
        cln.data = core::ptr::from_ref(rec).cast_mut().cast();
    }
    true
}

/// Has `rec`, the record [`add`] made for `r`'s main request, dropped when
/// that request's pool is destroyed, through the cleanup entry `cln`: room
/// in that pool allocated with a value of the caller's (one allocation for
/// both), linked into the pool's cleanups as `ngx_pool_cleanup_add` links
/// its own (call it once, instead of [`drop_with_pool`]).
pub fn drop_with_pool_at<T: Slotted>(
    r: &Request,
    rec: &'static T,
    cln: &'static mut MaybeUninit<ngx_pool_cleanup_t>,
) {
    // SAFETY: the pool is valid, its cleanup list ours to prepend to (the
    // worker's one thread); `cln` lives in that pool until its cleanups
    // have run, and `rec` is dropped only by this entry.
    unsafe {
        let pool = main_of(r).as_ref().pool;
        let cln = cln.write(ngx_pool_cleanup_t {
            handler: Some(drop_entry::<T>),
            data: core::ptr::from_ref(rec).cast_mut().cast(),
            next: (*pool).cleanup,
        });
        (*pool).cleanup = cln;
    }
}

/// Room for `n` values of `E` in `r`'s main request's pool. None: out of
/// memory.
pub fn room<E>(r: &Request, n: usize) -> Option<&'static Room<E>> {
    const { assert!(align_of::<E>() <= POOL_ALIGN) };
    let size = n.checked_mul(size_of::<E>())?;
    // SAFETY: the pool is valid; a non-null result has room for n values
    // of E (pool alignment), uninitialized (which Room allows), alive until
    // the pool is destroyed.
    unsafe {
        let p = ngx_palloc(main_of(r).as_ref().pool, size).cast::<Cell<MaybeUninit<E>>>();
        (!p.is_null()).then(|| slice::from_raw_parts(p, n))
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
