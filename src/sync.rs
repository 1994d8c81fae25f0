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
//! replies have deadlines (`redis_link.rs`), the whole round has one, and
//! the stop flag and ownership are checked between batches: a stop (quit,
//! reload) waits about half a second at most. The threads block every signal.
//!
//! The thread touches only shared-memory atomics (through the core's table
//! and the zone header) and its own socket: never an nginx API. When Redis
//! is down or slow, rounds fail, the gateways decide from local counts
//! (fail-open for the cluster part), errors are counted in the zone header
//! by kind, and worker 0 logs each outage and each change of owner once
//! (`log_changes`, from its sweep timer).
//!
//! A client library (the `redis` crate, synchronous API) in a plain thread
//! was chosen over nginx's event loop: the sync is a periodic batch job, so
//! blocking I/O off the request path is the simplest correct shape, and it
//! can never delay a request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nginx_sys::{ngx_log_t, NGX_LOG_ERR, NGX_LOG_NOTICE, NGX_LOG_WARN};
use ngx::ngx_log_error;
use rate_limit_window_core::cluster::{claim, Claim, Ledger};
use rate_limit_window_core::fleet::{Diff, Profile};
use rate_limit_window_core::{Table, Window};

use crate::redis_link::{Link, LinkError, LinkErrorKind, RedisTarget};
use crate::sync_round::{round, RoundState};
use crate::sync_stats::Durations;
use crate::zone::{ZoneConf, ZoneHeader};

/// Reconnect backoff bounds (ms).
const BACKOFF_MIN_MS: u64 = 100;
const BACKOFF_MAX_MS: u64 = 1_000;
/// Longest a connect (name resolution included) may take (ms): also about
/// the longest a stop waits for a connect in flight.
const CONNECT_MS: u64 = 500;
/// How often a waiting thread, or a napping owner, checks the stop flag
/// and the ownership words, and the owner beats its heartbeat (ms).
const POLL_MS: u64 = 50;

/// What a sync thread needs; all of it outlives the thread (the cycle's
/// configuration and the shared zone stay until the worker exits, or until
/// a single-process reload, and `stop_all` joins the threads before that).
pub(crate) struct Job {
    pub name: String,
    target: RedisTarget,
    pub sync_ms: u64,
    pub window: Window,
    /// What this gateway publishes to the fleet hash (never the secret).
    pub profile: Profile,
    table: *const Table<'static>,
    header: *const ZoneHeader,
}

