//! The stream module's configuration: the zones of `stream {}`, and each
//! server's limits, dry run and log level; created and merged as nginx's
//! stream modules do.

use core::ffi::{c_char, c_void};

use nginx_sys::{ngx_conf_t, ngx_flag_t, ngx_stream_complex_value_t, ngx_uint_t, NGX_LOG_ERR};
use ngx::core::NGX_CONF_OK;

use crate::conf::{strict_limit, Limit, UNSET, UNSET_UINT};
use crate::ffi::conf_ext::{conf_status, ConfExt};

/// Most `rate_limit_window` lines of one stream server: a session's
/// decision keeps them on the stack.
pub const MAX_LIMITS: usize = 8;

/// A stream server's `rate_limit_window` line.
pub type StreamLimit = Limit<ngx_stream_complex_value_t>;

/// `stream {}`'s configuration: every zone declared or referenced there.
pub type StreamMainConf = crate::zone::ZoneList;

/// A stream server's (or the stream block's) configuration.
pub struct SrvConf {
    /// `rate_limit_window` lines; None inherits from the level above.
    pub limits: Option<Vec<StreamLimit>>,
    /// `rate_limit_window_dry_run`.
    pub dry_run: ngx_flag_t,
    /// `rate_limit_window_log_level`: an NGX_LOG_* level for refusals.
    pub log_level: ngx_uint_t,
    /// Some limit has `in_flight=`: a session may take places, given back
    /// when it ends (set by the merge).
    pub places: bool,
}

impl Default for SrvConf {
    fn default() -> Self {
        Self {
            limits: None,
            dry_run: UNSET,
            log_level: UNSET_UINT,
            places: false,
        }
    }
}

/// `create_main_conf`.
pub extern "C" fn create_main_conf(cf: *mut ngx_conf_t) -> *mut c_void {
    // SAFETY: nginx passes the configuration being parsed.
    let cf = unsafe { &*cf };
    cf.pool().allocate(StreamMainConf::default()).cast()
}

/// `create_srv_conf`.
pub extern "C" fn create_srv_conf(cf: *mut ngx_conf_t) -> *mut c_void {
    // SAFETY: nginx passes the configuration being parsed.
    let cf = unsafe { &*cf };
    cf.pool().allocate(SrvConf::default()).cast()
}

/// `merge_srv_conf`: unset values from the level above, then the defaults.
pub extern "C" fn merge_srv_conf(
    _cf: *mut ngx_conf_t,
    prev: *mut c_void,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx passes two distinct SrvConf that create_srv_conf
    // allocated, the level above first.
    let (prev, conf) = unsafe { (&*prev.cast::<SrvConf>(), &mut *conf.cast::<SrvConf>()) };
    if conf.limits.is_none() {
        conf.limits.clone_from(&prev.limits);
    }
    if conf.dry_run == UNSET {
        conf.dry_run = if prev.dry_run == UNSET {
            0
        } else {
            prev.dry_run
        };
    }
    if conf.log_level == UNSET_UINT {
        conf.log_level = if prev.log_level == UNSET_UINT {
            NGX_LOG_ERR as ngx_uint_t
        } else {
            prev.log_level
        };
    }
    conf.places = conf.limits.iter().flatten().any(|l| l.in_flight.is_some());
    NGX_CONF_OK
}

/// `init_main_conf`: after stream{} is parsed, every zone a server
/// references must be declared there, and a strict zone declared after a
/// `limit=` above what it counts is refused at that line (as in http).
pub extern "C" fn init_main_conf(cf: *mut ngx_conf_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: nginx passes the stream{} configuration and this module's
    // StreamMainConf, which create_main_conf allocated.
    let (cf, mcf) = unsafe { (&mut *cf, &*conf.cast::<StreamMainConf>()) };
    if mcf.zones.is_empty() {
        return NGX_CONF_OK;
    }
    conf_status(crate::conf::check_declared(cf, &mcf.zones).and_then(|()| {
        crate::zone::each(&mcf.zones).try_for_each(|z| strict_limit::check_zone(cf, z))
    }))
}
