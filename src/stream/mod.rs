//! `ngx_stream_rate_limit_window_module`: the same limits for nginx's
//! stream proxy (TCP connections, UDP sessions), a second module in the
//! same `.so` beside the http one. A session is one request: counted when
//! it is accepted, in the stream's PREACCESS phase (after `realip`'s
//! POST_ACCEPT, so `proxy_protocol` with `set_real_ip_from` keys by the
//! real client), and an in-flight place is held until its connection
//! closes, however it closes. A refused session is closed at once, as
//! `limit_conn` does.
//!
//! The decision is the core's engine, the zones are the http module's
//! (src/zone/, keyed by the stream's variables, `Context::Stream`); here
//! only the stream's glue: the module statics and configuration
//! ([`conf`]), the directive table ([`commands`]) and the phase handler
//! ([`handler`]).

pub mod commands;
pub mod conf;
pub mod handler;
pub mod variables;

use nginx_sys::{
    ngx_array_push, ngx_conf_t, ngx_int_t, ngx_module_t, ngx_stream_core_main_conf_t,
    ngx_stream_handler_pt, ngx_stream_phases_NGX_STREAM_PREACCESS_PHASE,
};
use ngx::core::Status;

use crate::ffi::stream_conf;

/// The module descriptor (lib.rs), for its indexes.
pub fn module() -> &'static ngx_module_t {
    crate::stream_module()
}

/// Postconfiguration: the handler in the stream's PREACCESS phase.
pub extern "C" fn postconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: nginx passes the stream block's configuration.
    let cf = unsafe { &*cf };
    // Checked in preconfiguration (variables.rs).
    let Some(core) = crate::ffi::stream_weak::stream_core_module() else {
        return Status::NGX_ERROR.into();
    };
    let cmcf = stream_conf::main_conf(cf, core).cast::<ngx_stream_core_main_conf_t>();
    // SAFETY: the stream core module's main configuration of this block;
    // its phases' handler arrays are initialised before postconfiguration.
    let h = unsafe {
        let Some(cmcf) = cmcf.as_mut() else {
            return Status::NGX_ERROR.into();
        };
        let phase = ngx_stream_phases_NGX_STREAM_PREACCESS_PHASE as usize;
        ngx_array_push(&mut cmcf.phases[phase].handlers).cast::<ngx_stream_handler_pt>()
    };
    // SAFETY: a non-null element of the handlers array, ours to set.
    match unsafe { h.as_mut() } {
        Some(h) => {
            *h = Some(handler::preaccess_handler);
            Status::NGX_OK.into()
        }
        None => Status::NGX_ERROR.into(),
    }
}
