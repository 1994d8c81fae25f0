//! Reliability scenarios shared by tests/it/reliability/ (short variants)
//! and tests/it/soak.rs (long ones): `#[path = "common/scenarios.rs"] mod
//! scenarios;` next to `mod common;`. Each scenario asserts its guarantees
//! and prints its numbers on stderr.
#![allow(dead_code)]

use crate::common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

pub const HOUR_MS: u128 = 3_600_000;

/// One `location /` limited by `loc`, `/hot` limited by `hot` (the same
/// zones), `/metrics`, on a reuseport listener so that connections spread
/// over the workers; every response names its worker.
pub fn conf(zones: &str, loc: &str, hot: &str) -> String {
    proxy_conf(
        zones,
        "reuseport",
        &format!(
            "add_header X-Worker $pid always;
             add_header X-RLW-Status $rate_limit_window_status always;
             location = /hot {{ {hot} proxy_pass http://{{{{UPSTREAM}}}}; }}
             location = /metrics {{ rate_limit_window_metrics; }}"
        ),
        loc,
    )
}

pub fn one_key_conf(limit: u32) -> String {
    conf(
        "rate_limit_window_zone $http_x_key zone=z:1m window=1h;",
        &format!("rate_limit_window zone=z limit={limit};"),
        "",
    )
}

pub fn current(port: u16, zone: &str, key: &[u8]) -> u64 {
    let v = key_json(port, zone, key);
    v["current"]
        .as_f64()
        .unwrap_or_else(|| panic!("current in {v}")) as u64
}

pub fn metric(port: u16, name: &str, labels: &[(&str, &str)]) -> f64 {
    let text = metrics_text(port);
    prom_value(&text, name, labels).unwrap_or_else(|| panic!("no sample {name}{labels:?}:\n{text}"))
}

/// Sends on one connection until the first rejection; returns the number
/// admitted before it (at most `max`).
pub fn admit_until_rejected(port: u16, path: &str, key: &[u8], max: usize) -> usize {
    let mut c = Conn::connect(port).unwrap();
    for n in 0..=max {
        if c.closed {
            c = Conn::connect(port).unwrap();
        }
        let r = c.request("GET", path, &[("X-Key", key)]).unwrap();
        match r.status {
            200 => {}
            429 => return n,
            _ => panic!("unexpected {}", r.describe()),
        }
    }
    panic!("{max}+1 requests admitted without a rejection");
}

/// Stats of one kill run, for the report.
pub struct KillRun {
    pub limit: u32,
    pub admitted_during: usize,
    pub admitted_after: usize,
    pub kills: usize,
    /// Kills sent while the upstream had seen fewer than `limit`.
    pub kills_while_admitting: usize,
    pub stats: LoadStats,
}

/// SIGKILL a random worker every `every` for `duration` while `conns`
/// connections send one key (limit `limit` per 1h). The key is never
/// admitted above its limit, the shared count ends at exactly `limit`, and
/// nothing hangs.
pub fn kill_workers_under_load(
    limit: u32,
    conns: usize,
    duration: Duration,
    every: Duration,
) -> KillRun {
    let up = Upstream::start();
    // Frozen ten minutes into the hour: one window, whatever the run's length.
    let clock = FakeClock::new(FROZEN_MID_HOUR);
    let ng = clock
        .builder()
        .workers(4)
        .upstream_of(&up)
        .start(&one_key_conf(limit));
    let stop = Arc::new(AtomicBool::new(false));
    let port = ng.port;
    let t0 = Instant::now();
    let load = {
        let stop = stop.clone();
        thread::spawn(move || load_until(port, conns, "/", &[("X-Key", b"crash")], stop, false))
    };
    let mut killed = vec![];
    let mut kills_while_admitting = 0;
    let mut seed: u64 = (now_ms() as u64) | 1;
    while t0.elapsed() < duration {
        thread::sleep(every);
        let ws = ng.worker_pids();
        if ws.is_empty() {
            continue;
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let victim = ws[(seed % ws.len() as u64) as usize];
        sigkill(victim);
        killed.push(victim);
        if up.received() < limit as u64 {
            kills_while_admitting += 1;
        }
    }
    stop.store(true, Ordering::SeqCst);
    // Every thread's current request completes or errors within IO_TIMEOUT.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !load.is_finished() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(
        load.is_finished(),
        "load threads hung 15 s after the kills stopped"
    );
    let stats = load.join().unwrap();
    let elapsed = t0.elapsed();

    // nginx respawned the workers.
    assert!(
        wait_for(Duration::from_secs(10), || ng.worker_pids().len() == 4),
        "workers not respawned: {:?}",
        ng.worker_pids()
    );
    let admitted_during = stats.count(200);
    eprintln!(
        "kill: limit {limit}, {} kills ({kills_while_admitting} while the key was still being admitted) in {elapsed:?}, responses {:?}, lost to killed workers {} \
         ({} before any byte, {} on fresh connections), timeouts {}, connect errors {}, upstream {}",
        killed.len(),
        stats.statuses,
        stats.lost.len(),
        stats.lost_before_any_byte,
        stats.lost_on_fresh_connection,
        stats.timeouts,
        stats.connect_errors,
        up.received()
    );
    for l in stats.lost.iter().take(5) {
        eprintln!("  lost: {l}");
    }
    let unexplained = forget_killed_workers(&ng, &killed);
    assert!(
        unexplained.is_empty(),
        "workers died on their own:\n{}",
        unexplained.join("\n")
    );
    let bad = serious_log_lines(&ng.error_log());
    assert!(
        bad.is_empty(),
        "serious error.log lines besides the kills:\n{}",
        bad.join("\n")
    );
    assert_eq!(stats.timeouts, 0, "requests hung");
    assert!(killed.len() >= 5, "only {} kills", killed.len());
    assert!(
        stats.statuses.keys().all(|s| *s == 200 || *s == 429),
        "unexpected statuses {:?}",
        stats.statuses
    );
    assert!(
        admitted_during <= limit as usize,
        "over-admission: {admitted_during} > {limit}"
    );

    // Top up until the limit rejects: the shared count is exactly `limit`;
    // only admissions whose response died with a worker are unseen.
    let admitted_after = admit_until_rejected(port, "/", b"crash", limit as usize);
    let seen = admitted_during + admitted_after;
    let count = current(port, "z", b"crash");
    eprintln!(
        "kill: admitted {admitted_during} during + {admitted_after} after = {seen} seen by clients, \
         shared count {count}, limit {limit}, upstream {}",
        up.received()
    );
    assert_eq!(
        count, limit as u64,
        "the shared count must end at exactly the limit"
    );
    assert!(seen <= limit as usize, "over-admission: {seen} > {limit}");
    assert!(
        seen + stats.lost.len() >= limit as usize,
        "admissions lost beyond the requests that died with a worker: {seen} + {} < {limit}",
        stats.lost.len()
    );
    assert!(
        up.received() as usize >= seen && up.received() <= limit as u64,
        "upstream {}",
        up.received()
    );
    assert_eq!(admit_until_rejected(port, "/", b"crash", 0), 0);
    KillRun {
        limit,
        admitted_during,
        admitted_after,
        kills: killed.len(),
        kills_while_admitting,
        stats,
    }
}

/// SIGHUP (nginx -s reload) every 200 ms for `duration` while `conns`
/// connections send one key with limit `limit` per 1h: no request fails
/// (5xx, reset, or a close other than a reused keep-alive connection closed
/// before any response byte, which is retried), and exactly `limit` are
/// admitted in all.
pub fn reload_under_load(limit: u32, conns: usize, duration: Duration) -> usize {
    let up = Upstream::start();
    // Frozen ten minutes into the hour: one window, whatever the run's length.
    let clock = FakeClock::new(FROZEN_MID_HOUR);
    let ng = clock
        .builder()
        .workers(2)
        .upstream_of(&up)
        .start(&one_key_conf(limit));
    let port = ng.port;
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let load = {
        let stop = stop.clone();
        thread::spawn(move || load_until(port, conns, "/", &[("X-Key", b"reload")], stop, true))
    };
    let mut reloads = 0;
    let mut reloads_while_admitting = 0;
    let mut pids: BTreeSet<i32> = BTreeSet::new();
    while t0.elapsed() < duration {
        thread::sleep(Duration::from_millis(200));
        pids.extend(ng.worker_pids());
        if up.received() < limit as u64 {
            reloads_while_admitting += 1;
        }
        sighup(&ng);
        reloads += 1;
    }
    stop.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(15);
    while !load.is_finished() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(load.is_finished(), "load threads hung after the reloads");
    let stats = load.join().unwrap();
    // Old generations exit.
    assert!(
        wait_for(Duration::from_secs(15), || ng.worker_pids().len() == 2),
        "old workers did not exit: {:?}",
        ng.worker_pids()
    );
    pids.extend(ng.worker_pids());
    let during = stats.count(200);
    let after = admit_until_rejected(port, "/", b"reload", limit as usize);
    eprintln!(
        "reload: {reloads} reloads ({reloads_while_admitting} while the key was still being admitted) in {:?} ({} worker pids seen), responses {:?}, benign keep-alive \
         retries {}, failures {} ({} on fresh connections), admitted {during} during + {after} after = {} \
         of limit {limit}, upstream {}",
        t0.elapsed(),
        pids.len(),
        stats.statuses,
        stats.benign_retries,
        stats.lost.len(),
        stats.lost_on_fresh_connection,
        during + after,
        up.received()
    );
    for l in stats.lost.iter().take(5) {
        eprintln!("  failed: {l}");
    }
    let log = ng.error_log();
    let bad = serious_log_lines(&log);
    assert!(
        bad.is_empty(),
        "serious error.log lines during reloads:\n{}",
        bad.join("\n")
    );
    assert!(
        count_lines(&log, "reconfiguring") >= 3,
        "reloads did not happen:\n{log}"
    );
    assert!(pids.len() > 4, "no new workers were started: {pids:?}");
    assert!(
        stats.lost.is_empty(),
        "{} requests failed: {:?}",
        stats.lost.len(),
        &stats.lost[..stats.lost.len().min(5)]
    );
    assert_eq!(stats.connect_errors, 0);
    assert!(
        stats.statuses.keys().all(|s| *s == 200 || *s == 429),
        "{:?}",
        stats.statuses
    );
    assert!(during > 0, "nothing admitted during the reloads");
    assert_eq!(
        during + after,
        limit as usize,
        "counts lost or doubled across reloads"
    );
    assert_eq!(up.received(), limit as u64);
    assert_eq!(current(port, "z", b"reload"), limit as u64);
    reloads_while_admitting
}

/// Sum of the workers' RSS growth (KiB) and the largest per-worker growth.
pub fn rss_growth(before: &BTreeMap<i32, u64>, after: &BTreeMap<i32, u64>) -> i64 {
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "workers changed"
    );
    before
        .iter()
        .map(|(p, b)| after[p] as i64 - *b as i64)
        .max()
        .unwrap_or(0)
}

/// What a flood saw.
pub struct Flood {
    pub clients: usize,
    pub flood: BTreeMap<u16, usize>,
    pub hot_admitted: usize,
    pub hot_statuses: BTreeMap<u16, usize>,
    pub rss_before: BTreeMap<i32, u64>,
    pub rss_after: BTreeMap<i32, u64>,
    pub metrics: String,
    pub log: String,
    pub elapsed: Duration,
}

/// 2024-01-01T00:10:00Z: ten minutes into an hour window, where a flood
/// under a frozen clock stays inside one window however long it takes.
pub const FROZEN_MID_HOUR: i64 = 1_704_067_200 + 600;

/// `clients` distinct keys (one request each, 32 connections) flood a 32k
/// zone (1,264 slots: what nginx's slab and the zone and table headers leave
/// of 32,768 bytes, at 16 bytes a slot) with `fail`, while a hot
/// key keeps sending to /hot (limit 5, 3 of them admitted before the
/// flood). nginx's clock is frozen ten minutes into the hour (libfaketime),
/// so the flood never meets a window boundary and nothing waits for one.
pub fn flood_small_zone(fail: &str, clients: usize) -> Flood {
    let up = Upstream::start();
    let clock = FakeClock::new(FROZEN_MID_HOUR);
    let ng = clock.builder().upstream_of(&up).start(&conf(
        &format!("rate_limit_window_zone $http_x_key zone=tiny:32k window=1h fail={fail};"),
        "rate_limit_window zone=tiny limit=100;",
        "rate_limit_window zone=tiny limit=5;",
    ));
    let port = ng.port;
    let hot: Vec<u16> = (0..3)
        .map(|_| get_key(port, "/hot", "hot").status)
        .collect();
    assert_eq!(hot, [200, 200, 200]);
    // Warm the workers (buffers, pools) before measuring memory.
    let st = hammer_with(port, 500, 8, |i| {
        (
            "/".into(),
            vec![("X-Key".into(), format!("warm-{i}").into_bytes())],
        )
    });
    assert_eq!(st.len(), 500);
    let rss_before = worker_rss_kb(&ng);
    let off = ng.error_log_len();
    let stop = Arc::new(AtomicBool::new(false));
    let hot_load = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut m = BTreeMap::new();
            let mut c = Conn::connect(port).unwrap();
            while !stop.load(Ordering::SeqCst) {
                if c.closed {
                    c = Conn::connect(port).unwrap();
                }
                let r = c.request("GET", "/hot", &[("X-Key", b"hot")]).unwrap();
                *m.entry(r.status).or_insert(0usize) += 1;
                thread::sleep(Duration::from_millis(2));
            }
            m
        })
    };
    let t0 = Instant::now();
    let st = hammer_with(port, clients, 32, |i| {
        (
            "/".into(),
            vec![("X-Key".into(), format!("flood-client-{i}").into_bytes())],
        )
    });
    let elapsed = t0.elapsed();
    stop.store(true, Ordering::SeqCst);
    let hot_statuses = hot_load.join().unwrap();
    let rss_after = worker_rss_kb(&ng);
    let metrics = metrics_text(port);
    let log = ng.error_log_since(off);
    let flood = tally(&st);
    let hot_admitted = 3 + hot_statuses.get(&200).copied().unwrap_or(0);
    eprintln!(
        "flood fail={fail}: {clients} clients in {elapsed:?}: {flood:?}; hot key (limit 5) {hot_statuses:?} + 3 before \
         = {hot_admitted} admitted; worker VmRSS before {rss_before:?} after {rss_after:?} KiB (max growth {} KiB)",
        rss_growth(&rss_before, &rss_after)
    );
    for m in [
        "rate_limit_window_evictions_total",
        "rate_limit_window_fail_closed_total",
        "rate_limit_window_slots",
    ] {
        for l in metrics.lines().filter(|l| l.starts_with(m)) {
            eprintln!("  {l}");
        }
    }
    assert_eq!(st.len(), clients);
    Flood {
        clients,
        flood,
        hot_admitted,
        hot_statuses,
        rss_before,
        rss_after,
        metrics,
        log,
        elapsed,
    }
}

