//! `rate_limit_window_shed zone=NAME max=N priority=VALUE [reserve=P%]
//! [reserve_low=P%] [reserve_high=P%]
//! [status=CODE];` (location): the directive's handler. The words are
//! parsed by the core (`conf::shed_opts`); the group is found by name in
//! the main configuration, or made with its own small shared-memory zone
//! (zone/shed.rs); every location naming a group must give the same
//! `max=` and reserves.

use core::ptr;

use nginx_sys::{
    ngx_conf_t, ngx_http_complex_value_t, ngx_int_t, ngx_pagesize, ngx_shared_memory_add,
    ngx_uint_t,
};
use rate_limit_window_core::conf::parse::single_variable;
use rate_limit_window_core::conf::shed_opts::{parse_shed_directive, ShedConfError};
use rate_limit_window_core::shm::shed::ShedGroup;

use crate::conf::{LocConf, MainConf};
use crate::ffi::conf_ext::{ConfExt, ConfFailed, ConfResult};
use crate::ffi::header_in::HeaderName;
use crate::zone::shed::{self as zone_shed, ShedConf};
use crate::Module;
use ngx::http::HttpModuleMainConf;

/// A location's `rate_limit_window_shed`.
#[derive(Clone, Copy)]
pub struct LocShed {
    /// The group (configuration pool), for the cycle.
    pub group: *mut ShedConf,
    /// `priority=`, compiled.
    pub priority: *mut ngx_http_complex_value_t,
    /// `priority=` when it is one variable (configuration pool, shared by
    /// the locations that inherit this one's group; null otherwise).
    pub priority_var: *mut PriorityVar,
    /// `status=` of a shed request.
    pub status: ngx_int_t,
}

/// A `priority=` that is one variable: its index and, once nginx resolved
/// the configuration's variables, the header's name when it is a generic
/// `$http_NAME` (read by the module itself, as a zone's key is:
/// ffi/header_in.rs).
pub struct PriorityVar {
    /// The variable's index.
    pub index: ngx_uint_t,
    /// The header's name, for `$http_NAME` (set at `init_module`).
    pub header: Option<HeaderName>,
}

impl LocShed {
    /// `priority=`'s one `$http_NAME` header, if it is that: (variable
    /// index, header name).
    #[inline]
    pub fn priority_header(&self) -> Option<(ngx_uint_t, &'static HeaderName)> {
        // SAFETY: null or a PriorityVar of the configuration pool, set at
        // init_module, unchanged after it, for the cycle.
        let v = unsafe { self.priority_var.as_ref() }?;
        v.header.as_ref().map(|h| (v.index, h))
    }

    /// The group, for the cycle.
    pub fn group(&self) -> &'static ShedConf {
        // SAFETY: `group` comes from the configuration pool and stays
        // valid, unchanged after configuration, for the cycle.
        unsafe { &*self.group }
    }
}

/// A tag of the groups' zones, apart from `rate_limit_window_zone`'s.
static SHED_TAG: u8 = 0;

/// `rate_limit_window_shed ...;` at the level of `lcf`.
pub fn set_shed(cf: &ngx_conf_t, lcf: &mut LocConf) -> ConfResult {
    if lcf.shed.is_some() {
        return Err(ConfFailed::Says(c"is duplicate"));
    }
    let d = parse_shed_directive(&cf.words(1)).map_err(|e| cf.emerg(e))?;
    let mcf = Module::main_conf_mut(cf).ok_or(ConfFailed::Logged)?;
    let group = match find(mcf, &d.zone) {
        Some(g) => {
            // SAFETY: a group of the configuration pool (see LocShed).
            let before = unsafe { &*g }.limits;
            if before != d.limits {
                let zone = d.zone.clone();
                return Err(cf.emerg(ShedConfError::Conflict { zone, before }));
            }
            g
        }
        None => new_group(cf, mcf, &d.zone, d.limits)?,
    };
    let priority_var = priority_var(cf, mcf, &d.priority)?;
    lcf.shed = Some(LocShed {
        group,
        priority: cf.compile(&d.priority)?,
        priority_var,
        status: ngx_int_t::from(i16::try_from(d.status).unwrap_or(503)),
    });
    Ok(())
}

