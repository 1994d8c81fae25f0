//! The stream module's directives, spelled as in `http {}`:
//! `rate_limit_window_zone` in `stream {}`, `rate_limit_window`,
//! `rate_limit_window_dry_run` and `rate_limit_window_log_level` in
//! `stream {}` and its servers. What only an HTTP request has
//! (`count_status=`, `charge=`, `delay=`, `delay_max_held=`, `name=`) is
//! refused with an `[emerg]` that names it.

use core::mem::offset_of;
use core::ptr;

use nginx_sys::{
    ngx_command_t, ngx_conf_set_flag_slot, ngx_conf_t, ngx_uint_t, NGX_CONF_1MORE, NGX_CONF_FLAG,
    NGX_CONF_TAKE1, NGX_STREAM_MAIN_CONF, NGX_STREAM_SRV_CONF,
};
use ngx::ngx_string;
use rate_limit_window_core::conf::error::LimitConfError;
use rate_limit_window_core::conf::limit_opts::{parse_limit_directive, LimitDirective};

use super::conf::{SrvConf, StreamMainConf, MAX_LIMITS};
use crate::conf::value::ConfValue;
use crate::conf::{self, strict_limit, zone_by_name, zone_directive, Compiled, LOG_LEVELS};
use crate::ffi::conf_ext::{conf_handler, ConfExt, ConfFailed, ConfResult};
use crate::ffi::stream_conf;
use crate::zone::Context;

/// `offsetof(ngx_stream_conf_ctx_t, main_conf)` and `srv_conf`.
const MAIN_CONF_OFFSET: ngx_uint_t = 0;
const SRV_CONF_OFFSET: ngx_uint_t = core::mem::size_of::<*mut u8>();

const MAIN_OR_SRV: u32 = NGX_STREAM_MAIN_CONF | NGX_STREAM_SRV_CONF;

/// The stream module's directives.
pub static mut COMMANDS: [ngx_command_t; 5] = [
    ngx_command_t {
        name: ngx_string!("rate_limit_window_zone"),
        type_: (NGX_STREAM_MAIN_CONF | NGX_CONF_1MORE) as ngx_uint_t,
        set: Some(set_zone),
        conf: MAIN_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    },
    ngx_command_t {
        name: ngx_string!("rate_limit_window"),
        type_: (MAIN_OR_SRV | NGX_CONF_1MORE) as ngx_uint_t,
        set: Some(set_limit),
        conf: SRV_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    },
    ngx_command_t {
        name: ngx_string!("rate_limit_window_dry_run"),
        type_: (MAIN_OR_SRV | NGX_CONF_FLAG) as ngx_uint_t,
        set: Some(ngx_conf_set_flag_slot),
        conf: SRV_CONF_OFFSET,
        offset: offset_of!(SrvConf, dry_run),
        post: ptr::null_mut(),
    },
    ngx_command_t {
        name: ngx_string!("rate_limit_window_log_level"),
        type_: (MAIN_OR_SRV | NGX_CONF_TAKE1) as ngx_uint_t,
        set: Some(set_log_level),
        conf: SRV_CONF_OFFSET,
        offset: 0,
        post: ptr::null_mut(),
    },
    ngx_command_t::empty(),
];

conf_handler!(set_zone, StreamMainConf, |cf, mcf: &mut StreamMainConf| {
    zone_directive::set_zone(cf, &mut mcf.zones, Context::Stream)
});
conf_handler!(set_limit, SrvConf, stream_limit);
conf_handler!(set_log_level, SrvConf, |cf, scf: &mut SrvConf| {
    conf::set_enum(cf, LOG_LEVELS, &mut scf.log_level)
});

/// The parameters of `rate_limit_window` an HTTP request alone has, the
/// first one `d` gives (None: none).
fn http_only(d: &LimitDirective) -> Option<&'static str> {
    if d.count_status.is_some() {
        Some("count_status=")
    } else if d.charge.is_some() {
        Some("charge=")
    } else if d.delay.delay_ms > 0 {
        Some("delay=")
    } else if d.delay.max_held.is_some() {
        Some("delay_max_held=")
    } else if d.name.is_some() {
        Some("name=")
    } else {
        None
    }
}

/// `rate_limit_window zone=NAME limit=N|$variable [in_flight=N|$variable]
/// [cost=N|$variable] [ban=TIME];` in `stream {}` or a stream server.
fn stream_limit(cf: &ngx_conf_t, scf: &mut SrvConf) -> ConfResult {
    let d = parse_limit_directive(&cf.words(1)).map_err(|e| cf.emerg(e))?;
    if let Some(param) = http_only(&d) {
        return Err(cf.emerg(format_args!(
            "\"{param}\" of \"rate_limit_window\" is for http only: a stream session has no \
             HTTP status, body or hold (use it in an http location)"
        )));
    }
    let (value, cost, in_flight) =
        conf::line_values(&d, |spec| ConfValue::compile_stream(cf, spec))?;
    let mcf = stream_conf::main_conf(cf, super::module()).cast::<StreamMainConf>();
    // SAFETY: this module's main configuration of the stream block being
    // parsed, which create_main_conf allocated; only this directive uses
    // it now.
    let mcf = unsafe { mcf.as_mut() }.ok_or(ConfFailed::Logged)?;
    let zone_ref = zone_by_name(cf, &mut mcf.zones, Context::Stream, &d.zone)?;
    strict_limit::note(cf, zone_ref, value, cf.position())?;
    let zone = ptr::from_mut(zone_ref);
    let limits = scf.limits.get_or_insert_with(Vec::new);
    if limits.iter().any(|l| l.zone == zone) {
        return Err(cf.emerg(LimitConfError::DuplicateZone(d.zone)));
    }
    if limits.len() == MAX_LIMITS {
        return Err(cf.emerg(format_args!(
            "too many \"rate_limit_window\" lines in one stream server (at most {MAX_LIMITS})"
        )));
    }
    let c = Compiled {
        zone,
        value,
        cost,
        charge: None,
        route: None,
        in_flight,
    };
    limits.push(conf::limit(&d, c, cf.position()));
    Ok(())
}
