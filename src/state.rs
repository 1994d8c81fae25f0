//! `state=FILE` on `rate_limit_window_zone`: the zone's clients kept across
//! a stop and a start (a reload keeps the zone in memory anyway).
//!
//! * **Read** by the master when it formats a fresh zone (`zone.rs`
//!   `init_zone`): at start, and at a reload only for a zone that is new
//!   in it (an existing zone is adopted, its memory is newer than the
//!   file). A file that is missing is normal (the first start); one that
//!   cannot be read, is corrupt, truncated, of another version or written
//!   by another zone is logged at `error` and ignored: the zone starts
//!   empty and nginx starts.
//! * **Written** by worker 0 every [`EVERY_MS`] (a cancelable timer) and
//!   by every worker when it exits (quit, stop, reload), atomically: the
//!   bytes go to `FILE.tmp`, are fsynced, and the temporary file is renamed
//!   over FILE (then the directory is fsynced). Writers take an exclusive
//!   `flock` on `FILE.lock` for the whole snapshot-write-rename, so the
//!   last writer's snapshot, which is the newest, is the file left; a
//!   writer killed at any point leaves FILE as it was (and releases the
//!   lock as it dies).
//!
//! The format and its checks are the core's (`rate_limit_window_core::state`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use core::ptr;

use nginx_sys::{
    ngx_add_timer, ngx_cycle, ngx_cycle_t, ngx_event_t, ngx_exiting, ngx_log_t, ngx_msec_t,
    ngx_quit, ngx_terminate, NGX_LOG_ERR, NGX_LOG_INFO, NGX_LOG_NOTICE,
};
use ngx::http::HttpModuleMainConf;
use ngx::ngx_log_error;
use rate_limit_window_core::mode::Mode;
use rate_limit_window_core::state::{self, check_identity, Identity, StateFile};

use crate::util::now_ms;
use crate::zone::ZoneConf;
use crate::Module;

/// How often worker 0 writes the state files (ms): what a crash (kill -9,
/// power loss) can lose.
pub const EVERY_MS: ngx_msec_t = 5_000;

/// Reads `state=FILE` from a zone's parameters into `zone.state`: a path
/// relative to nginx's prefix (`prefix`), as nginx resolves its own files.
/// Err is the `[emerg]` text.
pub fn configure(zone: &mut ZoneConf, params: &[&[u8]], prefix: &[u8]) -> Result<(), String> {
    let (path, _) = state::take_state(params)?;
    let Some(path) = path else {
        return Ok(());
    };
    if zone.redis.is_some() {
        return Err(format!(
            "\"state=\" cannot be combined with \"redis=\" in zone \"{}\": the counts of a \
             redis= zone are kept in Redis across restarts",
            zone.name
        ));
    }
    let path = Path::new(std::ffi::OsStr::from_bytes(path));
    zone.state = Some(if path.is_absolute() {
        path.to_path_buf()
    } else {
        Path::new(std::ffi::OsStr::from_bytes(prefix)).join(path)
    });
    Ok(())
}

/// The zone's identity, as a state file records it.
fn identity(zone: &ZoneConf) -> Identity {
    Identity {
        zone: zone.name.as_bytes().to_vec(),
        key: zone.key_src.as_bytes().to_vec(),
        window_ms: zone.window.ms(),
        strict: zone.mode == Mode::Strict,
    }
}

/// The zone's state file, when it has one that can be restored: None (and
/// an `error` line, except for a file that does not exist yet) otherwise.
/// Called by the master for a zone it is about to format.
pub fn load(zone: &ZoneConf, log: *mut ngx_log_t) -> Option<StateFile> {
    let path = zone.state.as_ref()?;
    let refuse = |why: &dyn core::fmt::Display| {
        ngx_log_error!(
            NGX_LOG_ERR,
            log,
            "rate_limit_window_zone \"{}\": state file \"{}\" ignored: {}; the zone starts empty",
            zone.name,
            path.display(),
            why
        );
        None
    };
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            ngx_log_error!(
                NGX_LOG_NOTICE,
                log,
                "rate_limit_window_zone \"{}\": no state file \"{}\" yet; the zone starts empty",
                zone.name,
                path.display()
            );
            return None;
        }
        Err(e) => return refuse(&e),
    };
    let file = match state::decode(&bytes) {
        Ok(f) => f,
        Err(e) => return refuse(&e),
    };
    match check_identity(&file.identity, &identity(zone)) {
        Ok(()) => Some(file),
        Err(e) => refuse(&e),
    }
}

/// Puts a loaded file's clients into the zone's fresh table (formatted
/// with the file's seed) and logs what was restored.
pub fn restore(zone: &ZoneConf, file: &StateFile, log: *mut ngx_log_t) {
    let Some(table) = zone.table.as_ref() else {
        return;
    };
    let now = now_ms();
    match table.restore(&file.table, now) {
        Ok(r) => {
            ngx_log_error!(
                NGX_LOG_NOTICE,
                log,
                "rate_limit_window_zone \"{}\": restored {} live clients from state file \"{}\" \
             written {}s ago ({} could not be placed)",
                zone.name,
                r.live,
                zone.state.as_deref().unwrap_or(Path::new("")).display(),
                now.saturating_sub(file.saved_ms) / 1000,
                r.dropped
            );
        }
        Err(e) => {
            ngx_log_error!(
                NGX_LOG_ERR,
                log,
                "rate_limit_window_zone \"{}\": state file not restored: {}; the zone starts empty",
                zone.name,
                e
            );
        }
    }
}