/// After nginx resolved the configuration's variables (`init_module`):
/// the header's name of each `priority=` that is one generic `$http_NAME`.
pub fn resolve_priority_headers(cycle: &nginx_sys::ngx_cycle_t, vars: &[*mut PriorityVar]) {
    use ngx::http::{HttpModuleMainConf, NgxHttpCoreModule};
    let Some(cmcf) = NgxHttpCoreModule::main_conf(cycle) else {
        return;
    };
    for &v in vars {
        // SAFETY: configuration pool memory; nothing reads it concurrently
        // while the master initialises modules.
        let v = unsafe { &mut *v };
        // SAFETY: the core module's main configuration, its variables
        // resolved; the index is one nginx gave for this configuration.
        v.header =
            unsafe { crate::ffi::header_in::generic_header_name(cmcf, v.index) }.map(|name| {
                // SAFETY: the name is configuration memory, for the cycle.
                HeaderName::new(unsafe {
                    core::slice::from_raw_parts(name.data.cast_const(), name.len)
                })
            });
    }
}

/// `priority=`'s variable, when it is exactly one, noted in `mcf` so
/// that its header is resolved at `init_module` (null otherwise).
fn priority_var(cf: &ngx_conf_t, mcf: &mut MainConf, value: &[u8]) -> ConfResult<*mut PriorityVar> {
    let Some(var) = single_variable(value) else {
        return Ok(ptr::null_mut());
    };
    let v = cf.pool().allocate(PriorityVar {
        index: cf.variable_index(var)?,
        header: None,
    });
    if v.is_null() {
        return Err(ConfFailed::Logged);
    }
    mcf.shed_priorities.push(v);
    Ok(v)
}

/// The group called `name`, if a location named it before.
fn find(mcf: &MainConf, name: &[u8]) -> Option<*mut ShedConf> {
    mcf.sheds.iter().copied().find(|&g| {
        // SAFETY: groups of the configuration pool (see LocShed).
        unsafe { &*g }.name.as_bytes() == name
    })
}

/// A new group `name` and its shared-memory zone, sized for `max=`.
fn new_group(
    cf: &ngx_conf_t,
    mcf: &mut MainConf,
    name: &[u8],
    limits: rate_limit_window_core::engine::shed::ShedLimits,
) -> ConfResult<*mut ShedConf> {
    let conf = ShedConf {
        name: cf.pool_str(name)?,
        limits,
        group: None,
    };
    let g = cf.pool().allocate(conf);
    if g.is_null() {
        return Err(ConfFailed::Logged);
    }
    // SAFETY: ngx_pagesize is set by nginx at startup, before parsing.
    let page = unsafe { ngx_pagesize };
    // The group's bytes on whole pages, and the slab pool's own: 8 pages
    // at least, as nginx's own small zones.
    let size = (ShedGroup::bytes_for(limits.max).next_multiple_of(page) + 2 * page).max(8 * page);
    let mut zname = cf.pool_str(&zone_shed::zone_name(name))?;
    let cf = ptr::from_ref(cf).cast_mut();
    // SAFETY: registers the named zone in the cycle being configured; nginx
    // keeps the pointers (the tag is a static), and reads nothing else of cf.
    let shm = unsafe {
        ngx_shared_memory_add(
            cf,
            &mut zname,
            size,
            ptr::addr_of!(SHED_TAG).cast_mut().cast(),
        )
    };
    // SAFETY: a non-null shm is a zone descriptor owned by the cycle.
    let shm = unsafe { shm.as_mut() }.ok_or(ConfFailed::Logged)?;
    shm.init = Some(zone_shed::init_zone);
    shm.data = g.cast();
    mcf.sheds.push(g);
    Ok(g)
}
