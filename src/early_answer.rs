//! A limit that cannot run says so: a location with limits that answers
//! before the preaccess phase (`return` runs in the rewrite phase) is never
//! limited. Two checks, both `warn`:
//!
//! - at configuration (`nginx -t`), when the location's first rewrite
//!   instruction is `return` (read from the rewrite module's own location
//!   configuration, while its merge is under way);
//! - otherwise at the first such request, once per location and worker: the
//!   header filter sees a main request whose location has limits, answered
//!   (status below 400, no error_page) with no decision ever made for it.

use core::ffi::{c_void, CStr};
use core::sync::atomic::Ordering;

use nginx_sys::{
    ngx_array_t, ngx_conf_t, ngx_http_conf_ctx_t, ngx_http_core_loc_conf_t, ngx_http_core_module,
    ngx_http_script_code_pt, ngx_http_script_return_code, ngx_uint_t, NGX_LOG_WARN,
};
use ngx::http::Request;
use ngx::ngx_log_error;

use crate::conf::LocConf;
use crate::conf_log::log_at;
use crate::Module;
use ngx::http::HttpModuleLocationConf;

/// The start of `ngx_http_rewrite_loc_conf_t` (private to
/// ngx_http_rewrite_module.c, unchanged since nginx 0.x): the location's
/// script codes come first.
#[repr(C)]
struct RewriteLocConf {
    codes: *mut ngx_array_t,
}

/// The rewrite module's index in the configuration contexts, found by name
/// (a dynamic module cannot link to a static module's descriptor: nginx
/// may be built without it).
///
/// # Safety
/// `cf` must be a valid configuration context.
unsafe fn rewrite_ctx_index(cf: *mut ngx_conf_t) -> Option<ngx_uint_t> {
    // SAFETY: cf->cycle->modules holds modules_n valid module pointers
    // while the configuration is parsed.
    unsafe {
        let cycle = (*cf).cycle;
        let modules = core::slice::from_raw_parts((*cycle).modules, (*cycle).modules_n);
        modules
            .iter()
            .find(|&&m| {
                !m.is_null()
                    && !(*m).name.is_null()
                    && CStr::from_ptr((*m).name) == c"ngx_http_rewrite_module"
            })
            .map(|&m| (*m).ctx_index)
    }
}

/// Whether the first rewrite instruction of the level being merged is
/// `return`: then every request there is answered in the rewrite phase.
///
/// # Safety
/// `cf` must be the configuration context nginx passes to merge_loc_conf:
/// its ctx's loc_conf is the level being merged.
unsafe fn answers_in_rewrite(cf: *mut ngx_conf_t) -> bool {
    // SAFETY: the caller's contract; the rewrite module's merge of this
    // level has run (modules merge in order, rewrite before us).
    unsafe {
        let Some(index) = rewrite_ctx_index(cf) else {
            return false;
        };
        let ctx = (*cf).ctx.cast::<ngx_http_conf_ctx_t>();
        let rlcf = (*(*ctx).loc_conf.add(index)).cast::<RewriteLocConf>();
        if rlcf.is_null() || (*rlcf).codes.is_null() || (*(*rlcf).codes).nelts == 0 {
            return false;
        }
        let first = (*(*rlcf).codes).elts.cast::<ngx_http_script_code_pt>();
        // Both are the address of the one function in the nginx binary
        // (the module reaches it through the dynamic linker).
        let ret: unsafe extern "C" fn(_) = ngx_http_script_return_code;
        (*first).is_some_and(|f| core::ptr::fn_addr_eq(f, ret))
    }
}

/// The location's name for messages ("" at server level) and whether it
/// is an `if` block (which shares its parent's rewrite codes).
///
/// # Safety
/// `loc_conf` must be a level's loc_conf array.
unsafe fn location_of(loc_conf: *mut *mut c_void) -> (String, bool) {
    // SAFETY: every level has the core module's location configuration.
    unsafe {
        let clcf =
            (*loc_conf.add(ngx_http_core_module.ctx_index)).cast::<ngx_http_core_loc_conf_t>();
        let name = String::from_utf8_lossy((*clcf).name.as_bytes()).into_owned();
        (name, (*clcf).noname() != 0)
    }
}

/// "location \"/x\"" or "server".
fn describe(name: &str) -> String {
    if name.is_empty() {
        "this server".into()
    } else {
        format!("location \"{name}\"")
    }
}

/// At `nginx -t`: warns when the level being merged has limits and answers
/// with `return` before them.
///
/// # Safety
/// As for [`answers_in_rewrite`].
pub unsafe fn check_conf(cf: *mut ngx_conf_t, conf: &LocConf) {
    let Some(first) = conf.limits.as_ref().and_then(|l| l.first()) else {
        return;
    };
    // SAFETY: the caller's contract.
    if !unsafe { answers_in_rewrite(cf) } {
        return;
    }
    // SAFETY: as above; cf->ctx is the level being merged.
    let (name, noname) =
        unsafe { location_of((*(*cf).ctx.cast::<ngx_http_conf_ctx_t>()).loc_conf) };
    if noname {
        return;
    }
    let msg = format!(
        "\"rate_limit_window\" never runs in {}: its \"return\" answers in the rewrite phase, \
         before the limits (preaccess phase), so no request there is limited; pass the request \
         on (proxy_pass, try_files, a static file) or move the limit",
        describe(&name)
    );
    // SAFETY: cf is valid; the limit's file name lives in the configuration pool.
    unsafe { log_at(cf, first.file, first.line, NGX_LOG_WARN as ngx_uint_t, &msg) };
}

/// At a response of a main request with no decision: warns, once per
/// location and worker, when the location has limits and the request was
/// answered without them (before preaccess). A location without limits
/// (the usual case here) costs one test.
#[inline]
pub fn check_request(r: &Request) {
    let Some(lcf) = Module::location_conf(r.as_ref()) else {
        return;
    };
    if lcf.limits.as_ref().is_some_and(|l| !l.is_empty()) {
        warn_once(r, lcf);
    }
}

/// [`check_request`] in a location with limits and no decision.
#[cold]
#[inline(never)]
fn warn_once(r: &Request, lcf: &LocConf) {
    let raw = r.as_ref();
    let status = raw.headers_out.status;
    if status == 0 || status >= 400 || raw.error_page() != 0 {
        return;
    }
    if lcf.early_answer_warned.swap(true, Ordering::Relaxed) {
        return;
    }
    // SAFETY: r->loc_conf is the request's location configuration array.
    let (name, _) = unsafe { location_of(raw.loc_conf) };
    ngx_log_error!(
        NGX_LOG_WARN,
        r.log(),
        "rate_limit_window: the limits of {} did not run: the request was answered ({}) before \
         the preaccess phase (\"return\" answers in the rewrite phase), so requests there are not \
         limited; pass the request on (proxy_pass, try_files, a static file) or move the limit \
         (logged once per location and worker)",
        describe(&name),
        status
    );
}
