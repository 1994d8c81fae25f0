//! The issue's reproductions, end to end: reloads while long requests run
//! (owners that never run out), a resize with a request in flight, a shed
//! group's `max=` changed by reload, and every gauge reconciled after a
//! worker is killed while holding requests.
use super::*;

/// Zones `c` (`fail=closed`) and `o` (`fail=open`): `/hold/` takes a place
/// in both (and keeps it as long as the upstream sleeps), `/c/` and `/o/`
/// allow 2 requests in flight per client.
fn two_policies() -> String {
    http_conf(
        r#"
        rate_limit_window_zone $http_x_client zone=c:1m window=1m fail=closed;
        rate_limit_window_zone $http_x_client zone=o:1m window=1m fail=open;
        server {
            listen 127.0.0.1:{{PORT}};
            proxy_read_timeout 300s;
            location /hold/ {
                rate_limit_window zone=c in_flight=1000;
                rate_limit_window zone=o in_flight=1000;
                proxy_pass http://{{UPSTREAM}};
            }
            location /c/ {
                rate_limit_window zone=c in_flight=2;
                proxy_pass http://{{UPSTREAM}};
            }
            location /o/ {
                rate_limit_window zone=o in_flight=2;
                proxy_pass http://{{UPSTREAM}};
            }
            location = /metrics { rate_limit_window_metrics; }
        }"#,
    )
}

/// The issue's first case: 300 reloads, each while a long request of the
/// running workers is in flight, so that 300 old workers (more than the
/// 256 owners there once were) still hold places; then `in_flight=2` is
/// enforced under both `fail=`: two of three requests reach the upstream,
/// the third gets 429, none is admitted untracked. Once the long requests
/// end, the old workers exit and every gauge is back to 0.
#[test]
fn in_flight_is_enforced_after_300_reloads_with_long_requests() {
    const RELOADS: usize = 300;
    let up = Upstream::start();
    let mut ng = Nginx::builder().upstream_of(&up).start(&two_policies());
    let port = ng.port;
    let started = Instant::now();
    let mut held = Vec::with_capacity(RELOADS);
    for i in 0..RELOADS {
        let client = format!("h{i}");
        held.push(send_open(port, "/hold/x?sleep=240000", &client));
        assert!(
            wait_for(Duration::from_secs(10), || up.concurrent(&client) == 1),
            "long request {i} never reached the upstream"
        );
        reload_keeping_old(&mut ng, None).unwrap_or_else(|e| panic!("reload {i}: {e}"));
    }
    let workers = ng.worker_pids().len();
    eprintln!(
        "{RELOADS} reloads in {:?}, {workers} workers alive",
        started.elapsed()
    );
    assert!(workers > 256, "old workers alive: {workers}");
    for (zone, path) in [("c", "/c/p?sleep=2000"), ("o", "/o/p?sleep=2000")] {
        let client = format!("p{zone}");
        assert_eq!(
            at_once(port, path, &client, 3),
            [200, 200, 429],
            "zone {zone}"
        );
        assert_eq!(up.max_concurrent(&client), 2, "zone {zone}");
        let labels = [("zone", zone), ("result", "untracked")];
        assert_eq!(
            metric(port, "rate_limit_window_in_flight_total", &labels),
            0.0
        );
        let gauge = metric(port, "rate_limit_window_in_flight", &[("zone", zone)]);
        assert_eq!(gauge, RELOADS as f64, "zone {zone}: the held requests");
    }
    assert!(!ng.error_log().contains("processes already"));
    drop(held);
    assert!(
        wait_for(Duration::from_secs(60), || ng.worker_pids().len() == 2),
        "old workers left: {}",
        ng.worker_pids().len()
    );
    for zone in ["c", "o"] {
        let gauge = || metric(port, "rate_limit_window_in_flight", &[("zone", zone)]);
        assert!(
            wait_for(Duration::from_secs(5), || gauge() == 0.0),
            "{}",
            gauge()
        );
    }
}

