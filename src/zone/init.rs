//! The zone init callback: formats a new zone, or adopts the previous
//! cycle's on reload (see CONTRIBUTING.md, "The zone across reloads").
//!
//! The table fills the whole zone: at init we take every free page of the
//! slab pool in one allocation and format it with the core's `Table::init`.
//! The slab pool's `data` pointer remembers where the zone header is.

use core::alloc::Layout;
use core::ffi::c_void;
use core::ptr;

use nginx_sys::{
    ngx_int_t, ngx_log_t, ngx_pagesize_shift, ngx_shm_zone_t, NGX_LOG_EMERG, NGX_LOG_NOTICE,
};
use ngx::allocator::Allocator;
use ngx::core::{SlabPool, Status};
use ngx::ngx_log_error;
use rate_limit_window_core::conf::error::zone_change;
use rate_limit_window_core::shm::{self, Expect, Format, Parts, Zone};
use rate_limit_window_core::table::seed::seed_from;
use rate_limit_window_core::{hash_with_seed, TableError};

use crate::zone::{state_dir, ZoneConf, ZoneHeader};

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

/// What nginx hands the init callback, as safe references.
struct Init<'a> {
    /// The new cycle's zone configuration.
    zone: &'a mut ZoneConf,
    /// The old cycle's, on a reload onto the same name and size.
    old: Option<&'a ZoneConf>,
    /// The zone's slab pool, ours alone until init returns.
    pool: SlabPool,
    /// Whether the zone was inherited from a previous binary (Windows).
    exists: bool,
    /// The zone's size (bytes), as nginx mapped it.
    bytes: usize,
    log: *mut ngx_log_t,
}

/// `ngx_shm_zone_t.init`: formats a new zone, or adopts the previous
/// cycle's table on reload (`data` is then the old cycle's ZoneConf).
pub extern "C" fn init_zone(shm_zone: *mut ngx_shm_zone_t, data: *mut c_void) -> ngx_int_t {
    // SAFETY: nginx passes the zone it created, whose `data` set_zone set
    // to our live, pool-allocated ZoneConf; `data` is null or the old
    // cycle's ZoneConf (alive during init); nginx initialised the slab pool
    // over the zone before init, and it is ours alone until init returns.
    let init = unsafe {
        let shm = &(*shm_zone).shm;
        SlabPool::from_shm_zone(&*shm_zone).map(|pool| Init {
            zone: &mut *(*shm_zone).data.cast::<ZoneConf>(),
            old: data.cast::<ZoneConf>().as_ref(),
            pool,
            exists: shm.exists != 0,
            bytes: shm.size,
            log: shm.log,
        })
    };
    let Some(init) = init else {
        return Status::NGX_ERROR.into();
    };
    if state_writable(init.zone, init.log).is_err() {
        return Status::NGX_ERROR.into();
    }
    let ok = match init.old {
        Some(old) => reuse(init.zone, old, init.bytes, init.log),
        // A zone inherited from a previous binary (Windows only): the
        // slab pool's data pointer leads to the header.
        None if init.exists => {
            let header = init.pool.as_ref().data.cast();
            adopt(init.zone, header, init.bytes, init.log)
        }
        None => create(init),
    };
    match ok {
        Ok(()) => Status::NGX_OK.into(),
        Err(()) => Status::NGX_ERROR.into(),
    }
}

/// A zone with `state=`: its workers must be able to write the file (at
/// start, reload and `nginx -t`), else an `[emerg]` naming the path, the
/// user and the fix (state_dir.rs).
fn state_writable(zone: &ZoneConf, log: *mut ngx_log_t) -> Result<(), ()> {
    let Some(path) = zone.state.as_deref() else {
        return Ok(());
    };
    if zone.cycle.is_null() {
        return Ok(());
    }
    let user = state_dir::worker_user(zone.cycle);
    state_dir::check(path, &user).map_err(|p| {
        let text = state_dir::message(&zone.name_str(), path, &user, &p);
        ngx_log_error!(NGX_LOG_EMERG, log, "{}", text);
    })
}

/// A reload onto a zone of the same name and size: adopts it when its
/// hashing, window and mode are unchanged.
fn reuse(zone: &mut ZoneConf, old: &ZoneConf, bytes: usize, log: *mut ngx_log_t) -> Result<(), ()> {
    if !same_hashing_and_window(zone, old, log) {
        return Err(());
    }
    crate::zone::resize::warn_prefix_change(zone, old, log);
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
        return Err(());
    }
    adopt(zone, old.header, bytes, log)
}

