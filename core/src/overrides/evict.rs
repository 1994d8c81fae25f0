//! Room for operators: a full table evicts a ban for an operator's change
//! (made here or read from the fleet), the ban nearest its end first, so
//! that an attack's bans never keep an operator's block, exempt or limit
//! out.

use core::sync::atomic::Ordering;

use super::slot::{decode, Slot};
use super::{Action, Overrides};

impl Overrides<'_> {
    /// Evicts one live ban to make room for `id`: among `id`'s candidate
    /// groups when they hold no free slot, else the ban nearest its end in
    /// the whole table (a scan of every slot: a full table only). Returns
    /// whether it evicted one (counted, [`Overrides::bans_evicted`]).
    pub(super) fn evict_ban(&self, id: u64, now_ms: u64) -> bool {
        let groups_full = self.candidates(id).all(|idx| self.holds_live(idx, now_ms));
        let best = if groups_full {
            self.nearest_end(self.candidates(id), now_ms)
        } else {
            self.nearest_end(0..self.slots.len(), now_ms)
        };
        let Some((idx, w)) = best else {
            return false;
        };
        if !self.reap(idx, w) {
            // Changed meanwhile: the caller tries again.
            return true;
        }
        self.header.evicted.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Whether slot `idx` holds an entry live at `now_ms`.
    fn holds_live(&self, idx: usize, now_ms: u64) -> bool {
        matches!(decode(self.load(idx)), Slot::Live(e) if !e.expired(now_ms))
    }

    /// The live ban of `slots` that ends first, with its word.
    fn nearest_end(
        &self,
        slots: impl Iterator<Item = usize>,
        now_ms: u64,
    ) -> Option<(usize, u128)> {
        let mut best: Option<(u64, usize, u128)> = None;
        for idx in slots {
            let w = self.load(idx);
            let Slot::Live(e) = decode(w) else { continue };
            if e.action != Action::Ban || e.expired(now_ms) {
                continue;
            }
            // A ban without an end (never set by `ban=`) goes last.
            let end = if e.expires_ms == 0 {
                u64::MAX
            } else {
                e.expires_ms
            };
            if best.is_none_or(|(b, _, _)| end < b) {
                best = Some((end, idx, w));
            }
        }
        best.map(|(_, idx, w)| (idx, w))
    }
}
