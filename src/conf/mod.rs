//! The module's configuration: the main and location configuration
//! structs, merge, the zones referenced by name, and the safe handlers of
//! `rate_limit_window` and the enum-valued directives. Parameters are
//! parsed into typed values by the core (`limit_opts::parse_limit_directive`);
//! the directive table is in commands.rs.
//!
//! Here too: the one number-or-variable type ([`value`]), `delay=`'s
//! location side ([`loc_delay`]), `charge=` compiled ([`charge_var`]),
//! `rate_limit_window_zone` ([`zone_directive`]) and its Redis files
//! ([`redis_files`]), and the warning for limits that cannot run
//! ([`early_answer`]).
//!
//! Messages follow nginx's own wording ("invalid zone size", "is too small",
//! "is already bound to key") so that `nginx -t` reads like any stock module.

pub mod calendar;
pub mod charge_var;
pub mod early_answer;
pub mod loc_delay;
pub mod redis_files;
pub mod shed;
pub mod strict_limit;
pub mod value;
pub mod zone_directive;

use core::ptr;

use nginx_sys::{
    ngx_conf_t, ngx_flag_t, ngx_http_complex_value_t, ngx_int_t, ngx_str_t, ngx_uint_t,
    NGX_LOG_EMERG, NGX_LOG_ERR, NGX_LOG_INFO, NGX_LOG_NOTICE, NGX_LOG_WARN,
};
use ngx::http::{HttpModuleMainConf, Merge, MergeConfigError};
use rate_limit_window_core::conf::error::{invalid_value, undefined_zone, LimitConfError};
use rate_limit_window_core::conf::limit_opts::{parse_limit_directive, LimitDirective, StatusSet};
use rate_limit_window_core::conf::parse::{escape, ValueSpec};
use rate_limit_window_core::units::parse_time_ms;

use crate::ffi::conf_ext::{ConfExt, ConfFailed, ConfResult};
use crate::zone::tally::TallyConf;
use crate::zone::{Context, ZoneConf};
use crate::Module;
use loc_delay::LocDelay;
use value::ConfValue;

/// `ngx_conf_t`'s "unset" markers, as nginx's merge macros expect them.
pub const UNSET: isize = -1;
pub const UNSET_UINT: usize = usize::MAX;

/// Default rejection status: 429 Too Many Requests (limit_req uses 503).
pub const DEFAULT_STATUS: ngx_int_t = 429;

/// The default of `rate_limit_window_grpc`: on.
pub const GRPC_DEFAULT: ngx_flag_t = 1;

/// `rate_limit_window_headers` values.
pub const HEADERS_OFF: ngx_uint_t = 0;
pub const HEADERS_ON: ngx_uint_t = 1;
pub const HEADERS_IETF: ngx_uint_t = 2;

/// `rate_limit_window_phase` values: decide in nginx's PREACCESS phase,
/// before the access checks, or in PRECONTENT, after every access check
/// (auth_request, auth_basic, allow/deny, satisfy) has passed.
pub const PHASE_PREACCESS: ngx_uint_t = 0;
pub const PHASE_POSTACCESS: ngx_uint_t = 1;

/// The words of `rate_limit_window_headers` and their values.
pub const HEADERS_VALUES: &[(&str, ngx_uint_t)] = &[
    ("off", HEADERS_OFF),
    ("on", HEADERS_ON),
    ("ietf", HEADERS_IETF),
];

/// The words of `rate_limit_window_log_level` and their NGX_LOG_* levels.
pub const LOG_LEVELS: &[(&str, ngx_uint_t)] = &[
    ("info", NGX_LOG_INFO as ngx_uint_t),
    ("notice", NGX_LOG_NOTICE as ngx_uint_t),
    ("warn", NGX_LOG_WARN as ngx_uint_t),
    ("error", NGX_LOG_ERR as ngx_uint_t),
];

/// The words of `rate_limit_window_phase` and their values.
pub const PHASE_VALUES: &[(&str, ngx_uint_t)] = &[
    ("preaccess", PHASE_PREACCESS),
    ("postaccess", PHASE_POSTACCESS),
];

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
    /// None when no location decides in postaccess: the mark is read
    /// only there, so no request pays for keeping it.
    pub access_mark: Option<crate::ffi::access::Marks>,
    /// Whether some location decides in postaccess (set while merging).
    pub postaccess: bool,
    /// Index of the hidden variable whose request slot holds the main
    /// request's record (see pool.rs).
    pub record_index: Option<ngx_uint_t>,
    /// `rate_limit_window_shed` groups, in the order locations named them
    /// (configuration pool, for the cycle).
    pub sheds: Vec<*mut crate::zone::shed::ShedConf>,
    /// The `priority=` values of `rate_limit_window_shed` that are one
    /// variable (configuration pool), their headers resolved at
    /// `init_module` (zone::resolve_header_keys).
    pub shed_priorities: Vec<*mut shed::PriorityVar>,
    /// `rate_limit_window_state_interval`: how often worker 0 writes the
    /// zones' state files (ms); None: not given, [`STATE_INTERVAL_MS`].
    pub state_interval_ms: Option<u64>,
    /// The module's tally of requests decided, and the routes of
    /// `name=` (zone/tally.rs).
    pub tally: TallyConf,
}

