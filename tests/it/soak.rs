//! Long-running checks, run by `make soak` (which passes --include-ignored).
use crate::common;
use crate::common::scenarios;

use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

fn conf(gen: u32) -> String {
    http_conf(&format!(
        "rate_limit_window_zone $http_x_key zone=z:1m window=1h;
         server {{ listen 127.0.0.1:{{{{PORT}}}} reuseport; add_header X-Gen {gen} always;
           location / {{ rate_limit_window zone=z limit=2000; proxy_pass http://{{{{UPSTREAM}}}}; }}
           location = /metrics {{ rate_limit_window_metrics; }} }}"
    ))
}

/// Ten reloads while 8 connections hammer one key: exactly `limit`
/// requests are admitted in total, none lost or double counted.
#[test]
#[ignore = "soak: ~15 s of load with repeated reloads"]
fn reloads_under_load_admit_exactly_limit() {
    let up = Upstream::start();
    let mut ng = Nginx::builder().upstream_of(&up).start(&conf(0));
    clear_of_boundary(3_600_000, 120_000);
    let port = ng.port;
    let load = thread::spawn(move || hammer(port, "/", &[("X-Key", b"soak")], 20_000, 8));
    for gen in 1..=10 {
        thread::sleep(Duration::from_millis(300));
        ng.reload_with(&conf(gen));
    }
    let st = load.join().unwrap();
    let t = tally(&st);
    assert_eq!(t.get(&200).copied().unwrap_or(0), 2000, "{t:?}");
    assert_eq!(st.len(), 20_000);
    assert_eq!(up.received(), 2000);
}

/// Continuous traffic over many 2 s windows: no aligned window admits more
/// than the limit (counted by the upstream's receive time, with a small
/// tolerance for requests in flight across a boundary), and the steady state
/// admits close to the limit per window.
#[test]
#[ignore = "soak: 20 s of continuous traffic"]
fn sliding_window_bound_under_continuous_load() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        "rate_limit_window_zone $http_x_key zone=z:1m window=2s;
         server { listen 127.0.0.1:{{PORT}};
           location / { rate_limit_window zone=z limit=50; proxy_pass http://{{UPSTREAM}}; } }",
    ));
    let port = ng.port;
    let stop = Arc::new(AtomicBool::new(false));
    let admitted = Arc::new(std::sync::Mutex::new(Vec::<u128>::new()));
    let mut hs = vec![];
    for _ in 0..4 {
        let (stop, admitted) = (stop.clone(), admitted.clone());
        hs.push(thread::spawn(move || {
            let mut c = Conn::connect(port).unwrap();
            while !stop.load(Ordering::SeqCst) {
                let t = now_ms();
                let r = c.request("GET", "/", &[("X-Key", b"steady")]).unwrap();
                if r.status == 200 {
                    admitted.lock().unwrap().push(t);
                }
                if c.closed {
                    c = Conn::connect(port).unwrap();
                }
                thread::sleep(Duration::from_millis(2));
            }
        }));
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::SeqCst);
    for h in hs {
        h.join().unwrap();
    }
    let ts = admitted.lock().unwrap().clone();
    let mut per_window = std::collections::BTreeMap::new();
    for t in &ts {
        *per_window.entry(t / 2000).or_insert(0usize) += 1;
    }
    let windows: Vec<_> = per_window.iter().collect();
    // Drop the first and last (partial) windows.
    for (w, n) in &windows[1..windows.len() - 1] {
        assert!(
            **n <= 52,
            "window {w} admitted {n} > 50 (+2 tolerance): {per_window:?}"
        );
        assert!(**n >= 40, "window {w} admitted only {n}: {per_window:?}");
    }
}

// ---------------------------------------------------------------------------
// Long variants of tests/it/reliability/ (scenarios in tests/it/common/scenarios.rs)
// ---------------------------------------------------------------------------

/// Reload every 200 ms for 10 s under load: no failed request, exactly
/// `limit` admitted in all.
#[test]
#[ignore = "soak: 10 s of reloads every 200 ms under load"]
fn reload_every_200ms_for_10s_keeps_counts() {
    let n = scenarios::reload_under_load(60_000, 16, Duration::from_secs(10));
    assert!(
        n >= 10,
        "only {n} reloads while admitting: the limit was exhausted too fast"
    );
}

/// A random worker SIGKILLed every 300 ms for 10 s under load: never above
/// the limit, the shared count ends at exactly the limit, nothing hangs.
#[test]
#[ignore = "soak: 10 s of worker kills under load"]
fn killed_workers_for_10s_never_over_admit() {
    let run = scenarios::kill_workers_under_load(
        50_000,
        32,
        Duration::from_secs(10),
        Duration::from_millis(300),
    );
    assert!(
        run.kills_while_admitting >= 5,
        "only {} kills while admitting",
        run.kills_while_admitting
    );
}

/// 120,000 distinct clients flood a 32k zone, fail=open.
#[test]
#[ignore = "soak: 120k-client flood (fail=open)"]
fn flood_120k_clients_fail_open() {
    scenarios::flood_fail_open(120_000);
}

/// 120,000 distinct clients flood a 32k zone, fail=closed.
#[test]
#[ignore = "soak: 120k-client flood (fail=closed)"]
fn flood_120k_clients_fail_closed() {
    scenarios::flood_fail_closed(120_000);
}

/// Issue 36: 60 s of a delay flood (48 concurrent connections: two
/// flooding clients and 5,000 cycling, `limit=2` per 2 s, `delay=5s`):
/// held requests come and go (each client's share, the rest refused at
/// once), and the
/// workers' memory stays flat: RSS grows less than 4 MB from 10 s in to
/// the end; every hold ends.
#[test]
#[ignore = "soak: 60 s delay flood"]
fn delay_flood_60s_memory_flat() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&proxy_conf(
        "rate_limit_window_zone $http_x_key zone=z:1m window=2s;",
        "",
        "location = /metrics { rate_limit_window_metrics; }",
        "rate_limit_window zone=z limit=2 delay=5s;",
    ));
    let port = ng.port;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let threads: Vec<_> = (0..48u64)
        .map(|t| {
            let (stop, sent) = (stop.clone(), sent.clone());
            thread::spawn(move || {
                let mut n = t;
                while !stop.load(Ordering::SeqCst) {
                    // 32 connections on two flooding clients (past their
                    // share), 16 on 5,000 clients cycling (the per-client
                    // queue map grows and shrinks).
                    let key = if t < 32 {
                        format!("hot{}", t % 2)
                    } else {
                        format!("c{}", n % 5_000)
                    };
                    let r = request(port, "GET", "/", &[("X-Key", key.as_bytes())]);
                    assert!(matches!(r.status, 200 | 429), "{}", r.describe());
                    sent.fetch_add(1, Ordering::Relaxed);
                    n += 48;
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_secs(10));
    let before = worker_rss_kb(&ng);
    thread::sleep(Duration::from_secs(50));
    let after = worker_rss_kb(&ng);
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    let text = metrics_text(port);
    let m = |name: &str, labels: &[(&str, &str)]| prom_value(&text, name, labels).unwrap_or(0.0);
    let admitted = m(
        "rate_limit_window_delayed_total",
        &[("zone", "z"), ("result", "admitted")],
    );
    let full = m("rate_limit_window_delay_share_full_total", &[("zone", "z")]);
    let growth = scenarios::rss_growth(&before, &after);
    eprintln!(
        "delay flood: {} requests, {admitted} held then admitted, {full} refused (share full); RSS {before:?} -> {after:?} ({growth} KB)",
        sent.load(Ordering::Relaxed)
    );
    // The two flooding clients are admitted about once a second each.
    assert!(
        admitted >= 20.0 && full >= 1_000.0,
        "the flood did not exercise the queue"
    );
    assert!(
        growth < 4096,
        "worker RSS grew {growth} KB during the delay flood"
    );
    assert!(wait_for(Duration::from_secs(15), || prom_value(
        &metrics_text(port),
        "rate_limit_window_delay_held",
        &[("zone", "z")]
    ) == Some(0.0)));
}