/// `in_flight=1` in a zone of `size`, keyed by `X-Client`.
fn one_in_flight(size: &str) -> String {
    http_conf(&format!(
        r#"
        rate_limit_window_zone $http_x_client zone=fl:{size} window=1m;
        server {{
            listen 127.0.0.1:{{{{PORT}}}};
            location /long/ {{
                rate_limit_window zone=fl in_flight=1;
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location = /metrics {{ rate_limit_window_metrics; }}
        }}"#
    ))
}

/// The issue's second case: a reload that resizes the zone (1m to 2m)
/// while a request of an `in_flight=1` client is in flight: the new
/// workers count it (429, the gauge reads 1), the upstream never sees 2
/// at once, and the place comes back once the old worker has finished.
#[test]
fn in_flight_1_holds_through_a_resize() {
    let up = Upstream::start();
    let mut ng = Nginx::builder()
        .upstream_of(&up)
        .start(&one_in_flight("1m"));
    let port = ng.port;
    let held = send_open(port, "/long/r?sleep=4000", "gina");
    assert!(wait_for(Duration::from_secs(5), || up.concurrent("gina") == 1));
    let off = ng.error_log_len();
    reload_keeping_old(&mut ng, Some(&one_in_flight("2m"))).unwrap();
    let log = ng.error_log_since(off);
    assert!(
        log.contains("resized: 1 requests in flight carried over"),
        "{log}"
    );
    assert_eq!(
        up.concurrent("gina"),
        1,
        "still in flight in the old worker"
    );
    assert_eq!(
        at_once(port, "/long/x?sleep=500", "gina", 3),
        [429, 429, 429]
    );
    assert_eq!(
        metric(port, "rate_limit_window_in_flight", &[("zone", "fl")]),
        1.0
    );
    // The old worker answers and exits: its place in the new zone is
    // taken back (the sweep, within a second).
    assert!(wait_for(Duration::from_secs(10), || {
        as_client(port, "/long/x", "gina").status == 200
    }));
    assert_eq!(up.max_concurrent("gina"), 1, "the upstream saw 2 at once");
    drop(held);
    let gauge = || metric(port, "rate_limit_window_in_flight", &[("zone", "fl")]);
    assert!(wait_for(Duration::from_secs(5), || gauge() == 0.0));
    assert_eq!(as_client(port, "/long/x", "other").status, 200);
}

/// A shed group of `max`, every request critical (so only `max` sheds).
fn shed_of(max: u32) -> String {
    http_conf(&format!(
        r#"
        server {{
            listen 127.0.0.1:{{{{PORT}}}};
            location /s/ {{
                rate_limit_window_shed zone=cap max={max} priority=critical;
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location = /metrics {{ rate_limit_window_metrics; }}
        }}"#
    ))
}

/// The issue's third case: `max=4` then `max=8` by reload takes effect
/// (same zone size: adopted), with the 4 requests in flight still counted;
/// then `max=2` (shed at once, 8 in flight); then `max=5000`, a zone of
/// another size, which counts the old group's requests in flight.
#[test]
fn a_shed_groups_max_changes_on_reload() {
    let up = Upstream::start();
    let mut ng = Nginx::builder().upstream_of(&up).start(&shed_of(4));
    let port = ng.port;
    let in_flight = || metric(port, "rate_limit_window_shed_in_flight", &[("zone", "cap")]);
    let first: Vec<TcpStream> = (0..4)
        .map(|_| send_open(port, "/s/a?sleep=6000", "s"))
        .collect();
    assert!(wait_for(Duration::from_secs(5), || up.concurrent("s") == 4));
    assert_eq!(as_client(port, "/s/b", "t").status, 503);
    reload_keeping_old(&mut ng, Some(&shed_of(8))).unwrap();
    assert_eq!(in_flight(), 4.0);
    assert_eq!(
        at_once(port, "/s/c?sleep=3000", "s", 5),
        [200, 200, 200, 200, 503]
    );
    assert_eq!(up.max_concurrent("s"), 8);
    assert_eq!(
        metric(port, "rate_limit_window_shed_max", &[("zone", "cap")]),
        8.0
    );
    // Fewer: shed at once while 4 are still in flight.
    reload_keeping_old(&mut ng, Some(&shed_of(2))).unwrap();
    assert_eq!(as_client(port, "/s/d", "t").status, 503);
    // A zone of another size: the requests in flight are carried.
    let off = ng.error_log_len();
    reload_keeping_old(&mut ng, Some(&shed_of(5000))).unwrap();
    assert!(!ng.error_log_since(off).contains("[emerg]"));
    assert_eq!(in_flight(), 4.0, "the old group's requests in flight");
    drop(first);
    assert!(wait_for(Duration::from_secs(15), || in_flight() == 0.0));
    assert_eq!(up.max_concurrent("s"), 8);
}

/// One worker holding, when killed: two `delay=` requests (a rate of 1 per
/// 10 s), one long request with an `in_flight=` place and a shed place.
fn holding() -> String {
    http_conf(
        r#"
        rate_limit_window_zone $http_x_client zone=d:1m window=10s;
        server {
            listen 127.0.0.1:{{PORT}};
            location /d/ {
                rate_limit_window zone=d limit=1 delay=30s;
                proxy_pass http://{{UPSTREAM}};
            }
            location /long/ {
                rate_limit_window_shed zone=g max=10 priority=critical;
                rate_limit_window zone=d in_flight=5;
                proxy_pass http://{{UPSTREAM}};
            }
            location = /metrics { rate_limit_window_metrics; }
        }"#,
    )
}

/// The issue's gauges after a crash: the worker is SIGKILLed while it
/// holds two `delay=` requests and a long one; its successor takes back
/// every gauge: `delay_held`, `in_flight`, the shed group's, to 0.
#[test]
fn every_gauge_is_back_to_0_after_a_sigkill() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .workers(1)
        .upstream_of(&up)
        .start(&holding());
    let port = ng.port;
    assert_eq!(as_client(port, "/d/a", "k").status, 200);
    let held: Vec<TcpStream> = (0..2).map(|_| send_open(port, "/d/b", "k")).collect();
    let long = send_open(port, "/long/c?sleep=20000", "k");
    let gauges = || {
        [
            metric(port, "rate_limit_window_delay_held", &[("zone", "d")]),
            metric(port, "rate_limit_window_in_flight", &[("zone", "d")]),
            metric(port, "rate_limit_window_shed_in_flight", &[("zone", "g")]),
        ]
    };
    assert!(
        wait_for(Duration::from_secs(5), || gauges() == [2.0, 1.0, 1.0]),
        "{:?}",
        gauges()
    );
    let victim = ng.worker_pids();
    assert_eq!(victim.len(), 1);
    sigkill(victim[0]);
    assert!(wait_for(Duration::from_secs(10), || {
        let now = ng.worker_pids();
        now.len() == 1 && now[0] != victim[0]
    }));
    assert!(
        wait_for(Duration::from_secs(5), || gauges() == [0.0, 0.0, 0.0]),
        "{:?}",
        gauges()
    );
    drop((held, long));
    let unexplained = forget_killed_workers(&ng, &victim);
    assert!(unexplained.is_empty(), "{unexplained:?}");
}

/// The documented capacity of a `32k` zone (the smallest: 508 places),
/// one request in flight each for 508 clients, none refused; the next
/// client's request finds no room: refused under `fail=closed`, counted as
/// `no_room` (never as `untracked`, which `fail=open` admits).
#[test]
fn a_full_zone_counts_its_refusals_as_no_room() {
    const CAPACITY: usize = 508;
    let up = Upstream::start();
    let conf = http_conf(
        r#"
        rate_limit_window_zone $http_x_client zone=fl:32k window=1m fail=closed;
        server {
            listen 127.0.0.1:{{PORT}};
            location /long/ {
                rate_limit_window zone=fl in_flight=1;
                proxy_pass http://{{UPSTREAM}};
            }
            location = /metrics { rate_limit_window_metrics; }
        }"#,
    );
    let ng = Nginx::builder().upstream_of(&up).start(&conf);
    let port = ng.port;
    let held: Vec<TcpStream> = (0..CAPACITY)
        .map(|i| send_open(port, "/long/x?sleep=20000", &format!("c{i}")))
        .collect();
    let gauge = || metric(port, "rate_limit_window_in_flight", &[("zone", "fl")]);
    assert!(
        wait_for(Duration::from_secs(20), || gauge() == CAPACITY as f64),
        "{} of {CAPACITY} in flight",
        gauge()
    );
    let total = |r: &str| {
        metric(
            port,
            "rate_limit_window_in_flight_total",
            &[("zone", "fl"), ("result", r)],
        )
    };
    assert_eq!(
        total("no_room"),
        0.0,
        "refused below the documented capacity"
    );
    assert_eq!(as_client(port, "/long/y", "late").status, 429);
    assert_eq!((total("no_room"), total("untracked")), (1.0, 0.0));
    drop(held);
    assert!(wait_for(Duration::from_secs(10), || gauge() == 0.0));
    assert_eq!(as_client(port, "/long/y", "late").status, 200);
}

/// The cache manager and loader run `init_process` as worker 0, as a
/// reload's new worker 0 does: none of them takes the `delay=` turns that
/// the old worker 0 holds (turns are owned by pid, not by a worker's
/// number). Two requests held across a reload keep their turns and the
/// gauge, until they are decided.
#[test]
fn a_reload_and_the_cache_manager_keep_worker_0s_turns() {
    let up = Upstream::start();
    let conf = http_conf(
        r#"
        proxy_cache_path {{PREFIX}}/cache keys_zone=pc:1m;
        rate_limit_window_zone $http_x_client zone=d:1m window=10s;
        server {
            listen 127.0.0.1:{{PORT}};
            location /d/ {
                rate_limit_window zone=d limit=1 delay=30s;
                proxy_pass http://{{UPSTREAM}};
            }
            location = /metrics { rate_limit_window_metrics; }
        }"#,
    );
    let mut ng = Nginx::builder().workers(1).upstream_of(&up).start(&conf);
    let port = ng.port;
    assert_eq!(as_client(port, "/d/a", "k").status, 200);
    let held: Vec<TcpStream> = (0..2).map(|_| send_open(port, "/d/b", "k")).collect();
    let gauges = || {
        [
            metric(port, "rate_limit_window_delay_held", &[("zone", "d")]),
            metric(port, "rate_limit_window_delay_turns", &[("zone", "d")]),
        ]
    };
    assert!(
        wait_for(Duration::from_secs(5), || gauges() == [2.0, 2.0]),
        "{:?}",
        gauges()
    );
    reload_keeping_old(&mut ng, None).unwrap();
    assert!(has_cache_manager(&ng), "no cache manager");
    thread::sleep(Duration::from_millis(300));
    assert_eq!(gauges(), [2.0, 2.0], "the old worker's held requests");
    drop(held);
    assert!(
        wait_for(Duration::from_secs(5), || gauges() == [0.0, 0.0]),
        "{:?}",
        gauges()
    );
}