/// The default of `rate_limit_window_state_interval` (ms).
pub const STATE_INTERVAL_MS: u64 = 5_000;

/// The bounds of `rate_limit_window_state_interval` (ms): 1s to 1h.
const STATE_INTERVAL_RANGE: core::ops::RangeInclusive<u64> = 1_000..=3_600_000;

impl MainConf {
    /// Every zone, as references for the cycle (the one place the zone
    /// pointers are dereferenced at run time).
    pub fn zones(&self) -> impl Iterator<Item = &'static ZoneConf> + '_ {
        // SAFETY: zone pointers come from the configuration pool and stay
        // valid (and unchanged after configuration) for the cycle.
        self.zones.iter().map(|&z| unsafe { &*z })
    }

    /// Every shed group, as references for the cycle.
    pub fn sheds(&self) -> impl Iterator<Item = &'static crate::zone::shed::ShedConf> + '_ {
        // SAFETY: as for the zones: configuration pool, for the cycle.
        self.sheds.iter().map(|&g| unsafe { &*g })
    }
}

/// The limit of one `rate_limit_window` directive: requests per window,
/// fixed or from a variable (the one number-or-variable type).
pub use value::ConfValue as LimitValue;

/// One `rate_limit_window zone=NAME limit=…;` directive.
/// `C`: the block's complex value (http's, or the stream's, whose
/// lines have no `count_status=`, `charge=`, `delay=` or `name=`).
#[derive(Clone, Copy)]
pub struct Limit<C: Copy = ngx_http_complex_value_t> {
    pub zone: *mut ZoneConf,
    /// `limit=` (a fixed 0 when the line has `in_flight=` alone).
    pub value: ConfValue<C>,
    /// What the line counts: a rate (`limit=`), in-flight places, or both.
    pub counts: rate_limit_window_core::engine::Line,
    /// `in_flight=`: requests of a client in flight at once (see
    /// request/in_flight.rs); None: no limit on them.
    pub in_flight: Option<ConfValue<C>>,
    /// `delay=`: longest hold of a request this limit rejects (ms).
    pub delay_ms: u64,
    /// `ban=`: how long a client this limit rejects stays rejected (ms; 0: no ban).
    pub ban_ms: u64,
    /// `cost=`: requests one request counts (see cost.rs).
    pub cost: ConfValue<C>,
    /// `count_status=`: the final statuses that keep the request counted
    /// (None: every admitted request counts). See count_status.rs.
    pub count_status: Option<StatusSet>,
    /// `cost` is the default, a fixed 1: nothing to evaluate per request.
    pub cost_one: bool,
    /// `charge=`: counted once the response is done (request/charge_read.rs); None: cost.
    pub charge: Option<*mut ngx_http_complex_value_t>,
    /// `name=`: its route, an index into `MainConf::routes` (None: none).
    pub route: Option<u8>,
    /// Where the directive is, for warnings about the location.
    pub file: ngx_str_t,
    pub line: ngx_uint_t,
}

impl<C: Copy> Limit<C> {
    /// The limit's zone, for the cycle.
    pub fn zone(&self) -> &'static ZoneConf {
        // SAFETY: `zone` comes from the configuration pool (zone_by_name)
        // and stays valid, unchanged after configuration, for the cycle.
        unsafe { &*self.zone }
    }

    /// The line as the engine needs it (None: its zone has no table yet).
    #[inline(always)]
    pub fn engine_conf(&self) -> Option<rate_limit_window_core::engine::LimitConf<'static>> {
        let zone = self.zone();
        Some(rate_limit_window_core::engine::LimitConf {
            table: zone.table.as_ref()?,
            overrides: zone.overrides.as_ref(),
            fail: zone.fail,
            delay_ms: self.delay_ms,
            ban_ms: self.ban_ms,
            line: self.counts,
            outage: crate::sync::outage_of(zone),
        })
    }
}

