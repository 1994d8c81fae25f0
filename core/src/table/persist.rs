//! Saving a table's clients for a state file, and restoring them into a
//! fresh table after a restart (see `crate::state` for the file format).
//!
//! A saved table is every used slot, by position, as its raw word: the
//! slots holding counts that still matter at the time of saving keep them,
//! the others keep only their fingerprint (counts cleared), because a used
//! slot ends no probe sequence and a restored client must be found behind
//! it (see [Placement](super#placement)). Groups of [`PROBE`] slots with no
//! live client are left out entirely: no lookup needs their slots.
//!
//! Restoring into a table of the same capacity puts every word back at its
//! position, then sweeps the table at the restore time, which clears the
//! counts that stopped mattering while nginx was down (two windows or more
//! old for an estimate zone, out of the seven sub-windows of a strict
//! one). A table of another capacity (the zone was resized across the
//! restart) takes the live clients of an estimate zone by fingerprint, as
//! a resize on reload does (`carry.rs`); a strict zone's 24-bit
//! fingerprints cannot be placed again, so its clients are dropped.

use portable_atomic::Ordering;

use super::layout::{fp_of, Slot, COUNTS_MASK, LAYOUT_VERSION, SLOT_WORDS_SINCE};
use super::{Table, PROBE};
use crate::rule::strict::{self, SPAN};

/// A table's used slots, as saved in a state file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SavedTable {
    /// The layout version of the module that saved the words
    /// ([`LAYOUT_VERSION`]; restored from [`SLOT_WORDS_SINCE`] on).
    pub layout: u32,
    /// The zone decided with the strict rule (the words are strict words).
    pub strict: bool,
    /// Slots in the saved table.
    pub capacity: u64,
    /// The newest window index counted in (sub-window index for strict).
    pub newest: u64,
    /// `(position, word)` of the slots kept, in position order.
    pub slots: Vec<(u32, u128)>,
}

/// What [`Table::restore`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Clients holding counts that still matter at the restore time.
    pub live: u64,
    /// Live clients that could not be placed (a resized zone).
    pub dropped: usize,
}

/// Why a saved table cannot be restored into this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreError {
    /// Another slot layout version.
    Layout(u32),
    /// Saved by a zone of the other mode.
    Mode,
    /// A position outside the saved capacity, or positions out of order.
    Position,
}

impl core::fmt::Display for RestoreError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RestoreError::Layout(v) => write!(
                f,
                "slots of layout version {v}, this module reads versions {SLOT_WORDS_SINCE} to \
                 {LAYOUT_VERSION}"
            ),
            RestoreError::Mode => f.write_str("slots of the other mode= (estimate or strict)"),
            RestoreError::Position => f.write_str("a slot position out of range or out of order"),
        }
    }
}

