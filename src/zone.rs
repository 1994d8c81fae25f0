//! Shared-memory zones: the per-zone configuration (`ZoneConf`) and the
//! zone header (`ZoneHeader`), the first allocation in every zone. The
//! zone init callback that formats a new zone or adopts the old one on
//! reload is in zone_init.rs.

use core::ptr;
use core::sync::atomic::{AtomicU64, Ordering};

use nginx_sys::{ngx_http_complex_value_t, ngx_shm_zone_t, ngx_str_t, ngx_uint_t};
use rate_limit_window_core::conf_error::ZoneIdentity;
use rate_limit_window_core::mode::Mode;
use rate_limit_window_core::overrides::{Overrides, DEFAULT_OVERRIDES};
use rate_limit_window_core::parse::RedisParams;
use rate_limit_window_core::{FailPolicy, Table, TableError, Window, DEFAULT_WINDOW_MS};

/// One `rate_limit_window_zone`, allocated from the configuration pool.
pub struct ZoneConf {
    /// Zone name (configuration pool memory).
    pub name: ngx_str_t,
    /// False while the zone is only a forward reference from `rate_limit_window`.
    pub defined: bool,
    /// Where the zone was first referenced, for the "is not defined" error.
    pub ref_file: ngx_str_t,
    pub ref_line: ngx_uint_t,
    /// The compiled key, and its source text (compared on reload).
    pub key: ngx_http_complex_value_t,
    pub key_src: ngx_str_t,
    /// The variable's index when the key is exactly one variable (the usual
    /// `$binary_remote_addr`): read directly, without the script engine.
    pub key_index: Option<ngx_uint_t>,
    /// `ipv6_prefix=` (bits, 32..=128; 128: whole addresses): IPv6 keys of
    /// a `$binary_remote_addr` zone are masked to it.
    pub ipv6_prefix: u8,
    /// Window length; windows are aligned to the UTC epoch.
    pub window: Window,
    /// The `window=` value as written (empty: the default), for messages.
    pub window_src: Vec<u8>,
    /// The rule (`mode=`): the sliding estimate or the strict window.
    pub mode: Mode,
    /// What happens when a new client cannot be tracked, or a limit
    /// variable holds garbage.
    pub fail: FailPolicy,
    /// Zone size in bytes, as configured.
    pub size: usize,
    /// Cluster sync through Redis (`redis=`), if configured.
    pub redis: Option<RedisParams>,
    /// The state file (`state=`, absolute), if configured (see state.rs).
    pub state: Option<std::path::PathBuf>,
    pub shm_zone: *mut ngx_shm_zone_t,
    /// The zone header (set by `init_zone`): where the table is, plus the
    /// cluster-sync state shared by all workers.
    pub header: *mut ZoneHeader,
    /// The slot table inside the zone; None until the zone is initialised.
    pub table: Option<Table<'static>>,
    /// Where a `rate_limit_window` first gave the zone a `charge=` (file,
    /// line), for the refusal of a strict zone (charge.rs).
    pub charge_at: Option<(ngx_str_t, ngx_uint_t)>,
    /// `overrides=`: most per-client overrides (see overrides.rs).
    pub overrides_cap: usize,
    /// The override table inside the zone; None until it is initialised.
    pub overrides: Option<Overrides<'static>>,
}

/// Marks a zone header written by this module, and its layout: bump the
/// digit whenever `ZoneHeader` changes (3: the sweep's `slots_used` count
/// and the `delay` counters; 4: the sync's gateway id, generations and
/// errors by kind; 5: `near_limit`; 6: the sync's auth, TLS, master and
/// cluster errors; 7: `resets`; 8: `evict_over_limit`; 9: the sync's
/// `stats`; A: `charge` and the override table), so that a reload onto a
/// zone of another layout is refused, not misread.
const ZONE_MAGIC: u64 = u64::from_le_bytes(*b"RLWZONEA");

