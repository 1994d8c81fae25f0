//! `rate_limit_window_shed`: the host's side of a location's group. The
//! engine asks the group first ([`ask`]: its memory, this process's owner,
//! the request's priority; `engine::shed` decides, dry run included) and
//! the glue acts on its answer: a shed request gets the directive's
//! `status=` (503) with `Retry-After: 1`, `$rate_limit_window_status`
//! `SHED` and a log line ([`log_shed`]), and is counted by no rate limit;
//! an admitted one keeps its place until it ends (in_flight.rs), or gives
//! it back at once when a rate limit of the location rejects or holds it
//! (the engine decides which); a dry run's is logged ([`log_would_shed`])
//! and goes on.

use ngx::http::Request;
use ngx::{ngx_log_debug_http, ngx_log_error};
use rate_limit_window_core::engine::shed::Priority;
use rate_limit_window_core::engine::ShedAsk;

use crate::conf::shed::LocShed;
use crate::conf::LocConf;
use crate::ffi::header_in;
use crate::request::in_flight::text;

/// The group of `s` as the engine asks it for `r` (None: the group has no
/// memory).
#[cold]
#[inline(never)]
pub fn ask(r: &Request, s: &LocShed) -> Option<ShedAsk<'static>> {
    let conf = s.group();
    let group = conf.group.as_ref()?;
    let priority = priority(r, s);
    ngx_log_debug_http!(
        r,
        "rate_limit_window_shed: zone \"{}\": asked, priority {}",
        conf.name_str(),
        priority.name()
    );
    Some(ShedAsk {
        group,
        owner: conf.owner(),
        limits: conf.limits,
        priority,
    })
}

/// The request's priority; an error evaluating it: not critical. A
/// `$http_NAME` priority is read from the header list by the module
/// itself (ffi/header_in.rs), as a zone's key is.
fn priority(r: &Request, s: &LocShed) -> Priority {
    if let Some((index, name)) = s.priority_header() {
        // SAFETY: the index and the header's name were resolved for this
        // configuration; the request is valid (read here, its variable's
        // value cached in it as nginx's handler would).
        let v = unsafe { header_in::header_key(r, index, name) };
        return v.map_or(Priority::Default, Priority::of);
    }
    text(r, s.priority).map_or(Priority::Default, Priority::of)
}

/// The log line of a request the group of `s` shed (`in_flight` in it).
#[cold]
#[inline(never)]
pub fn log_shed(r: &Request, lcf: &LocConf, s: &LocShed, in_flight: u32) {
    log(r, lcf, s, in_flight, "shedding request");
}

/// The log line of a dry run's request the group of `s` would have shed.
#[cold]
#[inline(never)]
pub fn log_would_shed(r: &Request, lcf: &LocConf, s: &LocShed, in_flight: u32) {
    log(r, lcf, s, in_flight, "dry run, would shed request");
}

fn log(r: &Request, lcf: &LocConf, s: &LocShed, in_flight: u32, what: &str) {
    let conf = s.group();
    let p = priority(r, s);
    ngx_log_error!(
        lcf.log_level,
        r.log(),
        "{} by rate_limit_window_shed zone \"{}\", in flight: {}, priority: {}, limit: {} of \
         max={}",
        what,
        conf.name_str(),
        in_flight,
        p.name(),
        conf.limits.limit(p),
        conf.limits.max
    );
}
