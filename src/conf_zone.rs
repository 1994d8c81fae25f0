//! `rate_limit_window_zone`: the directive's handler, its parameters (the
//! core's pure parser, then the Redis files read by the master), the key's
//! compilation, and the shared-memory zone it registers.

use core::ffi::{c_char, c_void};
use core::ptr;

use nginx_sys::{
    ngx_command_t, ngx_conf_t, ngx_http_get_variable_index, ngx_pagesize, ngx_shared_memory_add,
    ngx_str_t, ngx_uint_t,
};
use ngx::core::{NGX_CONF_ERROR, NGX_CONF_OK};
use rate_limit_window_core::cluster::secret_error;
use rate_limit_window_core::conf_error::{check_params, Units, ZONE_PARAMS};
use rate_limit_window_core::mode::{check_mode, take_mode, Mode};
use rate_limit_window_core::override_conf::take_overrides;
use rate_limit_window_core::parse::{escape, parse_zone_params, single_variable, ZoneParams};

use crate::conf::{args, compile_complex, emerg, words, zone_by_name, BINARY_REMOTE_ADDR};
use crate::zone::ZoneConf;

/// `rate_limit_window_zone KEY zone=NAME:SIZE [window=TIME] [fail=open|closed]
/// [redis=HOST:PORT|unix:/path|redis[s]://... [sync=TIME] [secret=STRING]
/// [redis_mode=single|sentinel|cluster] [redis_master=NAME] [redis_ca=PATH]
/// [redis_cert=PATH] [redis_key=PATH] [redis_password_file=PATH]]];`
///
/// The parameters are parsed by the core's pure (and fuzzed) parser.
pub(crate) extern "C" fn set_zone(
    cf: *mut ngx_conf_t,
    _cmd: *mut ngx_command_t,
    _conf: *mut c_void,
) -> *mut c_char {
    // SAFETY: called by nginx's configuration parser with a valid cf.
    let key = unsafe { args(cf) }[1];
    // SAFETY: as above.
    let params = unsafe { words(cf, 2) };
    if let Err(e) = check_params("rate_limit_window_zone", &params, ZONE_PARAMS) {
        return emerg(cf, &e.to_string());
    }
    // SAFETY: as above.
    let (mode, overrides, params) = match unsafe { zone_params(cf) } {
        Ok(p) => p,
        Err(e) => return emerg(cf, &e),
    };
    // SAFETY: cf->pool is the configuration pool.
    let Some(name) = (unsafe { ngx_str_t::from_bytes((*cf).pool, &params.name) }) else {
        return NGX_CONF_ERROR;
    };

    // SAFETY: cf is a valid http{} configuration context.
    let Some(zp) = (unsafe { zone_by_name(cf, &name) }) else {
        return NGX_CONF_ERROR;
    };
    // SAFETY: zp points into the configuration pool.
    let zone = unsafe { &mut *zp };
    if zone.defined {
        if zone.key_src.as_bytes() != key.as_bytes() || zone.window != params.window {
            return emerg(
                cf,
                &format!(
                    "zone \"{}\" is already bound to key \"{}\" with window={}: \
                     declare it once, or give the other one a new name",
                    escape(&params.name),
                    escape(zone.key_src.as_bytes()),
                    Units(zone.window.ms())
                ),
            );
        }
        return emerg(cf, &format!("duplicate zone \"{}\"", escape(&params.name)));
    }

    // SAFETY: cf is the directive's valid configuration context.
    if unsafe { compile_key(cf, zone, key) }.is_err() {
        return NGX_CONF_ERROR;
    }
    if let Some(bits) = params.ipv6_prefix {
        if key.as_bytes() != BINARY_REMOTE_ADDR {
            return emerg(
                cf,
                &format!(
                    "\"ipv6_prefix={bits}\" of zone \"{}\" needs the key \"$binary_remote_addr\", \
                     not \"{}\"",
                    escape(&params.name),
                    escape(key.as_bytes())
                ),
            );
        }
        zone.ipv6_prefix = bits;
    }
    zone.window = params.window;
    zone.window_src = params.window_src;
    zone.mode = mode;
    zone.overrides_cap = overrides;
    zone.fail = params.fail;
    zone.size = params.size;
    zone.redis = params.redis;
    // SAFETY: cf is valid; cf->cycle is the cycle being configured.
    let (words, prefix) = unsafe { (words(cf, 2), (*(*cf).cycle).prefix.as_bytes()) };
    if let Err(e) = crate::state::configure(zone, &words, prefix) {
        return emerg(cf, &e);
    }
    zone.defined = true;
    // SAFETY: as above; zp is the zone just defined.
    match unsafe { add_shared_zone(cf, zp, name) } {
        Ok(()) => NGX_CONF_OK,
        Err(()) => NGX_CONF_ERROR,
    }
}