// SAFETY: the pointers refer to the cycle's configuration and to shared
// memory, both alive until the thread is joined (see `Job`); the table and
// header are only used through atomics.
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
            name: zone.name.to_string(),
            target: RedisTarget::from_params(r),
            sync_ms: r.sync_ms,
            window: zone.window,
            profile: Profile::new(
                zone.name.as_bytes(),
                &r.secret,
                zone.window.ms(),
                zone.mode.name(),
            ),
            table,
            header: zone.header,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let name = format!("rlw-sync-{}", job.name);
        if let Some(handle) = spawn_blocked(name, move || run(job, &flag)) {
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
/// outage also by requests, see `handler.rs`): never by a sync thread.
pub fn log_changes(log: *mut ngx_log_t, zone: &ZoneConf, now_ms: u64) {
    if zone.redis.is_none() || zone.header.is_null() {
        return;
    }
    // SAFETY: the header lives in the zone as long as the cycle.
    let header = unsafe { &*zone.header };
    if let Some(since) = header.outage_to_log() {
        log_outage(log, zone, header, now_ms.saturating_sub(since));
    }
    log_fleet(log, zone, header);
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
    ngx_log_error!(
        level,
        log,
        "rate_limit_window_zone \"{}\": redis sync failing for {} ms{}{}; deciding from this \
         gateway's counts only (fail-open for the cluster part); errors are counted in metrics",
        zone.name_str(),
        for_ms,
        if what.is_some() { ": " } else { "" },
        what.unwrap_or("")
    );
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// How long an owner may stay silent before a newer generation takes the
/// sync over (it died without releasing it), in ms. An owner beats at
/// least every second (between batches, and every `POLL_MS` while it
/// waits), so a live one is never replaced.
fn lease_timeout_ms(sync_ms: u64) -> u64 {
    (sync_ms * 5).max(3_000)
}

/// This thread's view of the ownership words.
pub(crate) struct Owner<'h> {
    pub header: &'h ZoneHeader,
    /// This thread's generation.
    me: u64,
    timeout_ms: u64,
}

impl Owner<'_> {
    /// Holds, takes, waits for, or has lost the sync.
    fn claim(&self) -> Claim {
        let h = self.header;
        let now = epoch_ms();
        let c = claim(
            h.sync_owner.load(Ordering::Acquire),
            h.sync_handover.load(Ordering::Acquire),
            h.sync_heartbeat_ms.load(Ordering::Acquire),
            self.me,
            now,
            self.timeout_ms,
        );
        match c {
            Claim::Take { from } => {
                let taken = h
                    .sync_owner
                    .compare_exchange(from, self.me, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok();
                if taken {
                    h.sync_heartbeat_ms.store(now, Ordering::Release);
                    Claim::Held
                } else {
                    Claim::Wait
                }
            }
            Claim::Held => {
                h.sync_heartbeat_ms.store(now, Ordering::Release);
                Claim::Held
            }
            other => other,
        }
    }

    /// Gives the sync up if this thread holds it.
    fn release(&self) {
        let _ = self.header.sync_owner.compare_exchange(
            self.me,
            0,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// True while the thread should go on: not stopped, and still the
    /// owner (beating the heartbeat).
    pub fn keep_on(&self, stop: &AtomicBool) -> bool {
        !stop.load(Ordering::Relaxed) && self.claim() == Claim::Held
    }

    /// Sleeps `ms` as the owner, beating and checking every `POLL_MS`.
    /// Returns false on stop or lost ownership.
    fn nap(&self, ms: u64, stop: &AtomicBool) -> bool {
        let until = Instant::now() + Duration::from_millis(ms);
        loop {
            if !self.keep_on(stop) {
                return false;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(left.min(Duration::from_millis(POLL_MS)));
        }
    }
}

/// Why a round ended early.
pub(crate) enum RoundError {
    Link(LinkError),
    /// Stopped, or lost the ownership, between batches.
    Stopped,
}

impl From<LinkError> for RoundError {
    fn from(e: LinkError) -> Self {
        RoundError::Link(e)
    }
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
    let owner = Owner {
        header,
        me: header.sync_generation.fetch_add(1, Ordering::AcqRel) + 1,
        timeout_ms: lease_timeout_ms(job.sync_ms),
    };
    header.sync_handover.fetch_max(owner.me, Ordering::AcqRel);
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
        let result = connect(&mut conn, &job.target)
            .map_err(RoundError::from)
            .and_then(|c| {
                let ctx = RoundCtx {
                    table,
                    ledger: &ledger,
                    job: &job,
                    owner: &owner,
                    stop,
                };
                round(c, &ctx, &mut state, started)
            });
        let nap_ms = match result {
            Ok(done) => {
                backoff = BACKOFF_MIN_MS;
                let stats = &header.stats;
                durations.add(stats, epoch_ms().saturating_sub(started));
                stats.last_pushed.store(done.pushed, Ordering::Relaxed);
                stats.last_read.store(done.read, Ordering::Relaxed);
                header.sync_rounds.fetch_add(1, Ordering::Relaxed);
                // The lag counts from the last round that visited every
                // active client (a round cut by its deadline resumes).
                if done.full {
                    header.last_sync_ms.store(epoch_ms(), Ordering::Relaxed);
                }
                header.down_since_ms.store(0, Ordering::Relaxed);
                job.sync_ms
                    .saturating_sub(epoch_ms().saturating_sub(started))
            }
            Err(RoundError::Stopped) => break,
            Err(RoundError::Link(e)) => {
                conn = None;
                count_error(header, &e);
                let _ = header.down_since_ms.compare_exchange(
                    0,
                    started.max(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                let ms = backoff.max(job.sync_ms);
                backoff = (backoff * 2).min(BACKOFF_MAX_MS.max(job.sync_ms));
                ms
            }
        };
        if !owner.nap(nap_ms, stop) {
            break;
        }
    }
    owner.release();
}

/// Counts a failed round, by kind.
fn count_error(header: &ZoneHeader, e: &LinkError) {
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
}

fn connect<'c>(
    conn: &'c mut Option<Link>,
    target: &RedisTarget,
) -> Result<&'c mut Link, LinkError> {
    if conn.as_ref().is_none_or(Link::is_broken) {
        let deadline = Instant::now() + Duration::from_millis(CONNECT_MS);
        *conn = Some(Link::open(target, deadline)?);
    }
    Ok(conn.as_mut().expect("connection was just set"))
}

/// What a round works on.
pub(crate) struct RoundCtx<'a> {
    pub table: &'a Table<'static>,
    pub ledger: &'a Ledger<'static>,
    pub job: &'a Job,
    pub owner: &'a Owner<'a>,
    pub stop: &'a AtomicBool,
}