pub fn m(f: &Flood, name: &str, labels: &[(&str, &str)]) -> f64 {
    prom_value(&f.metrics, name, labels)
        .unwrap_or_else(|| panic!("no {name}{labels:?}:\n{}", f.metrics))
}

/// Checks common to both policies: answers are 200/429, the zone stays
/// bounded, memory flat.
pub fn flood_common(f: &Flood) {
    assert!(
        f.flood.keys().all(|s| *s == 200 || *s == 429),
        "{:?}",
        f.flood
    );
    assert!(
        f.hot_statuses.keys().all(|s| *s == 200 || *s == 429),
        "{:?}",
        f.hot_statuses
    );
    let slots = m(f, "rate_limit_window_slots", &[("zone", "tiny")]);
    let used = m(f, "rate_limit_window_slots_used", &[("zone", "tiny")]);
    assert!(
        slots > 0.0 && slots <= 2048.0,
        "a 32k zone holds {slots} slots"
    );
    assert!(used <= slots, "slots_used {used} > slots {slots}");
    assert!(
        f.clients as f64 >= 4.0 * slots,
        "{} clients do not overflow {slots} slots four times over",
        f.clients
    );
    let growth = rss_growth(&f.rss_before, &f.rss_after);
    assert!(
        growth < 4096,
        "a worker grew by {growth} KiB during the flood"
    );
}

