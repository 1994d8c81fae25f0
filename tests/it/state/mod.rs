//! `state=FILE`: a zone's counts across a stop and a start of real nginx
//! (2 workers), and windows up to 31 days with exact headers.
//!
//! A restart here is a real one: the master quits (SIGQUIT), is stopped
//! (SIGTERM) or is killed with its workers (SIGKILL), and a new master is
//! started on the same state file, so its zone is fresh memory that only
//! the file can fill. Time-dependent tests freeze the clock with
//! libfaketime (tests/it/common/clock.rs).
use crate::common;

use std::ffi::CString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use common::*;

mod nginx_t;
mod not_regular;
mod overrides;

/// 2024-01-01T00:00:00Z, a day boundary.
const T0: i64 = 1_704_067_200;
const DAY: i64 = 86_400;

/// One site whose nginx is started again and again on one state file.
struct Site {
    up: Upstream,
    dir: tempfile::TempDir,
    clock: Option<FakeClock>,
}

impl Site {
    fn new(clock: Option<i64>) -> Site {
        let dir = tempfile::tempdir().unwrap();
        // The workers write the file (as `nobody` under a root master):
        // its directory must be writable by them.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        Site {
            up: Upstream::start(),
            dir,
            clock: clock.map(FakeClock::new),
        }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("z.state")
    }

    /// nginx with zone `z` (`zone_args` after the key) limited to `limit`.
    fn start(&self, zone_args: &str, limit: u32) -> Nginx {
        let conf = self.conf(zone_args, limit);
        match &self.clock {
            Some(c) => start_faked(c, &self.up, "UTC", &conf),
            None => Nginx::builder().upstream_of(&self.up).start(&conf),
        }
    }

    /// The configuration [`Site::start`] runs.
    fn conf(&self, zone_args: &str, limit: u32) -> String {
        proxy_conf(
            &format!(
                "rate_limit_window_zone $http_x_key zone=z:1m {zone_args} state={};",
                self.state().display()
            ),
            "",
            "",
            &format!("rate_limit_window zone=z limit={limit}; rate_limit_window_headers on;"),
        )
    }

    fn set_clock(&self, secs: i64) {
        self.clock.as_ref().expect("a faked clock").set(secs);
    }
}

/// Requests of `key` admitted until the first rejection (at most 100),
/// and that rejection.
pub(crate) fn admitted(ng: &Nginx, key: &str) -> (usize, Response) {
    for n in 0..100 {
        let r = get_key(ng.port, "/", key);
        if r.status != 200 {
            assert_eq!(r.status, 429, "{}", r.describe());
            return (n, r);
        }
    }
    panic!("{key} was never rejected");
}

/// Sends `n` requests of `key`, every one admitted.
fn send(ng: &Nginx, key: &str, n: usize) {
    for _ in 0..n {
        let r = get_key(ng.port, "/", key);
        assert_eq!(r.status, 200, "{}", r.describe());
    }
}

