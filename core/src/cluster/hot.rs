//! Which clients a sync round writes and reads back, and where it starts.
//!
//! A round touches only the clients that can matter: those whose own count
//! here reached the threshold `T = max(1, floor(L / (2 × N)))`
//! ([`threshold`]; `N` the gateways seen sharing the zone, at least 2),
//! and those some gateway has flagged ([`HotSet::work`]). `L` is the
//! client's limit in force ([`Thresholds`]): its `{"limit": N}` override
//! if it has one, else the smallest limit value (configured, or a
//! `map`'s) the zone's requests were judged against in this window and the
//! last, lowered by the `limit` of any range override. So one low
//! override makes its own client hot, not every client, and once it is
//! removed the next round no longer counts it; a lower limit in the
//! configuration reaches `T` within a window. A gateway flags a client once
//! per window, when its own count reaches `T`, by appending the
//! fingerprint to the window's list [`hot_key`] (`RPUSH`; a replayed append
//! only repeats an entry, which readers ignore). Each gateway reads that
//! list incrementally (`LRANGE` from what it has read so far) into a
//! [`HotSet`]. A client that matters is written when its count changed
//! since what Redis last held (its first write included) and read back
//! every round; an unflagged client below `T` is never written nor read.
//!
//! While no gateway's own count of a client has reached `T`, the fleet's
//! total is below `N × T ≤ L / 2`: nobody can over-admit it. Once one has,
//! it takes up to three rounds until every gateway sees every other's
//! count: the flagging gateway's round writes the flag and its count, each
//! other gateway's next round reads the flag, writes its own count and
//! reads the first, and the flagging gateway's next round reads those.
//!
//! Rounds visit the clients from where the last one stopped
//! ([`resume_from`]), so a round cut short by its deadline or an error never
//! leaves the same clients behind twice.

use std::collections::{HashMap, HashSet};

use crate::cluster::Push;
use crate::overrides::range::RANGE_BIT;
use crate::overrides::{Action, Overrides};

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

/// The flag thresholds of one round: the zone's, and those of the clients
/// whose `limit` override gives them a lower one.
#[derive(Debug, Default)]
pub struct Thresholds {
    base: i64,
    low: HashMap<u64, i64>,
}

impl Thresholds {
    /// The thresholds for a zone whose requests were judged against limit
    /// values of `min_limit` at least (0: none seen), shared by `gateways`
    /// gateways, with the live overrides of `overrides` at `now_ms` (a
    /// scan of the table, only when it holds any).
    pub fn new(min_limit: u64, gateways: u64, overrides: Option<&Overrides>, now_ms: u64) -> Self {
        let mut base_limit = min_limit;
        let mut low = Vec::new();
        for e in overrides
            .filter(|o| o.live() != 0)
            .into_iter()
            .flat_map(|o| o.iter(now_ms))
        {
            let Action::Limit(n) = e.action else {
                continue;
            };
            if e.fp & RANGE_BIT != 0 {
                // A range's clients are not known by fingerprint: its
                // limit bounds the zone's.
                base_limit = base_limit.min(u64::from(n));
            } else {
                low.push((e.fp, u64::from(n)));
            }
        }
        let base = threshold(base_limit, gateways);
        let low = low
            .into_iter()
            .map(|(fp, n)| (fp, threshold(n, gateways)))
            .filter(|&(_, t)| t < base)
            .collect();
        Thresholds { base, low }
    }

    /// The threshold of client `fp`.
    #[inline]
    pub fn of(&self, fp: u64) -> i64 {
        self.low.get(&fp).copied().unwrap_or(self.base)
    }

    /// The zone's threshold (clients without a lower override).
    pub fn base(&self) -> i64 {
        self.base
    }
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

/// One client's commands in a round (see [`HotSet::work`]); it is always
/// read back (`HGETALL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Work {
    /// `HSET` of this gateway's own count (and `PEXPIRE`).
    pub write: bool,
    /// `RPUSH` of its fingerprint to the hot list.
    pub flag: bool,
}

/// What this gateway knows of a window's hot list.
#[derive(Debug, Default)]
pub struct HotSet {
    index: u64,
    /// Entries of the list read so far.
    read: u64,
    /// The last entry read: the next `LRANGE` starts with it again, to see
    /// that the list is still the one read (a Redis restarted empty, or
    /// failed over to a replica that lacked the end, loses entries).
    last: Option<Vec<u8>>,
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

