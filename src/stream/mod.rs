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

use core::ptr;

use nginx_sys::{
    ngx_array_push, ngx_conf_t, ngx_cycle_t, ngx_int_t, ngx_module_t, ngx_process,
    ngx_stream_conf_ctx_t, ngx_stream_core_main_conf_t, ngx_stream_core_module,
    ngx_stream_handler_pt, ngx_stream_module, ngx_stream_module_t,
    ngx_stream_phases_NGX_STREAM_PREACCESS_PHASE, ngx_uint_t, ngx_worker, NGX_PROCESS_SINGLE,
    NGX_PROCESS_WORKER, NGX_STREAM_MODULE,
};
use ngx::core::Status;

use crate::ffi::stream_conf;
use conf::StreamMainConf;

static NGX_STREAM_RATE_LIMIT_WINDOW_MODULE_CTX: ngx_stream_module_t = ngx_stream_module_t {
    preconfiguration: Some(variables::register),
    postconfiguration: Some(postconfiguration),
    create_main_conf: Some(conf::create_main_conf),
    init_main_conf: Some(conf::init_main_conf),
    create_srv_conf: Some(conf::create_srv_conf),
    merge_srv_conf: Some(conf::merge_srv_conf),
};

/// The stream module's descriptor nginx loads (named in `ngx_modules`
/// beside the http one, lib.rs).
#[used]
#[allow(non_upper_case_globals)]
#[cfg_attr(not(feature = "export-modules"), no_mangle)]
pub static mut ngx_stream_rate_limit_window_module: ngx_module_t = ngx_module_t {
    ctx: ptr::addr_of!(NGX_STREAM_RATE_LIMIT_WINDOW_MODULE_CTX) as _,
    commands: ptr::addr_of_mut!(commands::COMMANDS).cast(),
    type_: NGX_STREAM_MODULE as ngx_uint_t,
    init_process: Some(init_process),
    exit_process: Some(exit_process),
    ..ngx_module_t::default()
};

/// The module descriptor, for its indexes.
pub fn module() -> &'static ngx_module_t {
    // SAFETY: the static is only changed by nginx (its indexes), before
    // the configuration that reads them is parsed.
    unsafe { &*ptr::addr_of!(ngx_stream_rate_limit_window_module) }
}

/// Postconfiguration: the handler in the stream's PREACCESS phase.
extern "C" fn postconfiguration(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: nginx passes the stream block's configuration.
    let cf = unsafe { &*cf };
    // SAFETY: ngx_stream_core_module is nginx's static, its ctx_index set.
    let core = unsafe { &*ptr::addr_of!(ngx_stream_core_module) };
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

/// The stream block's main configuration of this module in `cycle`
/// (None: no stream block, or nginx without stream).
pub fn main_conf(cycle: &ngx_cycle_t) -> Option<&'static StreamMainConf> {
    // SAFETY: conf_ctx holds one entry per core-type module, by index;
    // the stream module's is null without a stream block, else an
    // ngx_stream_conf_ctx_t whose main_conf holds one entry per stream
    // module by ctx_index (this module's a StreamMainConf). They live as
    // long as the cycle's configuration.
    unsafe {
        let stream = &*ptr::addr_of!(ngx_stream_module);
        let ctx = (*cycle.conf_ctx.add(stream.index)).cast::<ngx_stream_conf_ctx_t>();
        let ctx = ctx.as_ref()?;
        let mcf = *ctx.main_conf.add(module().ctx_index);
        mcf.cast::<StreamMainConf>().as_ref()
    }
}

/// Worker start: the in-flight places of every process gone are taken
/// back (as the http module does for its zones); worker 0 runs the Redis
/// sync of the stream's `redis=` zones.
extern "C" fn init_process(cycle: *mut ngx_cycle_t) -> ngx_int_t {
    // SAFETY: ngx_process and ngx_worker are set before init_process runs;
    // nginx passes the running cycle.
    let (process, worker, cycle) = unsafe { (ngx_process, ngx_worker, &*cycle) };
    let Some(mcf) = main_conf(cycle) else {
        return Status::NGX_OK.into();
    };
    crate::zone::stop_places(
        mcf.zones(),
        core::iter::empty::<&crate::zone::shed::ShedConf>(),
    );
    crate::zone::reclaim_places(
        mcf.zones(),
        core::iter::empty::<&crate::zone::shed::ShedConf>(),
    );
    let ours = (process == NGX_PROCESS_WORKER as ngx_uint_t && worker == 0)
        || process == NGX_PROCESS_SINGLE as ngx_uint_t;
    if ours {
        crate::sync::start_all(&mcf.zones);
    }
    Status::NGX_OK.into()
}

/// Worker exit: gives back this process's places (the http module's
/// exit stops every sync thread).
extern "C" fn exit_process(cycle: *mut ngx_cycle_t) {
    // SAFETY: nginx passes the running cycle.
    if let Some(mcf) = unsafe { cycle.as_ref() }.and_then(main_conf) {
        crate::zone::stop_places(
            mcf.zones(),
            core::iter::empty::<&crate::zone::shed::ShedConf>(),
        );
    }
}
