//! Time: the wall clock, positions inside a window, polling with a
//! deadline, calendar formatting, and a faked clock for nginx under
//! libfaketime.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::nginx::{Nginx, NginxBuilder};
use super::upstream::Upstream;

pub fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// Sleeps until `now mod window` equals `offset_ms` (in the next occurrence).
/// Windows are aligned to the Unix epoch, so this positions a test at a known
/// point inside a window.
pub fn sleep_until_window_offset(window_ms: u128, offset_ms: u128) {
    let now = now_ms();
    let pos = now % window_ms;
    let wait = if pos <= offset_ms {
        offset_ms - pos
    } else {
        window_ms - pos + offset_ms
    };
    thread::sleep(Duration::from_millis(wait as u64));
}

/// Ensures at least `need_ms` remain before the next window boundary, so a
/// test that counts within one window is not split by a rollover.
pub fn clear_of_boundary(window_ms: u128, need_ms: u128) {
    let pos = now_ms() % window_ms;
    if window_ms - pos < need_ms {
        thread::sleep(Duration::from_millis((window_ms - pos + 50) as u64));
    }
}

/// Polls `f` until it returns true or `timeout` passes.
pub fn wait_for(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let d = Instant::now() + timeout;
    while Instant::now() < d {
        if f() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// A dedicated path to a faketime timestamp file; see tests/it/clock.rs.
pub fn libfaketime() -> Option<PathBuf> {
    for p in [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
        "/usr/local/lib/faketime/libfaketime.so.1",
    ] {
        if Path::new(p).exists() {
            return Some(PathBuf::from(p));
        }
    }
    None
}

pub fn strip_zero_fraction(s: &str) -> String {
    // "…:05.000Z" -> "…:05Z"
    if let Some(dot) = s.find('.') {
        let end = s[dot + 1..]
            .find(|c: char| !c.is_ascii_digit())
            .map(|i| dot + 1 + i)
            .unwrap_or(s.len());
        if s[dot + 1..end].chars().all(|c| c == '0') {
            return format!("{}{}", &s[..dot], &s[end..]);
        }
    }
    s.to_string()
}

pub fn civil(secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // Howard Hinnant's days-to-civil
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = if m <= 2 { y + 1 } else { y };
    (
        y,
        m,
        d,
        (rem / 3600) as u32,
        (rem % 3600 / 60) as u32,
        (rem % 60) as u32,
    )
}

pub fn rfc3339_utc(secs: i64) -> String {
    let (y, mo, d, h, mi, s) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

pub fn rfc3339_offset(secs: i64, offset: i64) -> String {
    let (y, mo, d, h, mi, s) = civil(secs + offset);
    let sign = if offset < 0 { '-' } else { '+' };
    let o = offset.abs();
    format!(
        "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{sign}{:02}:{:02}",
        o / 3600,
        o % 3600 / 60
    )
}

/// A frozen clock for nginx under libfaketime, set by rewriting a
/// timestamp file that holds Unix seconds (`FAKETIME_FMT=%s`), so the time
/// is the same instant whatever TZ says (a formatted date would be read as
/// local time, which is ambiguous in a repeated DST hour).
pub struct FakeClock {
    _dir: tempfile::TempDir,
    file: PathBuf,
}

impl FakeClock {
    pub fn new(start: i64) -> FakeClock {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("faketime.rc");
        let c = FakeClock { _dir: dir, file };
        c.set(start);
        c
    }

    /// The timestamp file, for `FAKETIME_TIMESTAMP_FILE`.
    pub fn path(&self) -> &Path {
        &self.file
    }

    /// Freezes the clock nginx sees at `secs` (Unix time, UTC).
    pub fn set(&self, secs: i64) {
        let tmp = self.file.with_extension("tmp");
        fs::write(&tmp, format!("{secs}\n")).unwrap();
        fs::rename(&tmp, &self.file).unwrap();
    }
}

/// Starts nginx with libfaketime preloaded, reading `clock` on every clock
/// read (FAKETIME_NO_CACHE), with real monotonic time so nginx's timers
/// work, and TZ set to `tz`. Panics if libfaketime is missing (`make test`
/// installs the faketime package).
pub fn start_faked(clock: &FakeClock, up: &Upstream, tz: &str, conf: &str) -> Nginx {
    clock.builder().upstream_of(up).env("TZ", tz).start(conf)
}

impl FakeClock {
    /// A builder for nginx under libfaketime, frozen at this clock.
    pub fn builder(&self) -> NginxBuilder {
        faked_builder(&self.file).env("FAKETIME_FMT", "%s")
    }
}

/// nginx with libfaketime preloaded, reading `file` on every clock read
/// (FAKETIME_NO_CACHE), with real monotonic time so nginx's timers work.
fn faked_builder(file: &Path) -> NginxBuilder {
    let lib = libfaketime()
        .expect("libfaketime not installed: `make test` installs the faketime package");
    Nginx::builder()
        .env("LD_PRELOAD", lib.to_str().unwrap())
        .env("FAKETIME_TIMESTAMP_FILE", file.to_str().unwrap())
        .env("FAKETIME_NO_CACHE", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
}

/// A running clock for nginx under libfaketime: the real wall clock plus a
/// shift (a relative offset in the timestamp file, re-read on every clock
/// read) that only ever grows. A test jumps to a point of a window instead
/// of sleeping until it: for nginx the jump is time that passed, for the
/// test `now_ms` is the shifted clock. Monotonic time stays real.
#[derive(Clone)]
pub struct ShiftedClock(Arc<Shift>);

struct Shift {
    _dir: tempfile::TempDir,
    file: PathBuf,
    ms: AtomicU64,
}

impl Default for ShiftedClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ShiftedClock {
    /// Starts with no shift (nginx sees the real time).
    pub fn new() -> ShiftedClock {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("faketime.rc");
        let c = ShiftedClock(Arc::new(Shift {
            _dir: dir,
            file,
            ms: AtomicU64::new(0),
        }));
        c.write(0);
        c
    }

    fn write(&self, shift_ms: u64) {
        let tmp = self.0.file.with_extension("tmp");
        fs::write(
            &tmp,
            format!("+{}.{:03}\n", shift_ms / 1000, shift_ms % 1000),
        )
        .unwrap();
        fs::rename(&tmp, &self.0.file).unwrap();
        self.0.ms.store(shift_ms, Ordering::SeqCst);
    }

    /// The time nginx sees, in Unix milliseconds.
    pub fn now_ms(&self) -> u128 {
        now_ms() + self.0.ms.load(Ordering::SeqCst) as u128
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: u128) {
        self.write(self.0.ms.load(Ordering::SeqCst) + ms as u64);
    }

    /// Moves the clock forward to the next instant where `now mod window`
    /// equals `offset_ms`: `sleep_until_window_offset` without the sleep.
    pub fn jump_to_window_offset(&self, window_ms: u128, offset_ms: u128) {
        let pos = self.now_ms() % window_ms;
        self.advance(if pos <= offset_ms {
            offset_ms - pos
        } else {
            window_ms - pos + offset_ms
        });
    }

    /// Ensures at least `need_ms` remain before the next window boundary by
    /// jumping past it when fewer do: `clear_of_boundary` without the sleep.
    pub fn clear_of_boundary(&self, window_ms: u128, need_ms: u128) {
        let pos = self.now_ms() % window_ms;
        if window_ms - pos < need_ms {
            self.advance(window_ms - pos + 50);
        }
    }

    /// A builder for nginx under libfaketime, on this clock.
    pub fn builder(&self) -> NginxBuilder {
        faked_builder(&self.0.file)
    }
}