/// The first allocation in every zone. It outlives reloads with the zone,
/// and tells a new cycle where the table is. Its sync fields are written by
/// the sync thread (worker 0) and read by every worker.
#[repr(C)]
pub struct ZoneHeader {
    magic: u64,
    /// The slot table region and its length in bytes.
    table: *mut u8,
    table_len: usize,
    /// The cluster-sync ledger of a Redis-backed zone (null otherwise) and
    /// its length in bytes.
    pub ledger: *mut u8,
    pub ledger_len: usize,
    /// The override table (overrides.rs) and its length in bytes.
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
    /// Requests whose `limit=$variable` held something other than a number.
    pub invalid_limits: AtomicU64,
    /// Failed sync rounds (connect, I/O or protocol errors).
    pub sync_errors: AtomicU64,
    /// Failed sync calls by kind: deadline passed, connection, bad reply.
    pub sync_err_timeout: AtomicU64,
    pub sync_err_connection: AtomicU64,
    pub sync_err_reply: AtomicU64,
    /// Failed sync calls that need an operator: credentials refused, TLS
    /// handshake failed, no master known to the sentinels, cluster down.
    pub sync_err_auth: AtomicU64,
    pub sync_err_tls: AtomicU64,
    pub sync_err_master: AtomicU64,
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
    /// The next slot the sweep of stale slots visits (see `sweep.rs`).
    pub sweep_next: AtomicU64,
    /// Stale slots whose counts the sweep cleared.
    pub swept: AtomicU64,
    /// Requests held by `delay=` (see delay.rs).
    pub delay: crate::zone_stats::DelayStats,
    /// The next slot the sweep's count of used slots visits, and what it
    /// has counted so far in this pass (see `sweep::count_used`).
    pub used_next: AtomicU64,
    pub used_acc: AtomicU64,
    /// Slots used, as of the sweep's last complete pass (`slots_used`).
    pub slots_used: AtomicU64,
    /// Admitted requests that left the estimate at or above 80% of their
    /// limit (see near_limit.rs).
    pub near_limit: AtomicU64,
    /// Live clients evicted although refused since their last admission
    /// (at or over their limit): every candidate was (fail=open).
    pub evict_over_limit: AtomicU64,
    /// Fingerprints of keys reset by `DELETE` (reset.rs) whose store keys
    /// the sync thread deletes at its next round (0: free entry).
    pub resets: [AtomicU64; RESETS],
    /// Fingerprints of clients whose override changed here, which the sync
    /// thread writes to Redis at its next round (override_sync.rs; 0: free).
    pub ovr_pending: [AtomicU64; 32],
    /// Sync round measurements and the fleet seen in Redis (sync_stats.rs).
    pub stats: crate::sync_stats::SyncStats,
    /// Invalid `charge=` values (charge.rs).
    pub charge: crate::zone_stats::ChargeStats,
}

/// The zones of a configuration's list (`MainConf::zones`, raw pointers
/// into the configuration pool), as references for the cycle.
pub fn each(zones: &[*mut ZoneConf]) -> impl Iterator<Item = &'static ZoneConf> + '_ {
    // SAFETY: zone pointers come from the configuration pool and stay
    // valid (and unchanged after configuration) for the cycle, longer than
    // any use of this list's zones by the process's timers and threads.
    zones.iter().map(|&z| unsafe { &*z })
}

/// Bytes the override table of `capacity` entries takes at the end of the
/// zone's region (a multiple of 64).
pub fn override_region_bytes(capacity: usize) -> usize {
    Overrides::bytes_for(capacity).next_multiple_of(64)
}

/// The key of a zone keyed by the client's address (`addr=` lookups,
/// `ipv6_prefix=`).
pub const BINARY_REMOTE_ADDR: &[u8] = b"$binary_remote_addr";

/// Resets of a Redis-backed zone waiting for the next sync round.
pub const RESETS: usize = 16;

