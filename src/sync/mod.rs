//! Cluster sync through Redis for zones with `redis=`.
//!
//! Requests never wait for Redis: every decision is made from the local
//! zone, as for any zone. One background thread per nginx instance and
//! Redis-backed zone (in worker 0, or the single process) runs a sync round
//! every `sync=` interval:
//!
//! 1. for every client active in the current window, write this gateway's
//!    own *absolute* count of the window under its gateway id
//!    (`HSET rlw:{ZONE:FP}:WINDOW GATEWAY COUNT`, with a `PEXPIRE` of two
//!    windows), only when it changed since the last write;
//! 2. read the hash (`HGETALL`): the other gateways' share is the sum of
//!    their fields; add what is new of it to the client's count here.
//!
//! A `DELETE` reset (`reset.rs`) queues the key's fingerprint in the zone
//! header; the next round first deletes its hashes of the current and
//! previous window and zeroes its share here.
//!
//! A write sets a value and never adds to one, so replaying a round, or part
//! of one, after a lost reply never moves a total past what the gateways
//! admitted. What was written and added per key is kept in a ledger in the
//! zone (core's `cluster::Ledger`) so that a new sync thread (after a reload
//! or respawn) continues without counting anything twice.
//!
//! **One owner.** Each sync thread draws a generation number from the zone
//! header when it starts; only the owning generation runs rounds, and the
//! sync only ever moves to a newer one (core's `cluster::claim`): the new
//! worker 0 after a reload asks for it and the old owner steps down within
//! 50 ms (it checks while it works, waits or backs off) and its thread
//! exits; an owner that died is replaced once its heartbeat is older than
//! `lease_timeout_ms`. An older process can never take the sync back.
//!
//! **Bounded waits.** Connects (name resolution included) and each batch's
//! replies have deadlines (`redis_link.rs`), each checked on every read
//! with the stop flag, in every mode (`raw_conn.rs`, `cluster_link.rs`);
//! the whole round has one, and the stop flag and ownership are checked
//! between batches: a stop (quit, reload) waits about half a second at
//! most. The threads block every signal.
//!
//! The thread touches only shared-memory atomics (through the core's table
//! and the zone header) and its own socket: never an nginx API. When Redis
//! is down or slow, rounds fail, the gateways decide from local counts
//! (fail-open for the cluster part), errors are counted in the zone header
//! by kind, and worker 0 logs each outage and each change of owner once
//! (`log_changes`, from its sweep timer).
//!
//! Blocking I/O in a plain thread (the `redis` crate's commands and RESP
//! parser over the module's own bounded connections) was chosen over
//! nginx's event loop: the sync is a periodic batch job, so
//! blocking I/O off the request path is the simplest correct shape, and it
//! can never delay a request.
//!
//! Here: the thread and its owner (this file), a round's job and context
//! ([`ctx`]), one round ([`round`](mod@round)) and its measurements ([`round_stats`]),
//! the Redis connection ([`redis_link`]; a Redis Cluster's in
//! [`cluster_link`]), and the overrides the fleet
//! shares ([`fleet_overrides`]).

pub mod cluster_link;
pub mod cluster_map;
pub mod ctx;
pub mod denied;
pub mod fleet_overrides;
pub mod link_error;
pub mod node_conn;
pub mod ovr_calls;
pub mod raw_conn;
pub mod redis_link;
pub mod round;
pub mod round_stats;
pub mod tls;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nginx_sys::{ngx_log_t, NGX_LOG_ERR, NGX_LOG_NOTICE, NGX_LOG_WARN};
use ngx::ngx_log_error;
use rate_limit_window_core::cluster::fleet::{Diff, Profile};
use rate_limit_window_core::cluster::Claim;
use rate_limit_window_core::conf::redis_url::OutagePolicy;
use rate_limit_window_core::engine::outage::{in_force, Outage};

use crate::sync::ctx::{epoch_ms, Job, Owner, RoundCtx, RoundError, POLL_MS};
use crate::sync::redis_link::{Link, LinkError, LinkErrorKind, RedisTarget};
use crate::sync::round::{round, Done, RoundState};
use crate::sync::round_stats::Durations;
use crate::zone::{ZoneConf, ZoneHeader};

/// Reconnect backoff bounds (ms).
const BACKOFF_MIN_MS: u64 = 100;
const BACKOFF_MAX_MS: u64 = 1_000;
/// Longest a connect (name resolution included) may take (ms): also about
/// the longest a stop waits for a connect in flight.
const CONNECT_MS: u64 = 500;

/// Threads of this process: stop flag and handle.
static THREADS: Mutex<Vec<(Arc<AtomicBool>, JoinHandle<()>)>> = Mutex::new(Vec::new());