pub fn flood_fail_open(clients: usize) {
    let f = flood_small_zone("open", clients);
    flood_common(&f);
    // New clients are tracked (their first request is admitted).
    assert_eq!(
        f.flood.get(&200).copied().unwrap_or(0),
        clients,
        "{:?}",
        f.flood
    );
    let live = m(
        &f,
        "rate_limit_window_evictions_total",
        &[("zone", "tiny"), ("kind", "live")],
    );
    assert!(
        live > 0.0,
        "no live evictions after {clients} clients in 32k"
    );
    assert_eq!(
        m(
            &f,
            "rate_limit_window_fail_closed_total",
            &[("zone", "tiny")]
        ),
        0.0
    );
    let n = count_lines(&f.log, "evicting live clients");
    assert_eq!(
        n,
        1,
        "one warning per episode, got {n}:\n{}",
        f.log
            .lines()
            .filter(|l| l.contains("[warn]"))
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(f.log.lines().any(|l| l.contains("[warn]")
        && l.contains("evicting live clients")
        && l.contains("\"tiny\"")));
}

pub fn flood_fail_closed(clients: usize) {
    let f = flood_small_zone("closed", clients);
    flood_common(&f);
    let rejected = f.flood.get(&429).copied().unwrap_or(0);
    let fc = m(
        &f,
        "rate_limit_window_fail_closed_total",
        &[("zone", "tiny")],
    );
    assert!(rejected > 0, "no new client rejected: {:?}", f.flood);
    assert!(fc > 0.0, "fail_closed_total = 0");
    // Every flood key is new and sends once: each 429 is a fail-closed one.
    assert_eq!(
        fc, rejected as f64,
        "fail_closed_total vs new clients rejected"
    );
    assert_eq!(
        m(
            &f,
            "rate_limit_window_evictions_total",
            &[("zone", "tiny"), ("kind", "live")]
        ),
        0.0
    );
    // The hot key, tracked before the flood, keeps its count and its limit.
    assert_eq!(
        f.hot_admitted, 5,
        "hot key admitted {} (limit 5): {:?}",
        f.hot_admitted, f.hot_statuses
    );
    let n = count_lines(&f.log, "rejecting new clients (fail=closed)");
    assert_eq!(n, 1, "one warning per episode, got {n}");
    assert!(f.log.lines().any(|l| l.contains("[warn]")
        && l.contains("rejecting new clients")
        && l.contains("\"tiny\"")));
}

/// [alert], [crit] and [emerg] lines of an error log.
pub fn serious_log_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("[alert]") || l.contains("[crit]") || l.contains("[emerg]"))
        .map(String::from)
        .collect()
}
