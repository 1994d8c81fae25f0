//! The module's directive table and the `extern "C"` entries nginx calls
//! with a configuration: each converts its pointers once
//! ([`conf_handler!`]) and calls a safe handler. A top file (with lib.rs):
//! it names the feature files whose handlers or checks a directive picks
//! (metrics, reset, early_answer), so that the configuration files below
//! it import none of them.

use core::ffi::{c_char, c_void};
use core::mem::offset_of;
use core::ptr;

use nginx_sys::{
    ngx_command_t, ngx_conf_set_flag_slot, ngx_conf_t, ngx_uint_t, NGX_CONF_1MORE, NGX_CONF_FLAG,
    NGX_CONF_NOARGS, NGX_CONF_TAKE1, NGX_HTTP_LOC_CONF, NGX_HTTP_LOC_CONF_OFFSET,
    NGX_HTTP_MAIN_CONF, NGX_HTTP_MAIN_CONF_OFFSET, NGX_HTTP_SRV_CONF,
};
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::http::{HttpModuleLocationConf, HttpModuleMainConf, Merge, NgxHttpCoreModule};
use ngx::ngx_string;
use rate_limit_window_core::conf::error::LimitConfError;

use crate::conf::zone_directive;
use crate::conf::{self, LocConf, MainConf, HEADERS_VALUES, LOG_LEVELS, PHASE_VALUES};
use crate::ffi::conf_ext::{conf_handler, conf_status, ConfExt, ConfFailed, ConfResult};
use crate::Module;

const ANY_LEVEL: u32 = NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF;

/// The module's directives.
pub static mut COMMANDS: [ngx_command_t; 12] = [
    ngx_command_t {
        name: ngx_string!("rate_limit_window_zone"),
        type_: (NGX_HTTP_MAIN_CONF | NGX_CONF_1MORE) as ngx_uint_t,
        set: Some(set_zone),
        conf: NGX_HTTP_MAIN_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    },
    ngx_command_t {
        name: ngx_string!("rate_limit_window"),
        type_: (ANY_LEVEL | NGX_CONF_1MORE) as ngx_uint_t,
        set: Some(set_limit),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    },
    ngx_command_t {
        name: ngx_string!("rate_limit_window_status"),
        type_: (ANY_LEVEL | NGX_CONF_TAKE1) as ngx_uint_t,
        set: Some(set_status),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    },
    ngx_command_t {
        name: ngx_string!("rate_limit_window_headers"),
        type_: (ANY_LEVEL | NGX_CONF_TAKE1) as ngx_uint_t,
        set: Some(set_headers),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    },
    ngx_command_t {
        name: ngx_string!("rate_limit_window_dry_run"),
        type_: (ANY_LEVEL | NGX_CONF_FLAG) as ngx_uint_t,
        set: Some(ngx_conf_set_flag_slot),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: offset_of!(LocConf, dry_run),
        post: ptr::null_mut(),
    },
    ngx_command_t {
        name: ngx_string!("rate_limit_window_log_level"),
        type_: (ANY_LEVEL | NGX_CONF_TAKE1) as ngx_uint_t,
        set: Some(set_log_level),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    },
    ngx_command_t {
        name: ngx_string!("rate_limit_window_metrics"),
        type_: (NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS | NGX_CONF_TAKE1) as ngx_uint_t,
        set: Some(set_metrics),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    },
    ngx_command_t {
        name: ngx_string!("rate_limit_window_phase"),
        type_: (ANY_LEVEL | NGX_CONF_TAKE1) as ngx_uint_t,
        set: Some(set_phase),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    },
    // `rate_limit_window_grpc on | off;`: gRPC-native rejections (request/grpc_reject.rs).
    ngx_command_t {
        name: ngx_string!("rate_limit_window_grpc"),
        type_: (ANY_LEVEL | NGX_CONF_FLAG) as ngx_uint_t,
        set: Some(ngx_conf_set_flag_slot),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: offset_of!(LocConf, grpc),
        post: ptr::null_mut(),
    },
    // `rate_limit_window_shed zone=NAME max=N priority=VALUE ...;`: load
    // shedding (conf/shed.rs).
    ngx_command_t {
        name: ngx_string!("rate_limit_window_shed"),
        type_: (NGX_HTTP_LOC_CONF | NGX_CONF_1MORE) as ngx_uint_t,
        set: Some(set_shed),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    },
    // `rate_limit_window_state_interval time;`: how often state files are
    // written (state_write.rs).
    ngx_command_t {
        name: ngx_string!("rate_limit_window_state_interval"),
        type_: (NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1) as ngx_uint_t,
        set: Some(set_state_interval),
        conf: NGX_HTTP_MAIN_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    },
    ngx_command_t::empty(),
];

