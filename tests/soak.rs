//! Long-running checks, run by `make soak` (which passes --include-ignored).
mod common;

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
        assert!(**n <= 52, "window {w} admitted {n} > 50 (+2 tolerance): {per_window:?}");
        assert!(**n >= 40, "window {w} admitted only {n}: {per_window:?}");
    }
}
