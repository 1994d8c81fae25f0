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

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nginx_sys::{ngx_log_t, NGX_LOG_ERR, NGX_LOG_NOTICE};
use ngx::ngx_log_error;
use rate_limit_window_core::mode::Mode;
use rate_limit_window_core::state::{self, check_identity, Identity, StateFile};

use crate::util::now_ms;
use crate::zone::ZoneConf;

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
            // SAFETY: a process-wide flag nginx sets before loading any
            // configuration.
            let what = if unsafe { nginx_sys::ngx_test_config } != 0 {
                "would restore"
            } else {
                "restored"
            };
            ngx_log_error!(
                NGX_LOG_NOTICE,
                log,
                "rate_limit_window_zone \"{}\": {} {} live clients from state file \"{}\" \
                 written {}s ago ({} could not be placed)",
                zone.name,
                what,
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
