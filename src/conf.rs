//! Directives and configuration: the command table, the main and location
//! configuration structs, parsing of every directive value, and merge.
//!
//! Messages follow nginx's own wording ("invalid zone size", "is too small",
//! "is already bound to key") so that `nginx -t` reads like any stock module.

use core::ffi::{c_char, c_void};
use core::mem::offset_of;
use core::ptr;

use nginx_sys::{
    ngx_command_t, ngx_conf_check_num_bounds, ngx_conf_enum_t, ngx_conf_num_bounds_t,
    ngx_conf_set_enum_slot, ngx_conf_set_flag_slot, ngx_conf_set_num_slot, ngx_conf_t, ngx_flag_t,
    ngx_http_compile_complex_value, ngx_http_compile_complex_value_t, ngx_http_complex_value_t,
    ngx_int_t, ngx_str_t, ngx_uint_t, NGX_CONF_1MORE, NGX_CONF_FLAG, NGX_CONF_NOARGS,
    NGX_CONF_TAKE1, NGX_HTTP_LOC_CONF, NGX_HTTP_LOC_CONF_OFFSET, NGX_HTTP_MAIN_CONF,
    NGX_HTTP_MAIN_CONF_OFFSET, NGX_HTTP_SRV_CONF, NGX_LOG_EMERG, NGX_LOG_ERR, NGX_LOG_INFO,
    NGX_LOG_NOTICE, NGX_LOG_WARN,
};
use ngx::core::{Pool, Status, NGX_CONF_ERROR, NGX_CONF_OK};
use ngx::http::{
    HttpModuleLocationConf, HttpModuleMainConf, Merge, MergeConfigError, NgxHttpCoreModule,
};
use ngx::{ngx_conf_log_error, ngx_string};
use rate_limit_window_core::conf_error::{
    check_params, invalid_value, undefined_zone, LIMIT_PARAMS,
};
use rate_limit_window_core::delay::split_delay_params;
use rate_limit_window_core::limit_opts::{split_limit_opts, CostSpec, StatusSet};
use rate_limit_window_core::override_conf::take_ban;
use rate_limit_window_core::parse::{escape, parse_limit_params, LimitSpec};

use crate::zone::ZoneConf;
use crate::Module;

/// `ngx_conf_t`'s "unset" markers, as nginx's merge macros expect them.
const UNSET: isize = -1;
const UNSET_UINT: usize = usize::MAX;

/// Default rejection status: 429 Too Many Requests (limit_req uses 503).
pub const DEFAULT_STATUS: ngx_int_t = 429;

/// `rate_limit_window_headers` values.
pub const HEADERS_OFF: ngx_uint_t = 0;
pub const HEADERS_ON: ngx_uint_t = 1;
pub const HEADERS_IETF: ngx_uint_t = 2;

/// `rate_limit_window_phase` values: decide in nginx's PREACCESS phase,
/// before the access checks, or in PRECONTENT, after every access check
/// (auth_request, auth_basic, allow/deny, satisfy) has passed.
pub const PHASE_PREACCESS: ngx_uint_t = 0;
pub const PHASE_POSTACCESS: ngx_uint_t = 1;

/// The key that `ipv6_prefix=` and the metrics' `addr=` lookup need.
pub const BINARY_REMOTE_ADDR: &[u8] = b"$binary_remote_addr";

/// Main (http{}) configuration: every zone declared or referenced.
#[derive(Default)]
pub struct MainConf {
    /// Zones in declaration/reference order. Each points into the
    /// configuration pool and lives as long as the cycle.
    pub zones: Vec<*mut ZoneConf>,
    /// Index of the hidden variable whose request slot says whether the
    /// main request failed an access check (see access.rs).
    pub access_mark: Option<crate::access::Marks>,
}

impl MainConf {
    /// Every zone, as references for the cycle (the one place the zone
    /// pointers are dereferenced at run time).
    pub fn zones(&self) -> impl Iterator<Item = &'static ZoneConf> + '_ {
        // SAFETY: zone pointers come from the configuration pool and stay
        // valid (and unchanged after configuration) for the cycle.
        self.zones.iter().map(|&z| unsafe { &*z })
    }