/// A new zone: allocates and formats it, then carries over the clients of
/// the running cycle's zone (a resize) or of the state file.
fn create(init: Init<'_>) -> Result<(), ()> {
    let Init {
        zone,
        mut pool,
        log,
        bytes,
        ..
    } = init;
    let space = allocate(&pool, zone, log).ok_or(())?;
    // A Redis-backed zone hashes keys alike on every gateway of a cluster
    // (its seed comes from the configuration) and draws a random gateway
    // id instead, under which it writes its counts.
    let random = random_or_log(zone, log)?;
    // A resize on reload: the running cycle's zone, whose clients are
    // carried over (with its seed) when they can be.
    let previous = crate::zone::resize::previous(zone);
    // A zone new to this start: its state file's clients, with their seed.
    let saved = previous
        .is_none()
        .then(|| crate::zone::state_file::load(zone, log))
        .flatten();
    let ids = Ids {
        zone_bytes: bytes,
        seed: seed_of(zone, previous, saved.as_ref().map(|f| f.seed), random),
        gateway_id: random[0].max(1),
    };
    format(zone, space, ids).map_err(|e| {
        ngx_log_error!(
            NGX_LOG_EMERG,
            log,
            "rate_limit_window_zone \"{}\": {}",
            zone.name,
            e
        );
    })?;
    // The pool's data pointer tells a later cycle where the header is.
    pool.as_mut().data = zone.header.cast();
    if let Some(old) = previous {
        crate::zone::resize::carry(zone, old, log);
        carry_overrides(zone, old, log);
        crate::zone::resize::carry_runtime(zone, old, log);
    }
    if let Some(f) = saved {
        crate::zone::state_file::restore(zone, &f, log);
    }
    Ok(())
}

/// The zone's hash seed: a Redis-backed zone's from its configuration (the
/// same on every gateway), else the resized zone's (`previous`), the state
/// file's (`saved`), or `random`, in that order.
fn seed_of(
    zone: &ZoneConf,
    previous: Option<&ZoneConf>,
    saved: Option<[u64; 2]>,
    random: [u64; 2],
) -> [u64; 2] {
    match &zone.redis {
        Some(r) => config_seed(zone.name.as_bytes(), &r.secret),
        None => crate::zone::resize::seed_for(zone, previous)
            .or(saved)
            .unwrap_or(random),
    }
}