fn alive(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit_once(')')
                .map(|x| x.1)
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// Sends `sig` to the master and waits until it and its workers are gone.
fn shut(ng: &Nginx, sig: i32) -> String {
    let master = ng.master_pid();
    let workers = ng.worker_pids();
    assert_eq!(workers.len(), 2);
    // SAFETY: kill(2) only sends a signal to a pid.
    unsafe { libc::kill(master, sig) };
    let gone = wait_for(Duration::from_secs(10), || {
        !alive(master) && workers.iter().all(|&w| !alive(w))
    });
    assert!(gone, "nginx did not exit on signal {sig}");
    ng.error_log()
}

/// SIGKILL to the master, then to every worker: nothing is written at
/// exit (the master goes first, so that it logs no worker's death).
fn kill_9(ng: &Nginx) {
    let master = ng.master_pid();
    let mut pids = ng.worker_pids();
    assert_eq!(pids.len(), 2);
    // SAFETY: kill(2) only sends a signal to a pid.
    unsafe { libc::kill(master, libc::SIGKILL) };
    assert!(wait_for(Duration::from_secs(5), || !alive(master)));
    for &p in &pids {
        // SAFETY: kill(2) only sends a signal to a pid.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    pids.push(master);
    assert!(wait_for(Duration::from_secs(5), || pids
        .iter()
        .all(|&p| !alive(p))));
}

fn mode_of(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// A client at its limit stays at it across a quit and a start, and a
/// client half way keeps its half; the file is private (0600).
#[test]
fn quit_and_start_keep_counts() {
    let site = Site::new(None);
    let ng = site.start("window=1h", 5);
    clear_of_boundary(3_600_000, 30_000);
    assert_eq!(admitted(&ng, "full").0, 5);
    send(&ng, "half", 2);
    let log = shut(&ng, libc::SIGQUIT);
    // Both workers wrote at exit, one after the other (the lock): the
    // file left is whole, as the restart below shows.
    let exits = log
        .lines()
        .filter(|l| l.contains("[notice]") && l.contains("written:"))
        .count();
    assert_eq!(exits, 2, "{log}");
    assert_eq!(mode_of(&site.state()), 0o600);
    drop(ng);
    // What a writer killed before its rename leaves: never read.
    fs::write(site.state().with_extension("state.tmp"), b"half a fi").unwrap();

    let ng = site.start("window=1h", 5);
    let log = ng.error_log();
    assert!(log.contains("restored 2 live clients"), "{log}");
    assert_eq!(
        admitted(&ng, "full").0,
        0,
        "at its limit before the restart"
    );
    assert_eq!(admitted(&ng, "half").0, 3);
    assert_eq!(admitted(&ng, "new").0, 5);
    // The next writes replaced the leftover (renamed away) and kept 0600.
    shut(&ng, libc::SIGQUIT);
    assert!(!site.state().with_extension("state.tmp").exists());
    assert_eq!(mode_of(&site.state()), 0o600);
}

/// A reload adopts the zone in memory: the file is not read (no
/// "restored" line), the counts are the live ones, and the new worker 0
/// goes on writing the file.
#[test]
fn reload_does_not_read_the_file() {
    let site = Site::new(None);
    let mut ng = site.start("window=1h", 5);
    clear_of_boundary(3_600_000, 30_000);
    send(&ng, "a", 3);
    let off = ng.error_log_len();
    ng.reload();
    send(&ng, "a", 1);
    let written = wait_for(Duration::from_secs(16), || {
        let log = ng.error_log_since(off);
        log.lines().filter(|l| l.contains("written:")).count() >= 3
    });
    let log = ng.error_log_since(off);
    assert!(
        written,
        "old workers at exit, then the new worker 0:\n{log}"
    );
    assert!(
        !log.contains("restored") && !log.contains("starts empty"),
        "{log}"
    );
    assert_eq!(admitted(&ng, "a").0, 1);
}

/// A strict zone's clients too (their own slot words).
#[test]
fn strict_zone_keeps_counts() {
    let site = Site::new(None);
    let ng = site.start("window=1h mode=strict", 4);
    clear_of_boundary(600_000, 30_000);
    assert_eq!(admitted(&ng, "a").0, 4);
    send(&ng, "b", 1);
    shut(&ng, libc::SIGQUIT);
    drop(ng);
    let ng = site.start("window=1h mode=strict", 4);
    assert_eq!(admitted(&ng, "a").0, 0);
    assert_eq!(admitted(&ng, "b").0, 3);
}

/// The same through `nginx -s stop` (SIGTERM: workers exit at once).
#[test]
fn stop_and_start_keep_counts() {
    let site = Site::new(None);
    let ng = site.start("window=1h", 4);
    clear_of_boundary(3_600_000, 30_000);
    send(&ng, "a", 3);
    shut(&ng, libc::SIGTERM);
    // `nginx -t` reads the file and says (in the log) what a start would
    // restore.
    let off = ng.error_log_len();
    let t = std::process::Command::new(nginx_bin())
        .arg("-t")
        .arg("-p")
        .arg(ng.prefix())
        .args(["-c", "conf/nginx.conf"])
        .output()
        .unwrap();
    assert!(t.status.success());
    let log = ng.error_log_since(off);
    assert!(log.contains("would restore 1 live clients"), "{log}");
    drop(ng);
    let ng = site.start("window=1h", 4);
    assert_eq!(admitted(&ng, "a").0, 1);
}

/// Without any exit write (kill -9 of master and workers), the periodic
/// write keeps the counts up to its last run; a zone unchanged since its
/// last write is not written again.
#[test]
fn periodic_write_survives_kill_9() {
    use std::os::unix::fs::MetadataExt;
    let site = Site::new(None);
    let conf = site
        .conf("window=1h", 6)
        .replace("http {", "http {\n    rate_limit_window_state_interval 1s;");
    let ng = site.start_conf(&conf);
    clear_of_boundary(3_600_000, 60_000);
    send(&ng, "a", 4);
    let off = ng.error_log_len();
    let writes = || {
        ng.error_log_since(off)
            .lines()
            .filter(|l| l.contains("written:"))
            .count()
    };
    // The timer fires every second (`rate_limit_window_state_interval
    // 1s`, not the default 5 s); a write is logged at the tick after it.
    assert!(
        wait_for(Duration::from_millis(3_500), || writes() == 1),
        "no periodic write within 3.5 s:\n{}",
        ng.error_log()
    );
    let inode = fs::metadata(site.state()).unwrap().ino();
    // Two more ticks without a request: the file stays as it is.
    thread::sleep(Duration::from_millis(2_500));
    assert_eq!(writes(), 1, "{}", ng.error_log_since(off));
    assert_eq!(fs::metadata(site.state()).unwrap().ino(), inode);
    send(&ng, "a", 1);
    assert!(wait_for(Duration::from_millis(3_500), || writes() == 2));
    kill_9(&ng);
    drop(ng);
    let ng = site.start("window=1h", 6);
    assert_eq!(admitted(&ng, "a").0, 1);
}

/// `rate_limit_window_state_interval`: whole seconds from 1s to 1h, given
/// once, in http{}.
#[test]
fn state_interval_values_are_checked() {
    let site = Site::new(None);
    let with = |line: &str| {
        site.conf("window=1h", 6)
            .replace("http {", &format!("http {{\n    {line}"))
    };
    for good in ["1s", "30", "1h"] {
        let (ok, out) = test_config(&with(&format!("rate_limit_window_state_interval {good};")));
        assert!(ok, "{good}: {out}");
    }
    for bad in ["0", "500ms", "1500ms", "2h", "5x"] {
        let (ok, out) = test_config(&with(&format!("rate_limit_window_state_interval {bad};")));
        assert!(!ok, "{bad} accepted");
        assert!(
            out.contains(&format!(
                "invalid rate_limit_window_state_interval \"{bad}\": whole seconds from 1s to 1h"
            )),
            "{bad}: {out}"
        );
    }
    let (ok, out) = test_config(&with(
        "rate_limit_window_state_interval 1s; rate_limit_window_state_interval 2s;",
    ));
    assert!(
        !ok && out.contains("\"rate_limit_window_state_interval\" directive is duplicate"),
        "{out}"
    );
    let (ok, out) = test_config(&site.conf("window=1h", 6).replace(
        "rate_limit_window zone=z",
        "rate_limit_window_state_interval 1s; rate_limit_window zone=z",
    ));
    assert!(
        !ok && out.contains("directive is not allowed here"),
        "{out}"
    );
}

/// Counts more than a window old at the restart are dropped: a client at
/// its limit gets its whole limit again.
#[test]
fn counts_older_than_a_window_are_dropped() {
    let site = Site::new(Some(T0 + 100));
    let ng = site.start("window=1m", 3);
    assert_eq!(admitted(&ng, "a").0, 3);
    shut(&ng, libc::SIGQUIT);
    drop(ng);
    // Two windows on: the counts carry no weight any more.
    site.set_clock(T0 + 100 + 120);
    let ng = site.start("window=1m", 3);
    assert!(ng.error_log().contains("restored 0 live clients"));
    assert_eq!(admitted(&ng, "a").0, 3);
    shut(&ng, libc::SIGQUIT);
    drop(ng);
    // One window on, 10 s into it: the previous count weighs 50/60,
    // 3 * 5/6 = 2.5, so one more is admitted (2.5 < 3), not two (3.5).
    let ng = site.start("window=1m", 3);
    assert_eq!(admitted(&ng, "b").0, 3);
    shut(&ng, libc::SIGQUIT);
    drop(ng);
    site.set_clock(T0 + 250);
    let ng = site.start("window=1m", 3);
    assert_eq!(admitted(&ng, "b").0, 1);
}

/// A day window across a restart: Retry-After (and a refusal's
/// RateLimit-Reset, the same moment) exact
/// to the second, before and after, and the client gets in at that second.
#[test]
fn day_window_across_restart() {
    let site = Site::new(Some(T0 + 10 * 3600));
    let ng = site.start("window=1d", 3);
    let (n, r) = admitted(&ng, "a");
    assert_eq!(n, 3);
    // The current count leaves its full weight 1 ms into the next window;
    // a refusal's reset is its Retry-After.
    assert_eq!(r.header_num("RateLimit-Reset"), 14 * 3600 + 1);
    assert_eq!(r.header_num("Retry-After"), 14 * 3600 + 1);
    shut(&ng, libc::SIGQUIT);
    drop(ng);

    site.set_clock(T0 + 12 * 3600);
    let ng = site.start("window=1d", 3);
    let (n, r) = admitted(&ng, "a");
    assert_eq!(n, 0, "the day's quota survived the restart");
    assert_eq!(r.header_num("RateLimit-Reset"), 12 * 3600 + 1);
    assert_eq!(r.header_num("Retry-After"), 12 * 3600 + 1);
    site.set_clock(T0 + DAY);
    assert_eq!(get_key(ng.port, "/", "a").status, 429, "3 * 1 = 3, not < 3");
    site.set_clock(T0 + DAY + 1);
    assert_eq!(get_key(ng.port, "/", "a").status, 200);
}

/// `window=31d` (a monthly quota): exact headers, and the month's count
/// kept across a restart.
#[test]
fn month_window_headers_exact_across_restart() {
    let month = 31 * DAY;
    let start = T0 - T0.rem_euclid(month) + month; // a window start
    let site = Site::new(Some(start + DAY));
    let ng = site.start("window=31d", 2);
    let (n, r) = admitted(&ng, "a");
    assert_eq!(n, 2);
    // A refusal's reset is its Retry-After (the same moment).
    assert_eq!(r.header_num("RateLimit-Reset"), 30 * DAY + 1);
    assert_eq!(r.header_num("Retry-After"), 30 * DAY + 1);
    shut(&ng, libc::SIGQUIT);
    drop(ng);
    site.set_clock(start + 20 * DAY);
    let ng = site.start("window=31d", 2);
    let (n, r) = admitted(&ng, "a");
    assert_eq!(n, 0);
    assert_eq!(r.header_num("RateLimit-Reset"), 11 * DAY + 1);
    assert_eq!(r.header_num("Retry-After"), 11 * DAY + 1);
    site.set_clock(start + month + 1);
    assert_eq!(get_key(ng.port, "/", "a").status, 200);
}

/// A state file that is corrupt, truncated, foreign or not one at all:
/// an `[error]` that says why, nginx starts, and the zone starts empty.
#[test]
fn bad_state_files_are_logged_and_ignored() {
    let site = Site::new(None);
    let ng = site.start("window=1h", 2);
    clear_of_boundary(3_600_000, 60_000);
    assert_eq!(admitted(&ng, "a").0, 2);
    shut(&ng, libc::SIGQUIT);
    drop(ng);
    let good = fs::read(site.state()).unwrap();
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x10;
    let cases: [(&str, Vec<u8>, &str, &str); 4] = [
        ("corrupt", flipped, "window=1h", "checksum mismatch"),
        (
            "truncated",
            good[..good.len() - 7].to_vec(),
            "window=1h",
            "truncated",
        ),
        (
            "foreign",
            good.clone(),
            "window=2h",
            "written by another zone",
        ),
        (
            "garbage",
            b"hello\n".to_vec(),
            "window=1h",
            "not a rate_limit_window state file",
        ),
    ];
    for (what, bytes, window, why) in cases {
        fs::write(site.state(), &bytes).unwrap();
        let ng = site.start(window, 2);
        let log = ng.error_log();
        let line = log
            .lines()
            .find(|l| l.contains("[error]") && l.contains("state file"))
            .unwrap_or_else(|| panic!("{what}: no [error] line:\n{log}"));
        assert!(
            line.contains(why) && line.contains("ignored"),
            "{what}: {line}"
        );
        assert_eq!(admitted(&ng, "a").0, 2, "{what}: the zone starts empty");
        shut(&ng, libc::SIGQUIT);
    }
    // The good file, put back, is restored (the cases above were refused
    // for what they were, not for something about this site).
    fs::write(site.state(), &good).unwrap();
    let ng = site.start("window=1h", 2);
    assert_eq!(admitted(&ng, "a").0, 0);
}

/// `state=` errors at `nginx -t`: an empty path, and `redis=` (whose
/// counts Redis keeps); a good one passes.
#[test]
fn state_parameter_is_checked_at_nginx_t() {
    let conf = |zone: &str| {
        proxy_conf(
            &format!("rate_limit_window_zone $http_x_key zone=z:1m {zone};"),
            "",
            "",
            "rate_limit_window zone=z limit=5;",
        )
    };
    let (ok, out) = test_config(&conf("state="));
    assert!(
        !ok && out.contains("invalid \"state=\": give the path"),
        "{out}"
    );
    let (ok, out) = test_config(&conf(
        "redis=127.0.0.1:9 secret=0123456789abcdef0123 state=/tmp/z.state",
    ));
    assert!(
        !ok && out.contains("\"state=\" cannot be combined with \"redis=\""),
        "{out}"
    );
    // A relative path is from the prefix, which the test's workers
    // (`nobody`) cannot write: refused at once, naming the resolved path.
    let (ok, out) = test_config(&conf("state=z.state window=31d"));
    assert!(
        !ok && out.contains("[emerg]")
            && out.contains("cannot write state file")
            && out.contains("rlw-test-")
            && out.contains("/z.state\""),
        "{out}"
    );
}

impl Site {
    /// nginx running `conf` (with the site's clock, if any).
    fn start_conf(&self, conf: &str) -> Nginx {
        match &self.clock {
            Some(c) => start_faked(c, &self.up, "UTC", conf),
            None => Nginx::builder().upstream_of(&self.up).start(conf),
        }
    }
}