    /// Where the next `LRANGE` of the list starts: at the last entry read
    /// (checked again), or at 0.
    pub fn offset(&self) -> u64 {
        self.read.saturating_sub(1)
    }

    /// Takes in the entries an `LRANGE` from [`Self::offset`] returned.
    /// When the first is not the last entry read, the list lost entries:
    /// the next read starts at 0 and this gateway's flags are appended
    /// again (the clients already known flagged stay flagged). Returns
    /// false then.
    pub fn absorb<'e>(&mut self, entries: impl IntoIterator<Item = &'e [u8]>) -> bool {
        let mut entries = entries.into_iter();
        if self.read > 0 && entries.next() != self.last.as_deref() {
            self.read = 0;
            self.last = None;
            self.mine.clear();
            return false;
        }
        for e in entries {
            self.read += 1;
            self.last = Some(e.to_vec());
            let fp = core::str::from_utf8(e)
                .ok()
                .and_then(|t| u64::from_str_radix(t, 16).ok());
            if let Some(fp) = fp {
                self.hot.insert(fp);
            }
        }
        true
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

    /// Whether `p`'s client can matter: its own count here reached the
    /// threshold, or some gateway flagged it. Only such a client is
    /// written and read back; an unflagged cold client is never written.
    pub fn matters(&self, p: &Push, threshold: i64) -> bool {
        p.own >= threshold || self.hot.contains(&p.fingerprint)
    }

    /// What this round does for `p`'s client (`None`: nothing). A client
    /// that matters is read back every round and its count written when it
    /// changed since what Redis last held of it (a first write included).
    pub fn work(&self, p: &Push, threshold: i64) -> Option<Work> {
        self.matters(p, threshold).then(|| Work {
            write: p.write,
            flag: self.to_flag(p, threshold),
        })
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
    use crate::testing::Region;

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
    fn only_flagged_or_near_clients_are_written_and_read_back() {
        let mut h = HotSet::default();
        h.roll(7);
        let t = threshold(40, 2);
        let cold = push(1, 0xa, 3);
        let near = push(2, 0xb, 10);
        let other = push(3, 0xc, 1);
        assert_eq!(h.work(&cold, t), None, "cold and unflagged: never written");
        assert_eq!(
            h.work(&near, t),
            Some(Work {
                write: true,
                flag: true
            })
        );
        h.flagged(0xb);
        assert!(!h.to_flag(&near, t), "flagged once per window");
        // Another gateway flagged 0xc: it is read here although cold here.
        assert!(h.absorb([b"0000000000000c".as_slice(), b"garbage".as_slice()]));
        assert_eq!(h.offset(), 1, "the last entry is read again");
        assert_eq!(
            h.work(&other, t),
            Some(Work {
                write: true,
                flag: false
            }),
            "flagged elsewhere: written and read back here"
        );
        assert_eq!(h.len(), 2);
        // A replayed append repeats an entry: nothing changes but the offset.
        assert!(h.absorb([b"garbage".as_slice(), b"0000000000000c".as_slice()]));
        assert_eq!((h.len(), h.offset()), (2, 2));
        // The list lost its entries (Redis restarted empty): read from 0
        // again, and flag again what this gateway had flagged.
        assert!(!h.absorb([]));
        assert_eq!((h.len(), h.offset()), (2, 0));
        assert!(h.to_flag(&near, t), "0xb is appended again");
        assert!(h.absorb([b"0000000000000b".as_slice()]));
        assert!(!h.absorb([b"0000000000000d".as_slice()]), "another list");
        h.roll(8);
        assert!(h.is_empty() && h.offset() == 0 && h.to_flag(&near, t));
    }

    /// A gateway of the simulated fleet: its table, ledger and hot list view.
    struct Gw {
        id: u64,
        _t: Region,
        _l: Vec<u64>,
        table: crate::table::Table<'static>,
        ledger: crate::cluster::Ledger<'static>,
        hot: HotSet,
    }

    fn gw(id: u64) -> Gw {
        use crate::cluster::Ledger;
        use crate::table::Table;
        let mut t = Region::new((Table::HEADER_BYTES / 64 + 1024) * 64);
        // SAFETY: the buffers live as long as the Gw and never move.
        let table = unsafe {
            Table::init(
                t.ptr(),
                t.len(),
                crate::rule::window::Window::from_ms(60_000).unwrap(),
                [4, 2],
            )
        }
        .unwrap();
        let mut l = vec![0u64; Ledger::bytes_for(table.capacity()) / 8];
        // SAFETY: as above.
        let ledger =
            unsafe { Ledger::over(l.as_mut_ptr().cast(), l.len() * 8, table.capacity()) }.unwrap();
        Gw {
            id,
            _t: t,
            _l: l,
            table,
            ledger,
            hot: HotSet::default(),
        }
    }

    /// Redis: store key -> (gateway field -> count), and the hot list.
    #[derive(Default)]
    struct Redis {
        hashes: std::collections::HashMap<String, std::collections::HashMap<String, i64>>,
        list: Vec<String>,
        writes: usize,
    }

    /// One round of `g` as the glue's `src/sync/round.rs` runs it (every reply delivered).
    fn sim_round(g: &mut Gw, r: &mut Redis, now: u64, t: i64) {
        use crate::cluster::{gateway_field, redis_key, shares};
        g.hot.roll(g.table.window().index(now));
        let new: Vec<&[u8]> = r.list[g.hot.offset() as usize..]
            .iter()
            .map(|e| e.as_bytes())
            .collect();
        g.hot.absorb(new);
        let mut pushes = vec![];
        g.ledger.plan(&g.table, now, &mut pushes);
        let me = gateway_field(g.id);
        for p in pushes {
            let Some(w) = g.hot.work(&p, t) else { continue };
            let hash = r
                .hashes
                .entry(redis_key("z", p.window_index, p.fingerprint))
                .or_default();
            if w.write {
                hash.insert(me.clone(), p.own);
                r.writes += 1;
            }
            if w.flag {
                r.list.push(fp_text(p.fingerprint));
                g.hot.flagged(p.fingerprint);
            }
            let text: Vec<(String, String)> = hash
                .iter()
                .map(|(f, v)| (f.clone(), v.to_string()))
                .collect();
            let stored = shares(text.iter().map(|(f, v)| (f.as_bytes(), v.as_bytes())), &me);
            g.ledger.settle(&g.table, &p, stored, now);
        }
    }

    const T0: u64 = 1_800_000_000_000 / 60_000 * 60_000;

    #[test]
    fn cold_clients_are_never_written_and_a_hot_one_keeps_its_bound() {
        use crate::table::FailPolicy;
        // 3 gateways, limit 60: T = 10. One request per tick over the fleet
        // (r = 1/tick) for the hot client, round robin; each gateway runs a
        // round every 3 ticks, staggered (one round D = 3 ticks).
        let (limit, n) = (60u32, 3u64);
        let t = threshold(u64::from(limit), n);
        assert_eq!(t, 10);
        let mut gws: Vec<Gw> = (1..=n).map(gw).collect();
        let mut redis = Redis::default();
        let hot = gws[0].table.hash_key(b"hot");
        let mut admitted = 0u64;
        for tick in 0..300u64 {
            let now = T0 + tick * 10;
            // 50 cold clients per gateway, 3 requests each (below T).
            if tick < 3 {
                for (i, g) in gws.iter().enumerate() {
                    for c in 0..50u32 {
                        let key = g.table.hash_key(format!("cold{i}-{c}").as_bytes());
                        for _ in 0..3 {
                            g.table.acquire(key, now, limit, FailPolicy::Open, 0);
                        }
                    }
                }
            }
            let g = &gws[(tick % n) as usize];
            if g.table
                .acquire(hot, now, limit, FailPolicy::Open, 0)
                .admission
                .is_some()
            {
                admitted += 1;
            }
            let turn = (tick % 3) as usize;
            sim_round(&mut gws[turn], &mut redis, now, t);
        }
        // Only the hot client's store key exists, with each gateway's count
        // written (absolute); no cold client was ever written.
        assert_eq!(redis.hashes.len(), 1, "cold clients stay out of Redis");
        let stored: i64 = redis.hashes.values().flat_map(|h| h.values()).sum();
        assert_eq!(stored as u64, admitted, "the store holds what was admitted");
        // The bound: L + N·r·D + max(0, 3·r·D − L/2), r = 1, D = 3.
        let (l, r, d) = (u64::from(limit), 1, 3);
        let bound = l + n * r * d + (3 * r * d).saturating_sub(l / 2);
        assert!(
            (l..=bound).contains(&admitted),
            "admitted {admitted}, bound {bound}"
        );
        // Each write was of a hot client's count: at most one per round.
        assert!(redis.writes <= 100, "writes {}", redis.writes);
    }

    #[test]
    fn a_client_flagged_elsewhere_is_written_at_the_next_round() {
        use crate::table::FailPolicy;
        let t = threshold(40, 2);
        let (mut a, mut b) = (gw(1), gw(2));
        let mut redis = Redis::default();
        let key = a.table.hash_key(b"k");
        for _ in 0..3 {
            b.table.acquire(key, T0, 40, FailPolicy::Open, 0);
        }
        sim_round(&mut b, &mut redis, T0, t);
        assert!(redis.hashes.is_empty(), "3 < T = 10: not written");
        for _ in 0..10 {
            a.table.acquire(key, T0, 40, FailPolicy::Open, 0);
        }
        sim_round(&mut a, &mut redis, T0 + 1, t);
        assert_eq!(redis.list.len(), 1, "a flags it");
        assert_eq!(
            a.table.peek(key, T0 + 1).current,
            10,
            "b's 3 not in Redis yet"
        );
        sim_round(&mut b, &mut redis, T0 + 2, t);
        assert_eq!(b.table.peek(key, T0 + 2).current, 13, "b reads a's 10");
        sim_round(&mut a, &mut redis, T0 + 3, t);
        assert_eq!(a.table.peek(key, T0 + 3).current, 13, "a reads b's 3");
        assert_eq!(redis.list.len(), 1, "flagged once");
        // Nothing new: no write.
        let writes = redis.writes;
        sim_round(&mut b, &mut redis, T0 + 4, t);
        sim_round(&mut a, &mut redis, T0 + 5, t);
        assert_eq!(redis.writes, writes);
    }

    #[test]
    fn a_limit_override_lowers_its_own_clients_threshold_only() {
        use crate::overrides::range::{Addr, Range};
        use crate::overrides::{Entry, Overrides};
        let mut buf = Region::new(Overrides::bytes_for(64));
        let len = buf.len();
        // SAFETY: an exclusive, 64-byte aligned buffer that outlives `o`.
        let o = unsafe { Overrides::init(buf.ptr(), len, 64) }.unwrap();
        let set = |fp, action| {
            let e = Entry {
                fp,
                action,
                expires_ms: 0,
            };
            o.set(e, 0).unwrap();
        };
        // No override: the zone's limit (600 over 3 gateways: 100).
        let t = Thresholds::new(600, 3, Some(&o), 0);
        assert_eq!((t.base(), t.of(7)), (100, 100));
        // {"limit":1} on client 7: 7 is flagged at its first request, the
        // others keep 100; a block or exempt changes nothing; a limit above
        // the zone's neither.
        set(7, Action::Limit(1));
        set(8, Action::Block);
        set(9, Action::Limit(6000));
        let t = Thresholds::new(600, 3, Some(&o), 0);
        assert_eq!((t.base(), t.of(7), t.of(8), t.of(9)), (100, 1, 100, 100));
        // Removed: the next round's thresholds no longer count it.
        o.remove(7, 0);
        assert_eq!(Thresholds::new(600, 3, Some(&o), 0).of(7), 100);
        // A range's limit bounds the zone's (its clients are not known).
        let r = Range::new(Addr::of_key(&[10, 0, 0, 0]).unwrap(), 8);
        set(r.id(|_| unreachable!()), Action::Limit(60));
        assert_eq!(Thresholds::new(600, 3, Some(&o), 0).base(), 10);
        // No limit seen yet: every client at its first request.
        assert_eq!(Thresholds::new(0, 3, None, 0).base(), 1);
    }

    #[test]
    fn the_zones_limit_follows_the_last_two_windows() {
        use crate::shm::SyncStats;
        let s = SyncStats::default();
        assert_eq!(s.min_limit(10), 0);
        s.note_limit(100, 10);
        s.note_limit(5, 10);
        s.note_limit(50, 10);
        assert_eq!(s.min_limit(10), 5);
        // The next window: the last one still counts.
        s.note_limit(100, 11);
        assert_eq!(s.min_limit(11), 5);
        // The one after: only what it and the last saw.
        s.note_limit(200, 12);
        assert_eq!(s.min_limit(12), 100);
        assert_eq!(s.min_limit(14), 0, "nothing seen in the two last windows");
    }
}
