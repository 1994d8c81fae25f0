//! Which clients a sync round reads back, and where it starts.
//!
//! A round *writes* only the counts that changed since the last round
//! ([`crate::cluster::Push::write`]) and *reads back* only the clients
//! that can matter: those some gateway has flagged as near their limit.
//! A gateway flags a client once per window, when its own count reaches
//! the threshold `T = floor(L / (2 × N))` ([`threshold`]; `L` the smallest
//! limit its requests used on the zone, `N` the gateways seen sharing the
//! zone, at least 2), by appending the fingerprint to the window's list
//! [`hot_key`] (`RPUSH`; a replayed append only repeats an entry, which
//! readers ignore). Each gateway reads that list incrementally (`LRANGE`
//! from what it has read so far) into a [`HotSet`].
//!
//! While no gateway's own count of a client has reached `T`, the fleet's
//! total is below `N × T ≤ L / 2`: nobody can over-admit it, so it needs
//! no read-back. Reading back costs one `HGETALL` per flagged client that
//! is active here, not one per active client.
//!
//! Rounds visit the clients from where the last one stopped
//! ([`resume_from`]), so a round cut short by its deadline or an error never
//! leaves the same clients behind twice.

use std::collections::HashSet;

use crate::cluster::Push;

/// The flag threshold: a client is flagged when one gateway's own count
/// in the window reaches it. `min_limit` is the smallest limit seen on the
/// zone (0: none seen yet, every client is flagged at its first request),
/// `gateways` the gateways seen sharing the zone (2 at least is assumed).
pub fn threshold(min_limit: u64, gateways: u64) -> i64 {
    let n = gateways.max(2);
    i64::try_from(min_limit / (2 * n))
        .unwrap_or(i64::MAX)
        .max(1)
}

/// The list of fingerprints flagged in window `window_index` of `zone`:
/// `rlw:{ZONE}:hot:WINDOW` (one Redis Cluster slot per zone).
pub fn hot_key(zone: &str, window_index: u64) -> String {
    format!("rlw:{{{zone}}}:hot:{window_index}")
}

/// A fingerprint as written in the hot list (14 hex digits).
pub fn fp_text(fp: u64) -> String {
    format!("{fp:014x}")
}

/// Starts `pushes` (in slot order) at the first client at or after slot
/// `cursor`, wrapping around: the round goes on where the last one stopped.
pub fn resume_from(pushes: &mut [Push], cursor: u32) {
    let at = pushes.partition_point(|p| p.slot < cursor);
    pushes.rotate_left(at);
}

/// What this gateway knows of a window's hot list.
#[derive(Debug, Default)]
pub struct HotSet {
    index: u64,
    /// Entries of the list read so far (the next `LRANGE` starts here).
    read: u64,
    /// Fingerprints flagged by any gateway.
    hot: HashSet<u64>,
    /// Fingerprints this gateway has appended (flagged once per window).
    mine: HashSet<u64>,
}

impl HotSet {
    /// Moves to window `index`: a new window starts an empty set.
    pub fn roll(&mut self, index: u64) {
        if self.index != index {
            *self = HotSet {
                index,
                ..HotSet::default()
            };
        }
    }

    /// Where the next `LRANGE` of the list starts.
    pub fn offset(&self) -> u64 {
        self.read
    }

