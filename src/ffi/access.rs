//! Whether the main request failed an access check, remembered across
//! internal redirects (`postaccess` never counts such a request, whatever
//! page answers it).
//!
//! `r->error_page` cannot tell: nginx sets it on every `error_page`
//! redirect, a 404 from the content phase too. Instead the main request
//! carries a mark that survives internal redirects without an allocation:
//! one slot of its variables array (module contexts are zeroed by a
//! redirect, the variables are not), for a hidden variable of our own.
//! - PREACCESS (this module's handler runs last in the phase, right before
//!   ACCESS): the request goes on to the access checks: `access`.
//! - PRECONTENT (this module's handler runs first in the phase, right after
//!   ACCESS and POST_ACCESS): it passed them: `passed`.
//! - A request that enters PREACCESS again while still `access` was
//!   redirected (`error_page`) by a failed access check (401, 403, an
//!   `auth_request` error, `satisfy any` with no check passed): `failed`,
//!   for the rest of the request.
//!
//! Only the main request writes the mark: subrequests share the variables
//! array of their parent, and the access phase skips them.

use core::ptr;

use nginx_sys::{ngx_conf_t, ngx_http_variable_value_t, ngx_uint_t};
use ngx::http::{HttpModuleMainConf, Request};

use crate::ffi::hidden;
use crate::Module;

/// The mark's states; each value's text is 6 bytes.
static ACCESS: [u8; 6] = *b"access";
static PASSED: [u8; 6] = *b"passed";
static FAILED: [u8; 6] = *b"failed";

/// The mark's variable index, and its three values made once (bindgen's
/// bit-field setters loop over each bit, some 400 instructions a value).
#[derive(Clone, Copy)]
pub struct Marks {
    index: ngx_uint_t,
    /// The values for [`ACCESS`], [`PASSED`], [`FAILED`].
    values: [ngx_http_variable_value_t; 3],
}

/// The marks of this configuration (`cf`: postconfiguration's), or None on
/// an nginx error.
pub fn marks(cf: &mut ngx_conf_t) -> Option<Marks> {
    let index = hidden::index(cf, hidden::ACCESS)?;
    let value = |text: &'static [u8; 6]| ngx_http_variable_value_t {
        _bitfield_align_1: [],
        _bitfield_1: ngx_http_variable_value_t::new_bitfield_1(6, 1, 0, 0, 0),
        data: text.as_ptr().cast_mut(),
    };
    Some(Marks {
        index,
        values: [value(&ACCESS), value(&PASSED), value(&FAILED)],
    })
}

/// The mark's slot of the main request `r` and the marks, or None for a
/// subrequest or a configuration without the variable.
fn slot(r: &mut Request) -> Option<(&mut ngx_http_variable_value_t, Marks)> {
    if !r.is_main() {
        return None;
    }
    let marks = Module::main_conf(r.as_ref())?.access_mark?;
    // SAFETY: the slot is the main request's value (see hidden::slot),
    // borrowed with `r`.
    Some((unsafe { &mut *hidden::slot(r, marks.index) }, marks))
}

/// The state in the slot: one of the three statics, or null (unset).
fn state(v: &ngx_http_variable_value_t) -> *const u8 {
    if v.valid() == 0 || v.not_found() != 0 {
        return ptr::null();
    }
    v.data
}

/// Writes mark `which` (0: access, 1: passed, 2: failed) into the slot;
/// the data is static, so the value stays readable for the request's life.
fn set(v: &mut ngx_http_variable_value_t, marks: &Marks, which: usize) {
    *v = marks.values[which];
}

/// PREACCESS, before deciding: a main request that comes back here while
/// still in its access checks was redirected by a failed one.
pub fn preaccess_enter(r: &mut Request) {
    if let Some((v, m)) = slot(r) {
        if ptr::eq(state(&*v), ACCESS.as_ptr()) {
            set(&mut *v, &m, 2);
        }
    }
}

/// PREACCESS, the request goes on to the access checks.
pub fn preaccess_leave(r: &mut Request) {
    if let Some((v, m)) = slot(r) {
        if !ptr::eq(state(&*v), FAILED.as_ptr()) {
            set(&mut *v, &m, 0);
        }
    }
}

/// PRECONTENT: the access checks passed, unless the request already failed
/// one and was redirected here. Returns whether it failed one.
pub fn precontent_failed(r: &mut Request) -> bool {
    let Some((v, m)) = slot(r) else {
        return false;
    };
    let s = state(v);
    if ptr::eq(s, FAILED.as_ptr()) {
        return true;
    }
    if ptr::eq(s, ACCESS.as_ptr()) {
        set(&mut *v, &m, 1);
    }
    false
}
