//! The sweep of stale slots: a timer in worker 0 (or the single process)
//! that clears, once a second, the counts of idle slots in a chunk of each
//! zone, so that every slot of every zone is visited at least once an hour.
//!
//! No decision depends on it: a slot idle for two windows or more already
//! reads as empty. It exists because a slot keeps its window index modulo
//! 2^24, and a slot left untouched for a multiple of 2^24 windows (194 days
//! at `window=1s`) would otherwise read as current again, its old counts
//! and all (see `Table::sweep`). A pass takes an hour at most, far inside
//! 2^24 windows of the shortest window (1 s).
//!
//! The same tick reaps the expired overrides of a chunk of each zone's
//! override table, so that once every override ended, the request path is
//! back to its one load of the table's live count (a lookup reaps only the
//! entries of its own client).
//!
//! The timer is cancelable: a worker shutting down gracefully does not wait
//! for it. The cursor of each zone is in its zone header, so a respawned
//! worker 0, or the new one after a reload, continues where the last one
//! stopped.

use core::sync::atomic::Ordering;

use nginx_sys::{ngx_cycle_t, ngx_event_t, ngx_msec_t};
use ngx::http::HttpModuleMainConf;

use rate_limit_window_core::Table;

use crate::ffi::process;
use crate::zone::{ZoneConf, ZoneHeader};
use crate::Module;

/// How often the timer fires (ms).
const TICK_MS: ngx_msec_t = 1000;
/// A full pass over a zone takes at most this many ticks (one hour).
const PASS_TICKS: usize = 3600;
/// The fewest slots swept per zone and tick: 16 bytes each, so 16 KiB of
/// sequential reads. A zone of up to 56 MiB (3.7 million slots) is swept
/// 1,024 slots a tick: a 1 MiB one in about a minute, a 56 MiB one in an
/// hour. A larger one is swept 1/3600 of it a tick.
const MIN_CHUNK: usize = 1_024;

/// Zones of up to this many slots (a 1 MB zone holds about 65,000) are
/// counted at each scrape: the scan costs at most as much as one of a
/// 1 MB table. Larger zones report the sweep's count (`count_used`).
pub const SCAN_AT_SCRAPE: usize = 65_536;
/// Slots the count of used slots visits per zone and tick (16 MiB of
/// sequential reads, about 2 ms): a 1 GB zone is counted in about a minute.
const COUNT_CHUNK: usize = 1 << 20;

/// Override slots reaped per zone and tick (16 bytes each: 1 MiB of
/// sequential reads): the largest table (2^21 slots) in 32 ticks.
const REAP_CHUNK: usize = 65_536;

thread_local! {
    /// The timer event of this process (only worker 0 arms it).
    static TIMER: process::Timer = const { process::Timer::new() };
}

/// Arms the sweep timer, if any zone or shed group is configured
/// (`any`). Called from `init_process` of the process that sweeps.
pub fn start(cycle: &ngx_cycle_t, any: bool) {
    if !any {
        return;
    }
    TIMER.with(|t| t.arm(Some(tick), cycle.log, TICK_MS));
}

/// Number of slots to sweep per tick in a table of `capacity` slots.
fn chunk(capacity: usize) -> usize {
    capacity.div_ceil(PASS_TICKS).max(MIN_CHUNK)
}

/// The timer handler: sweeps one chunk of every zone, then re-arms unless
/// the process is exiting. (`scripts/bench.sh` leaves this function out of
/// its callgrind counts by its name, `sweep::tick`.)
extern "C" fn tick(_ev: *mut ngx_event_t) {
    // The running cycle: its http main conf exists since `start` was
    // called with its zones.
    if let Some(cycle) = process::cycle() {
        let now = process::now_ms();
        // Every zone, http's and the stream's.
        let zones = crate::zone::all_of(cycle);
        let mcf = Module::main_conf(cycle);
        // The in-flight places of a process gone, taken back within a tick.
        let sheds = mcf.into_iter().flat_map(|m| m.sheds());
        crate::zone::reclaim_places(crate::zone::each(&zones), sheds);
        for (zone, table, header) in
            crate::zone::each(&zones).filter_map(|z| ZoneConf::live(z).map(|(t, h)| (z, t, h)))
        {
            // The running cycle's log: after a single-process reload the
            // event's (the first cycle's) may be closed.
            crate::sync::log_changes(cycle.log, zone, now);
            // The cursor is an atomic, written only by the sweeping process.
            let start = header.sweep_next.load(Ordering::Relaxed) as usize;
            let (next, cleared) = table.sweep(now, start, chunk(table.capacity()));
            header.sweep_next.store(next as u64, Ordering::Relaxed);
            header.swept.fetch_add(cleared as u64, Ordering::Relaxed);
            count_used(table, header, now);
            reap_overrides(zone, now);
        }
    }
    TIMER.with(|t| t.rearm(TICK_MS));
}

/// Reaps the expired overrides of the next chunk of the zone's table
/// (where the chunk is follows from the clock: no cursor to keep).
fn reap_overrides(zone: &ZoneConf, now: u64) {
    let Some(o) = zone.overrides.as_ref().filter(|o| o.live() != 0) else {
        return;
    };
    let from = (now / TICK_MS as u64) as usize * REAP_CHUNK;
    o.reap_expired(from, REAP_CHUNK, now);
}

/// Counts the used slots of the next chunk of a large zone; at the end of
/// a pass, publishes the total as the zone's `slots_used`. Only the
/// sweeping process writes these fields.
fn count_used(table: &Table<'static>, header: &ZoneHeader, now: u64) {
    if table.capacity() <= SCAN_AT_SCRAPE {
        return;
    }
    let start = header.used_next.load(Ordering::Relaxed) as usize;
    let (next, used) = table.slots_used_in(now, start, COUNT_CHUNK);
    let total = header.used_acc.load(Ordering::Relaxed) + used;
    if next == 0 {
        header.slots_used.store(total, Ordering::Relaxed);
        header.used_acc.store(0, Ordering::Relaxed);
    } else {
        header.used_acc.store(total, Ordering::Relaxed);
    }
    header.used_next.store(next as u64, Ordering::Relaxed);
}

/// Slots holding a client active in the current or previous window: a
/// scan of a small zone, the sweep's last count of a larger one, so that a
/// scrape costs no more for a 1 GB zone than for 1 MB.
pub fn slots_used(table: &Table<'static>, header: &ZoneHeader, now: u64) -> u64 {
    if table.capacity() <= SCAN_AT_SCRAPE {
        table.slots_used(now)
    } else {
        header.slots_used.load(Ordering::Relaxed)
    }
}