/// Starts one sync thread per Redis-backed zone.
pub fn start_all(zones: &[*mut ZoneConf]) {
    let Ok(mut threads) = THREADS.lock() else {
        return;
    };
    for zone in crate::zone::each(zones) {
        let (Some(r), Some((table, header))) = (zone.redis.as_ref(), zone.live()) else {
            continue;
        };
        let job = Job {
            name: zone.name.to_string(),
            target: RedisTarget::from_params(r),
            sync_ms: r.sync_ms,
            window: zone.window,
            profile: Profile::new(
                zone.name.as_bytes(),
                &r.secret,
                zone.window.ms(),
                &fleet_mode(zone),
            ),
            secret: r.secret.clone(),
            table,
            header,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let name = format!("rlw-sync-{}", job.name);
        if let Some(handle) = spawn_blocked(name, move || run(job, flag)) {
            threads.push((stop, handle));
        }
    }
}

/// Spawns a thread with every signal blocked from its first instruction:
/// signals are the event loop's (nginx's own thread pool does the same).
pub(crate) fn spawn_blocked<T: Send + 'static>(
    name: String,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<JoinHandle<T>> {
    // SAFETY: sigset_t is plain data that sigfillset initialises; the
    // calling thread's mask is restored right after the spawn, and a new
    // thread inherits the mask in force when it is created.
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let spawned = std::thread::Builder::new().name(name).spawn(f);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        spawned.ok()
    }
}

/// Stops and joins every sync thread (worker exit, including reload, and a
/// single-process reload before the old configuration goes). Each stops
/// within about a second (see the module doc).
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

/// Logs, once each, an outage of a zone's sync and a change of the
/// generation that owns it. Called by worker 0's sweep timer (and the
/// outage also by requests, see `request/logging.rs`): never by a sync thread.
pub fn log_changes(log: *mut ngx_log_t, zone: &ZoneConf, now_ms: u64) {
    let Some(header) = zone.header().filter(|_| zone.redis.is_some()) else {
        return;
    };
    if let Some(since) = header.outage_to_log() {
        log_outage(log, zone, header, now_ms.saturating_sub(since));
    }
    log_fleet(log, zone, header);
    log_misfits(log, zone, now_ms);
    denied::log(log, zone, header);
    log_ignored(log, zone, header);
    let owner = header.sync_owner.load(Ordering::Acquire);
    if owner != 0 && header.logged_owner.swap(owner, Ordering::Relaxed) != owner {
        ngx_log_error!(
            NGX_LOG_NOTICE,
            log,
            "rate_limit_window_zone \"{}\": redis sync now run by generation {}",
            zone.name_str(),
            owner
        );
    }
}

/// Logs the overrides read from the fleet that found no room here since
/// the last time, at most once a minute
/// (`rate_limit_window_overrides_misfit_total`).
fn log_misfits(log: *mut ngx_log_t, zone: &ZoneConf, now_ms: u64) {
    let Some(o) = zone.overrides.as_ref() else {
        return;
    };
    let Some(n) = o.misfits_to_log(now_ms) else {
        return;
    };
    ngx_log_error!(
        NGX_LOG_WARN,
        log,
        "rate_limit_window_zone \"{}\": {} override(s) of the fleet found no room in this \
         gateway's table (overrides={} full of operators' entries): they do not apply here; \
         raise \"overrides=\"",
        zone.name_str(),
        n,
        o.capacity()
    );
}

/// Logs, once, that override values read from Redis were ignored (never
/// a value: they may be anyone's).
fn log_ignored(log: *mut ngx_log_t, zone: &ZoneConf, header: &ZoneHeader) {
    let Some(n) = header.overrides().and_then(|o| o.ignored_to_log()) else {
        return;
    };
    ngx_log_error!(
        NGX_LOG_WARN,
        log,
        "rate_limit_window_zone \"{}\": {} override value(s) in redis are not this fleet's \
         (another \"secret=\", malformed, or changed without the secret) and are ignored; \
         they are counted in rate_limit_window_fleet_values_ignored_total",
        zone.name_str(),
        n
    );
}

/// Logs, once per episode, that gateways use this zone's name in Redis
/// with another secret, window or mode (never the secret itself).
fn log_fleet(log: *mut ngx_log_t, zone: &ZoneConf, header: &ZoneHeader) {
    let stats = &header.stats;
    let episode = stats.episode.load(Ordering::Relaxed);
    let diff = stats.diff.load(Ordering::Relaxed);
    if diff == 0 || stats.logged_episode.swap(episode, Ordering::Relaxed) == episode {
        return;
    }
    ngx_log_error!(
        NGX_LOG_WARN,
        log,
        "rate_limit_window_zone \"{}\": {} other gateway(s) use this zone name in redis with \
         another {}: they do not share counts with this gateway, so a client can get the limit \
         on each; give every gateway the same \"secret=\", \"window=\" and \"mode=\"",
        zone.name_str(),
        stats.mismatched.load(Ordering::Relaxed),
        Diff::describe(diff)
    );
}