/// What one write did.
struct Written {
    /// Slots saved (live clients and the used slots before them).
    slots: usize,
    /// File size, in bytes.
    bytes: usize,
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

/// Snapshots the zone and replaces its state file atomically (temporary
/// file, fsync, rename, fsync of the directory), under the writers' lock.
/// Ok(None): another writer holds the lock and `wait` is false.
fn write(zone: &ZoneConf, path: &Path, wait: bool) -> io::Result<Option<Written>> {
    let Some(table) = zone.table.as_ref() else {
        return Ok(None);
    };
    let Some(_lock) = lock(path, wait)? else {
        return Ok(None);
    };
    // The snapshot is taken under the lock: the last writer's is the newest.
    let now = now_ms();
    let file = StateFile {
        identity: identity(zone),
        seed: table.seed(),
        saved_ms: now,
        table: table.save(now),
        other: Vec::new(),
    };
    let bytes = state::encode(&file);
    let tmp = sibling(path, ".tmp");
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, path)?;
    sync_dir(path);
    Ok(Some(Written {
        slots: file.table.slots.len(),
        bytes: bytes.len(),
    }))
}

/// fsyncs the directory of `path`, so that the rename survives a power
/// loss (best effort: some file systems refuse it).
fn sync_dir(path: &Path) {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Ok(d) = File::open(dir.unwrap_or(Path::new("."))) {
        let _ = d.sync_all();
    }
}

/// Writes every zone's state file. `periodic`: the timer's write, which
/// skips a zone whose lock another writer holds, logs each write at `info`
/// and a failure once per episode; otherwise (exit) it waits for the lock
/// and logs every write at `notice`, every failure at `error`.
fn save_all(cycle: &ngx_cycle_t, periodic: bool) {
    let Some(mcf) = Module::main_conf(cycle) else {
        return;
    };
    for zone in mcf.zones() {
        let Some(path) = zone.state.as_ref() else {
            continue;
        };
        let t = Instant::now();
        let result = write(zone, path, !periodic);
        report(cycle.log, zone, path, result, t, periodic);
    }
}

thread_local! {
    /// Per zone name, the last periodic write failure logged (this
    /// process's event loop thread only).
    static FAILING: RefCell<HashMap<Vec<u8>, String>> = RefCell::new(HashMap::new());
}

/// Logs the outcome of one write (see [`save_all`]).
fn report(
    log: *mut ngx_log_t,
    zone: &ZoneConf,
    path: &Path,
    result: io::Result<Option<Written>>,
    t: Instant,
    periodic: bool,
) {
    let name = zone.name.as_bytes().to_vec();
    match result {
        Ok(Some(w)) => {
            let level = if periodic {
                NGX_LOG_INFO
            } else {
                NGX_LOG_NOTICE
            };
            let was = FAILING.with(|f| f.borrow_mut().remove(&name)).is_some();
            ngx_log_error!(
                if was { NGX_LOG_NOTICE } else { level },
                log,
                "rate_limit_window_zone \"{}\": state file \"{}\" written: {} slots, {} bytes, \
                 {} us",
                zone.name,
                path.display(),
                w.slots,
                w.bytes,
                t.elapsed().as_micros()
            );
        }
        Ok(None) => {}
        Err(e) => {
            let msg = e.to_string();
            let repeat = periodic
                && FAILING.with(|f| f.borrow_mut().insert(name, msg.clone())) == Some(msg.clone());
            if !repeat {
                ngx_log_error!(
                    NGX_LOG_ERR,
                    log,
                    "rate_limit_window_zone \"{}\": cannot write state file \"{}\": {}",
                    zone.name,
                    path.display(),
                    msg
                );
            }
        }
    }
}

/// The timer event of this process (only worker 0 arms it).
// SAFETY: an all-zero ngx_event_t is an idle event, which is how nginx
// allocates its own (ngx_pcalloc).
static mut EVENT: ngx_event_t = unsafe { core::mem::zeroed() };

/// Arms the periodic write, if a zone has a state file. Called from
/// `init_process` of worker 0 (or the single process).
pub fn start(cycle: &ngx_cycle_t, zones: &[*mut ZoneConf]) {
    // SAFETY: zone pointers come from the configuration pool, valid for
    // the cycle.
    if !zones.iter().any(|&z| unsafe { (*z).state.is_some() }) {
        return;
    }
    // SAFETY: EVENT is only touched by this process's event loop thread:
    // here at process start and in `tick`, which nginx calls from it.
    unsafe {
        let ev = ptr::addr_of_mut!(EVENT);
        (*ev).handler = Some(tick);
        (*ev).log = cycle.log;
        (*ev).set_cancelable(1);
        ngx_add_timer(ev, EVERY_MS);
    }
}

/// The timer handler: writes every state file (skipping one another
/// writer is busy with), then re-arms unless the process is exiting.
extern "C" fn tick(ev: *mut ngx_event_t) {
    // SAFETY: ngx_cycle is this worker's running cycle.
    save_all(unsafe { &*ngx_cycle }, true);
    // SAFETY: process-wide flags, written by the signal handler or the
    // event loop of this same process; ev is EVENT.
    unsafe {
        if ngx_exiting == 0 && ngx_quit == 0 && ngx_terminate == 0 {
            ngx_add_timer(ev, EVERY_MS);
        }
    }
}

/// Process exit (quit, stop, reload, respawn): every worker writes its
/// cycle's state files, waiting for the lock, so that the last worker to
/// exit leaves the newest counts.
pub fn save_at_exit(cycle: *mut ngx_cycle_t) {
    // SAFETY: nginx passes the exiting process's cycle, alive during the
    // call.
    if let Some(cycle) = unsafe { cycle.as_ref() } {
        save_all(cycle, false);
    }
}
