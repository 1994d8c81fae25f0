//! `charge=$variable`: an admitted request counts, once its response is
//! done, what the variable says (LLM tokens from `$upstream_http_x_tokens`)
//! instead of its `cost=`. See docs/charge.md and the core's `rule/charge.rs`.
//!
//! The arrival check is `cost=`'s, unchanged. The admission is kept in
//! `count_status=`'s record (count_status.rs), in a cleanup of the main
//! request's pool. The charge is read here, in the LOG phase, while the
//! request and its upstream's headers are intact (nginx runs the LOG phase
//! just before it destroys the pool, and sets the pool pointer to null
//! first, so a variable cannot be evaluated from the cleanup itself). The
//! handler is put first in the LOG phase's array (nginx runs that phase's
//! handlers in array order), before the access log. The cleanup then
//! settles the admission: with a counted status, it counts the charge.
//!
//! An empty or invalid charge keeps `cost=`: one `warn` per zone and
//! episode, every one counted in `rate_limit_window_invalid_charge_total`.

use core::cell::Cell;

use nginx_sys::{
    ngx_conf_t, ngx_http_phases_NGX_HTTP_LOG_PHASE, ngx_http_variable_value_t, ngx_int_t,
    NGX_LOG_WARN,
};
use ngx::core::Status;
use ngx::http::{HttpModuleMainConf, NgxHttpCoreModule, Request};
use ngx::{ngx_log_debug_http, ngx_log_error};
use rate_limit_window_core::conf::parse::escape;
use rate_limit_window_core::rule::charge::{final_count, parse_charge};

use crate::ffi::pool::main_of;
use crate::ffi::req::{request_handler, variable_get};
use crate::request::count_status::{self, Settle};
use crate::zone::ZoneConf;
use crate::Module;

/// Postconfiguration: when some zone is charged, puts the log-phase
/// handler first in the LOG phase (before the access log).
///
/// # Safety
/// `cf` must be the configuration passed to postconfiguration.
pub unsafe fn register(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: cf is valid during postconfiguration.
    let cf = unsafe { &*cf };
    let Some(mcf) = Module::main_conf(cf) else {
        return Status::NGX_ERROR.into();
    };
    if mcf.zones().all(|z| z.charge_at.is_none()) {
        return Status::NGX_OK.into();
    }
    let Some(cmcf) = NgxHttpCoreModule::main_conf_mut(cf) else {
        return Status::NGX_ERROR.into();
    };
    let phase = ngx_http_phases_NGX_HTTP_LOG_PHASE;
    match crate::request::phases::push_handler(cmcf, phase, Some(log_handler), true) {
        Ok(()) => Status::NGX_OK.into(),
        Err(()) => Status::NGX_ERROR.into(),
    }
}

request_handler!(log_handler, log_phase);

/// LOG phase: reads the charge of each admission kept for the request.
/// Only the main request has the record (a subrequest is logged with
/// log_subrequest).
fn log_phase(r: &mut Request) -> ngx_int_t {
    if !r.is_main() {
        return Status::NGX_OK.into();
    }
    let Some(held) = count_status::held(r) else {
        return Status::NGX_OK.into();
    };
    let status = count_status::final_status(r);
    for cell in held {
        let mut h = cell.get();
        if !h.charge.is_null() && h.counts(status) {
            h.charged = read(r, &h);
        }
        h.read = true;
        cell.set(h);
    }
    Status::NGX_OK.into()
}

variable_get!(pub(crate) get_charge, charge_value);

/// `$rate_limit_window_charge`: what the request counts once settled
/// under its first limit with `charge=` (the charge; its cost when the
/// charge was invalid; 0 when `count_status=` gives it back), from the LOG
/// phase on (the access log); empty before, or without `charge=`.
fn charge_value(r: &mut Request, v: &mut ngx_http_variable_value_t) -> ngx_int_t {
    let status = count_status::final_status(main_of(r));
    let count = count_status::held(r)
        .and_then(|h| {
            h.iter()
                .map(Cell::get)
                .find(|h| !h.charge.is_null() && h.read)
        })
        .map(|h| final_count(h.admission.cost(), h.counts(status), h.charged));
    let text = count.map(|n| n.to_string()).unwrap_or_default();
    crate::ffi::vars::set(r, v, text.as_bytes())
}

/// The charge of `h` for `r`: None when it is empty or invalid (logged
/// once per episode, counted) or could not be evaluated.
fn read(r: &Request, h: &Settle) -> Option<u32> {
    let zone = h.zone;
    // SAFETY: h.charge was compiled at configuration time (non-null: the
    // caller checks), in the configuration pool, which lives for the cycle.
    let cv = unsafe { &*h.charge };
    let bytes = r.get_complex_value(cv)?.as_bytes();
    match parse_charge(bytes) {
        Ok(n) => {
            ngx_log_debug_http!(
                r,
                "rate_limit_window: zone \"{}\": charge {} (cost {})",
                zone.name,
                n,
                h.admission.cost()
            );
            Some(n)
        }
        Err(_) => {
            invalid(r.log(), zone, bytes, h.admission.cost());
            None
        }
    }
}

/// Counts an invalid charge; the first of an episode is logged at `warn`.
#[cold]
#[inline(never)]
fn invalid(log: *mut nginx_sys::ngx_log_t, zone: &ZoneConf, bad: &[u8], cost: u32) {
    let Some(header) = zone.header() else {
        return;
    };
    if !header.charge.note_invalid(crate::ffi::process::now_ms()) {
        return;
    }
    ngx_log_error!(
        NGX_LOG_WARN,
        log,
        "rate_limit_window_zone \"{}\": charge \"{}\" is not a count (empty, or not an integer), \
         counting cost={} instead; further invalid charges are counted in \
         rate_limit_window_invalid_charge_total",
        zone.name,
        escape(&bad[..bad.len().min(64)]),
        cost
    );
}