    /// Takes in the entries an `LRANGE` from [`Self::offset`] returned.
    pub fn absorb<'e>(&mut self, entries: impl IntoIterator<Item = &'e [u8]>) {
        for e in entries {
            self.read += 1;
            let fp = core::str::from_utf8(e)
                .ok()
                .and_then(|t| u64::from_str_radix(t, 16).ok());
            if let Some(fp) = fp {
                self.hot.insert(fp);
            }
        }
    }

    /// Whether this round appends `p`'s client to the list.
    pub fn to_flag(&self, p: &Push, threshold: i64) -> bool {
        p.own >= threshold && !self.mine.contains(&p.fingerprint)
    }

    /// Records that `fp`'s append went through.
    pub fn flagged(&mut self, fp: u64) {
        self.mine.insert(fp);
        self.hot.insert(fp);
    }

    /// Whether this round reads `p`'s client back.
    pub fn to_read(&self, p: &Push, threshold: i64) -> bool {
        p.own >= threshold || self.hot.contains(&p.fingerprint)
    }

    /// Clients flagged in the window, as far as this gateway knows.
    pub fn len(&self) -> usize {
        self.hot.len()
    }

    /// Whether no client is flagged.
    pub fn is_empty(&self) -> bool {
        self.hot.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(slot: u32, fp: u64, own: i64) -> Push {
        Push {
            slot,
            fingerprint: fp,
            window_index: 7,
            own,
            write: true,
        }
    }

    #[test]
    fn the_threshold_keeps_the_unflagged_fleet_under_half_the_limit() {
        assert_eq!(threshold(40, 2), 10);
        assert_eq!(threshold(40, 1), 10, "two gateways assumed at least");
        assert_eq!(threshold(100, 3), 16);
        assert_eq!(threshold(3, 3), 1, "never below 1");
        assert_eq!(threshold(0, 2), 1, "no limit seen: flag every client");
        for (l, n) in [(40u64, 2u64), (100, 3), (1000, 7), (5, 2)] {
            let t = threshold(l, n) as u64;
            // N gateways each below T: a total under L/2 (or T = 1: nothing
            // unflagged was ever admitted).
            assert!(n * (t - 1) < l / 2 + 1 || t == 1, "L {l} N {n} T {t}");
        }
    }

    #[test]
    fn rounds_resume_where_the_last_stopped_and_wrap() {
        let mut p: Vec<Push> = [3, 8, 12, 20]
            .iter()
            .map(|&s| push(s, s as u64, 1))
            .collect();
        resume_from(&mut p, 12);
        assert_eq!(p.iter().map(|p| p.slot).collect::<Vec<_>>(), [12, 20, 3, 8]);
        resume_from(&mut p, 0);
        let mut q: Vec<Push> = [3, 8].iter().map(|&s| push(s, 0, 1)).collect();
        resume_from(&mut q, 9);
        assert_eq!(
            q.iter().map(|p| p.slot).collect::<Vec<_>>(),
            [3, 8],
            "past the end: wrap"
        );
    }

    #[test]
    fn a_cut_round_never_starves_the_same_clients_twice() {
        // 10 clients; each round gets through 4 before its deadline.
        let all: Vec<Push> = (0..10).map(|s| push(s * 3, s as u64, 1)).collect();
        let mut cursor = 0;
        let mut visits = [0u32; 10];
        for _ in 0..5 {
            let mut p = all.clone();
            resume_from(&mut p, cursor);
            for x in p.iter().take(4) {
                visits[x.fingerprint as usize] += 1;
                cursor = x.slot + 1;
            }
        }
        // 20 visits over 10 clients: each visited exactly twice.
        assert_eq!(visits, [2; 10]);
    }

    #[test]
    fn only_flagged_or_near_clients_are_read_back() {
        let mut h = HotSet::default();
        h.roll(7);
        let t = threshold(40, 2);
        let cold = push(1, 0xa, 3);
        let near = push(2, 0xb, 10);
        let other = push(3, 0xc, 1);
        assert!(!h.to_read(&cold, t) && !h.to_flag(&cold, t));
        assert!(h.to_read(&near, t) && h.to_flag(&near, t));
        h.flagged(0xb);
        assert!(!h.to_flag(&near, t), "flagged once per window");
        // Another gateway flagged 0xc: it is read here although cold here.
        h.absorb([b"0000000000000c".as_slice(), b"garbage".as_slice()]);
        assert_eq!(h.offset(), 2);
        assert!(h.to_read(&other, t));
        assert_eq!(h.len(), 2);
        // A replayed append repeats an entry: nothing changes but the offset.
        h.absorb([b"0000000000000c".as_slice()]);
        assert_eq!((h.len(), h.offset()), (2, 3));
        h.roll(8);
        assert!(h.is_empty() && h.offset() == 0 && h.to_flag(&near, t));
    }
}
