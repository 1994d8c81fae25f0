//! The one per-request decision: a request judged by every limit of its
//! location, composed here (several limits, cost, estimate or strict,
//! `delay=`, dry run, `fail=`, overrides, `ban=` and `in_flight=`'s places
//! ([`in_flight`]), so that every
//! combination is decided by one piece of pure code, and tested together
//! (`tests/`, against the models of `crate::testing::reference`).
//!
//! The glue (nginx) implements [`Request`]: it evaluates each limit's key,
//! limit value and cost **lazily**, when the engine asks, and records what
//! the engine decided for the headers and variables. The trait is
//! monomorphised and inlined, so the request path is the same straight
//! loop as a hand-written one: per limit, one key evaluation, one relaxed
//! load for the overrides, one CAS.
//!
//! [`decide`] returns one typed [`Verdict`]: admit, exempt, reject (which
//! limit, why, Retry-After for the whole cost over every limit), hold for
//! `delay=`, or a dry run's would-hold. A rejected request is counted by no
//! limit: the engine gives back the other limits' admissions itself.
//!
//! **One rule** answers "when does this request, whole cost included,
//! fit?": [`crate::rule::fit`], used by the table's admission and Retry-After, by
//! [`plan`]'s holds, and by the headers (the table's `remaining`).

mod applies;
mod around;
#[cfg(test)]
mod around_tests;
mod decide;
pub mod in_flight;
#[cfg(test)]
mod places_override_tests;
pub mod plan;
mod quiet;
#[cfg(test)]
mod range_tests;
mod reject;
mod request;
pub mod shed;
#[cfg(test)]
mod tests;

use applies::{override_of, Applies, Blocked};
pub use around::decide;
use decide::{charged, not_applied, noted_invalid, undo_all, Bad};
pub use plan::grows_in_s;
use quiet::{quiet_limit, Quiet};
use reject::{blocked_wait, rejected, Rejecting};
pub use request::{
    Ask, Cost, Hold, HostError, Invalid, Key, LimitConf, LimitRead, Line, Rejection, Request,
    Shared, ShedAsk, ShedRefusal, Skip, Verdict, Woken,
};
