//! Variable values at the boundary: a value's bytes and a flushed read,
//! both from the flag bits in one load, and a get handler's value set.

use core::ptr;

use nginx_sys::{
    ngx_http_get_flushed_variable, ngx_http_get_indexed_variable, ngx_http_variable_value_t,
    ngx_int_t, ngx_uint_t, ngx_variable_value_t,
};
use ngx::core::Status;
use ngx::http::Request;

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
pub unsafe fn flushed_variable(req: &Request, index: ngx_uint_t) -> *mut ngx_variable_value_t {
    let r = super::req::ptr(req);
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
pub unsafe fn flushed_variable(req: &Request, index: ngx_uint_t) -> *mut ngx_variable_value_t {
    let r = super::req::ptr(req);
    // SAFETY: per the contract.
    unsafe { ngx_http_get_flushed_variable(r, index) }
}

// The layout `variable_bytes` reads: a 4-byte bitfield unit, then (after
// padding) the data pointer.
const _: () = assert!(size_of::<ngx_variable_value_t>() == 2 * size_of::<usize>());
const _: () = assert!(core::mem::offset_of!(ngx_variable_value_t, data) == size_of::<usize>());

/// The flag bits of a value's first word (see [`variable_bytes`]).
#[cfg(target_endian = "little")]
const VALID: u32 = 1 << 28;
#[cfg(target_endian = "little")]
const NO_CACHEABLE: u32 = 1 << 29;
#[cfg(target_endian = "little")]
const NOT_FOUND: u32 = 1 << 30;
#[cfg(target_endian = "little")]
const LEN_MASK: u32 = (1 << 28) - 1;

/// The first word of `v`, its bitfield unit (see [`variable_bytes`]).
#[cfg(target_endian = "little")]
#[inline(always)]
fn word(v: &ngx_variable_value_t) -> u32 {
    // SAFETY: the struct starts with the 32-bit bitfield unit.
    unsafe { ptr::from_ref(v).cast::<u32>().read() }
}

/// Writes the first word of `v`.
#[cfg(target_endian = "little")]
#[inline(always)]
fn set_word(v: &mut ngx_variable_value_t, w: u32) {
    // SAFETY: as in `word`.
    unsafe { ptr::from_mut(v).cast::<u32>().write(w) }
}

/// Whether the request's value `v` was evaluated (valid or not found), as
/// `ngx_http_get_indexed_variable` tests it.
#[inline(always)]
pub fn evaluated(v: &ngx_variable_value_t) -> bool {
    #[cfg(target_endian = "little")]
    return word(v) & (VALID | NOT_FOUND) != 0;
    #[cfg(not(target_endian = "little"))]
    return v.valid() != 0 || v.not_found() != 0;
}

/// A get handler's found value, as nginx's handlers set it: `len` bytes at
/// `data`, valid, cacheable, found (the escape flag kept).
#[inline(always)]
pub fn set_found(v: &mut ngx_variable_value_t, data: *mut u8, len: usize) {
    v.data = data;
    #[cfg(target_endian = "little")]
    set_word(
        v,
        (word(v) & !(LEN_MASK | NO_CACHEABLE | NOT_FOUND)) | len as u32 & LEN_MASK | VALID,
    );
    #[cfg(not(target_endian = "little"))]
    {
        v.set_len(len as u32);
        v.set_valid(1);
        v.set_no_cacheable(0);
        v.set_not_found(0);
    }
}

/// A get handler's "not found" (nothing else of the value changes).
#[inline(always)]
pub fn set_not_found(v: &mut ngx_variable_value_t) {
    #[cfg(target_endian = "little")]
    set_word(v, word(v) | NOT_FOUND);
    #[cfg(not(target_endian = "little"))]
    v.set_not_found(1);
}

/// What `ngx_http_get_indexed_variable` leaves after a failed get handler:
/// not valid, not found. (Used by the join of several headers, nginx 1.23
/// and later.)
#[cfg(nginx1_23_0)]
pub fn set_failed(v: &mut ngx_variable_value_t) {
    #[cfg(target_endian = "little")]
    set_word(v, (word(v) & !VALID) | NOT_FOUND);
    #[cfg(not(target_endian = "little"))]
    {
        v.set_valid(0);
        v.set_not_found(1);
    }
}

/// Sets `v` to `bytes` copied into the request pool.
pub fn set(r: &Request, v: &mut ngx_http_variable_value_t, bytes: &[u8]) -> ngx_int_t {
    let Some(s) = super::pool::pool_str(&mut r.pool(), bytes) else {
        return Status::NGX_ERROR.into();
    };
    v.data = if s.len == 0 { ptr::null_mut() } else { s.data };
    v.set_len(s.len as u32);
    v.set_valid(1);
    v.set_no_cacheable(1);
    v.set_not_found(0);
    Status::NGX_OK.into()
}

/// Whether the variable `index` of `r` evaluates to something non-empty
/// when evaluated afresh (its cached value ignored); the request's cached
/// value is put back.
///
/// # Safety
/// `r` is a valid request and `index` a variable index obtained at
/// configuration time (within its variables array).
pub unsafe fn set_afresh(req: &Request, index: ngx_uint_t) -> bool {
    let r = super::req::ptr(req);
    // SAFETY: per the contract; the entry is restored before return.
    unsafe {
        let slot = (*r).variables.add(index);
        let saved = *slot;
        (*slot).set_valid(0);
        (*slot).set_not_found(0);
        let v = ngx_http_get_flushed_variable(r, index);
        let set = v.as_ref().is_some_and(|v| !variable_bytes(v).is_empty());
        *slot = saved;
        set
    }
}