/// The parameters after the key of `rate_limit_window_zone`: the mode and
/// the rest, checked together, with the Redis files read (by the master,
/// at load). Err is the `[emerg]` text.
///
/// # Safety
/// `cf` must be the configuration context of the directive being parsed.
unsafe fn zone_params(cf: *mut ngx_conf_t) -> Result<(Mode, usize, ZoneParams), String> {
    // SAFETY: ngx_pagesize is set by nginx at startup, before parsing.
    let min_size = 8 * unsafe { ngx_pagesize };
    // SAFETY: cf is valid (the caller's contract).
    let (mode, rest) = take_mode(&unsafe { words(cf, 2) })?;
    let (_, rest) = rate_limit_window_core::state::take_state(&rest)?; // state.rs reads it
    let (overrides, rest) = take_overrides(&rest)?;
    let mut params = parse_zone_params(&rest, min_size).map_err(|e| e.to_string())?;
    check_mode(mode, params.redis.is_some())?;
    if let Some(e) = params.redis.as_ref().and_then(|r| secret_error(&r.secret)) {
        return Err(e);
    }
    if let Some(r) = params.redis.as_mut() {
        // SAFETY: cf->cycle is the cycle being configured.
        let prefix = unsafe { (*(*cf).cycle).conf_prefix.as_bytes() };
        crate::redis_conf::load(r, prefix)?;
    }
    Ok((mode, overrides, params))
}

/// Registers the shared memory of the zone at `zp`, named `name`, whose
/// `init` creates or adopts its table (see zone.rs).
///
/// # Safety
/// `cf` must be the directive's configuration context; `zp` a defined zone
/// in the configuration pool.
unsafe fn add_shared_zone(
    cf: *mut ngx_conf_t,
    zp: *mut ZoneConf,
    name: ngx_str_t,
) -> Result<(), ()> {
    let mut shm_name = name;
    // SAFETY: registers (or finds) the named zone; nginx keeps the pointer.
    let shm = unsafe {
        ngx_shared_memory_add(
            cf,
            &mut shm_name,
            (*zp).size + crate::overrides::extra_bytes((*zp).overrides_cap),
            ptr::addr_of_mut!(crate::ngx_http_rate_limit_window_module).cast(),
        )
    };
    if shm.is_null() {
        return Err(());
    }
    // SAFETY: shm is a valid zone descriptor owned by the cycle; zp lives
    // in the configuration pool.
    unsafe {
        (*shm).init = Some(crate::zone_init::init_zone);
        (*shm).data = zp.cast();
        (*zp).shm_zone = shm;
    }
    Ok(())
}

/// Compiles the zone's key, and notes its variable's index when the key
/// is exactly one variable (read directly on the request path).
///
/// # Safety
/// `cf` must be the configuration context of the directive being parsed.
unsafe fn compile_key(cf: *mut ngx_conf_t, zone: &mut ZoneConf, key: ngx_str_t) -> Result<(), ()> {
    // SAFETY: the complex value lives inside the pool-allocated ZoneConf.
    unsafe { compile_complex(cf, &key, &mut zone.key) }?;
    zone.key_src = key;
    if let Some(var) = single_variable(key.as_bytes()) {
        let mut var = ngx_str_t {
            len: var.len(),
            data: var.as_ptr().cast_mut(),
        };
        // SAFETY: cf is valid; nginx copies the name (lowercased) into its
        // own pool, and the complex value above already registered it.
        let index = unsafe { ngx_http_get_variable_index(cf, &mut var) };
        zone.key_index = Some(ngx_uint_t::try_from(index).map_err(|_| ())?);
    }
    Ok(())
}
