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

use core::ffi::CStr;
use core::sync::atomic::Ordering;

use nginx_sys::{
    ngx_array_t, ngx_conf_t, ngx_http_conf_ctx_t, ngx_http_core_loc_conf_t,
    ngx_http_script_code_pt, ngx_http_script_return_code, ngx_uint_t, NGX_LOG_WARN,
};
use ngx::http::{HttpModuleLocationConf, NgxHttpCoreModule, Request};
use ngx::ngx_log_error;

use crate::conf::LocConf;
use crate::ffi::conf_ext::ConfExt;
use crate::ffi::request_bits;
use crate::Module;

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
fn rewrite_ctx_index(cf: &ngx_conf_t) -> Option<ngx_uint_t> {
    // SAFETY: cf->cycle->modules holds modules_n module pointers, each null
    // or valid with a null or NUL-terminated name, while the configuration
    // is parsed.
    unsafe {
        let cycle = &*cf.cycle;
        let modules = core::slice::from_raw_parts(cycle.modules, cycle.modules_n);
        let m = modules
            .iter()
            .filter_map(|&m| m.as_ref())
            .find(|m| !m.name.is_null() && CStr::from_ptr(m.name) == c"ngx_http_rewrite_module")?;
        Some(m.ctx_index)
    }
}

/// Whether the first rewrite instruction of the level being merged is
/// `return`: then every request there is answered in the rewrite phase.
/// `cf` is the configuration nginx passes to merge_loc_conf: its ctx's
/// loc_conf is the level being merged.
fn answers_in_rewrite(cf: &ngx_conf_t) -> bool {
    let Some(index) = rewrite_ctx_index(cf) else {
        return false;
    };
    // Both are the address of the one function in the nginx binary (the
    // module reaches it through the dynamic linker).
    let ret: unsafe extern "C" fn(_) = ngx_http_script_return_code;
    // SAFETY: during a merge cf->ctx is the http conf ctx of the level being
    // merged, whose loc_conf array has every module's configuration; the
    // rewrite module's (merged before ours, modules merge in order) starts
    // with its codes array, null or valid with nelts script codes.
    unsafe {
        let ctx = cf.ctx.cast::<ngx_http_conf_ctx_t>();
        let rlcf = (*(*ctx).loc_conf.add(index)).cast::<RewriteLocConf>();
        let Some(codes) = rlcf.as_ref().and_then(|r| r.codes.as_ref()) else {
            return false;
        };
        if codes.nelts == 0 {
            return false;
        }
        let first = codes.elts.cast::<ngx_http_script_code_pt>();
        (*first).is_some_and(|f| core::ptr::fn_addr_eq(f, ret))
    }
}

/// The location's name for messages ("" at server level) and whether it
/// is an `if` block (which shares its parent's rewrite codes).
fn location_of(clcf: &ngx_http_core_loc_conf_t) -> (String, bool) {
    let name = String::from_utf8_lossy(clcf.name.as_bytes()).into_owned();
    (name, clcf.noname() != 0)
}

/// "location \"/x\"" or "server".
fn describe(name: &str) -> String {
    if name.is_empty() {
        "this server".into()
    } else {
        format!("location \"{name}\"")
    }
}

/// At `nginx -t`: warns when the level being merged (`cf`, as nginx passes
/// it to merge_loc_conf) has limits and answers with `return` before them.
pub fn check_conf(cf: &mut ngx_conf_t, conf: &LocConf) {
    let Some(first) = conf.limits.as_ref().and_then(|l| l.first()) else {
        return;
    };
    if !answers_in_rewrite(cf) {
        return;
    }
    let Some(clcf) = NgxHttpCoreModule::location_conf(&*cf) else {
        return;
    };
    let (name, noname) = location_of(clcf);
    if noname {
        return;
    }
    let msg = format!(
        "\"rate_limit_window\" never runs in {}: its \"return\" answers in the rewrite phase, \
         before the limits (preaccess phase), so no request there is limited; pass the request \
         on (proxy_pass, try_files, a static file) or move the limit",
        describe(&name)
    );
    cf.log_at((first.file, first.line), NGX_LOG_WARN as ngx_uint_t, &msg);
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
    if status == 0 || status >= 400 || request_bits::error_page(r) {
        return;
    }
    if lcf.early_answer_warned.swap(true, Ordering::Relaxed) {
        return;
    }
    let Some(clcf) = NgxHttpCoreModule::location_conf(raw) else {
        return;
    };
    let (name, _) = location_of(clcf);
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
