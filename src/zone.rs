//! Shared-memory zones: the per-zone configuration, and the zone init
//! callback that formats a new zone or adopts the old one on reload.
//!
//! The table fills the whole zone: at init we take every free page of the
//! slab pool in one allocation and format it with the core's `Table::init`.
//! The slab pool's `data` pointer remembers where the table starts.

use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{AtomicU64, Ordering};

use nginx_sys::{
    ngx_http_complex_value_t, ngx_int_t, ngx_log_t, ngx_pagesize_shift, ngx_shm_zone_t,
    ngx_slab_alloc, ngx_slab_pool_t, ngx_str_t, ngx_uint_t, NGX_LOG_EMERG,
};
use ngx::core::Status;
use ngx::ngx_log_error;
use rate_limit_window_core::conf_error::{zone_change, ZoneIdentity};
use rate_limit_window_core::mode::Mode;
use rate_limit_window_core::overrides::{Overrides, DEFAULT_OVERRIDES};
use rate_limit_window_core::parse::RedisParams;
use rate_limit_window_core::seed::seed_from;
use rate_limit_window_core::{
    hash_with_seed, FailPolicy, Table, TableError, Window, DEFAULT_WINDOW_MS,
};

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
    pub delay: crate::delay::DelayStats,
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
    pub charge: crate::charge::ChargeStats,
}

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
            // SAFETY: an all-zero complex value is nginx's "unset" state.
            key: unsafe { core::mem::zeroed() },
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
    fn identity(&self) -> ZoneIdentity<'_> {
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

/// A per-zone random seed for the keyed hash, so nobody can aim collisions
/// at a client: `getrandom(2)`, retried when interrupted. There is no weak
/// fallback (time, pid): on failure the zone is refused.
fn random_seed() -> std::io::Result<[u64; 2]> {
    seed_from(|buf| {
        // SAFETY: getrandom writes at most buf.len() bytes into buf.
        let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
        usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
    })
}

/// The hash seed of a Redis-backed zone, derived from its name and
/// `secret=` so that every gateway of the cluster computes the same key
/// fingerprints. Without a secret, someone who knows the zone name can
/// compute fingerprints: set `secret=` where keys come from untrusted input.
pub fn config_seed(name: &[u8], secret: &[u8]) -> [u64; 2] {
    let mut material = Vec::with_capacity(name.len() + secret.len() + 1);
    material.extend_from_slice(name);
    material.push(0);
    material.extend_from_slice(secret);
    const K: [u64; 2] = [0x7261_7465_5f6c_696d, 0x6974_5f77_696e_646f]; // "rate_lim" "it_windo"
    [
        hash_with_seed(K, &material).0,
        hash_with_seed([K[1], K[0]], &material).0,
    ]
}

