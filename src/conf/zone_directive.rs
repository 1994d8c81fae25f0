//! `rate_limit_window_zone`: the directive's handler, its parameters (the
//! core's typed parser, then the Redis files read by the master), the key's
//! compilation, and the shared-memory zone it registers.

use core::ptr;

use nginx_sys::{ngx_conf_t, ngx_pagesize, ngx_shared_memory_add, ngx_str_t};
use rate_limit_window_core::conf::error::{ConfError, ZoneConfError};
use rate_limit_window_core::conf::parse::single_variable;
use rate_limit_window_core::conf::zone_opts::{
    calendar_window_at, parse_zone_directive, zoneinfo_dir, ZoneDirective,
};
use rate_limit_window_core::overrides::Overrides;

use crate::conf::{zone_by_name, BINARY_REMOTE_ADDR};
use crate::ffi::conf_ext::{ConfExt, ConfFailed, ConfResult};
use crate::ffi::stream_conf;
use crate::zone::{Context, ZoneConf};

/// The size of a memory page (bytes).
fn page_size() -> usize {
    // SAFETY: ngx_pagesize is set by nginx at startup, before parsing.
    unsafe { ngx_pagesize }
}

/// `rate_limit_window_zone KEY zone=NAME:SIZE [window=TIME | calendar=PERIOD [tz=NAME]]
/// [fail=open|closed]
/// [redis=HOST:PORT|unix:/path|redis[s]://... [sync=TIME] [secret=STRING]
/// [redis_mode=single|sentinel|cluster] [redis_master=NAME] [redis_ca=PATH]
/// [redis_cert=PATH] [redis_key=PATH] [redis_password_file=PATH]]];`
///
/// The parameters are parsed by the core's pure (and fuzzed) parser; a
/// `calendar=` zone's time zone is read from the system's database here,
/// at each configuration (`nginx -t`, a start, a reload).
///
/// `zones` is the list of the block being parsed, `context` (a zone of
/// `stream {}` keys by the stream's variables and is its own shared zone,
/// whose name nginx refuses to declare again for http).
pub fn set_zone(cf: &ngx_conf_t, zones: &mut Vec<*mut ZoneConf>, context: Context) -> ConfResult {
    let Some(&key) = cf.args().get(1) else {
        return Err(ConfFailed::Logged);
    };
    let d = zone_params(cf).map_err(|e| cf.emerg(e))?;
    let zone = zone_by_name(cf, zones, context, &d.params.name)?;
    if zone.defined {
        return Err(cf.emerg(redeclared(zone, key, &d)));
    }
    compile_key(cf, zone, key)?;
    if let Some(bits) = d.params.ipv6_prefix {
        if key.as_bytes() != BINARY_REMOTE_ADDR {
            let (zone, key) = (d.params.name.clone(), key.as_bytes().to_vec());
            return Err(cf.emerg(ZoneConfError::Ipv6PrefixKey { bits, zone, key }));
        }
        zone.ipv6_prefix = bits;
    }
    zone.window = d.params.window;
    zone.window_src = d.params.window_src;
    if let Some(spec) = &d.calendar {
        let dir = zoneinfo_dir();
        // Periods tabled up to 30 years past the configuration's own: a
        // reload moves the horizon on (never computed per request).
        let now = crate::ffi::process::now_ms();
        zone.window =
            calendar_window_at(spec, &dir, now).map_err(|e| cf.emerg(ConfError::from(e)))?;
        zone.window_src = format!("calendar={}", spec.period).into_bytes();
    }
    zone.mode = d.mode;
    zone.overrides_cap = d.overrides;
    zone.fail = d.params.fail;
    zone.size = d.params.size;
    zone.redis = d.params.redis;
    crate::zone::state_file::configure(zone, d.state.as_deref(), cf.prefixes().0);
    if let Some(other) = state_taken(zones, zone) {
        return Err(cf.emerg(format!(
            "rate_limit_window_zone \"{}\": state file \"{}\" is already zone \"{other}\"'s: \
             each zone needs a state file of its own",
            zone.name_str(),
            zone.state
                .as_deref()
                .map_or("".into(), |p| p.display().to_string())
        )));
    }
    zone.cycle = cf.cycle;
    zone.defined = true;
    add_shared_zone(cf, zone)
}

