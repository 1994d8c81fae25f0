//! What the sync thread measures and the fleet it sees, in the zone header
//! (written by the sync thread, read by every worker's metrics and by
//! worker 0's log of fleet mismatches).

use core::sync::atomic::{AtomicU64, Ordering};
use std::collections::VecDeque;

/// Rounds over which `round_p99_ms` is taken.
const P99_ROUNDS: usize = 200;

/// Sync measurements and fleet view of a zone.
#[derive(Default)]
#[repr(C)]
pub struct SyncStats {
    /// Sum of the durations of sync rounds that went through (ms) and their
    /// number: the `sync_round_seconds` summary.
    pub round_ms_sum: AtomicU64,
    pub round_count: AtomicU64,
    /// 99th percentile of the last 200 rounds' durations (ms).
    pub round_p99_ms: AtomicU64,
    /// Keys written and keys read back by the last round.
    pub last_pushed: AtomicU64,
    pub last_read: AtomicU64,
    /// Keys read back, all rounds.
    pub read_total: AtomicU64,
    /// Clients flagged near their limit in the current window (as far as
    /// this gateway has read the window's hot list).
    pub flagged: AtomicU64,
    /// Requests of other gateways added here by the sync.
    pub received: AtomicU64,
    /// Smallest limit a request of the zone was admitted against (0: none).
    pub min_limit: AtomicU64,
    /// Gateways seen in the last minute with this zone's profile (this one
    /// included; 0: not read yet) and with another.
    pub peers: AtomicU64,
    pub mismatched: AtomicU64,
    /// What differs (`fleet::Diff::bits`), 0 while nothing does.
    pub diff: AtomicU64,
    /// Mismatch episodes so far, and the last one logged.
    pub episode: AtomicU64,
    pub logged_episode: AtomicU64,
}

impl SyncStats {
    /// Notes a limit a request was admitted against.
    pub fn note_limit(&self, limit: u32) {
        let limit = u64::from(limit);
        let mut cur = self.min_limit.load(Ordering::Relaxed);
        while cur == 0 || limit < cur {
            match self.min_limit.compare_exchange_weak(
                cur,
                limit,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(c) => cur = c,
            }
        }
    }

    /// Records the fleet as last read: a new episode starts when a mismatch
    /// appears or what differs changes.
    pub fn set_fleet(&self, peers: u64, mismatched: u64, diff: u64) {
        self.peers.store(peers, Ordering::Relaxed);
        self.mismatched.store(mismatched, Ordering::Relaxed);
        let old = self.diff.swap(diff, Ordering::Relaxed);
        if diff != 0 && diff != old {
            self.episode.fetch_add(1, Ordering::Relaxed);
        }
    }
}

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
