//! `delay=` in the model: the held requests ([`Held`]), the turns of a
//! client's queue they hold across workers, and their wake, each decided
//! again at its time.

use proptest::prelude::*;

use super::{Asked, Run};

/// A held request waiting for its wake.
pub(super) struct Held {
    pub(super) at: u64,
    pub(super) since: u64,
    pub(super) q: Asked,
}

impl Run {
    /// Requests of `client` held in zone `n` that a new request waits
    /// behind (none for one held again: it has waited longest).
    pub(super) fn ahead(&self, client: usize, n: usize, since: Option<u64>) -> u32 {
        match since {
            Some(_) => 0,
            None => {
                // Every client has a queue of its own (the same key hash:
                // the same client).
                let k = |c: usize| self.zones[n].keys[c].0;
                self.held
                    .iter()
                    .filter(|h| k(h.q.client) == k(client) && h.q.turn.is_some_and(|t| t.0 == n))
                    .count() as u32
            }
        }
    }

    /// The shared turns count what the model holds, per zone and client,
    /// whichever worker holds it.
    pub(super) fn check_turns(&self) -> Result<(), TestCaseError> {
        for (n, z) in self.zones.iter().enumerate() {
            for (c, h) in z.keys.iter().enumerate() {
                let held = self.ahead(c, n, None);
                prop_assert_eq!(
                    z.turns.held(h.0),
                    held,
                    "turns of client {} in zone {}",
                    c,
                    n
                );
            }
        }
        Ok(())
    }

    /// Wakes the held requests due by `until`, in order, each decided
    /// again at its time by the worker that holds it.
    pub(super) fn wake_until(&mut self, until: u64) -> Result<(), TestCaseError> {
        loop {
            let due = self
                .held
                .iter()
                .enumerate()
                .filter(|(_, h)| h.at <= until)
                .min_by_key(|(_, h)| h.at)
                .map(|(i, _)| i);
            let Some(i) = due else { return Ok(()) };
            let h = self.held.remove(i);
            self.now = self.now.max(h.at);
            self.request(h.q, Some(h.since))?;
        }
    }

    pub(super) fn delays(&self) -> bool {
        self.lims.iter().any(|l| l.delay_ms > 0)
    }
}