impl ZoneHeader {
    /// The zone's override table (for the sync thread, which has the
    /// header only).
    pub fn overrides(&self) -> Option<Overrides<'static>> {
        // SAFETY: the region `format` wrote in this zone, mapped as long as
        // the header is.
        unsafe { Overrides::attach(self.overrides, self.overrides_len) }.ok()
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

/// Asks Linux to back the table's `len` bytes at `region` (page-aligned)
/// with transparent huge pages, before `Table::init` first writes them.
///
/// A zone larger than the TLB's reach (a few MB of 4 KB pages) otherwise
/// costs a page walk on most lookups of a client not seen recently. The
/// kernel honours the advice only when
/// `/sys/kernel/mm/transparent_hugepage/shmem_enabled` is `advise` (or
/// `always`/`within_size`); with `never`, the default of most distributions,
/// it is a no-op, and a kernel without THP refuses it: either way the zone
/// works as before, so the result is not checked.
fn advise_huge_pages(region: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: madvise only changes how the kernel backs these pages of our
    // own mapping; it does not touch their contents.
    unsafe {
        libc::madvise(region.cast(), len, libc::MADV_HUGEPAGE);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (region, len);
}

/// `ngx_shm_zone_t.init`: formats a new zone, or adopts the previous
/// cycle's table on reload (`data` is then the old cycle's ZoneConf).
pub unsafe extern "C" fn init_zone(shm_zone: *mut ngx_shm_zone_t, data: *mut c_void) -> ngx_int_t {
    // SAFETY: nginx passes the zone it created; data was set to our ZoneConf.
    let shm_zone = unsafe { &mut *shm_zone };
    // SAFETY: set_zone stored a pointer to a live, pool-allocated ZoneConf.
    let zone = unsafe { &mut *shm_zone.data.cast::<ZoneConf>() };
    let log = shm_zone.shm.log;

    if !data.is_null() {
        // SAFETY: the old cycle (and its ZoneConf) is alive during init.
        let old = unsafe { &*data.cast::<ZoneConf>() };
        if !same_hashing_and_window(zone, old, log) {
            return Status::NGX_ERROR.into();
        }
        crate::resize::warn_prefix_change(zone, old, log);
        if old.mode != zone.mode {
            ngx_log_error!(
                NGX_LOG_EMERG,
                log,
                "rate_limit_window_zone \"{}\" was created with mode={}; it cannot change to \
                 mode={} on reload: use a new zone name",
                zone.name_str(),
                old.mode,
                zone.mode
            );
            return Status::NGX_ERROR.into();
        }
        return adopt(zone, old.header, log);
    }

    let shpool = shm_zone.shm.addr.cast::<ngx_slab_pool_t>();
    if shm_zone.shm.exists != 0 {
        // A zone inherited from a previous binary (Windows only): the
        // slab pool's data pointer leads to the table.
        // SAFETY: the pool header sits at the start of the zone.
        return adopt(zone, unsafe { (*shpool).data.cast() }, log);
    }
    // SAFETY: nginx initialised the slab pool over the zone before init,
    // and the pool is ours alone until init returns.
    let Some(space) = (unsafe { allocate(shpool, zone, log) }) else {
        return Status::NGX_ERROR.into();
    };
    // A Redis-backed zone hashes keys alike on every gateway of a cluster
    // (its seed comes from the configuration) and draws a random gateway
    // id instead, under which it writes its counts.
    let random = match random_seed() {
        Ok(r) => r,
        Err(e) => {
            ngx_log_error!(
                NGX_LOG_EMERG,
                log,
                "rate_limit_window_zone \"{}\": getrandom() failed ({}): no unpredictable \
                 hash seed or gateway id, so the zone is not started",
                zone.name,
                e
            );
            return Status::NGX_ERROR.into();
        }
    };
    // A resize on reload: the running cycle's zone, whose clients are
    // carried over (with its seed) when they can be.
    let previous = crate::resize::previous(zone);
    // A zone new to this start: its state file's clients, with their seed.
    let saved = previous
        .is_none()
        .then(|| crate::state::load(zone, log))
        .flatten();
    let seed = match &zone.redis {
        Some(r) => config_seed(zone.name.as_bytes(), &r.secret),
        None => crate::resize::seed_for(zone, previous)
            .or(saved.as_ref().map(|f| f.seed))
            .unwrap_or(random),
    };
    let gateway_id = random[0].max(1);
    // SAFETY: `space` is fresh zone memory, ours alone during init.
    match unsafe { format(zone, space, seed, gateway_id) } {
        Ok(()) => {
            // SAFETY: as above; the pool's data pointer tells a later cycle
            // where the header is.
            unsafe { (*shpool).data = space.header.cast() };
            if let Some(old) = previous {
                crate::resize::carry(zone, old, log);
                crate::overrides::carry(zone, old, log);
            }
            if let Some(f) = saved {
                crate::state::restore(zone, &f, log);
            }
            Status::NGX_OK.into()
        }
        Err(e) => {
            ngx_log_error!(
                NGX_LOG_EMERG,
                log,
                "rate_limit_window_zone \"{}\": {}",
                zone.name,
                e
            );
            Status::NGX_ERROR.into()
        }
    }
}

/// On reload: the zone keeps its key, window and hashing, or is refused
/// (with an `[emerg]` that says why and what to do).
fn same_hashing_and_window(zone: &ZoneConf, old: &ZoneConf, log: *mut ngx_log_t) -> bool {
    let old_secret = old.redis.as_ref().map(|r| r.secret.as_slice());
    let new_secret = zone.redis.as_ref().map(|r| r.secret.as_slice());
    if old.redis.is_some() != zone.redis.is_some() || old_secret != new_secret {
        ngx_log_error!(
            NGX_LOG_EMERG,
            log,
            "rate_limit_window_zone \"{}\": adding or removing \"redis=\" or changing \"secret=\" \
             changes how keys are hashed; use a new zone name",
            zone.name
        );
        return false;
    }
    if let Some(e) = zone_change(zone.name.as_bytes(), old.identity(), zone.identity()) {
        ngx_log_error!(NGX_LOG_EMERG, log, "{}", e);
        return false;
    }
    true
}

/// A new zone's memory: its header, and the region of every other free
/// page for the table (and a Redis zone's ledger).
#[derive(Clone, Copy)]
struct Space {
    header: *mut ZoneHeader,
    region: *mut u8,
    /// Length of `region` in bytes.
    len: usize,
}

/// Allocates the header, then takes every free page of the slab pool for
/// the table; logs an `[emerg]` and returns None when memory runs out.
///
/// # Safety
/// `shpool` must be the zone's initialised slab pool, ours alone (init).
unsafe fn allocate(
    shpool: *mut ngx_slab_pool_t,
    zone: &ZoneConf,
    log: *mut ngx_log_t,
) -> Option<Space> {
    // SAFETY: a small slab allocation; the pool is ours alone during init.
    let header =
        unsafe { ngx_slab_alloc(shpool, core::mem::size_of::<ZoneHeader>()) }.cast::<ZoneHeader>();
    if header.is_null() {
        ngx_log_error!(
            NGX_LOG_EMERG,
            log,
            "rate_limit_window_zone \"{}\": no memory for the zone header",
            zone.name
        );
        return None;
    }
    // SAFETY: the caller guarantees an initialised pool.
    let mut pages = unsafe { (*shpool).pfree };
    while pages > 0 {
        // SAFETY: ngx_pagesize_shift is set at startup.
        let len = pages << unsafe { ngx_pagesize_shift };
        // SAFETY: a plain slab allocation; the pool is ours alone during init.
        let region = unsafe { ngx_slab_alloc(shpool, len) }.cast::<u8>();
        if !region.is_null() {
            return Some(Space {
                header,
                region,
                len,
            });
        }
        pages -= 1;
    }
    ngx_log_error!(
        NGX_LOG_EMERG,
        log,
        "rate_limit_window_zone \"{}\": no memory for the table",
        zone.name
    );
    None
}

/// Formats the table (and a Redis zone's ledger) in `space`, writes the
/// zone header and points the zone at both.
///
/// # Safety
/// `space` must be fresh, page-aligned zone memory from `allocate`, ours
/// alone during init.
unsafe fn format(
    zone: &mut ZoneConf,
    space: Space,
    seed: [u64; 2],
    gateway_id: u64,
) -> Result<(), TableError> {
    let Space {
        header,
        region,
        len,
    } = space;
    advise_huge_pages(region, len);
    // The override table at the end: the memory `overrides=` added.
    let ovr_len = crate::overrides::region_bytes(zone.overrides_cap);
    let len = len.checked_sub(ovr_len).ok_or(TableError::TooSmall)?;
    let ovr = region.wrapping_add(len);
    // SAFETY: the tail of our fresh, page-aligned region (so 64-byte
    // aligned: `len` and `ovr_len` are multiples of 64), ours alone.
    let overrides = unsafe { Overrides::init(ovr, ovr_len, zone.overrides_cap) }
        .map_err(|_| TableError::TooSmall)?;
    // A Redis-backed zone gives half of its memory to the sync ledger.
    let (table_len, ledger, ledger_len) = if zone.redis.is_some() {
        let t = len / 2 / 64 * 64;
        let ledger = region.wrapping_add(t);
        // SAFETY: the tail of our fresh region, ours alone during init.
        unsafe { ptr::write_bytes(ledger, 0, len - t) };
        (t, ledger, len - t)
    } else {
        (len, ptr::null_mut(), 0)
    };
    // SAFETY: region is `len` bytes of page-aligned zone memory, ours alone.
    let table = unsafe { Table::init_mode(region, table_len, zone.window, seed, zone.mode) }?;
    // SAFETY: header is fresh zone memory sized for a ZoneHeader.
    unsafe {
        header.write(ZoneHeader::new(Layout {
            table: region,
            table_len,
            ledger,
            ledger_len,
            overrides: (ovr, ovr_len),
            gateway_id,
        }))
    };
    zone.header = header;
    zone.table = Some(table);
    zone.overrides = Some(overrides);
    Ok(())
}

/// Where a new zone's table and ledger are, and its gateway id.
struct Layout {
    table: *mut u8,
    /// Bytes.
    table_len: usize,
    ledger: *mut u8,
    /// Bytes.
    ledger_len: usize,
    /// The override table and its length in bytes.
    overrides: (*mut u8, usize),
    gateway_id: u64,
}

impl ZoneHeader {
    /// A new zone's header: the table and ledger it describes, every
    /// counter and lease at zero.
    fn new(l: Layout) -> Self {
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

/// Adopts a zone formatted by an earlier cycle, after validating both
/// headers (ours, then the table's magic, layout version and window).
fn adopt(zone: &mut ZoneConf, header: *mut ZoneHeader, log: *mut ngx_log_t) -> ngx_int_t {
    // SAFETY: header is the first allocation an earlier init made in this
    // same zone, which nginx kept mapped at the same address.
    if header.is_null() || unsafe { (*header).magic } != ZONE_MAGIC {
        ngx_log_error!(
            NGX_LOG_EMERG,
            log,
            "rate_limit_window_zone \"{}\": cannot reuse the zone: bad zone header; restart nginx or use a new zone name",
            zone.name
        );
        return Status::NGX_ERROR.into();
    }
    // SAFETY: as above; table/table_len describe the table it formatted.
    match unsafe {
        Table::attach_mode((*header).table, (*header).table_len, zone.window, zone.mode)
    } {
        Ok(t) => {
            // SAFETY: as above; the override table it formatted.
            let o = unsafe { Overrides::attach((*header).overrides, (*header).overrides_len) };
            let Ok(o) = o else {
                ngx_log_error!(
                    NGX_LOG_EMERG,
                    log,
                    "rate_limit_window_zone \"{}\": cannot reuse the zone: no override table; restart nginx or use a new zone name",
                    zone.name
                );
                return Status::NGX_ERROR.into();
            };
            zone.header = header;
            zone.table = Some(t);
            zone.overrides = Some(o);
            Status::NGX_OK.into()
        }
        Err(e) => {
            ngx_log_error!(
                NGX_LOG_EMERG,
                log,
                "rate_limit_window_zone \"{}\": cannot reuse the zone: {}; restart nginx or use a new zone name",
                zone.name,
                e
            );
            Status::NGX_ERROR.into()
        }
    }
}