/// A line's `limit=` (a fixed 0 when it has `in_flight=` alone), `cost=`
/// and `in_flight=`, each compiled by `compile` (the block's complex
/// values).
pub type LineValues<C> = (ConfValue<C>, ConfValue<C>, Option<ConfValue<C>>);

/// [`LineValues`] of the parsed line `d`.
pub fn line_values<C: Copy>(
    d: &LimitDirective,
    compile: impl Fn(&ValueSpec) -> ConfResult<ConfValue<C>>,
) -> ConfResult<LineValues<C>> {
    let value = match &d.limit {
        Some(spec) => compile(spec)?,
        None => ConfValue::Fixed(0),
    };
    let cost = compile(&d.cost)?;
    let in_flight = d.in_flight.as_ref().map(&compile).transpose()?;
    Ok((value, cost, in_flight))
}

/// Every zone of `zones` (a block's) declared: the `[emerg]` at the line
/// of an undeclared one's first use.
pub fn check_declared(cf: &mut ngx_conf_t, zones: &[*mut ZoneConf]) -> ConfResult {
    let declared: Vec<&[u8]> = crate::zone::each(zones)
        .filter(|z| z.defined)
        .map(|z| z.name.as_bytes())
        .collect();
    let Some(z) = crate::zone::each(zones).find(|z| !z.defined) else {
        return Ok(());
    };
    let e = undefined_zone(z.name.as_bytes(), &declared);
    cf.log_at((z.ref_file, z.ref_line), NGX_LOG_EMERG as ngx_uint_t, &e);
    Err(ConfFailed::Logged)
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
    /// `delay_max_held=` and this worker's held requests (see request/hold.rs).
    pub delay: LocDelay,
    /// Some limit has `delay=`, `count_status=` or `charge=`, or the
    /// headers are `ietf` (whose `t` is computed for an admitted request):
    /// an admitted request has more to do (set by `merge`, so that the
    /// request path tests one flag).
    pub extras: bool,
    /// Some limit has `in_flight=`, or the location `rate_limit_window_shed`:
    /// a request may take places, given back when it ends (set by `merge`).
    pub places: bool,
    /// `rate_limit_window_shed` (see conf/shed.rs); inherited from the
    /// level above when not set.
    pub shed: Option<shed::LocShed>,
    /// This worker has warned that the location answers before its limits
    /// run (see early_answer.rs).
    pub early_answer_warned: core::sync::atomic::AtomicBool,
    /// Whether nginx works on for a request of this location after its
    /// answer (`post_action`, `mirror`): 0 not known yet in this worker,
    /// [`SIDE_WORK_NONE`] or [`SIDE_WORK_SOME`] (request/done.rs).
    pub side_work: core::sync::atomic::AtomicU8,
    /// `rate_limit_window_grpc`: answer rejected gRPC calls the gRPC way.
    pub grpc: ngx_flag_t,
    /// The distinct routes of `limits` (`name=`), each request of the
    /// location counted once in each (set by `merge`).
    pub routes: Vec<u8>,
    /// The phase in which the location decides (`phase`) when it has a
    /// limit or a shed group, else [`DECIDES_NEVER`] (set by `merge`, so
    /// that a visit of either phase tests one field).
    pub decides: ngx_uint_t,
}

/// [`LocConf::side_work`]: nothing runs after the answer.
pub const SIDE_WORK_NONE: u8 = 1;
/// [`LocConf::side_work`]: a `post_action` or a `mirror` runs on.
pub const SIDE_WORK_SOME: u8 = 2;

/// [`LocConf::decides`] of a location with nothing to decide.
pub const DECIDES_NEVER: ngx_uint_t = ngx_uint_t::MAX;

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
            places: false,
            shed: None,
            early_answer_warned: Default::default(),
            side_work: Default::default(),
            grpc: UNSET,
            routes: Vec::new(),
            decides: DECIDES_NEVER,
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
        pick(&mut self.grpc, prev.grpc, UNSET, GRPC_DEFAULT);
        self.delay.merge(&prev.delay);
        self.extras = self.limits.as_ref().is_some_and(|limits| {
            self.headers == HEADERS_IETF
                || limits
                    .iter()
                    .any(|l| l.delay_ms > 0 || l.count_status.is_some() || l.charge.is_some())
        });
        self.routes.clear();
        for l in self.limits.iter().flatten() {
            if let Some(r) = l.route.filter(|r| !self.routes.contains(r)) {
                self.routes.push(r);
            }
        }
        if self.shed.is_none() {
            self.shed = prev.shed;
        }
        self.places = self.shed.is_some()
            || self
                .limits
                .as_ref()
                .is_some_and(|limits| limits.iter().any(|l| l.in_flight.is_some()));
        if self.places {
            PLACES_USED.store(true, core::sync::atomic::Ordering::Relaxed);
        }
        let decides = self.limits.as_ref().is_some_and(|l| !l.is_empty()) || self.shed.is_some();
        self.decides = if decides { self.phase } else { DECIDES_NEVER };
        Ok(())
    }
}

