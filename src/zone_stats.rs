//! Counter groups of the zone header (`zone::ZoneHeader`) that belong to
//! one feature each: held requests (`delay=`, delay.rs) and invalid
//! charges (`charge=`, charge.rs). A leaf: plain atomics, no nginx type, so
//! that the header does not import the features that write them.

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
    /// Held now, by every worker.
    pub held: AtomicU64,
    /// Refused at once because their client's share of the queue was full
    /// (its turn, behind its held requests, would come after `delay`).
    pub share_full: AtomicU64,
}

/// How long invalid charges of a zone must stop before the next one is
/// logged again, as a new episode (ms).
const EPISODE_QUIET_MS: u64 = 60_000;

/// Invalid charges of one zone, in its shared header (all workers).
#[derive(Default)]
pub struct ChargeStats {
    /// Charges that were empty or not an integer (`cost=` counted instead).
    pub invalid: AtomicU64,
    /// Epoch ms + 1 of the latest invalid charge (0: never), for episodes.
    last_invalid: AtomicU64,
}

impl ChargeStats {
    /// Counts an invalid charge at `now_ms`; true when it starts a new
    /// episode (none in the `EPISODE_QUIET_MS` before it), to be logged.
    pub fn note_invalid(&self, now_ms: u64) -> bool {
        self.invalid.fetch_add(1, Ordering::Relaxed);
        let stamp = now_ms.saturating_add(1);
        let prev = self.last_invalid.fetch_max(stamp, Ordering::Relaxed);
        prev == 0 || now_ms.saturating_sub(prev - 1) > EPISODE_QUIET_MS
    }
}