impl Table<'_> {
    /// The used slots of every group holding a live client at `now_ms`
    /// (epoch ms), for a state file. One atomic load per slot: a client
    /// updated during the scan is saved as it was when its slot was read.
    pub fn save(&self, now_ms: u64) -> SavedTable {
        let mut slots = Vec::new();
        let mut group = Vec::with_capacity(PROBE);
        for base in (0..self.slots.len()).step_by(PROBE) {
            group.clear();
            let mut live = false;
            for at in base..base + PROBE {
                let v = self.load(at);
                match self.saved_word(v, now_ms) {
                    Some((w, l)) => {
                        live |= l;
                        group.push((at as u32, w));
                    }
                    None => continue,
                }
            }
            if live {
                slots.extend_from_slice(&group);
            }
        }
        SavedTable {
            layout: LAYOUT_VERSION,
            strict: self.strict,
            capacity: self.slots.len() as u64,
            newest: self.header.newest.load(Ordering::SeqCst),
            slots,
        }
    }

    /// A used slot's word as saved, and whether it holds a live client:
    /// None for a never-used slot; counts cleared when not live.
    fn saved_word(&self, v: u128, now_ms: u64) -> Option<(u128, bool)> {
        if self.strict {
            if strict::packed_fp(v) == 0 {
                return None;
            }
            let now_sub = strict::sub_index(now_ms, self.window.ms());
            let live = !self.strict_is_free(v, now_sub);
            return Some(if live {
                (v, true)
            } else {
                (v & !super::strict::COUNTS, false)
            });
        }
        if fp_of(v) == 0 {
            return None;
        }
        let now_idx = self.window.index(now_ms);
        let live = !Slot::decode(v).is_free(now_idx, self.ahead(now_idx));
        Some(if live {
            (v, true)
        } else {
            (v & !u128::from(COUNTS_MASK), false)
        })
    }

    /// Puts `saved`'s clients into this table, which must be fresh (just
    /// formatted, not yet shared) with the saved table's seed and window,
    /// then clears whatever is stale at `now_ms` (epoch ms).
    pub fn restore(&self, saved: &SavedTable, now_ms: u64) -> Result<Restored, RestoreError> {
        if !(SLOT_WORDS_SINCE..=LAYOUT_VERSION).contains(&saved.layout) {
            return Err(RestoreError::Layout(saved.layout));
        }
        if saved.strict != self.strict {
            return Err(RestoreError::Mode);
        }
        let in_order = saved.slots.windows(2).all(|p| p[0].0 < p[1].0);
        let in_range = saved
            .slots
            .last()
            .is_none_or(|&(at, _)| u64::from(at) < saved.capacity);
        if !in_order || !in_range {
            return Err(RestoreError::Position);
        }
        if self.all_stale(saved.newest, now_ms) {
            return Ok(Restored::default());
        }
        self.raise_newest(saved.newest);
        let dropped = if saved.capacity == self.slots.len() as u64 {
            for &(at, w) in &saved.slots {
                self.cas(at as usize, 0, w);
            }
            0
        } else {
            self.put_live(saved)
        };
        let n = self.slots.len();
        self.sweep(now_ms, 0, n);
        Ok(Restored {
            live: self.slots_used(now_ms),
            dropped,
        })
    }

    /// Whether every count of a table whose newest window was `newest`
    /// is stale at `now_ms`: then nothing is restored (no slot's index,
    /// kept modulo 2^24 or 2^15, may be read against a clock that far on).
    fn all_stale(&self, newest: u64, now_ms: u64) -> bool {
        if self.strict {
            strict::sub_index(now_ms, self.window.ms()) >= newest.saturating_add(SPAN as u64)
        } else {
            self.window.index(now_ms) >= newest.saturating_add(2)
        }
    }

    /// Places the clients with counts of an estimate table of another
    /// capacity by fingerprint; returns how many found no place (all of a
    /// strict table's).
    fn put_live(&self, saved: &SavedTable) -> usize {
        let live = saved.slots.iter().filter(|&&(_, w)| {
            if self.strict {
                !strict::packed_empty(w)
            } else {
                w as u64 & COUNTS_MASK != 0
            }
        });
        if self.strict {
            return live.count();
        }
        live.filter(|&&(_, w)| !self.put(w)).count()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::rule::mode::Mode;
    use crate::{FailPolicy, Outcome};

    const W: u64 = 60_000;

    fn with_mode(r: &mut Region, mode: Mode) -> Table<'_> {
        // SAFETY: the region is ours alone.
        unsafe { Table::init_mode(r.ptr(), r.len(), win(W), [5, 6], mode) }.unwrap()
    }

    fn key(i: usize) -> Vec<u8> {
        format!("client-{i}").into_bytes()
    }

    /// `n` clients with `i % 4 + 1` admitted requests each at `now`.
    fn load(t: &Table<'_>, n: usize, now: u64) {
        for i in 0..n {
            for _ in 0..(i % 4 + 1) {
                let d = t.acquire(t.hash_key(&key(i)), now, 1000, FailPolicy::Open, 0);
                assert_eq!(d.outcome, Outcome::Admitted);
            }
        }
    }

    fn counts_match(t: &Table<'_>, n: usize, now: u64, want: impl Fn(usize) -> u32) {
        for i in 0..n {
            let s = t.peek(t.hash_key(&key(i)), now);
            assert_eq!(s.current + s.previous, want(i), "client {i}");
        }
    }

    #[test]
    fn same_capacity_round_trip_both_modes() {
        for mode in [Mode::Estimate, Mode::Strict] {
            let mut a = Region::new(small_bytes(4096));
            let old = with_mode(&mut a, mode);
            load(&old, 2500, T0 + 10);
            let saved = old.save(T0 + 20);
            assert_eq!(saved.strict, mode == Mode::Strict);
            let mut b = Region::new(small_bytes(4096));
            let new = with_mode(&mut b, mode);
            let r = new.restore(&saved, T0 + 30).unwrap();
            assert_eq!(
                r,
                Restored {
                    live: 2500,
                    dropped: 0
                },
                "{mode:?}"
            );
            counts_match(&new, 2500, T0 + 30, |i| (i % 4 + 1) as u32);
        }
    }

    #[test]
    fn stale_counts_are_dropped_and_idle_groups_not_saved() {
        let mut a = Region::new(small_bytes(1024));
        let old = with_mode(&mut a, Mode::Estimate);
        load(&old, 300, T0);
        // One window on, the counts are the previous window's: still kept.
        let saved = old.save(T0 + W);
        assert!(!saved.slots.is_empty());
        let mut b = Region::new(small_bytes(1024));
        let new = with_mode(&mut b, Mode::Estimate);
        assert_eq!(new.restore(&saved, T0 + W + 5).unwrap().live, 300);
        // Restored two windows after they were counted: nothing left.
        let mut c = Region::new(small_bytes(1024));
        let late = with_mode(&mut c, Mode::Estimate);
        assert_eq!(late.restore(&saved, T0 + 2 * W).unwrap().live, 0);
        counts_match(&late, 300, T0 + 2 * W, |_| 0);
        // Saved when everything was stale: no slot at all.
        assert!(old.save(T0 + 2 * W).slots.is_empty());
    }

    #[test]
    fn strict_counts_leave_after_the_span() {
        let mut a = Region::new(small_bytes(256));
        let old = with_mode(&mut a, Mode::Strict);
        load(&old, 50, T0);
        let saved = old.save(T0 + 1);
        let mut b = Region::new(small_bytes(256));
        let new = with_mode(&mut b, Mode::Strict);
        // 7/6 of a window later every sub-window left the span.
        let r = new.restore(&saved, T0 + W * 7 / 6).unwrap();
        assert_eq!(r.live, 0);
        let mut c = Region::new(small_bytes(256));
        let soon = with_mode(&mut c, Mode::Strict);
        assert_eq!(soon.restore(&saved, T0 + W).unwrap().live, 50);
    }

    #[test]
    fn resized_estimate_zone_places_by_fingerprint() {
        let mut a = Region::new(small_bytes(2048));
        let old = with_mode(&mut a, Mode::Estimate);
        load(&old, 1000, T0);
        let saved = old.save(T0);
        let mut b = Region::new(small_bytes(4096));
        let new = with_mode(&mut b, Mode::Estimate);
        let r = new.restore(&saved, T0 + 1).unwrap();
        assert_eq!(r.live as usize + r.dropped, 1000);
        assert!(r.dropped <= 5, "{r:?}");
        let mut c = Region::new(small_bytes(4096));
        let strict_old = {
            let mut d = Region::new(small_bytes(2048));
            let t = with_mode(&mut d, Mode::Strict);
            load(&t, 10, T0);
            t.save(T0)
        };
        let s = with_mode(&mut c, Mode::Strict);
        let r = s.restore(&strict_old, T0).unwrap();
        assert_eq!(
            r,
            Restored {
                live: 0,
                dropped: 10
            }
        );
    }

    /// A file saved before layout 5 (which changed only the override
    /// region) keeps its counts across the upgrade; older slot words are
    /// refused.
    #[test]
    fn slots_of_an_earlier_layout_with_the_same_words_are_restored() {
        let mut a = Region::new(small_bytes(64));
        let old = with_mode(&mut a, Mode::Estimate);
        load(&old, 20, T0);
        let mut saved = old.save(T0);
        saved.layout = SLOT_WORDS_SINCE;
        let mut b = Region::new(small_bytes(64));
        let new = with_mode(&mut b, Mode::Estimate);
        assert_eq!(new.restore(&saved, T0).unwrap().live, 20);
        counts_match(&new, 20, T0, |i| (i % 4 + 1) as u32);
        saved.layout = SLOT_WORDS_SINCE - 1;
        let mut c = Region::new(small_bytes(64));
        let refused = with_mode(&mut c, Mode::Estimate).restore(&saved, T0);
        assert_eq!(refused, Err(RestoreError::Layout(SLOT_WORDS_SINCE - 1)));
        assert_eq!(
            refused.unwrap_err().to_string(),
            format!(
                "slots of layout version {}, this module reads versions {SLOT_WORDS_SINCE} to \
                 {LAYOUT_VERSION}",
                SLOT_WORDS_SINCE - 1
            )
        );
    }

    #[test]
    fn mismatches_are_refused() {
        let mut a = Region::new(small_bytes(64));
        let t = with_mode(&mut a, Mode::Estimate);
        let mut s = t.save(T0);
        s.strict = true;
        assert_eq!(t.restore(&s, T0), Err(RestoreError::Mode));
        s.strict = false;
        s.layout += 1;
        assert!(matches!(t.restore(&s, T0), Err(RestoreError::Layout(_))));
        s.layout = LAYOUT_VERSION;
        s.slots = vec![(64, 1)];
        assert_eq!(t.restore(&s, T0), Err(RestoreError::Position));
        s.slots = vec![(3, 1), (2, 1)];
        assert_eq!(t.restore(&s, T0), Err(RestoreError::Position));
    }
}