/// Set by `merge` when some location may take places (`in_flight=`,
/// `rate_limit_window_shed`); read and cleared when the body filter that
/// gives them back is registered (request/done.rs), so that a
/// configuration without places pays nothing for it.
pub static PLACES_USED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// An enum-valued directive (`rate_limit_window_headers`, `_log_level`,
/// `_phase`) into `field`: a value outside `values` is refused with the
/// allowed values listed (any case is accepted, as nginx's
/// `ngx_conf_set_enum_slot` does), a second one at the same level is
/// nginx's "is duplicate".
pub fn set_enum(
    cf: &ngx_conf_t,
    values: &[(&str, ngx_uint_t)],
    field: &mut ngx_uint_t,
) -> ConfResult {
    let (directive, value) = match cf.args() {
        [d, v, ..] => (d.as_bytes(), v.as_bytes()),
        _ => return Err(ConfFailed::Logged),
    };
    let Some(&(_, v)) = values
        .iter()
        .find(|(name, _)| name.as_bytes().eq_ignore_ascii_case(value))
    else {
        let allowed: Vec<&str> = values.iter().map(|(name, _)| *name).collect();
        let directive = String::from_utf8_lossy(directive);
        return Err(cf.emerg(invalid_value(&directive, value, &allowed)));
    };
    if *field != UNSET_UINT {
        return Err(ConfFailed::Says(c"is duplicate"));
    }
    *field = v;
    Ok(())
}

/// `rate_limit_window_status code;`: the status of a rejection, from 400
/// to 599. nginx's own bounds check (`ngx_conf_check_num_bounds`) would
/// say "value must be between 400 and 599" without naming the directive.
pub fn set_status(cf: &ngx_conf_t, lcf: &mut LocConf) -> ConfResult {
    let [_, value, ..] = cf.args() else {
        return Err(ConfFailed::Logged);
    };
    if lcf.status != UNSET {
        return Err(ConfFailed::Says(c"is duplicate"));
    }
    let value = value.as_bytes();
    let code = match value {
        [a, b, c] if value.iter().all(u8::is_ascii_digit) => [a, b, c]
            .iter()
            .fold(0, |n: ngx_int_t, &&d| n * 10 + ngx_int_t::from(d - b'0')),
        _ => 0,
    };
    if !(400..=599).contains(&code) {
        return Err(cf.emerg(format_args!(
            "invalid value \"{}\" in \"rate_limit_window_status\": it must be between 400 \
             and 599, the HTTP status of a rejection, e.g. 429 or 503",
            escape(value)
        )));
    }
    lcf.status = code;
    Ok(())
}

/// `rate_limit_window_state_interval time;` (http): how often the state
/// files are written, whole seconds from 1s to 1h.
pub fn set_state_interval(cf: &ngx_conf_t, mcf: &mut MainConf) -> ConfResult {
    let [_, value, ..] = cf.args() else {
        return Err(ConfFailed::Logged);
    };
    if mcf.state_interval_ms.is_some() {
        return Err(ConfFailed::Says(c"is duplicate"));
    }
    let value = value.as_bytes();
    match parse_time_ms(value) {
        Some(ms) if STATE_INTERVAL_RANGE.contains(&ms) && ms % 1000 == 0 => {
            mcf.state_interval_ms = Some(ms);
            Ok(())
        }
        _ => Err(cf.emerg(format_args!(
            "invalid rate_limit_window_state_interval \"{}\": whole seconds from 1s to 1h",
            escape(value)
        ))),
    }
}

/// Returns the zone called `name`, creating an undefined forward reference
/// if no `rate_limit_window_zone` has declared it yet.
/// `zones` is the list of the block being parsed (`context`'s).
pub fn zone_by_name<'z>(
    cf: &ngx_conf_t,
    zones: &mut Vec<*mut ZoneConf>,
    context: Context,
    name: &[u8],
) -> ConfResult<&'z mut ZoneConf> {
    let found = crate::zone::each(zones).position(|z| z.name.as_bytes() == name);
    let z = match found {
        Some(i) => zones[i],
        None => {
            let name = cf.pool_str(name)?;
            let (file, line) = cf.position();
            let z = cf.pool().allocate(ZoneConf::new(name, context, file, line));
            if !z.is_null() {
                zones.push(z);
            }
            z
        }
    };
    // SAFETY: a non-null zone pointer is a ZoneConf of the configuration
    // pool, alive for the cycle, which only the directive being parsed
    // changes now (one directive at a time).
    unsafe { z.as_mut() }.ok_or(ConfFailed::Logged)
}

