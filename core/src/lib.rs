//! Sliding-window rate limiting in shared memory, without locks.
//!
//! This crate is the nginx-free core of `rate_limit_window`: pure integer
//! arithmetic ([`rule::window`]) and a lock-free table of per-key counters over a
//! caller-provided byte region shared by worker processes ([`table`]). It
//! never reads a clock: every time is a `now_ms: u64` in UTC unix epoch
//! milliseconds passed by the caller.
//!
//! # Algorithm: the sliding window counter
//!
//! Time is cut into fixed windows of `W` ms aligned on the UTC epoch (window
//! `i` is `[i*W, (i+1)*W)`). For each key the table keeps the number of
//! admitted requests in the current window and in the one before. At
//! `elapsed` ms into the current window, the number of requests in the
//! sliding window `(now - W, now]` is estimated as
//!
//! ```text
//! estimate = current + previous * (W - elapsed) / W
//! ```
//!
//! and a request is admitted iff `estimate < limit`, evaluated exactly in
//! integers as `current*W + previous*(W - elapsed) < limit*W`. Admitted
//! requests are counted, rejected ones are not.
//!
//! # Error bound
//!
//! The estimate assumes the previous window's requests were spread evenly
//! over it. When they were not, the admitted count in some real sliding
//! window of length `W` can differ from `limit`:
//!
//! * Over-admission: if the previous window's requests all came at its very
//!   end, the estimate forgets them linearly although they are still inside
//!   the sliding window. An adversary that sends `limit` requests at the end
//!   of window `i` and then as many as admitted early in window `i + 1` gets
//!   `limit + floor(limit * e / W)`-ish requests into the interval
//!   `(e - W, e]`; the worst case over any real window is below `2 * limit`
//!   and is reached only by bursts placed exactly at a window boundary.
//!   Every fixed window still admits at most `limit` (the estimate is at
//!   least `current`).
//! * Under-admission is symmetric: requests early in the previous window
//!   are still weighted although they have left the sliding window.
//!
//! For traffic that is smooth at the scale of `W` the estimate is close to
//! exact; `cargo bench --bench accuracy` measures it against an exact log on
//! a synthetic trace (wrong-decision percentage and worst over-admission).
//!
//! # Time zones and DST
//!
//! Window indices are `floor(epoch_ms / W)`, so local time never matters: a
//! repeated local hour at the end of daylight saving time is a different hour
//! of UTC with its own windows, and "the previous window" is always the one
//! `W` ms earlier in real time.
//!
//! # No locks
//!
//! Every slot is one 128-bit atomic changed only by compare-and-swap (the
//! table refuses to run where 128-bit atomics are not lock-free), and
//! counters are atomic adds. A worker killed at any point leaves nothing held
//! and nothing half-written.
//!
//! See [`table`] for the region layout, the slot packing, placement and the
//! collision probability.
//!
//! # Layout
//!
//! | module | what it holds |
//! |--------|---------------|
//! | [`rule`] | the rule: sliding window counter, strict window, fit, `mode=`, `delay=`, `charge=` |
//! | [`engine`] | the one per-request decision over every limit of a location |
//! | [`table`] | the lock-free slot table over a byte region: placement, hash, seed |
//! | [`shm`] | a zone's shared memory: its header, its parts, adopt on reload |
//! | [`state`] | the state file (`state=FILE`): format, encode, decode |
//! | [`conf`] | the directives' words, parsed and checked, and their errors |
//! | [`overrides`] | per-client overrides: the table, the API's body, the fleet's Redis hash |
//! | [`cluster`] | the cluster sync's bookkeeping: ledger, hot clients, the fleet's profile |
//! | [`grpc`] | what a rejected gRPC call is told |
//! | [`units`] | nginx's value syntax (sizes, times) and `escape`: a leaf, imports nothing |
//! | `testing` | the reference models and the aligned test region (feature `testing`) |
#![warn(missing_docs)]

pub mod cluster;
pub mod conf;
pub mod engine;
pub mod grpc;
pub mod overrides;
pub mod rule;
pub mod shm;
pub mod state;
pub mod table;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod units;

pub use rule::window::*;
pub use table::*;
