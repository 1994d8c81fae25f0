//! `state=FILE` on `rate_limit_window_zone`: the zone's clients, and its
//! overrides and bans, kept across a stop and a start (a reload keeps the
//! zone in memory anyway).
//!
//! * **Read** by the master when it formats a fresh zone (`init.rs`,
//!   `init_zone`): at start, and at a reload only for a zone that is new
//!   in it (an existing zone is adopted, its memory is newer than the
//!   file). A file that is missing is normal (the first start); one that
//!   cannot be read, is corrupt, truncated, of another version or written
//!   by another zone is logged at `error` and ignored: the zone starts
//!   empty and nginx starts. Under `nginx -t` what would be restored is
//!   shown on the terminal as well as logged.
//! * **Checked** before that, whether the workers can write it
//!   (`state_dir.rs`): an `[emerg]` otherwise.
//! * **Written** by worker 0 every 5 s (a cancelable timer) and
//!   by every worker when it exits (quit, stop, reload), atomically: the
//!   bytes go to `FILE.tmp`, are fsynced, and the temporary file is renamed
//!   over FILE (then the directory is fsynced). Writers take an exclusive
//!   `flock` on `FILE.lock` for the whole snapshot-write-rename, so the
//!   last writer's snapshot, which is the newest, is the file left; a
//!   writer killed at any point leaves FILE as it was (and releases the
//!   lock as it dies).
//!
//! Writing is in `state_write.rs`; the format and its checks are the
//! core's (`rate_limit_window_core::state`).

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nginx_sys::{ngx_log_t, ngx_uint_t, NGX_LOG_ERR, NGX_LOG_NOTICE, NGX_LOG_WARN};
use ngx::ngx_log_error;
use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::state::{self, check_identity, Identity, StateFile};

use crate::ffi::process::{log_and_show, now_ms};
use crate::zone::ZoneConf;

/// The level of what a restore did: shown on the terminal by `nginx -t`
/// too ([`log_and_show`]).
const NOTICE: ngx_uint_t = NGX_LOG_NOTICE as ngx_uint_t;

/// Sets `zone.state` from `state=FILE` as the core's parser took it
/// (`path`, None without it; already checked against `redis=`): a path
/// relative to nginx's prefix (`prefix`), as nginx resolves its own files.
pub fn configure(zone: &mut ZoneConf, path: Option<&[u8]>, prefix: &[u8]) {
    zone.state = path.map(|p| {
        let path = Path::new(std::ffi::OsStr::from_bytes(p));
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            Path::new(std::ffi::OsStr::from_bytes(prefix)).join(path)
        }
    });
}

/// The zone's identity, as a state file records it.
pub(crate) fn identity(zone: &ZoneConf) -> Identity {
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
    let bytes = match super::state_dir::read_regular(path, state_cap(zone)) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let text = format!(
                "rate_limit_window_zone \"{}\": no state file \"{}\" yet; the zone starts empty",
                zone.name,
                path.display()
            );
            log_and_show(NOTICE, log, &text);
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

/// The largest state file a zone reads (bytes): four times its size, 16
/// MiB at least (a file never holds more than the zone's clients and
/// overrides).
fn state_cap(zone: &ZoneConf) -> u64 {
    (zone.size as u64).saturating_mul(4).max(16 << 20)
}

/// "would restore" under `nginx -t`, "restored" otherwise.
fn restored_verb() -> &'static str {
    // SAFETY: a process-wide flag nginx sets before loading any
    // configuration.
    if unsafe { nginx_sys::ngx_test_config } != 0 {
        "would restore"
    } else {
        "restored"
    }
}

/// Puts a loaded file's clients into the zone's fresh table (formatted
/// with the file's seed), then its overrides and bans into the fresh
/// override table, and logs what was restored.
pub fn restore(zone: &ZoneConf, file: &StateFile, log: *mut ngx_log_t) {
    let now = now_ms();
    restore_clients(zone, file, now, log);
    restore_overrides(zone, file, now, log);
}

/// The file's clients and their counts (`now`: epoch ms).
fn restore_clients(zone: &ZoneConf, file: &StateFile, now: u64, log: *mut ngx_log_t) {
    let Some(table) = zone.table.as_ref() else {
        return;
    };
    match table.restore(&file.table, now) {
        Ok(r) => {
            let text = format!(
                "rate_limit_window_zone \"{}\": {} {} live clients from state file \"{}\" \
                 written {}s ago ({} could not be placed)",
                zone.name,
                restored_verb(),
                r.live,
                zone.state.as_deref().unwrap_or(Path::new("")).display(),
                now.saturating_sub(file.saved_ms) / 1000,
                r.dropped
            );
            log_and_show(NOTICE, log, &text);
        }
        Err(e) => {
            ngx_log_error!(
                NGX_LOG_ERR,
                log,
                "rate_limit_window_zone \"{}\": state file's clients not restored: {}; their \
                 counts start empty",
                zone.name,
                e
            );
        }
    }
}

/// What restoring a file's overrides did.
#[derive(Default)]
struct OverridesRestored {
    /// Entries now in the table.
    kept: usize,
    /// Entries whose ttl (or ban) ended while nginx was down.
    expired: usize,
    /// Entries that did not fit (`overrides=` smaller than the list).
    dropped: usize,
}

/// The file's overrides and bans (keyed by fingerprints of the file's
/// seed, which the zone's table was formatted with, so lookups find them);
/// those whose ttl passed (`now`: epoch ms) are dropped. A table smaller
/// than the list keeps what fits, said at `warn`.
fn restore_overrides(zone: &ZoneConf, file: &StateFile, now: u64, log: *mut ngx_log_t) {
    let Some(o) = zone.overrides.as_ref() else {
        return;
    };
    if file.overrides.is_empty() {
        return;
    }
    let seeded = zone.table.as_ref().is_some_and(|t| t.seed() == file.seed);
    if !seeded {
        // Never expected (the table takes the file's seed): entries keyed
        // by another seed would apply to the wrong clients.
        ngx_log_error!(
            NGX_LOG_ERR,
            log,
            "rate_limit_window_zone \"{}\": {} overrides of the state file not restored: the \
             zone's hash seed is not the file's",
            zone.name,
            file.overrides.len()
        );
        return;
    }
    let mut r = OverridesRestored::default();
    for &e in &file.overrides {
        match o.restore(e, now) {
            Ok(true) => r.kept += 1,
            Ok(false) => r.expired += 1,
            Err(_) => r.dropped += 1,
        }
    }
    log_overrides(zone, &r, o.capacity(), log);
}

/// Logs [`restore_overrides`]' outcome: `notice`, or `warn` when some did
/// not fit.
fn log_overrides(zone: &ZoneConf, r: &OverridesRestored, capacity: usize, log: *mut ngx_log_t) {
    let text = format!(
        "rate_limit_window_zone \"{}\": {} {} overrides and bans from state file \"{}\" \
         ({} expired while nginx was down)",
        zone.name,
        restored_verb(),
        r.kept,
        zone.state.as_deref().unwrap_or(Path::new("")).display(),
        r.expired
    );
    log_and_show(NOTICE, log, &text);
    if r.dropped != 0 {
        ngx_log_error!(
            NGX_LOG_WARN,
            log,
            "rate_limit_window_zone \"{}\": {} overrides and bans of the state file dropped: \
             overrides={} holds {} of the file's {}",
            zone.name,
            r.dropped,
            capacity,
            r.kept,
            r.kept + r.dropped
        );
    }
}