impl ZoneConf {
    /// A zone known only by name so far.
    pub fn new(name: ngx_str_t, ref_file: ngx_str_t, ref_line: ngx_uint_t) -> Self {
        Self {
            name,
            defined: false,
            ref_file,
            ref_line,
            // All zero: nginx's "unset" complex value.
            key: ngx_http_complex_value_t {
                value: ngx_str_t::empty(),
                flushes: ptr::null_mut(),
                lengths: ptr::null_mut(),
                values: ptr::null_mut(),
                u: nginx_sys::ngx_http_complex_value_t__bindgen_ty_1 { size: 0 },
            },
            key_src: ngx_str_t::empty(),
            key_index: None,
            ipv6_prefix: rate_limit_window_core::addr::IPV6_PREFIX_MAX,
            window: Window::from_ms(DEFAULT_WINDOW_MS).expect("default window is valid"),
            window_src: Vec::new(),
            mode: Mode::Estimate,
            fail: FailPolicy::Open,
            size: 0,
            shm_zone: ptr::null_mut(),
            redis: None,
            state: None,
            header: ptr::null_mut(),
            table: None,
            charge_at: None,
            overrides_cap: DEFAULT_OVERRIDES,
            overrides: None,
        }
    }

    /// The key and window, as compared on reload.
    pub fn identity(&self) -> ZoneIdentity<'_> {
        ZoneIdentity {
            key: self.key_src.as_bytes(),
            window_ms: self.window.ms(),
            window_src: &self.window_src,
        }
    }

    /// Zone name for messages.
    pub fn name_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.name.as_bytes())
    }

    /// The zone header, once the zone is initialised.
    pub fn header(&self) -> Option<&ZoneHeader> {
        // SAFETY: `header` is null or points at the header `init_zone` or
        // `adopt` found in the zone, mapped for as long as this cycle.
        unsafe { self.header.as_ref() }
    }

    /// The table and the header of an initialised zone.
    pub fn live(&self) -> Option<(&Table<'static>, &ZoneHeader)> {
        Some((self.table.as_ref()?, self.header()?))
    }
}

impl ZoneHeader {
    /// The zone's override table (for the sync thread, which has the
    /// header only).
    pub fn overrides(&self) -> Option<Overrides<'static>> {
        // SAFETY: the region `format` wrote in this zone, mapped as long as
        // the header is.
        unsafe { Overrides::attach(self.overrides, self.overrides_len) }.ok()
    }

    /// Whether this header was written by this module, in this layout
    /// (`ZONE_MAGIC`): checked before a reload adopts the zone.
    pub fn is_ours(&self) -> bool {
        self.magic == ZONE_MAGIC
    }

    /// The slot table this header describes, attached (checked: the
    /// table's magic, layout version, window and mode).
    pub fn table(&self, window: Window, mode: Mode) -> Result<Table<'static>, TableError> {
        // SAFETY: the region `format` wrote in this zone for the table,
        // mapped as long as the header is; `attach_mode` checks its header.
        unsafe { Table::attach_mode(self.table, self.table_len, window, mode) }
    }

    /// Notes the start of an outage; returns true the first time a given
    /// outage is seen by anyone (so it is logged once).
    pub fn outage_to_log(&self) -> Option<u64> {
        let down = self.down_since_ms.load(Ordering::Relaxed);
        if down == 0 {
            return None;
        }
        (self.logged_down_ms.swap(down, Ordering::Relaxed) != down).then_some(down)
    }
}

/// Where a new zone's table and ledger are, and its gateway id.
pub struct Layout {
    pub table: *mut u8,
    /// Bytes.
    pub table_len: usize,
    pub ledger: *mut u8,
    /// Bytes.
    pub ledger_len: usize,
    /// The override table and its length in bytes.
    pub overrides: (*mut u8, usize),
    pub gateway_id: u64,
}

impl ZoneHeader {
    /// A new zone's header: the table and ledger it describes, every
    /// counter and lease at zero.
    pub fn new(l: Layout) -> Self {
        let zero = || AtomicU64::new(0);
        ZoneHeader {
            magic: ZONE_MAGIC,
            table: l.table,
            table_len: l.table_len,
            ledger: l.ledger,
            ledger_len: l.ledger_len,
            overrides: l.overrides.0,
            overrides_len: l.overrides.1,
            gateway_id: l.gateway_id,
            sync_owner: zero(),
            sync_heartbeat_ms: zero(),
            sync_handover: zero(),
            sync_generation: zero(),
            logged_owner: zero(),
            invalid_limits: zero(),
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
            ovr_pending: Default::default(),
            stats: Default::default(),
            charge: Default::default(),
        }
    }
}
