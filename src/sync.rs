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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rate_limit_window_core::{Table, Window};

use crate::zone::{ZoneConf, ZoneHeader};

/// Largest number of keys per pipelined batch.
const BATCH: usize = 1000;
/// Reconnect backoff bounds (ms).
const BACKOFF_MIN_MS: u64 = 100;
const BACKOFF_MAX_MS: u64 = 5_000;
/// Socket timeouts: a slow Redis delays only the sync thread.
const IO_TIMEOUT: Duration = Duration::from_millis(1_000);

/// What a sync thread needs; all of it outlives the thread (the cycle's
/// configuration and the shared zone stay until the worker exits, and
/// `stop_all` joins the threads before that).
struct Job {
    name: String,
    url: String,
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
            url: r.url.clone(),
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

/// Per-client sync bookkeeping for the current window.
#[derive(Clone, Copy)]
struct Pushed {
    /// Requests admitted here and pushed to Redis.
    pushed: i64,
    /// Requests of other gateways already added to the local count.
    applied: i64,
}

fn run(job: Job, stop: &AtomicBool) {
    // SAFETY: see `Job`: both outlive this thread.
    let (table, header) = unsafe { (&*job.table, &*job.header) };
    let mut conn: Option<redis::Connection> = None;
    let mut state: HashMap<(u32, u64), Pushed> = HashMap::new();
    let mut state_window = 0u64;
    let mut backoff = BACKOFF_MIN_MS;

    while !stop.load(Ordering::Relaxed) {
        let started = epoch_ms();
        let result = connect(&mut conn, &job.url)
            .and_then(|c| round(c, table, &job, &mut state, &mut state_window, started));
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
}

fn connect<'c>(
    conn: &'c mut Option<redis::Connection>,
    url: &str,
) -> redis::RedisResult<&'c mut redis::Connection> {
    if conn.is_none() {
        let client = redis::Client::open(url)?;
        let c = client.get_connection_with_timeout(IO_TIMEOUT)?;
        c.set_read_timeout(Some(IO_TIMEOUT))?;
        c.set_write_timeout(Some(IO_TIMEOUT))?;
        *conn = Some(c);
    }
    Ok(conn.as_mut().expect("connection was just set"))
}

/// One push/pull round for every client active in the current window.
fn round(
    conn: &mut redis::Connection,
    table: &Table<'static>,
    job: &Job,
    state: &mut HashMap<(u32, u64), Pushed>,
    state_window: &mut u64,
    now: u64,
) -> redis::RedisResult<()> {
    let index = job.window.index(now);
    if *state_window != index {
        state.clear();
        *state_window = index;
    }
    let mut live: Vec<(u32, u64, u32)> = Vec::new();
    table.for_each_current(now, |slot, fp, current| live.push((slot, fp, current)));
    let ttl_ms = job.window.ms() * 2;

    for batch in live.chunks(BATCH) {
        let mut pipe = redis::pipe();
        let mut deltas = Vec::with_capacity(batch.len());
        for &(slot, fp, current) in batch {
            let st = state.get(&(slot, fp)).copied().unwrap_or(Pushed {
                pushed: 0,
                applied: 0,
            });
            let own = i64::from(current) - st.applied;
            let delta = own - st.pushed;
            let key = format!("rlw:{}:{}:{:014x}", job.name, index, fp);
            pipe.cmd("INCRBY").arg(&key).arg(delta);
            pipe.cmd("PEXPIRE").arg(&key).arg(ttl_ms).ignore();
            deltas.push(delta);
        }
        let totals: Vec<i64> = pipe.query(conn)?;
        for ((&(slot, fp, _), delta), total) in batch.iter().zip(deltas).zip(totals) {
            let mut st = state.get(&(slot, fp)).copied().unwrap_or(Pushed {
                pushed: 0,
                applied: 0,
            });
            st.pushed += delta;
            let others = (total - st.pushed).max(0);
            let add = others - st.applied;
            if add == 0 || table.add_current(slot, fp, now, add) {
                st.applied = others;
            }
            state.insert((slot, fp), st);
        }
    }
    Ok(())
}
