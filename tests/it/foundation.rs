//! The module loads into a real multi-worker nginx, proxies, and a limit is
//! shared by all workers (shared memory).
use crate::common;

use common::*;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Module loaded, no directive used: nginx still proxies normally.
#[test]
fn module_loads_and_proxies() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        "server { listen 127.0.0.1:{{PORT}}; location / { proxy_pass http://{{UPSTREAM}}; } }",
    ));
    let r = get(ng.port, "/hello?x=1");
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(r.body, b"upstream ok\n");
    assert_eq!(r.header("X-Upstream"), Some("1"));
    assert_eq!(r.header("X-Path"), Some("/hello?x=1"));
    assert_eq!(up.received(), 1);
    assert!(
        ng.worker_pids().len() >= 2,
        "expected >= 2 workers: {:?}",
        ng.worker_pids()
    );
    assert!(!ng.error_log().contains("[emerg]"));
}

/// Requests are answered by at least two distinct worker processes.
#[test]
fn two_workers_answer() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        "server { listen 127.0.0.1:{{PORT}} reuseport;
           add_header X-Worker $pid always;
           location / { proxy_pass http://{{UPSTREAM}}; } }",
    ));
    let mut pids = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.len() < 2 && Instant::now() < deadline {
        let r = get(ng.port, "/");
        assert_eq!(r.status, 200);
        pids.insert(r.header("X-Worker").expect("X-Worker").to_string());
    }
    assert!(pids.len() >= 2, "only one worker answered: {pids:?}");
}

fn limited_conf(zone_args: &str, limit: &str) -> String {
    http_conf(&format!(
        "rate_limit_window_zone $http_x_key zone=z:1m {zone_args};
         server {{ listen 127.0.0.1:{{{{PORT}}}} reuseport;
           add_header X-Worker $pid always;
           location / {{ rate_limit_window zone=z limit={limit};
                         proxy_pass http://{{{{UPSTREAM}}}}; }} }}"
    ))
}

/// limit=5 over many separate connections landing on both workers:
/// exactly 5 pass, the state lives in shared memory.
#[test]
fn limit_is_shared_across_workers() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .upstream_of(&up)
        .start(&limited_conf("window=1h", "5"));
    clear_of_boundary(3_600_000, 15_000);
    let mut pids = BTreeSet::new();
    let mut statuses = vec![];
    for _ in 0..40 {
        let r = get_key(ng.port, "/", "client-a");
        pids.insert(r.header("X-Worker").unwrap_or("?").to_string());
        statuses.push(r.status);
    }
    assert!(
        pids.len() >= 2,
        "test is meaningless: one worker answered everything: {pids:?}"
    );
    assert_eq!(
        statuses.iter().filter(|&&s| s == 200).count(),
        5,
        "statuses: {statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|&&s| s == 429).count(),
        35,
        "statuses: {statuses:?}"
    );
    // The 5 admitted ones are the first 5.
    assert_eq!(&statuses[..5], &[200; 5]);
    assert_eq!(up.received(), 5);
}

/// Concurrent requests from 8 keep-alive connections never over-admit.
#[test]
fn concurrent_requests_admit_exactly_limit() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .upstream_of(&up)
        .start(&limited_conf("window=1h", "100"));
    clear_of_boundary(3_600_000, 15_000);
    let st = hammer(ng.port, "/", &[("X-Key", b"burst")], 400, 8);
    let t = tally(&st);
    assert_eq!(st.len(), 400);
    assert_eq!(t.get(&200).copied().unwrap_or(0), 100, "{t:?}");
    assert_eq!(t.get(&429).copied().unwrap_or(0), 300, "{t:?}");
    assert_eq!(up.received(), 100);
}

/// Distinct keys have independent counters.
#[test]
fn keys_are_independent() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .upstream_of(&up)
        .start(&limited_conf("window=1h", "2"));
    clear_of_boundary(3_600_000, 15_000);
    for key in ["a", "b", "c"] {
        assert_eq!(get_key(ng.port, "/", key).status, 200);
        assert_eq!(get_key(ng.port, "/", key).status, 200);
        assert_eq!(
            get_key(ng.port, "/", key).status,
            429,
            "third request for {key}"
        );
    }
    assert_eq!(up.received(), 6);
}

/// Shared mappings of process `pid` that carry the `hg` (MADV_HUGEPAGE)
/// flag in /proc/PID/smaps: their total size in KiB.
fn advised_shared_kib(pid: i32) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/smaps: {e}"));
    let (mut shared, mut size, mut total) = (false, 0u64, 0u64);
    for line in smaps.lines() {
        let mut f = line.split_whitespace();
        let first = f.next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            // A mapping's header: "start-end perms offset dev inode [path]".
            shared = f.next().is_some_and(|perms| perms.ends_with('s'));
            size = 0;
        } else if first == "Size:" {
            size = f.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        } else if first == "VmFlags:" && shared && f.any(|flag| flag == "hg") {
            total += size;
        }
    }
    total
}

/// The table's pages are advised for transparent huge pages before they are
/// first written: every worker's mapping of an 8 MB zone carries the `hg`
/// flag over the table (the whole zone less the slab pool's header pages).
/// Whether the kernel then backs it with 2 MB pages is the host's
/// `shmem_enabled` setting, not the module's.
#[test]
fn zone_table_is_advised_for_huge_pages() {
    let up = Upstream::start();
    let mut ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        "rate_limit_window_zone $remote_addr zone=hp:8m;
         server { listen 127.0.0.1:{{PORT}};
           location / { rate_limit_window zone=hp limit=10; proxy_pass http://{{UPSTREAM}}; } }",
    ));
    let r = get(ng.port, "/");
    assert_eq!(r.status, 200, "{}", r.describe());
    let thp = std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists();
    let check = |workers: Vec<i32>| {
        assert!(workers.len() >= 2, "{workers:?}");
        for pid in workers {
            let kib = advised_shared_kib(pid);
            if thp {
                assert!(
                    (7 * 1024..=8 * 1024).contains(&kib),
                    "worker {pid}: {kib} KiB of shared memory advised for huge pages, \
                     expected the 8 MB zone's table"
                );
            } else {
                // A kernel built without THP refuses the advice; the zone
                // works all the same (the request above was answered).
                assert_eq!(kib, 0, "worker {pid}: no THP, yet {kib} KiB advised");
            }
        }
    };
    check(ng.worker_pids());
    // The workers of a reload adopt the same zone, advice included.
    ng.reload();
    check(ng.worker_pids());
}