/// The name of another zone whose `state=` is `zone`'s path (two zones
/// writing one file would overwrite each other's state).
fn state_taken(zones: &[*mut ZoneConf], zone: &ZoneConf) -> Option<String> {
    let path = zone.state.as_deref()?;
    crate::zone::each(zones)
        .filter(|z| z.defined && z.name.as_bytes() != zone.name.as_bytes())
        .find(|z| z.state.as_deref() == Some(path))
        .map(|z| z.name_str().to_string())
}

/// The error for a zone declared again: with another key or window, or
/// the same way.
fn redeclared(zone: &ZoneConf, key: ngx_str_t, d: &ZoneDirective) -> ZoneConfError {
    let name = d.params.name.clone();
    if zone.key_src.as_bytes() != key.as_bytes() || zone.window != d.params.window {
        let key = zone.key_src.as_bytes().to_vec();
        let window_ms = zone.window.ms();
        return ZoneConfError::AlreadyBound {
            name,
            key,
            window_ms,
        };
    }
    ZoneConfError::Duplicate(name)
}

/// The parameters after the key of `rate_limit_window_zone`, parsed and
/// checked together by the core, with the Redis files read (by the
/// master, at load).
fn zone_params(cf: &ngx_conf_t) -> Result<ZoneDirective, ConfError> {
    let mut d = parse_zone_directive(&cf.words(2), 8 * page_size())?;
    if let Some(r) = d.params.redis.as_mut() {
        crate::conf::redis_files::load(r, cf.prefixes().1)?;
    }
    Ok(d)
}

/// Registers the shared memory of `zone`, a zone just defined in the
/// configuration pool, whose `init` creates or adopts its table (see
/// zone/mod.rs). `overrides=N` adds its table (64-byte aligned, as
/// the core's `shm::override_region_bytes`) on whole pages, plus one page for the
/// slab pool's own bookkeeping.
fn add_shared_zone(cf: &ngx_conf_t, zone: &mut ZoneConf) -> ConfResult {
    let page = page_size();
    let overrides = Overrides::bytes_for(zone.overrides_cap)
        .next_multiple_of(64)
        .next_multiple_of(page)
        + page;
    let mut name = zone.name;
    let cf = ptr::from_ref(cf).cast_mut();
    // The tag: the module of the zone's block, so that nginx refuses a
    // zone of the same name in the other block ("already declared for a
    // different use").
    let module = match zone.context {
        Context::Http => ptr::addr_of_mut!(crate::ngx_http_rate_limit_window_module),
        Context::Stream => ptr::addr_of_mut!(crate::ngx_stream_rate_limit_window_module),
    };
    // SAFETY: registers (or finds) the named zone in the cycle being
    // configured; nginx keeps the pointer, and reads nothing else of cf.
    let shm = unsafe { ngx_shared_memory_add(cf, &mut name, zone.size + overrides, module.cast()) };
    // SAFETY: a non-null shm is a zone descriptor owned by the cycle.
    let shm_ref = unsafe { shm.as_mut() }.ok_or(ConfFailed::Logged)?;
    shm_ref.init = Some(crate::zone::init::init_zone);
    shm_ref.data = ptr::from_mut(zone).cast();
    zone.shm_zone = shm;
    Ok(())
}

/// Compiles the zone's key, and notes its variable's index when the key
/// is exactly one variable (read directly on the request path).
fn compile_key(cf: &ngx_conf_t, zone: &mut ZoneConf, key: ngx_str_t) -> ConfResult {
    let var = single_variable(key.as_bytes());
    match zone.context {
        Context::Http => {
            cf.compile_into(key, &mut zone.key)?;
            if let Some(var) = var {
                zone.key_index = Some(cf.variable_index(var)?);
            }
        }
        Context::Stream => {
            stream_conf::compile_into(cf, key, &mut zone.stream_key)?;
            if let Some(var) = var {
                zone.key_index = Some(stream_conf::variable_index(cf, var)?);
            }
        }
    }
    zone.key_src = key;
    Ok(())
}
