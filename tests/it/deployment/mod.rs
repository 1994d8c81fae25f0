//! Runtime state through what a deployment does (issue 51): reloads while
//! long requests run, resizes, a shed group's `max=` changed, workers
//! killed while holding requests (reloads.rs), and a long, seeded run of
//! all of it at once with many clients (long_run.rs). Requests are held by
//! a real slow upstream that records each client's concurrency.
use crate::common;

use common::*;
use std::collections::BTreeSet;
use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

mod long_run;
mod reloads;
mod watch;

/// `n` requests of `client` at once, each in its own thread; their
/// statuses, sorted.
fn at_once(port: u16, path: &str, client: &str, n: usize) -> Vec<u16> {
    let hs: Vec<_> = (0..n)
        .map(|_| {
            let (path, client) = (path.to_string(), client.to_string());
            thread::spawn(move || as_client(port, &path, &client).status)
        })
        .collect();
    let mut v: Vec<u16> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    v.sort_unstable();
    v
}

/// A value of the metrics page (-1: absent).
fn metric(port: u16, name: &str, labels: &[(&str, &str)]) -> f64 {
    prom_value(&metrics_text(port), name, labels).unwrap_or(-1.0)
}

/// SIGHUP, then waits until `expected_workers` new workers run and the
/// old generation's workers stopped accepting (they may go on with their
/// requests), with `conf` written first when given. Err: the master logged
/// an `[emerg]`, or no new workers in 20 s.
fn reload_keeping_old(ng: &mut Nginx, conf: Option<&str>) -> Result<(), String> {
    if let Some(c) = conf {
        ng.set_conf(c);
    }
    let old: BTreeSet<i32> = ng.worker_pids().into_iter().collect();
    let off = ng.error_log_len();
    sighup(ng);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = ng.error_log_since(off);
        if log.contains("[emerg]") {
            return Err(log);
        }
        let fresh = ng
            .worker_pids()
            .into_iter()
            .filter(|p| !old.contains(p))
            .count();
        // The old generation no longer accepts once it said so.
        let quit = count_lines(&log, "gracefully shutting down");
        if fresh >= ng.expected_workers() && quit >= ng.expected_workers() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("no new workers in 20 s\n{log}"));
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Whether a cache manager process of `ng` runs.
fn has_cache_manager(ng: &Nginx) -> bool {
    ng.worker_pids().into_iter().any(|p| {
        let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&cmd).contains("cache manager")
    })
}