/// Fresh random words for a zone's hash seed and gateway id; Err (logged)
/// when the system has none to give.
fn random_or_log(zone: &ZoneConf, log: *mut ngx_log_t) -> Result<[u64; 2], ()> {
    random_seed().map_err(|e| {
        ngx_log_error!(
            NGX_LOG_EMERG,
            log,
            "rate_limit_window_zone \"{}\": getrandom() failed ({}): no unpredictable \
             hash seed or gateway id, so the zone is not started",
            zone.name,
            e
        );
    })
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
/// page for the table (and a Redis zone's ledger). Made only by
/// [`allocate`], so that holding one means: fresh, page-aligned zone
/// memory, ours alone during init.
struct Space {
    header: *mut ZoneHeader,
    region: *mut u8,
    /// Length of `region` in bytes.
    len: usize,
}

/// `ngx_slab_alloc` of `layout` from `pool` (null when it has no room).
fn slab_alloc(pool: &SlabPool, layout: Layout) -> *mut u8 {
    pool.allocate(layout)
        .map_or(ptr::null_mut(), |p| p.cast::<u8>().as_ptr())
}

/// Allocates the header, then takes every free page of the slab pool for
/// the table; logs an `[emerg]` and returns None when memory runs out.
fn allocate(pool: &SlabPool, zone: &ZoneConf, log: *mut ngx_log_t) -> Option<Space> {
    let header = slab_alloc(pool, Layout::new::<ZoneHeader>()).cast::<ZoneHeader>();
    if header.is_null() {
        ngx_log_error!(
            NGX_LOG_EMERG,
            log,
            "rate_limit_window_zone \"{}\": no memory for the zone header",
            zone.name
        );
        return None;
    }
    // SAFETY: ngx_pagesize_shift is set once at startup.
    let shift = unsafe { ngx_pagesize_shift };
    let mut pages = pool.as_ref().pfree;
    while pages > 0 {
        let len = pages << shift;
        let region =
            Layout::from_size_align(len, 1).map_or(ptr::null_mut(), |l| slab_alloc(pool, l));
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

/// What a new zone is formatted with besides its configuration.
struct Ids {
    /// The zone's size (bytes), as nginx mapped it.
    zone_bytes: usize,
    /// The key hash's seed.
    seed: [u64; 2],
    /// This gateway's id in the cluster store (never 0).
    gateway_id: u64,
}

/// Formats the table (and a Redis zone's ledger, and the override table)
/// in `space`, writes the zone header and points the zone at them
/// (`shm::format`).
fn format(zone: &mut ZoneConf, space: Space, ids: Ids) -> Result<(), TableError> {
    advise_huge_pages(space.region, space.len);
    let parts = Parts::split(
        space.region,
        space.len,
        zone.overrides_cap,
        zone.redis.is_some(),
    )?;
    let f = Format {
        zone_bytes: ids.zone_bytes,
        window: zone.window,
        mode: zone.mode,
        seed: ids.seed,
        gateway_id: ids.gateway_id,
        overrides_cap: zone.overrides_cap,
        with_ledger: zone.redis.is_some(),
    };
    // SAFETY: `space` comes from `allocate` (see `Space`): fresh,
    // page-aligned zone memory, ours alone during init and mapped for as
    // long as the zone; `split` cut the region into its parts, and the
    // header is its own slab allocation, sized for one.
    let z = unsafe { shm::format(space.header, &parts, &f) }?;
    set(zone, z);
    Ok(())
}

/// Points the zone at its header, table and override table; its places
/// are live (a reload adopts them, even after a resize that failed).
fn set(zone: &mut ZoneConf, z: Zone<'static>) {
    z.places.retire(None);
    zone.header = ptr::from_ref(z.header).cast_mut();
    zone.table = Some(z.table);
    zone.overrides = Some(z.overrides);
    zone.turns = Some(z.turns);
    zone.places = Some(z.places);
}

/// Adopts a zone formatted by an earlier cycle, after `shm::adopt`
/// checked it (its header's magic, layout version and sizes, then the
/// table's window, mode and capacity, and the override table).
fn adopt(
    zone: &mut ZoneConf,
    header: *const ZoneHeader,
    bytes: usize,
    log: *mut ngx_log_t,
) -> Result<(), ()> {
    let want = Expect {
        zone_bytes: bytes,
        window: zone.window,
        mode: zone.mode,
    };
    // SAFETY: header is null or the first allocation an earlier init made
    // in this same zone (`bytes` long), which nginx kept mapped at the same
    // address for as long as the zone.
    let z = unsafe { shm::adopt(header, &want) }.map_err(|e| {
        ngx_log_error!(
            NGX_LOG_EMERG,
            log,
            "rate_limit_window_zone \"{}\": cannot reuse the zone: {}; restart nginx or use a new zone name",
            zone.name,
            e
        );
    })?;
    set(zone, z);
    Ok(())
}

/// A resized zone (new memory on reload): copies `old`'s overrides when
/// the new table kept its hash seed, and logs how many.
fn carry_overrides(zone: &ZoneConf, old: &ZoneConf, log: *mut ngx_log_t) {
    let (Some(new_o), Some(old_o)) = (zone.overrides.as_ref(), old.overrides.as_ref()) else {
        return;
    };
    let (Some(nt), Some(ot)) = (zone.table.as_ref(), old.table.as_ref()) else {
        return;
    };
    if old_o.live() == 0 || nt.seed() != ot.seed() {
        return;
    }
    let now = crate::ffi::process::now_ms();
    let (mut kept, mut dropped) = (0, 0);
    for e in old_o.iter(now) {
        match new_o.restore(e, now) {
            Ok(_) => kept += 1,
            Err(_) => dropped += 1,
        }
    }
    ngx_log_error!(
        NGX_LOG_NOTICE,
        log,
        "rate_limit_window_zone \"{}\": {} overrides carried over, {} dropped (overrides={})",
        zone.name,
        kept,
        dropped,
        new_o.capacity()
    );
}
