//! The zone header: the first allocation in every zone, which outlives
//! reloads with the zone and tells a new cycle where the zone's parts are.
//! Its counters are written by every worker, its sync fields by the sync
//! thread (worker 0), and read by every worker.

use core::sync::atomic::{AtomicU64, Ordering};

use super::stats::{ChargeStats, DelayStats, Episodes, SyncStats};
use super::{Parts, LAYOUT_VERSION, MAGIC};
use crate::cluster::Ledger;
use crate::overrides::Overrides;

/// Resets of a Redis-backed zone waiting for the next sync round.
pub const RESETS: usize = 16;

/// Overrides changed here waiting for the next sync round (an operator's
/// burst of changes, bans of an attack's clients).
pub const OVR_PENDING: usize = 256;

/// The header's first bytes, the same in every layout that had one: read
/// alone before anything else of a header found in a zone, so that a
/// header of another layout (a smaller one, say) is never read as this one.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stamp {
    /// [`MAGIC`]: written by this module.
    pub(super) magic: u64,
    /// [`LAYOUT_VERSION`]: the layout of the whole zone.
    pub(super) version: u32,
    /// `size_of::<ZoneHeader>()` (bytes).
    pub(super) header_bytes: u32,
    /// The zone's size as configured (bytes).
    pub(super) zone_bytes: u64,
}

impl Stamp {
    /// The stamp of a zone of `zone_bytes` formatted by this module.
    pub(super) fn current(zone_bytes: usize) -> Stamp {
        Stamp {
            magic: MAGIC,
            version: LAYOUT_VERSION,
            header_bytes: size_of::<ZoneHeader>() as u32,
            zone_bytes: zone_bytes as u64,
        }
    }
}

/// The first allocation in every zone (see [the module](super)).
///
/// Made only by [`format`](super::format) in the zone and reached only
/// through [`format`](super::format) and [`adopt`](super::adopt), whose
/// contracts keep the parts it points at mapped as long as it is: so its
/// methods that attach the parts are safe.
#[repr(C)]
pub struct ZoneHeader {
    stamp: Stamp,
    /// The slot table region and its length in bytes.
    table: *mut u8,
    table_len: usize,
    /// The cluster-sync ledger of a Redis-backed zone (null otherwise) and
    /// its length in bytes.
    ledger: *mut u8,
    ledger_len: usize,
    /// `delay=`'s queue turns and their length in bytes.
    turns: *mut u8,
    turns_len: usize,
    /// `in_flight=`'s places and their length in bytes.
    places: *mut u8,
    places_len: usize,
    /// The override table and its length in bytes.
    overrides: *mut u8,
    overrides_len: usize,
    /// This gateway's id in the cluster store (random, never 0): the hash
    /// field under which it writes its own counts. Kept across reloads.
    pub gateway_id: u64,
    /// Generation of the sync thread that owns the sync (0: nobody). Only
    /// the owner writes the ledger. Generations only grow: each sync thread
    /// started (worker 0 after a start, reload or respawn) draws the next
    /// one from `sync_generation`, and an owner is only ever replaced by a
    /// newer generation, so an older process can never take it back.
    pub sync_owner: AtomicU64,
    /// Epoch ms at which the owner last showed it is alive (it beats while
    /// it works, waits or backs off).
    pub sync_heartbeat_ms: AtomicU64,
    /// Highest generation asking for the sync: the owner steps down for it
    /// at its next check (every 50 ms at most).
    pub sync_handover: AtomicU64,
    /// Last generation drawn.
    pub sync_generation: AtomicU64,
    /// Owner generation last logged, so that each change is logged once.
    pub logged_owner: AtomicU64,
    /// Requests whose `limit=`, `cost=` or `in_flight=` value was invalid
    /// (each kind's first of an episode logged).
    pub invalid_limits: Episodes,
    /// Failed sync rounds (connect, I/O or protocol errors).
    pub sync_errors: AtomicU64,
    /// Failed sync calls whose deadline passed.
    pub sync_err_timeout: AtomicU64,
    /// Failed sync calls that lost or could not open their connection.
    pub sync_err_connection: AtomicU64,
    /// Failed sync calls with a reply that could not be used.
    pub sync_err_reply: AtomicU64,
    /// Failed sync calls that need an operator: credentials refused.
    pub sync_err_auth: AtomicU64,
    /// Failed sync calls that need an operator: TLS handshake failed.
    pub sync_err_tls: AtomicU64,
    /// Failed sync calls that need an operator: no master known to the
    /// sentinels.
    pub sync_err_master: AtomicU64,
    /// Failed sync calls that need an operator: cluster down.
    pub sync_err_cluster_down: AtomicU64,
    /// Kind of the last failed call (`LinkErrorKind::code`; 0: none yet).
    pub down_kind: AtomicU64,
    /// Keys whose own replies were errors (a `WRONGTYPE`, say) in rounds
    /// that otherwise went through.
    pub sync_err_key: AtomicU64,
    /// Keys written to the store (an `HSET` of this gateway's count).
    pub sync_keys_pushed: AtomicU64,
    /// Completed sync rounds.
    pub sync_rounds: AtomicU64,
    /// Epoch ms of the last completed sync round (0: never).
    pub last_sync_ms: AtomicU64,
    /// Epoch ms at which the current outage began (0: no outage).
    pub down_since_ms: AtomicU64,
    /// `down_since_ms` of the outage already logged, so that each outage is
    /// logged once, by whichever worker notices it first.
    pub logged_down_ms: AtomicU64,
    /// The next slot the sweep of stale slots visits (the glue's sweep).
    pub sweep_next: AtomicU64,
    /// Stale slots whose counts the sweep cleared.
    pub swept: AtomicU64,
    /// Requests held by `delay=`.
    pub delay: DelayStats,
    /// The next slot the sweep's count of used slots visits.
    pub used_next: AtomicU64,
    /// What the sweep's count of used slots has counted so far in this
    /// pass (slots).
    pub used_acc: AtomicU64,
    /// Slots used, as of the sweep's last complete pass (`slots_used`).
    pub slots_used: AtomicU64,
    /// Admitted requests that left the estimate at or above 80% of their
    /// limit .
    pub near_limit: AtomicU64,
    /// Live clients evicted although refused since their last admission
    /// (at or over their limit): every candidate was (fail=open).
    pub evict_over_limit: AtomicU64,
    /// Fingerprints of keys reset by `DELETE` (the metrics API) whose store keys
    /// the sync thread deletes at its next round (0: free entry).
    pub resets: [AtomicU64; RESETS],
    /// Ids of clients (and ranges) whose override changed here, which the
    /// sync thread writes to Redis at its next round (0: free).
    pub ovr_pending: [AtomicU64; OVR_PENDING],
    /// Sync round measurements and the fleet seen in Redis.
    pub stats: SyncStats,
    /// Invalid `charge=` values.
    pub charge: ChargeStats,
}

