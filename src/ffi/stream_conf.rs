//! The stream block's side of the configuration: its complex values and
//! variable indexes (`ngx_stream_*`), beside [`conf_ext`](super::conf_ext)'s
//! http ones, and its modules' configurations at the level being parsed.

use core::ffi::c_void;
use core::ptr;

use nginx_sys::{
    ngx_conf_t, ngx_cycle_t, ngx_module_t, ngx_str_t, ngx_stream_compile_complex_value_t,
    ngx_stream_complex_value_t, ngx_stream_conf_ctx_t, ngx_uint_t,
};
use ngx::core::Status;

use super::conf_ext::{ConfExt, ConfFailed, ConfResult};
use super::stream_weak::{rlw_stream_compile_complex_value, rlw_stream_get_variable_index};

/// Compiles `value` into `cv` (configuration pool memory, zeroed or a field
/// of a pool-allocated struct) as a stream complex value.
pub fn compile_into(
    cf: &ngx_conf_t,
    value: ngx_str_t,
    cv: *mut ngx_stream_complex_value_t,
) -> ConfResult {
    let mut value = value;
    // SAFETY: all-zero is a valid compile request (null pointers, no
    // flags), as nginx's own stream modules start from ngx_memzero.
    let mut ccv: ngx_stream_compile_complex_value_t = unsafe { core::mem::zeroed() };
    ccv.cf = ptr::from_ref(cf).cast_mut();
    ccv.value = &mut value;
    ccv.complex_value = cv;
    // SAFETY: ccv is set up as nginx's stream modules do; nginx copies what
    // it needs into the configuration pool.
    let rc = unsafe { rlw_stream_compile_complex_value(&mut ccv) };
    if rc != Status::NGX_OK.into() {
        return Err(ConfFailed::Logged);
    }
    Ok(())
}

/// `text` compiled into a new stream complex value of the configuration pool.
pub fn compile(cf: &ngx_conf_t, text: &[u8]) -> ConfResult<*mut ngx_stream_complex_value_t> {
    let value = cf.pool_str(text)?;
    let cv = cf.pool().calloc_type::<ngx_stream_complex_value_t>();
    if cv.is_null() {
        return Err(ConfFailed::Logged);
    }
    compile_into(cf, value, cv)?;
    Ok(cv)
}

/// The index of the stream variable `name` (without `$`).
pub fn variable_index(cf: &ngx_conf_t, name: &[u8]) -> ConfResult<ngx_uint_t> {
    let mut name = cf.pool_str(name)?;
    let cf = ptr::from_ref(cf).cast_mut();
    // SAFETY: cf is a stream block's configuration; nginx copies the
    // (lowercased) name and registers it in the stream main configuration.
    let index = unsafe { rlw_stream_get_variable_index(cf, &mut name) };
    ngx_uint_t::try_from(index).map_err(|_| ConfFailed::Logged)
}

/// `module`'s main configuration of the stream block being parsed
/// (`ngx_stream_conf_get_module_main_conf`); null outside a stream block.
pub fn main_conf(cf: &ngx_conf_t, module: &ngx_module_t) -> *mut c_void {
    // SAFETY: inside stream {} (the only place the stream module's
    // callbacks and directives run), cf->ctx is an ngx_stream_conf_ctx_t
    // whose main_conf holds one entry per stream module, by ctx_index.
    unsafe {
        let Some(ctx) = cf.ctx.cast::<ngx_stream_conf_ctx_t>().as_ref() else {
            return ptr::null_mut();
        };
        if ctx.main_conf.is_null() {
            return ptr::null_mut();
        }
        *ctx.main_conf.add(module.ctx_index)
    }
}

/// `module`'s main configuration of `cycle`'s stream block (null: no
/// stream block).
pub fn cycle_main_conf(cycle: &ngx_cycle_t, module: &ngx_module_t) -> *mut c_void {
    // SAFETY: conf_ctx holds one entry per core-type module, by index;
    // the stream module's is null without a stream block, else an
    // ngx_stream_conf_ctx_t whose main_conf holds one entry per stream
    // module by ctx_index. They live as long as the cycle's configuration.
    let Some(stream) = super::stream_weak::stream_module() else {
        return ptr::null_mut();
    };
    // SAFETY: as above.
    unsafe {
        let conf_ctx = cycle.conf_ctx;
        if conf_ctx.is_null() {
            return ptr::null_mut();
        }
        let ctx = (*conf_ctx.add(stream.index)).cast::<ngx_stream_conf_ctx_t>();
        match ctx.as_ref() {
            Some(ctx) if !ctx.main_conf.is_null() => *ctx.main_conf.add(module.ctx_index),
            _ => ptr::null_mut(),
        }
    }
}
