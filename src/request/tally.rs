//! The tally of requests decided (`rate_limit_window_decided_total`, and
//! `rate_limit_window_route_requests_total` for a location whose limits
//! are named): counted once, when the main request's decision is committed
//! (handler.rs), whatever the number of its limits.

use ngx::http::{HttpModuleMainConf, Request};
use rate_limit_window_core::shm::tally::Decided;

use crate::conf::LocConf;
use crate::ffi::process;
use crate::request::record::RequestStatus;
use crate::Module;

/// The tally's result of a request decided `status`.
fn result(status: RequestStatus) -> Decided {
    match status {
        RequestStatus::Passed => Decided::Passed,
        RequestStatus::Delayed => Decided::Delayed,
        RequestStatus::Exempt => Decided::Exempt,
        // Refused by the in-flight places or shed: not admitted either.
        RequestStatus::Rejected | RequestStatus::RejectedInFlight | RequestStatus::Shed => {
            Decided::Rejected
        }
        RequestStatus::RejectedDryRun => Decided::RejectedDryRun,
        RequestStatus::DelayedDryRun => Decided::DelayedDryRun,
    }
}

/// Counts a request of a location of `lcf` decided `status`: once, and
/// once in each of the location's routes.
#[inline]
pub fn decided(r: &Request, lcf: &LocConf, status: RequestStatus) {
    let Some(conf) = Module::main_conf(r.as_ref()).map(|m| &m.tally) else {
        return;
    };
    let Some(tally) = conf.tally else {
        return;
    };
    let (what, shard) = (result(status), process::shard());
    tally.decided(shard, what);
    if !lcf.routes.is_empty() {
        core::hint::cold_path();
        for &route in &lcf.routes {
            tally.route(conf.slot(route), shard, what);
        }
    }
}