    /// Finds a zone by name.
    pub fn zone(&self, name: &[u8]) -> Option<*mut ZoneConf> {
        // SAFETY: zone pointers come from the configuration pool and stay
        // valid for the cycle's lifetime.
        self.zones
            .iter()
            .copied()
            .find(|&z| unsafe { (*z).name.as_bytes() } == name)
    }
}

/// The limit of one `rate_limit_window` directive.
#[derive(Clone, Copy)]
pub enum LimitValue {
    /// A fixed number of requests per window.
    Fixed(u32),
    /// A complex value evaluated per request (`limit=$plan_limit`).
    Variable(*mut ngx_http_complex_value_t),
}

/// One `rate_limit_window zone=NAME limit=…;` directive.
#[derive(Clone, Copy)]
pub struct Limit {
    pub zone: *mut ZoneConf,
    pub value: LimitValue,
    /// `delay=`: longest hold of a request this limit rejects (ms).
    pub delay_ms: u64,
    /// `ban=`: how long a client this limit rejects stays rejected (ms; 0: no ban).
    pub ban_ms: u64,
    /// `cost=`: requests one request counts (see cost.rs).
    pub cost: crate::cost::CostValue,
    /// `count_status=`: the final statuses that keep the request counted
    /// (None: every admitted request counts). See count_status.rs.
    pub count_status: Option<StatusSet>,
    /// `cost` is the default, a fixed 1: nothing to evaluate per request.
    pub cost_one: bool,
    /// `charge=`: counted once the response is done (charge.rs); None: cost.
    pub charge: Option<*mut ngx_http_complex_value_t>,
    /// Where the directive is, for warnings about the location.
    pub file: ngx_str_t,
    pub line: ngx_uint_t,
}

impl Limit {
    /// The limit's zone, for the cycle.
    pub fn zone(&self) -> &'static ZoneConf {
        // SAFETY: `zone` comes from the configuration pool (zone_by_name)
        // and stays valid, unchanged after configuration, for the cycle.
        unsafe { &*self.zone }
    }
}

/// Location configuration. `repr(C)` because nginx's stock slot setters
/// write the first four fields and `phase` by offset.
#[repr(C)]
pub struct LocConf {
    /// `rate_limit_window_status`: HTTP status of a rejection.
    pub status: ngx_int_t,
    /// `rate_limit_window_headers`: HEADERS_OFF, HEADERS_ON or HEADERS_IETF.
    pub headers: ngx_uint_t,
    /// `rate_limit_window_dry_run`.
    pub dry_run: ngx_flag_t,
    /// `rate_limit_window_log_level`: an NGX_LOG_* level for rejections.
    pub log_level: ngx_uint_t,
    /// `rate_limit_window` directives; `None` inherits from the level above.
    pub limits: Option<Vec<Limit>>,
    /// `rate_limit_window_phase`: PHASE_PREACCESS or PHASE_POSTACCESS.
    pub phase: ngx_uint_t,
    /// `delay_max_held=` and this worker's held requests (see delay.rs).
    pub delay: crate::delay::LocDelay,
    /// Some limit has `delay=` or `count_status=`: an admitted request has
    /// more to do (set by `merge`, so that the request path tests one flag).
    pub extras: bool,
    /// This worker has warned that the location answers before its limits
    /// run (see early_answer.rs).
    pub early_answer_warned: core::sync::atomic::AtomicBool,
    /// `rate_limit_window_grpc`: answer rejected gRPC calls the gRPC way.
    pub grpc: ngx_flag_t,
}

impl Default for LocConf {
    fn default() -> Self {
        Self {
            status: UNSET,
            headers: UNSET_UINT,
            dry_run: UNSET,
            log_level: UNSET_UINT,
            limits: None,
            phase: UNSET_UINT,
            delay: Default::default(),
            extras: false,
            early_answer_warned: Default::default(),
            grpc: UNSET,
        }
    }
}

