//! [`Places`]' side that no request takes: a resize's carry, the retired
//! mark a resize leaves in the old zone, and the metrics' scans and
//! counters.

use core::sync::atomic::Ordering;

use super::{
    pid_of, Carried, PlaceStats, Places, Take, FP_BITS, FP_MASK, HASH_MASK, HASH_SHIFT,
    MAX_IN_FLIGHT, RETIRED_GRACE_MS,
};
use super::{Owner, Place};

/// A key hash that counts where ledger word `w`'s place is counted (the
/// bits of a key the places read: its group hash and fingerprint).
fn key_of(w: u64) -> u64 {
    ((w >> HASH_SHIFT) & HASH_MASK) << 17 | (w & FP_MASK) << (64 - FP_BITS)
}

impl Places<'_> {
    /// Requests in flight now of the client whose place `p` is, by every
    /// process (0: `p` was given back, or is [`Place::NONE`]).
    pub fn held_at(&self, p: Place) -> u32 {
        let (at, word) = p.parts();
        match self.ledger.get(at as usize) {
            Some(slot) if slot.load(Ordering::Acquire) == word => self.held(key_of(word)),
            _ => 0,
        }
    }

    /// Counts again, in this region, every place `old` (another region: a
    /// zone resized on reload) counts, each under the process that holds
    /// it, so that it is reclaimed when that process is gone, and goes on
    /// with its counters. Called before any process takes a place here.
    pub fn carry_from(&self, old: &Places<'_>) -> Carried {
        let (h, o) = (self.header, old.header);
        for (to, from) in [
            (&h.taken, &o.taken),
            (&h.full, &o.full),
            (&h.no_room, &o.no_room),
            (&h.reclaimed, &o.reclaimed),
        ] {
            to.fetch_add(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        let mut c = Carried::default();
        for e in old.ledger {
            let w = e.load(Ordering::Acquire);
            if pid_of(w) == 0 {
                continue;
            }
            match self.take_as(pid_of(w), key_of(w), MAX_IN_FLIGHT) {
                Take::Taken(_) => c.carried += 1,
                _ => c.dropped += 1,
            }
        }
        c
    }

    /// Whether a resize retired these places ([`Places::retire`]): the
    /// host then says whether its process is exiting and what time it is
    /// ([`Owner::leaving`], [`Owner::at`]).
    #[inline]
    pub fn retired(&self) -> bool {
        self.header.retired.load(Ordering::Relaxed) != 0
    }

    /// Marks these places as moved into another zone by a resize at
    /// `at_ms` (epoch ms), or live again (None: a reload adopted their
    /// zone). The old workers then take no new place here, since the new
    /// zone would not count it: those exiting never (a `delay=` request
    /// they held, woken after the resize, is refused), the others for
    /// [`RETIRED_GRACE_MS`] (the moment before the master tells them to
    /// quit; after it, the reload must have failed, and they go on).
    pub fn retire(&self, at_ms: Option<u64>) {
        let v = at_ms.map_or(0, |t| t.saturating_add(1));
        self.header.retired.store(v, Ordering::Relaxed);
    }

    /// Whether `owner` takes no place here ([`Places::retire`]).
    #[inline]
    pub(super) fn retired_for(&self, owner: Owner) -> bool {
        match self.header.retired.load(Ordering::Relaxed) {
            0 => false,
            r => owner.leaving || owner.now_ms < (r - 1).saturating_add(RETIRED_GRACE_MS),
        }
    }

    /// Requests in flight now, every client's (a scan of the ledger: for the
    /// metrics).
    pub fn in_flight(&self) -> u64 {
        self.ledger
            .iter()
            .filter(|e| pid_of(e.load(Ordering::Relaxed)) != 0)
            .count() as u64
    }

    /// The counters of the metrics.
    pub fn stats(&self) -> PlaceStats {
        let h = self.header;
        PlaceStats {
            taken: h.taken.load(Ordering::Relaxed),
            full: h.full.load(Ordering::Relaxed),
            no_room: h.no_room.load(Ordering::Relaxed),
            reclaimed: h.reclaimed.load(Ordering::Relaxed),
        }
    }
}
