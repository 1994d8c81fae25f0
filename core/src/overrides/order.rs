//! The fleet's order as a gateway's table keeps it, and what a gateway
//! does with what it reads of the order (pure; the Redis side is
//! [`super::remote`], the glue `src/sync/fleet_overrides.rs`).
//!
//! A slot's version (see `slot.rs`) is one of two things:
//!
//! - a **sequence** of the fleet (below [`LOCAL`]): the slot holds the state
//!   that change number `seq` of Redis's order gave it (0: restored from a
//!   state file, older than any change of the fleet);
//! - a **local change** ([`LOCAL`] set, the change number below it): made
//!   here and not yet acknowledged by Redis. It applies at once here, is
//!   written (and written again until a reply says which sequence it got,
//!   [`Overrides::ack`]), and no change read from the fleet replaces it
//!   meanwhile: the fleet's own order for it is the place its write gets.
//!
//! A state read from the fleet applies over an older sequence only
//! ([`Overrides::apply_remote`]): so nothing read, however large its
//! number, moves this gateway's own changes (they are above every
//! sequence until acknowledged) nor any clock.
//!
//! Ages are Redis's: [`RedisClock`] is the offset between this gateway's
//! clock and Redis's `TIME`, measured at each read; expiries travel in
//! Redis's time and are kept here in the gateway's own.

use core::sync::atomic::Ordering;

use super::slot::{decode, version_word, Slot};
use super::{Entry, Overrides};

/// The bit of a version that marks a change made here and not yet
/// acknowledged.
pub const LOCAL: u64 = 1 << 59;

/// Whether version `v` is a local change not yet acknowledged.
pub fn is_local(v: u64) -> bool {
    v & LOCAL != 0
}

/// The offset between this gateway's clock and Redis's (`TIME`), in ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedisClock {
    /// This gateway's clock minus Redis's (ms).
    pub offset_ms: i64,
}

impl RedisClock {
    /// The offset of a `TIME` reply (`secs`, `micros`) read between
    /// `before` and `after` (this gateway's UTC epoch ms).
    pub fn measure(secs: u64, micros: u64, before: u64, after: u64) -> RedisClock {
        let redis = secs.saturating_mul(1000).saturating_add(micros / 1000);
        let mid = before / 2 + after / 2 + (before % 2 + after % 2) / 2;
        RedisClock {
            offset_ms: mid as i64 - redis as i64,
        }
    }

    /// Redis's time when this gateway's clock reads `local` (ms).
    pub fn redis_ms(&self, local: u64) -> u64 {
        (local as i64).saturating_sub(self.offset_ms).max(0) as u64
    }

    /// This gateway's time when Redis's clock reads `redis` (ms).
    pub fn local_ms(&self, redis: u64) -> u64 {
        (redis as i64).saturating_add(self.offset_ms).max(1) as u64
    }

    /// `e` with its expiry in Redis's time (0, none, stays 0).
    pub fn to_redis(&self, e: Entry) -> Entry {
        Entry {
            expires_ms: shift(e.expires_ms, |t| self.redis_ms(t)),
            ..e
        }
    }

    /// `e` (expiry in Redis's time) with its expiry in this gateway's.
    pub fn to_local(&self, e: Entry) -> Entry {
        Entry {
            expires_ms: shift(e.expires_ms, |t| self.local_ms(t)).min(super::MAX_EXPIRY_MS),
            ..e
        }
    }
}

fn shift(t: u64, f: impl Fn(u64) -> u64) -> u64 {
    if t == 0 {
        0
    } else {
        f(t).max(1)
    }
}

/// What one read of the order showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen<'a> {
    /// The epoch word.
    pub epoch: &'a str,
    /// The last sequence drawn.
    pub seq: u64,
    /// The last sequence trimmed from the log (0: none).
    pub cut: u64,
    /// Whether the log holds the change numbered as the last one seen.
    pub kept: bool,
}

/// What a gateway does after a read of the order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Apply the changes after its position.
    Follow,
    /// Read the snapshot in pages (it never read it, or the log lost
    /// changes it had not read).
    Bootstrap,
    /// Redis lost changes it saw (a new epoch: emptied, restarted without
    /// data, keys expired; or the sequence went back, or the last change
    /// it saw is gone from the log: a restart from an older copy, a
    /// failover to a replica that lagged): write its state back, then
    /// read the snapshot.
    Heal,
}

/// What to do with `seen`, for a gateway that last saw sequence `pos` of
/// epoch `known` (None: it never read the order).
pub fn judge(known: Option<&str>, pos: u64, seen: &Seen<'_>) -> Next {
    match known {
        None => Next::Bootstrap,
        Some(e) if e != seen.epoch => Next::Heal,
        Some(_) if seen.seq < pos => Next::Heal,
        Some(_) if seen.cut > pos => Next::Bootstrap,
        // The change it saw last is gone, not trimmed: Redis restarted
        // from an older copy, or failed over to a replica that lagged
        // (and changes made since numbered past it).
        Some(_) if pos > 0 && !seen.kept => Next::Heal,
        Some(_) => Next::Follow,
    }
}

/// A state of the table as the sync sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// The id (a fingerprint or a range's id).
    pub id: u64,
    /// Its entry (None: removed); expiry in this gateway's time.
    pub entry: Option<Entry>,
    /// Its version (see the module doc).
    pub version: u64,
}

impl Overrides<'_> {
    /// Records that the local change `change` (a version with [`LOCAL`])
    /// of `id` got sequence `seq`: the slot's version becomes `seq` if it
    /// still holds that change. Returns whether it did.
    pub fn ack(&self, id: u64, change: u64, seq: u64) -> bool {
        let Some((idx, w)) = self.find(id & super::ID_MASK) else {
            return false;
        };
        if !is_local(change) || is_local(seq) || self.version_at(idx, w) != Some(change) {
            return false;
        }
        let done = self.versions[idx]
            .compare_exchange(
                version_word(w, change),
                version_word(w, seq),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        done && self.load(idx) == w
    }

    /// Local changes not yet acknowledged (a scan of the table: the
    /// metrics' gauge).
    pub fn unsent(&self) -> u64 {
        self.held(0, self.slots.len(), |h| is_local(h.version))
            .0
            .len() as u64
    }

    /// The states of `count` slots from slot `from` on (each id once: its
    /// first slot) whose version `keep` accepts; and the slot to go on
    /// from (0 after the last). Unknown versions (a write in flight) are
    /// skipped.
    pub fn held(
        &self,
        from: usize,
        count: usize,
        keep: impl Fn(&Held) -> bool,
    ) -> (Vec<Held>, usize) {
        let n = self.slots.len();
        let from = from.min(n);
        let end = from.saturating_add(count).min(n);
        let mut out = Vec::new();
        for idx in from..end {
            let w = self.load(idx);
            let (id, entry) = match decode(w) {
                Slot::Empty => continue,
                Slot::Gone(id) => (id, None),
                Slot::Live(e) => (e.fp, Some(e)),
            };
            let Some(version) = self.version_at(idx, w) else {
                continue;
            };
            let h = Held { id, entry, version };
            if self.is_first(idx, id) && keep(&h) {
                out.push(h);
            }
        }
        (out, if end >= n { 0 } else { end })
    }
}

#[cfg(test)]
#[path = "order_tests.rs"]
mod tests;