impl Merge for LocConf {
    fn merge(&mut self, prev: &LocConf) -> Result<(), MergeConfigError> {
        fn pick<T: PartialEq + Copy>(v: &mut T, prev: T, unset: T, default: T) {
            if *v == unset {
                *v = if prev == unset { default } else { prev };
            }
        }
        pick(&mut self.status, prev.status, UNSET, DEFAULT_STATUS);
        pick(&mut self.headers, prev.headers, UNSET_UINT, HEADERS_ON);
        pick(&mut self.dry_run, prev.dry_run, UNSET, 0);
        pick(
            &mut self.log_level,
            prev.log_level,
            UNSET_UINT,
            NGX_LOG_ERR as ngx_uint_t,
        );
        // Like limit_req: a level without any rate_limit_window inherits
        // all of them from the level above.
        if self.limits.is_none() {
            self.limits.clone_from(&prev.limits);
        }
        pick(&mut self.phase, prev.phase, UNSET_UINT, PHASE_PREACCESS);
        pick(&mut self.grpc, prev.grpc, UNSET, crate::grpc::DEFAULT);
        self.delay.merge(&prev.delay);
        self.extras = self.limits.as_ref().is_some_and(|limits| {
            limits
                .iter()
                .any(|l| l.delay_ms > 0 || l.count_status.is_some() || l.charge.is_some())
        });
        Ok(())
    }
}

/// `merge_loc_conf`: [`Merge`], then the check that the level's limits can
/// run at all (early_answer.rs).
///
/// # Safety
/// Called by nginx with this module's location configurations.
pub unsafe extern "C" fn merge_loc_conf(
    cf: *mut ngx_conf_t,
    prev: *mut c_void,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: nginx passes two LocConf that create_loc_conf allocated.
    let (prev, conf) = unsafe { (&*prev.cast::<LocConf>(), &mut *conf.cast::<LocConf>()) };
    if conf.merge(prev).is_err() {
        return NGX_CONF_ERROR;
    }
    // SAFETY: cf is the context of this merge.
    unsafe { crate::early_answer::check_conf(cf, conf) };
    NGX_CONF_OK
}

static mut HEADERS_VALUES: [ngx_conf_enum_t; 4] = [
    ngx_conf_enum_t {
        name: ngx_string!("off"),
        value: HEADERS_OFF,
    },
    ngx_conf_enum_t {
        name: ngx_string!("on"),
        value: HEADERS_ON,
    },
    ngx_conf_enum_t {
        name: ngx_string!("ietf"),
        value: HEADERS_IETF,
    },
    ngx_conf_enum_t {
        name: ngx_str_t {
            len: 0,
            data: ptr::null_mut(),
        },
        value: 0,
    },
];

static mut LOG_LEVELS: [ngx_conf_enum_t; 5] = [
    ngx_conf_enum_t {
        name: ngx_string!("info"),
        value: NGX_LOG_INFO as ngx_uint_t,
    },
    ngx_conf_enum_t {
        name: ngx_string!("notice"),
        value: NGX_LOG_NOTICE as ngx_uint_t,
    },
    ngx_conf_enum_t {
        name: ngx_string!("warn"),
        value: NGX_LOG_WARN as ngx_uint_t,
    },
    ngx_conf_enum_t {
        name: ngx_string!("error"),
        value: NGX_LOG_ERR as ngx_uint_t,
    },
    ngx_conf_enum_t {
        name: ngx_str_t {
            len: 0,
            data: ptr::null_mut(),
        },
        value: 0,
    },
];

static mut PHASE_VALUES: [ngx_conf_enum_t; 3] = [
    ngx_conf_enum_t {
        name: ngx_string!("preaccess"),
        value: PHASE_PREACCESS,
    },
    ngx_conf_enum_t {
        name: ngx_string!("postaccess"),
        value: PHASE_POSTACCESS,
    },
    ngx_conf_enum_t {
        name: ngx_str_t {
            len: 0,
            data: ptr::null_mut(),
        },
        value: 0,
    },
];

static mut STATUS_BOUNDS: ngx_conf_num_bounds_t = ngx_conf_num_bounds_t {
    post_handler: Some(ngx_conf_check_num_bounds),
    low: 400,
    high: 599,
};

const ANY_LEVEL: u32 = NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF;

