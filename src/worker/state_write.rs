//! Writing the zones' state files (`state=`, see zone/state_file.rs): every
//! `rate_limit_window_state_interval` (5 s by default) by worker 0, in a thread so that the event loop never
//! waits for the scan, the disk or fsync (skipping a zone unchanged since
//! its last write), and by every worker at exit.
//!
//! A write takes an exclusive `flock` on `FILE.lock`, snapshots the table
//! (one atomic load per slot), writes `FILE.tmp`, fsyncs it, renames it
//! over FILE and fsyncs the directory. Under the lock writers follow one
//! another, so the file left is the last writer's, the newest snapshot;
//! a writer killed at any point leaves FILE whole (the rename is atomic)
//! and releases the lock as it dies.
//!
//! The writer thread has every signal blocked, reads only the shared
//! table and its own copies of the zone's name, identity and path, and
//! logs nothing: the event loop collects its outcome at the next tick (or
//! at exit, when it is joined before the configuration goes away).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nginx_sys::{
    ngx_cycle_t, ngx_event_t, ngx_log_t, ngx_msec_t, NGX_LOG_ERR, NGX_LOG_INFO, NGX_LOG_NOTICE,
};
use ngx::ngx_log_error;
use rate_limit_window_core::overrides::{Action, Entry, Overrides};
use rate_limit_window_core::state::{self, Identity, StateFile};
use rate_limit_window_core::{SavedTable, Table};

use crate::ffi::process::{now_ms, Timer};
use crate::zone::ZoneConf;

/// One zone's write, with everything the writer thread needs.
struct Job {
    /// Zone name, for the log.
    name: String,
    identity: Identity,
    /// The zone's table, in shared memory mapped for the whole cycle.
    table: &'static Table<'static>,
    /// The zone's override table, in the same shared memory.
    overrides: Option<Overrides<'static>>,
    path: PathBuf,
    /// Epoch ms of the snapshot (read on the event loop thread).
    now: u64,
    /// A periodic job: the digest of this process's last write of the
    /// zone, whose table and overrides are not written again while they
    /// are unchanged.
    last: Option<u64>,
}

/// What a write did.
enum Wrote {
    /// The file was replaced: slots, overrides and bytes written, the
    /// digest of what was saved.
    File {
        slots: usize,
        overrides: usize,
        bytes: usize,
        digest: u64,
    },
    /// Another writer held the lock (a periodic write skips then).
    Busy,
    /// The table and overrides are as at this process's last periodic
    /// write.
    Unchanged,
}

/// What one write did, for the log.
struct Outcome {
    name: String,
    path: PathBuf,
    result: io::Result<Wrote>,
    took: Duration,
}

/// The jobs of every zone of `cycle` with a state file (`periodic`: with
/// the digests of this process's last writes).
fn jobs(cycle: &ngx_cycle_t, periodic: bool) -> Vec<Job> {
    let zones = crate::zone::all_of(cycle);
    let now = now_ms();
    crate::zone::each(&zones)
        .filter_map(|z: &'static ZoneConf| {
            Some(Job {
                name: z.name_str().into_owned(),
                identity: crate::zone::state_file::identity(z),
                table: z.table.as_ref()?,
                overrides: z.overrides,
                path: z.state.clone()?,
                now,
                last: periodic
                    .then(|| LAST.with(|l| l.borrow().get(z.name.as_bytes()).copied()))
                    .flatten(),
            })
        })
        .collect()
}

