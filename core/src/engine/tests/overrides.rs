//! Overrides in the model and in the zones' tables: an operator's
//! change ([`Run::operator`]: a limit, exempt, block or places, with or
//! without a ttl, or a removal), and what a rate and a line's places
//! make of the live override.

use super::{Asked, Run};
use crate::engine::LimitRead;
use crate::overrides::{Action, Entry};

impl Run {
    /// The live override of `client` in zone `n` at `now`, as a rate sees
    /// it: an override of places leaves the rate to its value.
    pub(super) fn rate_override(&self, n: usize, client: usize, now: u64) -> Option<&Entry> {
        let live = self.ovr[n].get(&client).filter(|e| !e.expired(now));
        live.filter(|e| !matches!(e.action, Action::InFlight(_)))
    }

    /// What limit `n`'s places read for the request at `now`: the
    /// client's override of its places (the value is not read), else its
    /// `in_flight=` value.
    pub(super) fn places_read(&self, n: usize, q: &Asked, now: u64) -> LimitRead {
        let live = self.ovr[n].get(&q.client).filter(|e| !e.expired(now));
        match live.map(|e| e.action) {
            Some(Action::InFlight(k)) => LimitRead::Set(k),
            _ => q.in_flights[n],
        }
    }

    /// An operator's override (or its removal) in the table and the model.
    pub(super) fn operator(&mut self, zone: usize, client: usize, action: Option<(u8, u32, u64)>) {
        let zone = zone % self.zones.len();
        let z = &self.zones[zone];
        let fp = z.keys[client].fingerprint();
        let Some((kind, n, ttl)) = action else {
            z.ovr.remove(fp, self.now);
            self.ovr[zone].remove(&client);
            return;
        };
        let action = match kind {
            0 => Action::Limit(n % (self.lims[zone].limit + 3)),
            1 => Action::Exempt,
            2 => Action::Block,
            _ => Action::InFlight(n % 5),
        };
        if let Action::InFlight(k) = action {
            let most = self.raised[zone].entry(client).or_default();
            *most = (*most).max(k);
        }
        let e = Entry {
            fp,
            action,
            expires_ms: if ttl == 0 { 0 } else { self.now + ttl },
        };
        z.ovr.set(e, self.now).unwrap();
        self.ovr[zone].insert(client, e);
    }
}