/// Logs an outage of `for_ms` ms once: an `[error]` when its kind needs an
/// operator (credentials, TLS, unknown master, cluster down), a `[warn]`
/// otherwise. Never a password: the kind's fixed text only.
pub fn log_outage(log: *mut ngx_log_t, zone: &ZoneConf, header: &ZoneHeader, for_ms: u64) {
    let kind = LinkErrorKind::from_code(header.down_kind.load(Ordering::Relaxed));
    let what = kind.and_then(LinkErrorKind::needs_operator);
    let level = if what.is_some() {
        NGX_LOG_ERR
    } else {
        NGX_LOG_WARN
    };
    let policy = zone
        .redis
        .as_ref()
        .map_or(OutagePolicy::Local, |r| r.outage);
    let deciding = match policy {
        OutagePolicy::Local => {
            "deciding from this gateway's counts only (fail-open for the cluster part, \
             redis_outage=local)"
        }
        OutagePolicy::Share => {
            "each gateway enforces its share of every limit, the limit divided by the gateways \
             seen in the last minute (redis_outage=share)"
        }
        OutagePolicy::Closed => "refusing the requests that need the fleet (redis_outage=closed)",
    };
    ngx_log_error!(
        level,
        log,
        "rate_limit_window_zone \"{}\": redis sync failing for {} ms{}{}; {}; errors are \
         counted in metrics",
        zone.name_str(),
        for_ms,
        if what.is_some() { ": " } else { "" },
        what.unwrap_or(""),
        deciding
    );
}

/// `redis_outage=` in force for `zone` now (the request path: nothing for
/// a zone without `redis=` or with `redis_outage=local`; else two relaxed
/// loads of its header).
#[inline(always)]
pub fn outage_of(zone: &ZoneConf) -> Outage {
    let Some(r) = zone
        .redis
        .as_ref()
        .filter(|r| r.outage != OutagePolicy::Local)
    else {
        return Outage::None;
    };
    let Some(h) = zone.header() else {
        return Outage::None;
    };
    let down = h.down_since_ms.load(Ordering::Relaxed) != 0;
    in_force(r.outage, down, h.stats.peers.load(Ordering::Relaxed))
}

fn run(job: Job, flag: Arc<AtomicBool>) {
    let stop: &AtomicBool = &flag;
    let (table, header) = (job.table, job.header);
    let Some(ledger) = header.ledger(table.capacity()) else {
        return;
    };
    let owner = Owner::new(header, job.sync_ms);
    // The overrides' sync: a thread of its own (its own connection and
    // budget: it never delays nor fails a count round), joined here.
    let done = AtomicBool::new(false);
    let ctx = RoundCtx {
        table,
        ledger: &ledger,
        job: &job,
        owner: &owner,
        stop,
    };
    std::thread::scope(|sc| {
        let overrides = std::thread::Builder::new()
            .name(format!("rlw-ovr-{}", job.name))
            .spawn_scoped(sc, || fleet_overrides::run(&ctx, &done, &flag));
        count_rounds(&ctx, &flag);
        done.store(true, Ordering::Relaxed);
        drop(overrides);
    });
    owner.release();
}

/// The count rounds, while this thread owns the sync.
fn count_rounds(ctx: &RoundCtx<'_>, flag: &Arc<AtomicBool>) {
    let (job, header, owner, stop) = (ctx.job, ctx.job.header, ctx.owner, ctx.stop);
    let mut conn: Option<Link> = None;
    let mut backoff = BACKOFF_MIN_MS;
    let mut state = RoundState::default();
    let mut durations = Durations::default();
    while !stop.load(Ordering::Relaxed) {
        match owner.claim() {
            Claim::Held => {}
            Claim::Lost => break,
            _ => {
                std::thread::sleep(Duration::from_millis(POLL_MS));
                continue;
            }
        }
        let started = epoch_ms();
        let result = connect(&mut conn, &job.target, flag)
            .map_err(RoundError::from)
            .and_then(|c| round(c, ctx, &mut state, started));
        if let Some(d) = conn.as_mut().and_then(Link::take_denied) {
            denied::note(header, d);
        }
        let nap_ms = match result {
            Ok(done) => {
                backoff = BACKOFF_MIN_MS;
                round_done(header, &mut durations, &done, started);
                rest_of_interval(job.sync_ms, started)
            }
            Err(RoundError::Stopped) => break,
            // A call the stop interrupted: not a failure of Redis.
            Err(RoundError::Link(_)) if stop.load(Ordering::Relaxed) => break,
            Err(RoundError::Link(e)) => {
                conn = None;
                round_failed(header, &e, started);
                next_backoff(&mut backoff, job.sync_ms)
            }
        };
        if !owner.nap(nap_ms, stop) {
            break;
        }
    }
}

