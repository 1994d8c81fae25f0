//! Cluster sync through Redis for zones with `redis=`.
//!
//! Requests never wait for Redis: every decision is made from the local
//! zone, as for any zone. One background thread per nginx instance (in
//! worker 0, respawned with it) runs a sync round every `sync=` interval for
//! each Redis-backed zone:
//!
//! 1. for every client active in the current window, push its *local delta*
//!    (requests admitted here since the last push) with a pipelined
//!    `INCRBY rlw:{zone}:{window index}:{fingerprint} delta` and `PEXPIRE`
//!    of two windows, which returns the cluster total;
//! 2. the other gateways' share is `total − pushed here`; add what is new of
//!    it to the client's current count in the local zone.
//!
//! What was pushed and what was added per key is kept in a ledger in the
//! zone (core's `cluster::Ledger`), and only the holder of a lease in the
//! zone header runs rounds: after a reload or a respawn, the new worker 0
//! asks for the lease, the old thread hands it over at its next round (or
//! is replaced after a timeout if it died), and the new one continues from
//! the ledger without pushing anything twice.
//!
//! The estimate thus covers local and remote requests, for the current and
//! (after the window rolls) the previous window. Over-admission is bounded by
//! roughly one sync interval of the cluster's traffic for a key.
//!
//! The thread touches only shared-memory atomics (through the core's table
//! and the zone header) and its own socket: never an nginx API. When Redis
//! is down or slow, rounds fail, the gateways decide from local counts
//! (fail-open for the cluster part), errors are counted in the zone header,
//! the thread reconnects with backoff, and a worker logs the outage once.
//!
//! A client library (the `redis` crate, synchronous API) in a plain thread
//! was chosen over nginx's event loop: the sync is a periodic batch job, so
//! blocking I/O off the request path is the simplest correct shape, and it
//! can never delay a request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rate_limit_window_core::cluster::{Ledger, Push};
use rate_limit_window_core::{Table, Window};

use crate::redis_link::{Link, LinkError, RedisTarget};
use crate::zone::{ZoneConf, ZoneHeader};

/// Largest number of keys per pipelined batch.
const BATCH: usize = 1000;
/// Reconnect backoff bounds (ms).
const BACKOFF_MIN_MS: u64 = 100;
const BACKOFF_MAX_MS: u64 = 5_000;
/// Longest a connect (name resolution included) may take (ms).
const CONNECT_MS: u64 = 1_000;

/// What a sync thread needs; all of it outlives the thread (the cycle's
/// configuration and the shared zone stay until the worker exits, and
/// `stop_all` joins the threads before that).
struct Job {
    name: String,
    target: RedisTarget,
    sync_ms: u64,
    window: Window,
    table: *const Table<'static>,
    header: *const ZoneHeader,
}

// SAFETY: the pointers refer to the cycle's configuration and to shared
// memory, both alive until the worker exits after joining this thread; the
// table and header are only used through atomics.
unsafe impl Send for Job {}

/// Threads of this process: stop flag and handle.
static THREADS: Mutex<Vec<(Arc<AtomicBool>, JoinHandle<()>)>> = Mutex::new(Vec::new());

/// Starts one sync thread per Redis-backed zone.
pub fn start_all(zones: &[*mut ZoneConf]) {
    let Ok(mut threads) = THREADS.lock() else {
        return;
    };
    for &z in zones {
        // SAFETY: zones live in the configuration pool for the cycle.
        let zone = unsafe { &*z };
        let (Some(r), Some(table)) = (zone.redis.as_ref(), zone.table.as_ref()) else {
            continue;
        };
        if zone.header.is_null() {
            continue;
        }
        let job = Job {
            name: zone.name_str().into_owned(),
            target: RedisTarget::from_params(r),
            sync_ms: r.sync_ms,
            window: zone.window,
            table,
            header: zone.header,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("rlw-sync-{}", job.name))
            .spawn(move || run(job, &flag));
        if let Ok(handle) = spawned {
            threads.push((stop, handle));
        }
    }
}

