//! This module's record of a main request, kept where an internal redirect
//! cannot erase it.
//!
//! An internal redirect (`try_files` to a named location, `error_page`,
//! `rewrite … last`) zeroes every module context of the request. limit_req
//! survives this with a field of its own in nginx's request structure, which a
//! dynamic module cannot add. The record is therefore the data of a cleanup
//! entry on the *main* request's pool, recognised by its handler (a
//! [`Record`]'s tag), and dropped when that pool is destroyed, however the
//! request ends. The module context of the main request caches the entry,
//! so that the common case (no redirect) walks no list.

use core::cell::Cell;
use core::ffi::c_void;
use core::mem::MaybeUninit;
use core::{ptr, slice};

use nginx_sys::{ngx_palloc, ngx_pool_cleanup_t};
use ngx::http::{HttpModule, Request};

use crate::util::{tagged_cleanup, CleanupTag};
use crate::Module;

/// Room for values of `E` in pool memory, written one by one.
pub type Room<E> = [Cell<MaybeUninit<E>>];

/// nginx's pool alignment (`NGX_ALIGNMENT`, `sizeof(unsigned long)`).
const POOL_ALIGN: usize = align_of::<core::ffi::c_ulong>();

/// A type kept in a cleanup entry of a main request's pool.
///
/// # Safety
/// [`Record::tag`] returns the value of one `static TAG: CleanupTag =
/// pool::drop_entry::<Self>;` that tags no other type's entries, and the
/// type implements `Drop` (so that its `drop_entry` is code of its own,
/// never merged with another cleanup handler).
pub unsafe trait Record: Sized + 'static {
    /// The tag of this type's entries, read from its one static (see
    /// [`CleanupTag`]).
    fn tag() -> CleanupTag;
}

/// A [`Record`]'s cleanup handler: drops it when its pool is destroyed.
///
/// # Safety
/// `data` is a live `T` that [`add`] wrote, dropped this once.
pub unsafe extern "C" fn drop_entry<T>(data: *mut c_void) {
    // SAFETY: as the caller guarantees.
    unsafe { data.cast::<T>().drop_in_place() }
}

/// The main request of `r` (itself for a main request).
pub fn main_of(r: &Request) -> &Request {
    // SAFETY: every request points at its main request, which outlives it
    // and shares the representation of `Request`.
    unsafe { &*r.as_ref().main.cast::<Request>() }
}

/// The record of type `T` of `r`'s main request, if one was added: the
/// cached entry, else the newest entry of the pool tagged by `T`.
pub fn find<T: Record>(r: &Request) -> Option<&'static T> {
    let main = main_of(r);
    let cached = main.get_module_ctx::<ngx_pool_cleanup_t>(Module::module());
    // Only `cache` sets the context, to an entry of this pool; its handler
    // says which type it holds.
    #[allow(unpredictable_function_pointer_comparisons)]
    let data = match cached {
        Some(cln) if cln.handler == Some(T::tag()) => cln.data,
        _ => {
            // SAFETY: the main request's pool is valid while it runs.
            let data = unsafe { tagged_cleanup(main.as_ref().pool, T::tag()) }?;
            // After a redirect only (the context was zeroed): cache the
            // entry, found again by its data.
            cache(main, entry_of(main, data));
            data
        }
    };
    // SAFETY: entries tagged by T hold a T written by `add`, alive until
    // the pool (which outlives every use by the request) is destroyed.
    Some(unsafe { &*data.cast::<T>() })
}

/// The entry of the main request's pool whose data is `data`.
fn entry_of(main: &Request, data: *mut c_void) -> *mut ngx_pool_cleanup_t {
    // SAFETY: the pool is valid; its entries (each one's `next` is null or
    // the next live entry) live until it is destroyed.
    unsafe {
        let mut c = (*main.as_ref().pool).cleanup;
        while let Some(entry) = c.as_ref() {
            if entry.data == data {
                return c;
            }
            c = entry.next;
        }
    }
    ptr::null_mut()
}

/// Caches `entry` in the main request's module context.
fn cache(main: &Request, entry: *mut ngx_pool_cleanup_t) {
    main.set_module_ctx(entry.cast(), Module::module());
}

/// Adds `value` as the record of `r`'s main request, with room for `n`
/// values of `E` after it, in one pool allocation (the entry, then the
/// record, then the room: what `ngx_pool_cleanup_add` makes with two).
/// None: out of memory.
pub fn add<T: Record, E>(
    r: &Request,
    value: T,
    n: usize,
) -> Option<(&'static T, &'static Room<E>)> {
    const {
        assert!(align_of::<T>() <= POOL_ALIGN && align_of::<E>() <= POOL_ALIGN);
        assert!(size_of::<ngx_pool_cleanup_t>().is_multiple_of(POOL_ALIGN));
        assert!(size_of::<T>().is_multiple_of(align_of::<E>()));
    }
    let main = main_of(r);
    let size = (size_of::<ngx_pool_cleanup_t>() + size_of::<T>())
        .checked_add(n.checked_mul(size_of::<E>())?)?;
    // SAFETY: the pool is valid. The allocation has room for the entry, a
    // T and n values of E, each aligned (pool alignment, and the asserts
    // above). The entry is linked in front of the pool's cleanups, as
    // `ngx_pool_cleanup_add` does, once the T it drops is written. The T
    // and the room live until the pool is destroyed.
    unsafe {
        let pool = main.as_ref().pool;
        let cln = ngx_palloc(pool, size).cast::<ngx_pool_cleanup_t>();
        if cln.is_null() {
            return None;
        }
        let data = cln.add(1).cast::<T>();
        data.write(value);
        cln.write(ngx_pool_cleanup_t {
            handler: Some(T::tag()),
            data: data.cast(),
            next: (*pool).cleanup,
        });
        (*pool).cleanup = cln;
        cache(main, cln);
        let room = data.add(1).cast::<Cell<MaybeUninit<E>>>();
        Some((&*data, slice::from_raw_parts(room, n)))
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