/// The module's directives.
pub static mut COMMANDS: [ngx_command_t; 10] = [
    ngx_command_t {
        name: ngx_string!("rate_limit_window_zone"),
        type_: (NGX_HTTP_MAIN_CONF | NGX_CONF_1MORE) as ngx_uint_t,
        set: Some(crate::conf_zone::set_zone),
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
        set: Some(ngx_conf_set_num_slot),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: offset_of!(LocConf, status),
        post: ptr::addr_of_mut!(STATUS_BOUNDS) as *mut c_void,
    },
    ngx_command_t {
        name: ngx_string!("rate_limit_window_headers"),
        type_: (ANY_LEVEL | NGX_CONF_TAKE1) as ngx_uint_t,
        set: Some(set_enum),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: offset_of!(LocConf, headers),
        post: ptr::addr_of_mut!(HEADERS_VALUES) as *mut c_void,
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
        set: Some(set_enum),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: offset_of!(LocConf, log_level),
        post: ptr::addr_of_mut!(LOG_LEVELS) as *mut c_void,
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
        set: Some(set_enum),
        conf: NGX_HTTP_LOC_CONF_OFFSET,
        offset: offset_of!(LocConf, phase),
        post: ptr::addr_of_mut!(PHASE_VALUES) as *mut c_void,
    },
    crate::grpc::COMMAND,
    ngx_command_t::empty(),
];

/// An enum-valued directive (`ngx_conf_set_enum_slot`'s table in
/// `cmd->post`): a value outside the table is refused with the allowed
/// values listed; nginx's own slot setter does the rest.
extern "C" fn set_enum(
    cf: *mut ngx_conf_t,
    cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: cmd is this module's command, whose post is an enum table
    // ending with an empty name (the statics above).
    let (directive, allowed) = unsafe {
        let mut allowed = vec![];
        let mut e = (*cmd).post.cast::<ngx_conf_enum_t>();
        while (*e).name.len != 0 {
            allowed.push(String::from_utf8_lossy((*e).name.as_bytes()).into_owned());
            e = e.add(1);
        }
        (
            String::from_utf8_lossy((*cmd).name.as_bytes()).into_owned(),
            allowed,
        )
    };
    // SAFETY: called by nginx's configuration parser with a valid cf.
    let value = unsafe { args(cf) }[1].as_bytes();
    if !allowed
        .iter()
        .any(|a| a.as_bytes().eq_ignore_ascii_case(value))
    {
        return emerg(cf, &invalid_value(&directive, value, &allowed).to_string());
    }
    // SAFETY: the arguments nginx passed us, unchanged.
    unsafe { ngx_conf_set_enum_slot(cf, cmd, conf) }
}

/// Logs an `[emerg]` in the context of the directive being parsed and
/// returns NGX_CONF_ERROR.
pub(crate) fn emerg(cf: *mut ngx_conf_t, msg: &str) -> *mut c_char {
    ngx_conf_log_error!(NGX_LOG_EMERG, cf, "{}", msg);
    NGX_CONF_ERROR
}

/// The directive's arguments, the directive name first.
///
/// # Safety
/// `cf` must be the `ngx_conf_t` passed to a directive handler.
/// The file and line of the directive being parsed (an empty name and
/// line 0 outside a file).
///
/// # Safety
/// `cf` must be the configuration being parsed.
pub(crate) unsafe fn conf_position(cf: *mut ngx_conf_t) -> (ngx_str_t, ngx_uint_t) {
    // SAFETY: cf->conf_file is set (or null) while a file is being parsed.
    unsafe {
        let f = (*cf).conf_file;
        if f.is_null() {
            (ngx_str_t::empty(), 0)
        } else {
            ((*f).file.name, (*f).line)
        }
    }
}

pub(crate) unsafe fn args<'a>(cf: *mut ngx_conf_t) -> &'a [ngx_str_t] {
    // SAFETY: nginx fills cf->args with the directive's words before calling
    // the handler; they live in the configuration pool.
    unsafe { (*(*cf).args).as_slice() }
}