/// The nap after a round that worked (ms): the rest of the sync interval
/// `sync_ms` begun at `started` (epoch ms).
fn rest_of_interval(sync_ms: u64, started: u64) -> u64 {
    sync_ms.saturating_sub(epoch_ms().saturating_sub(started))
}

/// The nap after a failed round (ms): the backoff, at least the sync
/// interval `sync_ms`; the next failure's backoff doubles, up to
/// BACKOFF_MAX_MS (or the interval, if longer).
fn next_backoff(backoff: &mut u64, sync_ms: u64) -> u64 {
    let ms = (*backoff).max(sync_ms);
    *backoff = (*backoff * 2).min(BACKOFF_MAX_MS.max(sync_ms));
    ms
}

/// The measurements of a round that completed, started at `started`
/// (epoch ms).
fn round_done(header: &ZoneHeader, durations: &mut Durations, done: &Done, started: u64) {
    let stats = &header.stats;
    durations.add(stats, epoch_ms().saturating_sub(started));
    stats.last_pushed.store(done.pushed, Ordering::Relaxed);
    stats.last_read.store(done.read, Ordering::Relaxed);
    header.sync_rounds.fetch_add(1, Ordering::Relaxed);
    // The lag counts from the last round that visited every active client
    // (a round cut by its deadline resumes).
    if done.full {
        header.last_sync_ms.store(epoch_ms(), Ordering::Relaxed);
    }
    header.down_since_ms.store(0, Ordering::Relaxed);
}

/// A round that failed on its Redis link `e`, started at `started` (epoch
/// ms): counted, and the outage's start kept if it is the first.
fn round_failed(header: &ZoneHeader, e: &LinkError, started: u64) {
    count_error(header, e);
    let _ = header.down_since_ms.compare_exchange(
        0,
        started.max(1),
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
}

/// Counts a failed round (or override step), by kind.
pub(crate) fn count_error(header: &ZoneHeader, e: &LinkError) {
    header.sync_errors.fetch_add(1, Ordering::Relaxed);
    let by_kind = match e.kind {
        LinkErrorKind::Timeout => &header.sync_err_timeout,
        LinkErrorKind::Connection => &header.sync_err_connection,
        LinkErrorKind::Reply => &header.sync_err_reply,
        LinkErrorKind::Auth => &header.sync_err_auth,
        LinkErrorKind::Tls => &header.sync_err_tls,
        LinkErrorKind::Master => &header.sync_err_master,
        LinkErrorKind::ClusterDown => &header.sync_err_cluster_down,
    };
    by_kind.fetch_add(1, Ordering::Relaxed);
    header.down_kind.store(e.kind.code(), Ordering::Relaxed);
    if let Some(d) = e.denied {
        denied::note(header, d);
    }
}

fn connect<'c>(
    conn: &'c mut Option<Link>,
    target: &RedisTarget,
    stop: &Arc<AtomicBool>,
) -> Result<&'c mut Link, LinkError> {
    if conn.as_ref().is_none_or(Link::is_broken) {
        let deadline = Instant::now() + Duration::from_millis(CONNECT_MS);
        *conn = Some(Link::open_watched(target, deadline, stop)?);
    }
    Ok(conn.as_mut().expect("connection was just set"))
}

/// Queues fingerprint `fp` (never 0) in `slots`, lock-free, for the sync
/// thread: true when it is there (already queued, or put in a free slot,
/// 0), false when every slot holds another one.
pub fn enqueue(slots: &[core::sync::atomic::AtomicU64], fp: u64) -> bool {
    use core::sync::atomic::Ordering;
    slots.iter().any(|e| {
        e.load(Ordering::Relaxed) == fp
            || e.compare_exchange(0, fp, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    })
}

/// The rule a zone's fleet must share, as its profile's mode: `estimate`
/// or `strict`, or a calendar zone's time zone (`calendar:NAME`; its
/// period is in the window's length), so that gateways counting days in
/// two time zones are told apart.
fn fleet_mode(zone: &ZoneConf) -> String {
    match zone.window.calendar_of() {
        Some(c) => format!("calendar:{}", c.tz()),
        None => zone.mode.name().to_owned(),
    }
}
