//! `charge=$variable`: an admitted request counts, once its response is
//! done, what the variable says (LLM tokens from `$upstream_http_x_tokens`)
//! instead of its `cost=`. See docs/charge.md and the core's `charge.rs`.
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

use core::sync::atomic::{AtomicU64, Ordering};

use nginx_sys::{
    ngx_conf_t, ngx_http_complex_value, ngx_http_phases_NGX_HTTP_LOG_PHASE, ngx_http_request_t,
    ngx_int_t, ngx_str_t, ngx_uint_t, NGX_LOG_WARN,
};
use ngx::core::Status;
use ngx::http::{HttpModuleMainConf, NgxHttpCoreModule};
use ngx::{ngx_log_debug_http, ngx_log_error};
use rate_limit_window_core::charge::{final_count, parse_charge};
use rate_limit_window_core::parse::escape;

use crate::count_status::{self, Held};
use crate::zone::ZoneConf;
use crate::Module;

/// How long invalid charges of a zone must stop before the next one is
/// logged again, as a new episode (ms).
const EPISODE_QUIET_MS: u64 = 60_000;

/// Invalid charges of one zone, in its shared header (all workers).
#[derive(Default)]
pub struct ChargeStats {
    /// Charges that were empty or not an integer (`cost=` counted instead).
    pub invalid: AtomicU64,
    /// Epoch ms + 1 of the latest invalid charge (0: never), for episodes.
    last_invalid: AtomicU64,
}

impl ChargeStats {
    /// Counts an invalid charge at `now_ms`; true when it starts a new
    /// episode (none in the `EPISODE_QUIET_MS` before it), to be logged.
    fn note_invalid(&self, now_ms: u64) -> bool {
        self.invalid.fetch_add(1, Ordering::Relaxed);
        let stamp = now_ms.saturating_add(1);
        let prev = self.last_invalid.fetch_max(stamp, Ordering::Relaxed);
        prev == 0 || now_ms.saturating_sub(prev - 1) > EPISODE_QUIET_MS
    }
}

/// Postconfiguration: when some zone is charged, puts the log-phase
/// handler first in the LOG phase (before the access log).
///
/// # Safety
/// `cf` must be the configuration passed to postconfiguration.
pub unsafe fn register(cf: *mut ngx_conf_t) -> ngx_int_t {
    // SAFETY: cf is valid during postconfiguration.
    let Some(mcf) = (unsafe { Module::main_conf(&*cf) }) else {
        return Status::NGX_ERROR.into();
    };
    if mcf.zones().all(|z| z.charge_at.is_none()) {
        return Status::NGX_OK.into();
    }
    // SAFETY: cf is valid during postconfiguration.
    let Some(cmcf) = NgxHttpCoreModule::main_conf_mut(unsafe { &*cf }) else {
        return Status::NGX_ERROR.into();
    };
    let phase = ngx_http_phases_NGX_HTTP_LOG_PHASE;
    match crate::phases::push_handler(cmcf, phase, log_handler, true) {
        Ok(()) => Status::NGX_OK.into(),
        Err(()) => Status::NGX_ERROR.into(),
    }
}

/// LOG phase: reads the charge of each admission kept for the request.
extern "C" fn log_handler(r: *mut ngx_http_request_t) -> ngx_int_t {
    // SAFETY: nginx calls log handlers with a valid request. Only the main
    // request has the record (a subrequest is logged with log_subrequest).
    if unsafe { (*r).main } != r {
        return Status::NGX_OK.into();
    }
    // SAFETY: r is a valid main request; nothing else holds its entries.
    let Some(held) = (unsafe { count_status::held_mut(r) }) else {
        return Status::NGX_OK.into();
    };
    // SAFETY: r is valid.
    let status = unsafe { count_status::final_status(r) };
    for h in held.iter_mut() {
        if !h.charge.is_null() && h.counts(status) {
            // SAFETY: r is valid; h was made for it.
            h.charged = unsafe { read(r, h) };
        }
        h.read = true;
    }
    Status::NGX_OK.into()
}

/// Adds `$rate_limit_window_charge`: what the request counts once settled
/// under its first limit with `charge=` (the charge; its cost when the
/// charge was invalid; 0 when `count_status=` gives it back), from the LOG
/// phase on (the access log); empty before, or without `charge=`.
///
/// # Safety
/// `cf` must be the configuration passed to preconfiguration.
pub unsafe fn register_variable(cf: *mut ngx_conf_t) -> ngx_int_t {
    let mut name = ngx::ngx_string!("rate_limit_window_charge");
    let flags = nginx_sys::NGX_HTTP_VAR_NOCACHEABLE as ngx_uint_t;
    // SAFETY: cf is valid; nginx copies the name.
    let v = unsafe { nginx_sys::ngx_http_add_variable(cf, &mut name, flags) };
    if v.is_null() {
        return Status::NGX_ERROR.into();
    }
    // SAFETY: v is the variable nginx just created.
    unsafe {
        (*v).get_handler = Some(get_charge);
        (*v).data = 0;
    }
    Status::NGX_OK.into()
}

unsafe extern "C" fn get_charge(
    r: *mut ngx_http_request_t,
    v: *mut nginx_sys::ngx_http_variable_value_t,
    _: usize,
) -> ngx_int_t {
    // SAFETY: nginx passes a valid request, whose main request outlives it.
    let main = unsafe { (*r).main };
    // SAFETY: main is valid; the entries are only read here.
    let held = unsafe { count_status::held_mut(main) };
    let count = held
        .and_then(|h| h.iter().find(|h| !h.charge.is_null() && h.read))
        .map(|h| {
            // SAFETY: main is valid.
            let status = unsafe { count_status::final_status(main) };
            final_count(h.admission.cost(), h.counts(status), h.charged)
        });
    // SAFETY: called by nginx as a get handler.
    let (r, v) = unsafe { crate::variables::args(r, v) };
    let text = count.map(|n| n.to_string()).unwrap_or_default();
    crate::variables::set(r, v, text.as_bytes())
}

/// The charge of `h` for `r`: None when it is empty or invalid (logged
/// once per episode, counted) or could not be evaluated.
///
/// # Safety
/// `r` must be a valid request, `h.charge` compiled at configuration time.
unsafe fn read(r: *mut ngx_http_request_t, h: &Held) -> Option<u32> {
    let mut s = ngx_str_t::empty();
    // SAFETY: as the caller guarantees.
    if unsafe { ngx_http_complex_value(r, h.charge, &mut s) } != Status::NGX_OK.into() {
        return None;
    }
    let bytes = if s.len == 0 {
        &[][..]
    } else {
        // SAFETY: a non-empty value lives in the request pool.
        unsafe { core::slice::from_raw_parts(s.data, s.len) }
    };
    // SAFETY: zones live in the configuration pool for the cycle.
    let zone = unsafe { &*h.zone };
    // SAFETY: r is a valid request, which shares the representation of
    // `Request`.
    let req = unsafe { ngx::http::Request::from_ngx_http_request(r) };
    match parse_charge(bytes) {
        Ok(n) => {
            ngx_log_debug_http!(
                req,
                "rate_limit_window: zone \"{}\": charge {} (cost {})",
                zone.name,
                n,
                h.admission.cost()
            );
            Some(n)
        }
        Err(_) => {
            invalid(req.log(), zone, bytes, h.admission.cost());
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
    if !header.charge.note_invalid(crate::util::now_ms()) {
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