/// Compiles `value` into a complex value allocated from the configuration pool.
///
/// # Safety
/// `cf` must be a valid configuration context.
pub(crate) unsafe fn compile_complex(
    cf: *mut ngx_conf_t,
    value: &ngx_str_t,
    cv: *mut ngx_http_complex_value_t,
) -> Result<(), ()> {
    let mut value = *value;
    // SAFETY: a zeroed compile struct is what nginx's own modules start from.
    let mut ccv: ngx_http_compile_complex_value_t = unsafe { core::mem::zeroed() };
    ccv.cf = cf;
    ccv.value = &mut value;
    ccv.complex_value = cv;
    // SAFETY: ccv is fully set up; nginx copies what it needs into the pool.
    if unsafe { ngx_http_compile_complex_value(&mut ccv) } != Status::NGX_OK.into() {
        return Err(());
    }
    Ok(())
}

/// Returns the zone called `name`, creating an undefined forward reference
/// if no `rate_limit_window_zone` has declared it yet.
///
/// # Safety
/// `cf` must be a valid configuration context inside http{}.
pub(crate) unsafe fn zone_by_name(cf: *mut ngx_conf_t, name: &ngx_str_t) -> Option<*mut ZoneConf> {
    // SAFETY: cf is a valid http configuration context.
    let mcf = Module::main_conf_mut(unsafe { &*cf })?;
    if let Some(z) = mcf.zone(name.as_bytes()) {
        return Some(z);
    }
    // SAFETY: cf->pool is the cycle's configuration pool.
    let pool = unsafe { Pool::from_ngx_pool((*cf).pool) };
    // SAFETY: cf is the configuration being parsed.
    let (file, line) = unsafe { conf_position(cf) };
    let z = pool.allocate(ZoneConf::new(*name, file, line));
    if z.is_null() {
        return None;
    }
    mcf.zones.push(z);
    Some(z)
}

/// The words of the directive being parsed, from `from` on, as byte slices.
///
/// # Safety
/// `cf` must be the `ngx_conf_t` passed to a directive handler.
pub(crate) unsafe fn words<'a>(cf: *mut ngx_conf_t, from: usize) -> Vec<&'a [u8]> {
    // SAFETY: as for `args`.
    let all = unsafe { args(cf) };
    all[from..].iter().map(|a| a.as_bytes()).collect()
}

/// `rate_limit_window zone=NAME limit=NUMBER|$variable [delay=TIME]
/// [delay_max_held=N];`
extern "C" fn set_limit(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: conf is this module's LocConf at the current level.
    let lcf = unsafe { &mut *conf.cast::<LocConf>() };
    // SAFETY: called by nginx's configuration parser with a valid cf.
    let words = unsafe { words(cf, 1) };
    if let Err(e) = check_params("rate_limit_window", &words, LIMIT_PARAMS) {
        return emerg(cf, &e.to_string());
    }
    let (ban_ms, words) = match take_ban(&words) {
        Ok(b) => b,
        Err(e) => return emerg(cf, &e),
    };
    let (delay, words) = match split_delay_params(&words) {
        Ok(d) => d,
        Err(e) => return emerg(cf, &e),
    };
    let (words, opts) = match split_limit_opts(&words) {
        Ok(o) => o,
        Err(e) => return emerg(cf, &e),
    };
    let params = match parse_limit_params(&words) {
        Ok(p) => p,
        Err(e) => return emerg(cf, &e.to_string()),
    };
    if let Some(n) = delay.max_held {
        if let Err(e) = lcf.delay.set_max_held(n) {
            return emerg(cf, &e);
        }
    }
    // SAFETY: cf->pool is the configuration pool.
    let pool = unsafe { Pool::from_ngx_pool((*cf).pool) };
    let value = match &params.limit {
        LimitSpec::Fixed(n) => LimitValue::Fixed(*n),
        LimitSpec::Variable(text) => {
            let cv = pool.calloc_type::<ngx_http_complex_value_t>();
            // SAFETY: cf->pool is valid.
            let Some(s) = (unsafe { ngx_str_t::from_bytes((*cf).pool, text) }) else {
                return NGX_CONF_ERROR;
            };
            // SAFETY: cv was just allocated from the configuration pool.
            if cv.is_null() || unsafe { compile_complex(cf, &s, cv) }.is_err() {
                return NGX_CONF_ERROR;
            }
            LimitValue::Variable(cv)
        }
    };
    if let (LimitSpec::Fixed(limit), CostSpec::Fixed(cost)) = (&params.limit, &opts.cost) {
        if cost > limit && *cost > 1 {
            return emerg(cf, &format!("cost={cost} is above limit={limit}"));
        }
    }
    // SAFETY: cf is valid.
    let Some(cost) = (unsafe { crate::cost::compile(cf, &opts.cost) }) else {
        return NGX_CONF_ERROR;
    };
    // SAFETY: cf->pool is valid.
    let Some(zone_name) = (unsafe { ngx_str_t::from_bytes((*cf).pool, &params.zone) }) else {
        return NGX_CONF_ERROR;
    };
    // SAFETY: cf is a valid http configuration context.
    let Some(zone) = (unsafe { zone_by_name(cf, &zone_name) }) else {
        return NGX_CONF_ERROR;
    };
    let limits = lcf.limits.get_or_insert_with(Vec::new);
    if limits.iter().any(|l| l.zone == zone) {
        return emerg(
            cf,
            &format!("duplicate limit for zone \"{}\"", escape(&params.zone)),
        );
    }
    // SAFETY: cf is the configuration being parsed.
    let (file, line) = unsafe { conf_position(cf) };
    // SAFETY: cf is valid; zone is in its configuration pool.
    let Ok(charge) = (unsafe { crate::charge::compile(cf, zone, &opts, (file, line)) }) else {
        return NGX_CONF_ERROR;
    };
    limits.push(Limit {
        charge,
        file,
        line,
        zone,
        value,
        delay_ms: delay.delay_ms,
        ban_ms: ban_ms.unwrap_or(0),
        cost,
        count_status: opts.count_status,
        cost_one: matches!(cost, crate::cost::CostValue::Fixed(1)),
    });
    NGX_CONF_OK
}

