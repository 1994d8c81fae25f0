//! Hidden variables: slots of a request's variables array that this module
//! keeps its own per-request state in, because nginx keeps the array
//! through internal redirects (which zero module contexts) and a
//! subrequest shares its parent's. The module reads and writes the slots
//! directly. No directive can set one (`set`, `map` and the like refuse a
//! variable that is not changeable). One read by name gives the value the
//! module stored if it is marked valid (the access mark), else runs a
//! getter that only sets `not_found`: never the data the module keeps.
//! They are added, not hashed, with the module's other variables (the one
//! table of `request::variables::register`).

use nginx_sys::{
    ngx_conf_t, ngx_http_get_variable_index, ngx_http_variable_value_t, ngx_int_t, ngx_str_t,
    ngx_uint_t, NGX_ERROR, NGX_OK,
};
use ngx::http::Request;

use crate::ffi::req::variable_get;

/// `name` as nginx's string, for calls that only read it (nginx copies
/// a variable's name).
pub fn text(name: &'static str) -> ngx_str_t {
    ngx_str_t {
        len: name.len(),
        data: name.as_ptr().cast_mut(),
    }
}

/// Whether the main request failed an access check (access.rs).
pub const ACCESS: &str = "rate_limit_window_internal_access";

/// The address of the main request's record (pool.rs).
pub const RECORD: &str = "rate_limit_window_internal_record";

/// The index of the hidden variable `name` (postconfiguration, once
/// `request::variables::register` has added it), or None on an nginx
/// error.
pub fn index(cf: &mut ngx_conf_t, name: &'static str) -> Option<ngx_uint_t> {
    let mut name = text(name);
    // SAFETY: cf is a valid configuration; nginx copies the name.
    let i = unsafe { ngx_http_get_variable_index(cf, &mut name) };
    (i != NGX_ERROR as ngx_int_t).then_some(i as ngx_uint_t)
}

/// The slot of hidden variable `index` in `r`'s variables array (the main
/// request's: a subrequest shares it).
pub fn slot(r: &Request, index: ngx_uint_t) -> *mut ngx_http_variable_value_t {
    // SAFETY: `index` was obtained at configuration time, so it lies
    // within the request's variables array, which lives with the request.
    unsafe { r.as_ref().variables.add(index) }
}

variable_get!(
    pub(crate) not_found,
    |_: &mut Request, v: &mut ngx_http_variable_value_t| {
        v.set_not_found(1);
        NGX_OK as ngx_int_t
    }
);
