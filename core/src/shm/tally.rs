//! The module's tally: requests **decided**, once per request whatever the
//! number of limits of its location, by the request's result, and the same
//! per **route**, for the limits named with `name=`.
//!
//! The zones' own counters (`requests_total{zone,result}`) count a request
//! once per zone that applied: a location with two limits counts each
//! admitted request twice, which a sum over zones cannot undo. The tally is
//! one region of shared memory for the whole module (not a zone's part),
//! written by every worker, kept across reloads (nginx hands a reloaded
//! cycle the same memory when its size is unchanged, and [`Tally::attach`]
//! checks it) and read by the metrics page.
//!
//! Counters are sharded by worker ([`SHARDS`] cache lines per group), like
//! the table's: an increment is one uncontended relaxed `fetch_add`.
//!
//! Routes: at most [`MAX_ROUTES`] distinct names in a configuration (`nginx
//! -t` refuses more), so the label set of the route family is bounded.
//! Each route has a slot, found by the name's id ([`route_id`]) when a new
//! cycle binds its names ([`Tally::bind`]): a reload keeps a route's counts
//! whatever the order of the names in the new configuration.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::hash_with_seed;

/// "RLWTALLY".
const MAGIC: u64 = u64::from_le_bytes(*b"RLWTALLY");
/// The layout of [`Tally`]; bump on any change.
const VERSION: u32 = 1;
/// Counter shards per group (one 64-byte line each; worker `n` writes
/// shard `n % SHARDS`).
pub const SHARDS: usize = 64;
/// Most distinct route names (`name=`) in a configuration.
pub const MAX_ROUTES: usize = 64;
/// Longest route name (bytes).
pub const ROUTE_NAME_MAX: usize = 64;

/// A request's result, as `$rate_limit_window_status` says it: the label
/// `result` of `rate_limit_window_decided_total` and of the route family.
/// (The values follow the glue's own list of statuses, so that mapping one
/// to the other costs nothing on the request path.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Decided {
    /// Admitted at once (`PASSED`).
    Passed = 0,
    /// Rejected (`REJECTED`).
    Rejected = 1,
    /// Dry run: would have been rejected; admitted (`REJECTED_DRY_RUN`).
    RejectedDryRun = 2,
    /// No limit applied (`EXEMPT`: empty keys or limits, exempt override).
    Exempt = 3,
    /// Held by `delay=`, then admitted (`DELAYED`).
    Delayed = 4,
    /// Dry run: would have been held; admitted (`DELAYED_DRY_RUN`).
    DelayedDryRun = 5,
}

impl Decided {
    /// Every result, in the exposition's order.
    pub const ALL: [Decided; 6] = [
        Decided::Passed,
        Decided::Delayed,
        Decided::Exempt,
        Decided::Rejected,
        Decided::RejectedDryRun,
        Decided::DelayedDryRun,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Decided::Passed => "passed",
            Decided::Delayed => "delayed",
            Decided::Exempt => "exempt",
            Decided::Rejected => "rejected",
            Decided::RejectedDryRun => "rejected_dry_run",
            Decided::DelayedDryRun => "delayed_dry_run",
        }
    }
}

/// One cache line of counters.
#[repr(C, align(64))]
struct Line([AtomicU64; 8]);

/// One group of counters: a line per shard.
#[repr(C)]
struct Group([Line; SHARDS]);

impl Group {
    fn add(&self, shard: usize, what: Decided, n: u64) {
        self.0[shard % SHARDS].0[what as usize].fetch_add(n, Ordering::Relaxed);
    }

    fn total(&self, what: Decided) -> u64 {
        self.0.iter().fold(0u64, |s, l| {
            s.wrapping_add(l.0[what as usize].load(Ordering::Relaxed))
        })
    }