/// Stops and joins every sync thread (worker exit, including reload).
pub fn stop_all() {
    let Ok(mut threads) = THREADS.lock() else {
        return;
    };
    for (stop, _) in threads.iter() {
        stop.store(true, Ordering::Relaxed);
    }
    for (_, handle) in threads.drain(..) {
        let _ = handle.join();
    }
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Sleeps `ms`, waking early when asked to stop. Returns false on stop.
fn nap(ms: u64, stop: &AtomicBool) -> bool {
    let mut left = ms;
    while left > 0 {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let step = left.min(50);
        std::thread::sleep(Duration::from_millis(step));
        left -= step;
    }
    !stop.load(Ordering::Relaxed)
}

/// How long a lease holder may stay silent before another process takes
/// the lease over (it died without releasing it), in ms.
fn lease_timeout_ms(sync_ms: u64) -> u64 {
    (sync_ms * 5).max(3_000)
}

/// Holds, takes, or asks for the sync lease. Returns true if this process
/// may run a round now.
fn hold_lease(header: &ZoneHeader, me: u64, now: u64, sync_ms: u64) -> bool {
    let owner = header.sync_owner.load(Ordering::Acquire);
    if owner == me {
        return true;
    }
    if owner == 0 {
        return header
            .sync_owner
            .compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
    }
    // A newer generation (after a reload) asks the holder to step down at
    // its next round; a holder that died is replaced after a timeout.
    header.sync_handover.store(me, Ordering::Release);
    let beat = header.sync_heartbeat_ms.load(Ordering::Acquire);
    now.saturating_sub(beat) > lease_timeout_ms(sync_ms)
        && header
            .sync_owner
            .compare_exchange(owner, me, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
}

/// Gives the lease up if this process holds it.
fn release_lease(header: &ZoneHeader, me: u64) {
    let _ = header
        .sync_owner
        .compare_exchange(me, 0, Ordering::AcqRel, Ordering::Acquire);
}

fn run(job: Job, stop: &AtomicBool) {
    // SAFETY: see `Job`: both outlive this thread.
    let (table, header) = unsafe { (&*job.table, &*job.header) };
    // SAFETY: the ledger region was carved out of the zone for this table.
    let Some(ledger) =
        (unsafe { Ledger::over(header.ledger, header.ledger_len, table.capacity()) })
    else {
        return;
    };
    let me = u64::from(std::process::id());
    let mut conn: Option<Link> = None;
    let mut backoff = BACKOFF_MIN_MS;
    let mut pushes = Vec::new();

    while !stop.load(Ordering::Relaxed) {
        let started = epoch_ms();
        if !hold_lease(header, me, started, job.sync_ms) {
            if !nap(job.sync_ms, stop) {
                break;
            }
            continue;
        }
        header.sync_heartbeat_ms.store(started, Ordering::Release);
        let handover = header.sync_handover.load(Ordering::Acquire);
        if handover != 0 && handover != me {
            // A newer worker 0 (after a reload) takes over from here.
            header.sync_handover.store(0, Ordering::Release);
            release_lease(header, me);
            break;
        }
        let result = connect(&mut conn, &job.target)
            .and_then(|c| round(c, table, &ledger, &job, &mut pushes, started));
        match result {
            Ok(()) => {
                backoff = BACKOFF_MIN_MS;
                header.sync_rounds.fetch_add(1, Ordering::Relaxed);
                header.last_sync_ms.store(epoch_ms(), Ordering::Relaxed);
                header.down_since_ms.store(0, Ordering::Relaxed);
                let spent = epoch_ms().saturating_sub(started);
                if !nap(job.sync_ms.saturating_sub(spent), stop) {
                    break;
                }
            }
            Err(_) => {
                conn = None;
                header.sync_errors.fetch_add(1, Ordering::Relaxed);
                let _ = header.down_since_ms.compare_exchange(
                    0,
                    started.max(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                if !nap(backoff.max(job.sync_ms), stop) {
                    break;
                }
                backoff = (backoff * 2).min(BACKOFF_MAX_MS);
            }
        }
    }
    release_lease(header, me);
}

fn connect<'c>(
    conn: &'c mut Option<Link>,
    target: &RedisTarget,
) -> Result<&'c mut Link, LinkError> {
    if conn.as_ref().map_or(true, Link::is_broken) {
        let deadline = Instant::now() + Duration::from_millis(CONNECT_MS);
        *conn = Some(Link::open(target, deadline)?);
    }
    Ok(conn.as_mut().expect("connection was just set"))
}

/// One push/pull round for every client active in the current window.
fn round(
    conn: &mut Link,
    table: &Table<'static>,
    ledger: &Ledger<'static>,
    job: &Job,
    pushes: &mut Vec<Push>,
    now: u64,
) -> Result<(), LinkError> {
    pushes.clear();
    ledger.plan(table, now, pushes);
    let ttl_ms = job.window.ms() * 2;
    let deadline = Instant::now() + Duration::from_millis(job.sync_ms.max(1_000));
    for batch in pushes.chunks(BATCH) {
        let mut pipe = redis::pipe();
        for p in batch {
            let key = format!("rlw:{}:{}:{:014x}", job.name, p.window_index, p.fingerprint);
            pipe.cmd("INCRBY").arg(&key).arg(p.delta);
            pipe.cmd("PEXPIRE").arg(&key).arg(ttl_ms);
        }
        let replies = conn.exec(&pipe, deadline)?;
        for (p, reply) in batch.iter().zip(replies.chunks(2)) {
            if let redis::Value::Int(total) = reply[0] {
                ledger.settle(table, p, total, now);
            }
        }
    }
    Ok(())
}