// SAFETY: shared by every worker and the sync thread by design: its
// counters, lease and queues are atomics, and its plain fields (the stamp,
// where the parts are, the gateway id) are written once by `format`,
// before any reference to the header exists, and only read afterwards.
unsafe impl Sync for ZoneHeader {}

impl ZoneHeader {
    /// A new zone's header: the parts it describes, every counter and
    /// lease at zero.
    pub(super) fn new(stamp: Stamp, p: &Parts, gateway_id: u64) -> Self {
        let zero = || AtomicU64::new(0);
        ZoneHeader {
            stamp,
            table: p.table.0,
            table_len: p.table.1,
            ledger: p.ledger.0,
            ledger_len: p.ledger.1,
            turns: p.turns.0,
            turns_len: p.turns.1,
            places: p.places.0,
            places_len: p.places.1,
            overrides: p.overrides.0,
            overrides_len: p.overrides.1,
            gateway_id,
            sync_owner: zero(),
            sync_heartbeat_ms: zero(),
            sync_handover: zero(),
            sync_generation: zero(),
            logged_owner: zero(),
            invalid_limits: Episodes::default(),
            sync_errors: zero(),
            sync_err_timeout: zero(),
            sync_err_connection: zero(),
            sync_err_reply: zero(),
            sync_err_auth: zero(),
            sync_err_tls: zero(),
            sync_err_master: zero(),
            sync_err_cluster_down: zero(),
            down_kind: zero(),
            sync_err_key: zero(),
            sync_keys_pushed: zero(),
            sync_rounds: zero(),
            last_sync_ms: zero(),
            down_since_ms: zero(),
            logged_down_ms: zero(),
            sweep_next: zero(),
            swept: zero(),
            delay: Default::default(),
            used_next: zero(),
            used_acc: zero(),
            slots_used: zero(),
            near_limit: zero(),
            evict_over_limit: zero(),
            resets: Default::default(),
            ovr_pending: core::array::from_fn(|_| AtomicU64::new(0)),
            stats: Default::default(),
            charge: Default::default(),
        }
    }

    /// Where the parts are, as written at format.
    pub(super) fn parts(&self) -> Parts {
        Parts {
            table: (self.table, self.table_len),
            ledger: (self.ledger, self.ledger_len),
            turns: (self.turns, self.turns_len),
            places: (self.places, self.places_len),
            overrides: (self.overrides, self.overrides_len),
        }
    }

    /// The zone's override table (for the sync thread, which has the
    /// header only); None when it does not hold one.
    pub fn overrides(&self) -> Option<Overrides<'_>> {
        // SAFETY: the region `format` wrote in this zone for the override
        // table, mapped as long as the header is (see `ZoneHeader`);
        // `attach` checks what it holds.
        unsafe { Overrides::attach(self.overrides, self.overrides_len) }.ok()
    }

    /// The cluster-sync ledger of a Redis-backed zone for a table of
    /// `capacity` slots (None: the zone has none, or it is too small).
    pub fn ledger(&self, capacity: usize) -> Option<Ledger<'_>> {
        if self.ledger.is_null() {
            return None;
        }
        // SAFETY: the region `format` zeroed in this zone for the ledger
        // (64-byte aligned), mapped as long as the header is and used only
        // as a ledger; `over` checks alignment and length.
        unsafe { Ledger::over(self.ledger, self.ledger_len, capacity) }
    }

    /// Notes the start of an outage; returns its start (epoch ms) the first
    /// time a given outage is seen by anyone (so it is logged once).
    pub fn outage_to_log(&self) -> Option<u64> {
        let down = self.down_since_ms.load(Ordering::Relaxed);
        if down == 0 {
            return None;
        }
        (self.logged_down_ms.swap(down, Ordering::Relaxed) != down).then_some(down)
    }
}