    fn clear(&self) {
        for l in &self.0 {
            for c in &l.0 {
                c.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// The tally's memory (see [the module](self)); made by [`Tally::init`] or
/// found by [`Tally::attach`].
#[repr(C)]
pub struct Tally {
    magic: u64,
    version: u32,
    /// `size_of::<Tally>()` (bytes).
    bytes: u32,
    decided: Group,
    /// Each route slot's [`route_id`] (0: free).
    ids: [AtomicU64; MAX_ROUTES],
    routes: [Group; MAX_ROUTES],
}

/// The id of route `name` (never 0): the slot a reload finds it in.
pub fn route_id(name: &[u8]) -> u64 {
    const K: [u64; 2] = [0x726c_775f_726f_7574, 0x655f_6e61_6d65_5f31]; // "rlw_rout" "e_name_1"
    hash_with_seed(K, name).0.max(1)
}

/// Too little memory for a tally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooSmall;

impl Tally {
    /// Bytes a tally takes.
    pub const BYTES: usize = size_of::<Tally>();

    /// Formats a fresh tally in `region` (zeroed counters, no route).
    ///
    /// # Safety
    /// `region` is `len` bytes of writable memory aligned to 64, mapped for
    /// `'a` and not used as anything else meanwhile.
    pub unsafe fn init<'a>(region: *mut u8, len: usize) -> Result<&'a Tally, TooSmall> {
        if len < Self::BYTES || region.align_offset(64) != 0 {
            return Err(TooSmall);
        }
        // SAFETY: the caller gives us this memory (len checked above); every
        // field is an integer or an atomic, for which zero is valid.
        let t = unsafe {
            core::ptr::write_bytes(region, 0, Self::BYTES);
            &mut *region.cast::<Tally>()
        };
        t.magic = MAGIC;
        t.version = VERSION;
        t.bytes = Self::BYTES as u32;
        Ok(t)
    }

    /// The tally an earlier cycle formatted in `region`, if its stamp says
    /// so (magic, version, size); None: format it again.
    ///
    /// # Safety
    /// As [`Tally::init`]; the memory is shared with other processes that
    /// use it only through a `Tally`.
    pub unsafe fn attach<'a>(region: *const u8, len: usize) -> Option<&'a Tally> {
        if len < Self::BYTES || region.align_offset(64) != 0 {
            return None;
        }
        // SAFETY: `len` bytes are mapped (the caller); the stamp fields are
        // plain integers, which any bit pattern makes valid.
        let t = unsafe { &*region.cast::<Tally>() };
        (t.magic == MAGIC && t.version == VERSION && t.bytes as usize == Self::BYTES).then_some(t)
    }

    /// Counts one request decided `what` (by worker `shard`).
    #[inline]
    pub fn decided(&self, shard: usize, what: Decided) {
        self.decided.add(shard, what, 1);
    }

    /// Requests decided `what`, all workers.
    pub fn decided_total(&self, what: Decided) -> u64 {
        self.decided.total(what)
    }

    /// Counts one request of route slot `slot` decided `what`.
    #[inline]
    pub fn route(&self, slot: usize, shard: usize, what: Decided) {
        if let Some(g) = self.routes.get(slot) {
            g.add(shard, what, 1);
        }
    }

    /// Requests of route slot `slot` decided `what`, all workers.
    pub fn route_total(&self, slot: usize, what: Decided) -> u64 {
        self.routes.get(slot).map_or(0, |g| g.total(what))
    }

    /// Binds a configuration's route ids (at most [`MAX_ROUTES`], distinct,
    /// non-zero) to slots, in order: the slot that already holds the id
    /// (its counts go on), else a free one, else one whose id is not among
    /// `ids` (a route the configuration dropped: its counts start again).
    /// Run by the master while it loads a configuration (old workers may
    /// still count into their own slots meanwhile).
    pub fn bind(&self, ids: &[u64]) -> Vec<usize> {
        let held = |id: u64| (0..MAX_ROUTES).find(|&s| self.ids[s].load(Ordering::Relaxed) == id);
        let mut slots: Vec<Option<usize>> = ids.iter().map(|&id| held(id)).collect();
        for (n, &id) in ids.iter().enumerate() {
            if slots[n].is_some() {
                continue;
            }
            let taken = |s: usize| slots.contains(&Some(s));
            let free = (0..MAX_ROUTES).find(|&s| self.ids[s].load(Ordering::Relaxed) == 0);
            let stale = || {
                (0..MAX_ROUTES)
                    .find(|&s| !taken(s) && !ids.contains(&self.ids[s].load(Ordering::Relaxed)))
            };
            let Some(s) = free.or_else(stale) else {
                continue;
            };
            self.routes[s].clear();
            self.ids[s].store(id, Ordering::Relaxed);
            slots[n] = Some(s);
        }
        // More than MAX_ROUTES ids (refused at configuration) get no slot:
        // usize::MAX, which `route` ignores.
        slots.into_iter().map(|s| s.unwrap_or(usize::MAX)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Region;

    fn tally(r: &mut Region) -> &Tally {
        let len = r.len();
        // SAFETY: the region is ours, aligned and long enough.
        unsafe { Tally::init(r.ptr(), len) }.unwrap()
    }

    #[test]
    fn decided_sums_the_shards() {
        let mut r = Region::new(Tally::BYTES);
        let t = tally(&mut r);
        t.decided(0, Decided::Passed);
        t.decided(1, Decided::Passed);
        t.decided(SHARDS + 1, Decided::Rejected);
        assert_eq!(t.decided_total(Decided::Passed), 2);
        assert_eq!(t.decided_total(Decided::Rejected), 1);
        assert_eq!(t.decided_total(Decided::Exempt), 0);
    }

    #[test]
    fn attach_checks_the_stamp() {
        let mut r = Region::new(Tally::BYTES);
        let (p, len) = (r.ptr(), r.len());
        // SAFETY: the region is ours and aligned.
        assert!(unsafe { Tally::attach(p, len) }.is_none(), "zeroes");
        // SAFETY: as above.
        let t = unsafe { Tally::init(p, len) }.unwrap();
        t.decided(3, Decided::Delayed);
        // SAFETY: as above.
        let again = unsafe { Tally::attach(p, len) }.unwrap();
        assert_eq!(again.decided_total(Decided::Delayed), 1);
        // SAFETY: as above.
        assert!(unsafe { Tally::attach(p, Tally::BYTES - 1) }.is_none());
        // SAFETY: as above.
        assert!(unsafe { Tally::init(p, Tally::BYTES - 1) }.is_err());
    }

    #[test]
    fn a_reload_keeps_each_routes_counts_whatever_the_order() {
        let mut r = Region::new(Tally::BYTES);
        let t = tally(&mut r);
        let (a, b, c) = (route_id(b"a"), route_id(b"b"), route_id(b"c"));
        let s = t.bind(&[a, b]);
        t.route(s[0], 0, Decided::Passed);
        t.route(s[1], 0, Decided::Rejected);
        t.route(s[1], 1, Decided::Rejected);
        // Reordered, one dropped, one added.
        let s2 = t.bind(&[c, b]);
        assert_eq!(s2[1], s[1]);
        assert_eq!(t.route_total(s2[1], Decided::Rejected), 2);
        assert_eq!(t.route_total(s2[0], Decided::Passed), 0, "a new route");
        assert_ne!(s2[0], s[0], "a free slot first, not the dropped route's");
        // `a` comes back: its slot was kept.
        let s3 = t.bind(&[a]);
        assert_eq!(t.route_total(s3[0], Decided::Passed), 1);
    }

    #[test]
    fn a_full_tally_reuses_the_slots_of_dropped_routes() {
        let mut r = Region::new(Tally::BYTES);
        let t = tally(&mut r);
        let old: Vec<u64> = (0..MAX_ROUTES as u64)
            .map(|i| route_id(&i.to_le_bytes()))
            .collect();
        let s = t.bind(&old);
        for &slot in &s {
            t.route(slot, 0, Decided::Passed);
        }
        let mut new = old[1..].to_vec();
        new.push(route_id(b"new"));
        let s2 = t.bind(&new);
        assert_eq!(s2[MAX_ROUTES - 1], s[0], "the dropped route's slot");
        assert_eq!(t.route_total(s2[MAX_ROUTES - 1], Decided::Passed), 0);
        assert_eq!(t.route_total(s2[0], Decided::Passed), 1);
        let mut distinct = s2.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), MAX_ROUTES);
    }

    #[test]
    fn route_ids_are_never_zero_and_differ() {
        assert_ne!(route_id(b""), 0);
        assert_ne!(route_id(b"api"), route_id(b"apj"));
    }
}