/// `path` with `suffix` appended to its file name.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// Takes the writers' lock (`FILE.lock`, flock): blocking, or None at
/// once when another writer holds it and `wait` is false.
fn lock(path: &Path, wait: bool) -> io::Result<Option<File>> {
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(sibling(path, ".lock"))?;
    let op = libc::LOCK_EX | if wait { 0 } else { libc::LOCK_NB };
    loop {
        // SAFETY: flock on a descriptor we own; released when it closes
        // (or when this process dies).
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            return Ok(Some(f));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// Snapshots the table and replaces the file, under the writers' lock
/// (waited for, unless the job is periodic).
fn write(job: &Job) -> io::Result<Wrote> {
    let Some(_lock) = lock(&job.path, job.last.is_none())? else {
        return Ok(Wrote::Busy);
    };
    // Taken under the lock: the last writer's snapshot is the newest.
    let table = job.table.save(job.now);
    let overrides = job
        .overrides
        .map(|o| state::savable(o.iter(job.now)))
        .unwrap_or_default();
    let digest = digest(&table, &overrides);
    if job.last == Some(digest) {
        return Ok(Wrote::Unchanged);
    }
    let file = StateFile {
        identity: job.identity.clone(),
        seed: job.table.seed(),
        saved_ms: job.now,
        table,
        overrides,
        other: Vec::new(),
    };
    let bytes = state::encode(&file);
    let tmp = sibling(&job.path, ".tmp");
    // A new file every time (O_EXCL): mode 0600 whatever a leftover had,
    // and never through a link planted at that name.
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, &job.path)?;
    sync_dir(&job.path);
    Ok(Wrote::File {
        slots: file.table.slots.len(),
        overrides: file.overrides.len(),
        bytes: bytes.len(),
        digest,
    })
}

/// A digest of what a write saves: the table's used slots and the live
/// overrides (an override set, changed, removed or expired changes it).
fn digest(table: &SavedTable, overrides: &[Entry]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    (table.newest, &table.slots).hash(&mut h);
    for e in overrides {
        (e.fp, e.action.name(), e.expires_ms).hash(&mut h);
        if let Action::Limit(n) | Action::InFlight(n) = e.action {
            n.hash(&mut h);
        }
    }
    h.finish()
}

/// fsyncs the directory of `path`, so that the rename survives a power
/// loss (best effort: some file systems refuse it).
fn sync_dir(path: &Path) {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Ok(d) = File::open(dir.unwrap_or(Path::new("."))) {
        let _ = d.sync_all();
    }
}

/// Runs `jobs` one after another.
fn run(jobs: Vec<Job>) -> Vec<Outcome> {
    jobs.into_iter()
        .map(|job| {
            let t = Instant::now();
            let result = write(&job);
            Outcome {
                name: job.name,
                path: job.path,
                result,
                took: t.elapsed(),
            }
        })
        .collect()
}

thread_local! {
    /// The periodic writer thread, while one runs (event loop thread only).
    static WRITER: RefCell<Option<JoinHandle<Vec<Outcome>>>> = const { RefCell::new(None) };
    /// Per zone name, the last periodic write failure logged.
    static FAILING: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
    /// Per zone name, the digest of the table this process last wrote.
    static LAST: RefCell<HashMap<Vec<u8>, u64>> = RefCell::new(HashMap::new());
}

/// Logs one write's outcome. Periodic writes log at `info`, a failure
/// once per episode; exit writes at `notice`, every failure.
fn report(log: *mut ngx_log_t, o: Outcome, periodic: bool) {
    match o.result {
        Ok(Wrote::File {
            slots,
            overrides,
            bytes,
            digest,
        }) => {
            LAST.with(|l| l.borrow_mut().insert(o.name.clone().into_bytes(), digest));
            let was_failing = FAILING.with(|f| f.borrow_mut().remove(&o.name)).is_some();
            let level = if periodic && !was_failing {
                NGX_LOG_INFO
            } else {
                NGX_LOG_NOTICE
            };
            ngx_log_error!(
                level,
                log,
                "rate_limit_window_zone \"{}\": state file \"{}\" written: {} slots, {} overrides, \
                 {} bytes, {} us",
                o.name,
                o.path.display(),
                slots,
                overrides,
                bytes,
                o.took.as_micros()
            );
        }
        Ok(Wrote::Busy | Wrote::Unchanged) => {}
        Err(e) => {
            let msg = e.to_string();
            let again = FAILING.with(|f| f.borrow_mut().insert(o.name.clone(), msg.clone()));
            if !periodic || again.as_ref() != Some(&msg) {
                ngx_log_error!(
                    NGX_LOG_ERR,
                    log,
                    "rate_limit_window_zone \"{}\": cannot write state file \"{}\": {}",
                    o.name,
                    o.path.display(),
                    msg
                );
            }
        }
    }
}

/// Joins the periodic writer if it is done (or, with `wait`, whenever it
/// is) and logs its outcome. True when no writer runs any more.
fn collect(log: *mut ngx_log_t, wait: bool) -> bool {
    let Some(h) = WRITER.with(|w| w.borrow_mut().take()) else {
        return true;
    };
    if !wait && !h.is_finished() {
        WRITER.with(|w| *w.borrow_mut() = Some(h));
        return false;
    }
    for o in h.join().unwrap_or_default() {
        report(log, o, true);
    }
    true
}

thread_local! {
    /// The timer event of this process (only worker 0 arms it).
    static TIMER: Timer = const { Timer::new() };
    /// How often it fires (ms): `rate_limit_window_state_interval`, what a
    /// crash (kill -9, power loss) can lose.
    static EVERY_MS: Cell<ngx_msec_t> = const { Cell::new(0) };
}

/// Arms the periodic write, if a zone has a state file. Called from
/// `init_process` of worker 0 (or the single process).
/// `every_ms`: the write interval (ms).
pub fn start(cycle: &ngx_cycle_t, zones: &[*mut ZoneConf], every_ms: u64) {
    if !crate::zone::each(zones).any(|z| z.state.is_some()) {
        return;
    }
    let every_ms = every_ms as ngx_msec_t;
    EVERY_MS.with(|e| e.set(every_ms));
    TIMER.with(|t| t.arm(Some(tick), cycle.log, every_ms));
}

/// The timer handler: logs the last write's outcome and starts the next
/// (unless the last one still runs), then re-arms unless exiting.
extern "C" fn tick(_ev: *mut ngx_event_t) {
    if let Some(cycle) = crate::ffi::process::cycle() {
        if collect(cycle.log, false) {
            let jobs = jobs(cycle, true);
            let h = crate::sync::spawn_blocked("rlw-state".into(), move || run(jobs));
            WRITER.with(|w| *w.borrow_mut() = h);
        }
    }
    TIMER.with(|t| t.rearm(EVERY_MS.with(Cell::get)));
}

/// Joins the periodic writer, if one runs (before its configuration goes:
/// process exit, single-process reload).
pub fn join(log: *mut ngx_log_t) {
    collect(log, true);
}

/// Process exit (quit, stop, reload, respawn): joins the periodic writer,
/// then writes its cycle's state files, waiting for the lock, so that the
/// last worker to exit leaves the newest counts.
pub fn save_at_exit(cycle: *mut ngx_cycle_t) {
    // SAFETY: nginx passes the exiting process's cycle, alive during the
    // call.
    let Some(cycle) = (unsafe { cycle.as_ref() }) else {
        return;
    };
    join(cycle.log);
    for o in run(jobs(cycle, false)) {
        report(cycle.log, o, false);
    }
}
