//! Counter groups of the zone header ([`ZoneHeader`](super::ZoneHeader))
//! that belong to one feature each: held requests (`delay=`), invalid
//! charges (`charge=`) and the cluster sync's measurements and fleet view.
//! Plain atomics in shared memory, written by every worker (the sync
//! thread for [`SyncStats`]) and kept across reloads.

use core::sync::atomic::{AtomicU64, Ordering};

/// Per-zone counters of held requests, in the zone header (shared by every
/// worker, kept across reloads).
#[repr(C)]
#[derive(Default)]
pub struct DelayStats {
    /// Held, then admitted.
    pub admitted: AtomicU64,
    /// Held, then rejected (the room was taken and the wait no longer fit).
    pub rejected: AtomicU64,
    /// Held, then the client went away: never counted by the limits.
    pub abandoned: AtomicU64,
    /// Dry run: would have been held.
    pub dry_run: AtomicU64,
    /// Total wait of the admitted ones (ms).
    pub wait_ms: AtomicU64,
    /// Refused at once because their client's share of the queue was full
    /// (its turn, behind its held requests, would come after `delay`).
    pub share_full: AtomicU64,
}

/// How long a zone's invalid values must stop before the next one is
/// logged again, as a new episode (ms).
const EPISODE_QUIET_MS: u64 = 60_000;

/// A count of one kind of invalid value in a zone, in its shared header
/// (all workers), and the time of the latest, so that only the first of
/// an episode is logged.
#[derive(Default)]
pub struct Episodes {
    /// Values counted (requests or responses).
    pub count: AtomicU64,
    /// Epoch ms + 1 of the latest (0: never).
    last: AtomicU64,
}

impl Episodes {
    /// Counts one at `now_ms` (epoch ms); true when it starts a new episode
    /// (none in the `EPISODE_QUIET_MS` before it): the one to log.
    pub fn note(&self, now_ms: u64) -> bool {
        self.count.fetch_add(1, Ordering::Relaxed);
        let stamp = now_ms.saturating_add(1);
        let prev = self.last.fetch_max(stamp, Ordering::Relaxed);
        prev == 0 || now_ms.saturating_sub(prev - 1) > EPISODE_QUIET_MS
    }
}

/// Invalid charges of one zone, in its shared header (all workers).
#[derive(Default)]
pub struct ChargeStats {
    /// Charges that were empty or not an integer (`cost=` counted instead).
    pub invalid: Episodes,
}

impl ChargeStats {
    /// Counts an invalid charge at `now_ms`; true when it starts a new
    /// episode, to be logged.
    pub fn note_invalid(&self, now_ms: u64) -> bool {
        self.invalid.note(now_ms)
    }
}

/// Bits of a limit in [`SyncStats::limits`].
const LIMIT_BITS: u32 = 20;
const LIMIT_MASK: u64 = (1 << LIMIT_BITS) - 1;

/// Sync measurements and fleet view of a zone.
#[derive(Default)]
#[repr(C)]
pub struct SyncStats {
    /// Sum of the durations of sync rounds that went through (ms): the
    /// `sync_round_seconds` summary's sum.
    pub round_ms_sum: AtomicU64,
    /// Sync rounds that went through: the summary's count.
    pub round_count: AtomicU64,
    /// 99th percentile of the last 200 rounds' durations (ms).
    pub round_p99_ms: AtomicU64,
    /// Keys written by the last round.
    pub last_pushed: AtomicU64,
    /// Keys read back by the last round.
    pub last_read: AtomicU64,
    /// Keys read back, all rounds.
    pub read_total: AtomicU64,
    /// Clients flagged near their limit in the current window (as far as
    /// this gateway has read the window's hot list).
    pub flagged: AtomicU64,
    /// Requests of other gateways added here by the sync.
    pub received: AtomicU64,
    /// Smallest limit value (as configured, or a `map`'s: before any
    /// override) a request of the zone was judged against, in each of the
    /// two last windows: `window_index << 20 | limit` at `window_index % 2`
    /// (0: none). See [`SyncStats::min_limit`].
    pub limits: [AtomicU64; 2],
    /// Gateways seen in the last minute with this zone's profile (this one
    /// included; 0: not read yet).
    pub peers: AtomicU64,
    /// Gateways seen in the last minute with another profile.
    pub mismatched: AtomicU64,
    /// What differs (`fleet::Diff::bits`), 0 while nothing does.
    pub diff: AtomicU64,
    /// Mismatch episodes so far.
    pub episode: AtomicU64,
    /// The last mismatch episode logged.
    pub logged_episode: AtomicU64,
}

impl SyncStats {
    /// Notes a limit value (requests per window, at most 2^20 - 1) a
    /// request was judged against in window `window_index`: one relaxed
    /// load when it is not below the window's smallest.
    #[inline]
    pub fn note_limit(&self, limit: u32, window_index: u64) {
        let limit = u64::from(limit).min(LIMIT_MASK);
        let slot = &self.limits[(window_index % 2) as usize];
        let mut cur = slot.load(Ordering::Relaxed);
        loop {
            if cur >> LIMIT_BITS == window_index && cur & LIMIT_MASK <= limit {
                return;
            }
            let new = (window_index << LIMIT_BITS) | limit;
            match slot.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(c) => cur = c,
            }
        }
    }

    /// The smallest limit value noted in window `window_index` and the one
    /// before it (0: none): what the zone's clients are limited to now,
    /// following the configuration (a reload, a `map`) within a window.
    pub fn min_limit(&self, window_index: u64) -> u64 {
        [window_index, window_index.wrapping_sub(1)]
            .iter()
            .filter_map(|&i| {
                let v = self.limits[(i % 2) as usize].load(Ordering::Relaxed);
                (v != 0 && v >> LIMIT_BITS == i).then_some(v & LIMIT_MASK)
            })
            .min()
            .unwrap_or(0)
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
