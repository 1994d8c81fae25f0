//! Where the phase handler sits in nginx's phases (see docs/phases.md):
//! first in PREACCESS's array, so that it runs last in that phase, after
//! realip's location-level handler, `limit_req` and `limit_conn`; last in
//! PRECONTENT's, so that it runs first there, before `try_files` and
//! `mirror`. nginx runs a phase's handlers in the reverse order of the
//! array (`ngx_http_init_phase_handlers`), and a dynamic module's
//! postconfiguration runs after every static module's.

use nginx_sys::{
    ngx_array_push, ngx_conf_t, ngx_http_core_main_conf_t, ngx_http_handler_pt, ngx_http_phases,
    ngx_http_phases_NGX_HTTP_PREACCESS_PHASE, ngx_http_phases_NGX_HTTP_PRECONTENT_PHASE, ngx_int_t,
};
use ngx::core::Status;
use ngx::http::{HttpModuleMainConf, NgxHttpCoreModule};

use crate::request::handler::{preaccess_handler, precontent_handler};
use crate::Module;

/// Pushes the handler onto the PREACCESS and the PRECONTENT phases.
///
/// # Safety
/// `cf` must be the configuration passed to postconfiguration.
pub unsafe fn register(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: cf is the configuration of postconfiguration, valid and
    // ours during the call.
    let cf = unsafe { &mut *cf };
    let Some(cmcf) = NgxHttpCoreModule::main_conf_mut(cf) else {
        return Status::NGX_ERROR.into();
    };
    let (Some(mark), Some(mcf)) = (crate::ffi::access::marks(cf), Module::main_conf_mut(cf)) else {
        return Status::NGX_ERROR.into();
    };
    // Locations are merged before postconfiguration: `postaccess` is known.
    if mcf.postaccess {
        mcf.access_mark = Some(mark);
    }
    mcf.record_index = crate::ffi::hidden::index(cf, crate::ffi::hidden::RECORD);
    if mcf.record_index.is_none() {
        return Status::NGX_ERROR.into();
    }
    let phases: [(ngx_http_phases, ngx_http_handler_pt); 2] = [
        (
            ngx_http_phases_NGX_HTTP_PREACCESS_PHASE,
            Some(preaccess_handler),
        ),
        (
            ngx_http_phases_NGX_HTTP_PRECONTENT_PHASE,
            Some(precontent_handler),
        ),
    ];
    for (phase, handler) in phases {
        // PREACCESS: first in the array, so it runs last in the phase, after
        // realip's location-level handler (and limit_req, limit_conn).
        // PRECONTENT: last, so it runs first, before try_files and mirror.
        let first = phase == ngx_http_phases_NGX_HTTP_PREACCESS_PHASE;
        if push_handler(cmcf, phase, handler, first).is_err() {
            return Status::NGX_ERROR.into();
        }
    }
    Status::NGX_OK.into()
}

/// Adds `handler` to `phase`'s handler array: at its end (run first in the
/// phase: nginx runs a phase's handlers in reverse order), or with `first`
/// at its start (run last).
pub(crate) fn push_handler(
    cmcf: &mut ngx_http_core_main_conf_t,
    phase: ngx_http_phases,
    handler: ngx_http_handler_pt,
    first: bool,
) -> Result<(), ()> {
    let arr = &mut cmcf.phases[phase as usize].handlers;
    // SAFETY: the phase handler arrays are initialised by the core module
    // before any postconfiguration runs, as arrays of ngx_http_handler_pt;
    // a non-null push is a fresh slot at the end, written here, after
    // which the array's nelts handlers are all initialised.
    let handlers = unsafe {
        let h = ngx_array_push(arr).cast::<ngx_http_handler_pt>();
        if h.is_null() {
            return Err(());
        }
        h.write(handler);
        core::slice::from_raw_parts_mut(arr.elts.cast::<ngx_http_handler_pt>(), arr.nelts)
    };
    if first {
        // The new one (last) goes first; the older ones move up by one.
        handlers.rotate_right(1);
    }
    Ok(())
}
