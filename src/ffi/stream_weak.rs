//! nginx's stream functions and modules, through `stream_weak.c`, which
//! refers to them weakly: the `.so` loads into an nginx without stream
//! (`--without-stream`, or Debian's with `ngx_stream_module.so` not loaded
//! before this module), where the http module works and a `stream {}`
//! block that uses this module's directives fails at `nginx -t`
//! ([`linked`] is false there; docs/stream.md#loading). The calls are made
//! only once [`linked`] said yes: from the stream module's callbacks and
//! handlers, which nginx runs only inside a `stream {}` block.

use nginx_sys::{
    ngx_conf_t, ngx_int_t, ngx_module_t, ngx_str_t, ngx_stream_compile_complex_value_t,
    ngx_stream_complex_value_t, ngx_stream_session_t, ngx_stream_variable_t,
    ngx_stream_variable_value_t, ngx_uint_t,
};

extern "C" {
    fn rlw_stream_module() -> *mut ngx_module_t;
    fn rlw_stream_core_module() -> *mut ngx_module_t;
    fn rlw_stream_linked() -> ngx_uint_t;
    pub fn rlw_stream_add_variable(
        cf: *mut ngx_conf_t,
        name: *mut ngx_str_t,
        flags: ngx_uint_t,
    ) -> *mut ngx_stream_variable_t;
    pub fn rlw_stream_get_variable_index(cf: *mut ngx_conf_t, name: *mut ngx_str_t) -> ngx_int_t;
    pub fn rlw_stream_get_flushed_variable(
        s: *mut ngx_stream_session_t,
        index: ngx_uint_t,
    ) -> *mut ngx_stream_variable_value_t;
    pub fn rlw_stream_compile_complex_value(
        ccv: *mut ngx_stream_compile_complex_value_t,
    ) -> ngx_int_t;
    pub fn rlw_stream_complex_value(
        s: *mut ngx_stream_session_t,
        val: *mut ngx_stream_complex_value_t,
        value: *mut ngx_str_t,
    ) -> ngx_int_t;
}

/// Whether this nginx had its stream module (and every stream function
/// the module calls) when the module was loaded.
pub fn linked() -> bool {
    // SAFETY: reads the addresses of weak symbols, nothing else.
    unsafe { rlw_stream_linked() != 0 }
}

/// nginx's `ngx_stream_module` (None: not loaded before this module).
pub fn stream_module() -> Option<&'static ngx_module_t> {
    // SAFETY: null, or nginx's static module, which lives as long as the
    // process; only nginx writes its indexes, at configuration.
    unsafe { rlw_stream_module().as_ref() }
}

/// nginx's `ngx_stream_core_module` (None: not loaded).
pub fn stream_core_module() -> Option<&'static ngx_module_t> {
    // SAFETY: as for [`stream_module`].
    unsafe { rlw_stream_core_module().as_ref() }
}
