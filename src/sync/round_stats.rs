//! What the sync thread measures and the fleet it sees, in the zone header
//! (written by the sync thread, read by every worker's metrics and by
//! worker 0's log of fleet mismatches): the shared part is the core's
//! `SyncStats`; the sync thread's own window of round durations is here.

use core::sync::atomic::Ordering;
use std::collections::VecDeque;

pub use rate_limit_window_core::shm::SyncStats;

/// Rounds over which `round_p99_ms` is taken.
const P99_ROUNDS: usize = 200;

/// The sync thread's window of recent round durations.
#[derive(Default)]
pub struct Durations(VecDeque<u64>);

impl Durations {
    /// Adds a round of `ms` and publishes the summary and the p99.
    pub fn add(&mut self, stats: &SyncStats, ms: u64) {
        stats.round_ms_sum.fetch_add(ms, Ordering::Relaxed);
        stats.round_count.fetch_add(1, Ordering::Relaxed);
        if self.0.len() == P99_ROUNDS {
            self.0.pop_front();
        }
        self.0.push_back(ms);
        let mut v: Vec<u64> = self.0.iter().copied().collect();
        v.sort_unstable();
        let at = (v.len() * 99).div_ceil(100).saturating_sub(1);
        stats.round_p99_ms.store(v[at], Ordering::Relaxed);
    }
}