/// `rate_limit_window zone=NAME limit=NUMBER|$variable
/// [in_flight=N|$variable] [delay=TIME] [delay_max_held=N]
/// [cost=N|$variable] [count_status=CODES] [charge=$variable] [ban=TIME];`
/// (or `zone=NAME in_flight=N|$variable` alone) at the level of `lcf`.
pub fn set_limit(cf: &ngx_conf_t, lcf: &mut LocConf) -> ConfResult {
    let d = parse_limit_directive(&cf.words(1)).map_err(|e| cf.emerg(e))?;
    if let Some(n) = d.delay.max_held {
        lcf.delay.set_max_held(n).map_err(|e| cf.emerg(e))?;
    }
    let (value, cost, in_flight) = line_values(&d, |spec| ConfValue::compile(cf, spec))?;
    let mcf = Module::main_conf_mut(cf).ok_or(ConfFailed::Logged)?;
    let route = d
        .name
        .as_deref()
        .map(|n| mcf.tally.route(n))
        .transpose()
        .map_err(|e| cf.emerg(e))?;
    let zone_ref = zone_by_name(cf, &mut mcf.zones, Context::Http, &d.zone)?;
    let zone = ptr::from_mut(zone_ref);
    let limits = lcf.limits.get_or_insert_with(Vec::new);
    if limits.iter().any(|l| l.zone == zone) {
        return Err(cf.emerg(LimitConfError::DuplicateZone(d.zone)));
    }
    let (file, line) = cf.position();
    let charge = charge_var::compile(cf, zone_ref, d.charge.as_deref(), (file, line))?;
    calendar::note_delay(cf, zone_ref, d.delay.delay_ms, (file, line))?;
    strict_limit::note(cf, zone_ref, value, (file, line))?;
    limits.push(limit(
        &d,
        Compiled {
            zone,
            value,
            cost,
            charge,
            route,
            in_flight,
        },
        (file, line),
    ));
    Ok(())
}

/// What [`set_limit`] (or the stream's) compiled for one directive.
pub struct Compiled<C: Copy = ngx_http_complex_value_t> {
    pub zone: *mut ZoneConf,
    pub value: ConfValue<C>,
    pub cost: ConfValue<C>,
    pub charge: Option<*mut ngx_http_complex_value_t>,
    pub route: Option<u8>,
    pub in_flight: Option<ConfValue<C>>,
}

/// The [`Limit`] of a parsed directive `d` at `at` (file, line).
pub fn limit<C: Copy>(d: &LimitDirective, c: Compiled<C>, at: (ngx_str_t, ngx_uint_t)) -> Limit<C> {
    Limit {
        charge: c.charge,
        file: at.0,
        line: at.1,
        zone: c.zone,
        value: c.value,
        counts: match (d.limit.is_some(), d.in_flight.is_some()) {
            (true, false) => rate_limit_window_core::engine::Line::Rate,
            (true, true) => rate_limit_window_core::engine::Line::RateInFlight,
            (false, _) => rate_limit_window_core::engine::Line::InFlight,
        },
        in_flight: c.in_flight,
        delay_ms: d.delay.delay_ms,
        ban_ms: d.ban_ms.unwrap_or(0),
        cost: c.cost,
        count_status: d.count_status,
        cost_one: matches!(c.cost, ConfValue::Fixed(1)),
        route: c.route,
    }
}

/// After http{} is parsed: every referenced zone must have been declared,
/// and a charged zone must not be strict. The `[emerg]` names the line of
/// the zone's first use. With zones, the module's tally is registered.
pub fn init_main_conf(cf: &mut ngx_conf_t, mcf: &mut MainConf) -> ConfResult {
    check_declared(cf, &mcf.zones)?;
    for z in mcf.zones() {
        charge_var::check_zone(cf, z)?;
        calendar::check_zone(cf, z)?;
        strict_limit::check_zone(cf, z)?;
    }
    if !mcf.zones.is_empty() {
        crate::zone::tally::register(cf, &mut mcf.tally).map_err(|()| ConfFailed::Logged)?;
    }
    Ok(())
}