conf_handler!(set_zone, MainConf, |cf, mcf: &mut MainConf| {
    zone_directive::set_zone(cf, &mut mcf.zones, crate::zone::Context::Http)
});
conf_handler!(set_state_interval, MainConf, conf::set_state_interval);
conf_handler!(set_limit, LocConf, conf::set_limit);
conf_handler!(set_status, LocConf, conf::set_status);
conf_handler!(set_shed, LocConf, conf::shed::set_shed);
conf_handler!(set_headers, LocConf, |cf, lcf: &mut LocConf| {
    conf::set_enum(cf, HEADERS_VALUES, &mut lcf.headers)
});
conf_handler!(set_log_level, LocConf, |cf, lcf: &mut LocConf| {
    conf::set_enum(cf, LOG_LEVELS, &mut lcf.log_level)
});
conf_handler!(set_phase, LocConf, |cf, lcf: &mut LocConf| {
    conf::set_enum(cf, PHASE_VALUES, &mut lcf.phase)
});
conf_handler!(set_metrics, LocConf, metrics);

/// `rate_limit_window_metrics [write=on|off];` installs the metrics content
/// handler (with `write=on`, or its synonym `reset=on`, the one that also
/// answers DELETE and PUT: api/reset.rs, api/overrides.rs).
fn metrics(cf: &ngx_conf_t, _lcf: &mut LocConf) -> ConfResult {
    let clcf = NgxHttpCoreModule::location_conf_mut(cf).ok_or(ConfFailed::Logged)?;
    clcf.handler = match cf.words(1).as_slice() {
        [] | [b"reset=off" | b"write=off"] => Some(crate::api::metrics::handler),
        [b"reset=on" | b"write=on"] => Some(crate::api::reset::handler),
        [other] => return Err(cf.emerg(LimitConfError::MetricsParam(other.to_vec()))),
        _ => return Err(ConfFailed::Logged),
    };
    Ok(())
}

/// `merge_loc_conf`: [`Merge`], then the check that the level's limits can
/// run at all (early_answer.rs).
pub extern "C" fn merge_loc_conf(
    cf: *mut ngx_conf_t,
    prev: *mut c_void,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx passes the configuration being merged and two distinct
    // LocConf that create_loc_conf allocated, the level above first.
    let (cf, prev, conf) = unsafe {
        (
            &mut *cf,
            &*prev.cast::<LocConf>(),
            &mut *conf.cast::<LocConf>(),
        )
    };
    if conf.merge(prev).is_err() {
        return NGX_CONF_ERROR;
    }
    crate::conf::early_answer::check_conf(cf, conf);
    let decides = conf.limits.as_ref().is_some_and(|l| !l.is_empty()) || conf.shed.is_some();
    if conf.phase == conf::PHASE_POSTACCESS && decides {
        // The access mark is kept only for configurations that read it (a
        // location with `rate_limit_window_shed` alone decides too).
        let Some(mcf) = Module::main_conf_mut(cf) else {
            return NGX_CONF_ERROR;
        };
        mcf.postaccess = true;
    }
    NGX_CONF_OK
}

/// `init_main_conf`: after http{} is parsed, the zones' checks.
pub extern "C" fn init_main_conf(cf: *mut ngx_conf_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx passes the http{} configuration and this module's
    // MainConf, which create_main_conf allocated.
    let (cf, mcf) = unsafe { (&mut *cf, &mut *conf.cast::<MainConf>()) };
    conf_status(conf::init_main_conf(cf, mcf))
}
