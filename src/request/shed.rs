//! `rate_limit_window_shed`: a location's request asks its group for a
//! place before any rate limit sees it (the core's `engine::shed`
//! decides). A shed request gets the directive's `status=` (503) with
//! `Retry-After: 1`, `$rate_limit_window_status` `SHED`, a log line, and is
//! counted by no rate limit; an admitted one keeps its place until it ends
//! (in_flight.rs), or gives it back at once when a rate limit of the
//! location rejects or holds it (handler.rs).

use ngx::http::Request;
use ngx::{ngx_log_debug_http, ngx_log_error};
use rate_limit_window_core::engine::shed::{self, Priority, Shed};

use crate::conf::shed::LocShed;
use crate::conf::LocConf;
use crate::request::in_flight::text;
use crate::request::record::Taken;

/// Asks the group of `s` (the location `lcf`'s) for a place for `r`.
/// Ok: admitted, with its place (None: counted by none, no room). Err:
/// shed, with the Retry-After seconds.
#[cold]
#[inline(never)]
pub fn admit(r: &Request, lcf: &LocConf, s: &LocShed) -> Result<Option<Taken>, u32> {
    let conf = s.group();
    let Some(group) = conf.group.as_ref() else {
        return Ok(None);
    };
    // An error evaluating the value: the request is not critical.
    let priority = text(r, s.priority).map_or(Priority::Default, Priority::of);
    match shed::decide(group, conf.owner(), conf.limits, priority) {
        Shed::Admit(place) => {
            ngx_log_debug_http!(
                r,
                "rate_limit_window_shed: zone \"{}\": admitted, priority {}",
                conf.name_str(),
                priority.name()
            );
            Ok(Some(Taken {
                places: &group.places,
                place,
                shed: true,
            }))
        }
        Shed::Untracked => Ok(None),
        Shed::Shed {
            in_flight,
            retry_after_s,
        } => {
            ngx_log_error!(
                lcf.log_level,
                r.log(),
                "shedding request by rate_limit_window_shed zone \"{}\", in flight: {}, \
                 priority: {}, limit: {} of max={}",
                conf.name_str(),
                in_flight,
                priority.name(),
                conf.limits.limit(priority),
                conf.limits.max
            );
            Err(retry_after_s)
        }
    }
}