/// `rate_limit_window_metrics [write=on|off];` installs the metrics content
/// handler (with `write=on`, or its synonym `reset=on`, the one that also
/// answers DELETE and PUT: reset.rs, override_api.rs).
extern "C" fn set_metrics(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    _conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: cf is a valid location configuration context.
    let Some(clcf) = NgxHttpCoreModule::location_conf_mut(unsafe { &*cf }) else {
        return NGX_CONF_ERROR;
    };
    // SAFETY: as for `words`.
    clcf.handler = match unsafe { words(cf, 1) }.as_slice() {
        [] | [b"reset=off" | b"write=off"] => Some(crate::metrics::handler),
        [b"reset=on" | b"write=on"] => Some(crate::reset::handler),
        [other] => {
            let e = format!(
                "invalid parameter \"{}\": write=on or write=off (reset=on is write=on)",
                escape(other)
            );
            return emerg(cf, &e);
        }
        _ => return NGX_CONF_ERROR,
    };
    NGX_CONF_OK
}

/// After http{} is parsed: every referenced zone must have been declared.
///
/// # Safety
/// Called by nginx with this module's MainConf.
pub unsafe fn init_main_conf(cf: *mut ngx_conf_t, conf: *mut c_void) -> *mut c_char {
    // SAFETY: conf is the MainConf create_main_conf allocated.
    let mcf = unsafe { &*conf.cast::<MainConf>() };
    let declared: Vec<&[u8]> = mcf
        .zones()
        .filter(|z| z.defined)
        .map(|z| z.name.as_bytes())
        .collect();
    for z in mcf.zones() {
        if !z.defined {
            let e = undefined_zone(z.name.as_bytes(), &declared).to_string();
            let emerg = NGX_LOG_EMERG as ngx_uint_t;
            // SAFETY: cf is the http{} configuration context.
            unsafe { crate::conf_log::log_at(cf, z.ref_file, z.ref_line, emerg, &e) };
            return NGX_CONF_ERROR;
        }
        // SAFETY: cf is the http{} configuration context.
        if unsafe { crate::charge::check_zone(cf, z) }.is_err() {
            return NGX_CONF_ERROR;
        }
    }
    NGX_CONF_OK
}
