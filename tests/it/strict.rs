//! `mode=strict` zones in a real nginx: the boundary burst the estimate lets
//! through, Retry-After that a client can honour, the bound under four
//! workers and 40 connections, the key lookup, reloads and the refused
//! configurations.
use crate::common;

use std::time::{Duration, Instant};

use common::*;

/// 2024-01-01T00:00:00Z, a multiple of every window used here.
const T0: i64 = 1_704_067_200;

fn zones() -> &'static str {
    "rate_limit_window_zone $http_x_key zone=s:1m window=10s mode=strict;
     rate_limit_window_zone $http_x_key zone=e:1m window=10s;"
}

fn conf(zones: &str) -> String {
    proxy_conf(
        zones,
        "",
        "add_header X-Msec $msec always;
         location = /metrics { rate_limit_window_metrics; }
         location /e { rate_limit_window zone=e limit=10; proxy_pass http://{{UPSTREAM}}; }",
        "rate_limit_window zone=s limit=10;",
    )
}

/// `n` requests of key `k` on `path`: the responses.
fn send(ng: &Nginx, path: &str, n: usize) -> Vec<Response> {
    (0..n).map(|_| get_key(ng.port, path, "k")).collect()
}

fn statuses(rs: &[Response]) -> Vec<u16> {
    rs.iter().map(|r| r.status).collect()
}

/// The scenario on whole seconds: 10 requests 1 s before a window
/// boundary, 10 more 9 s later. The estimate admits 8 of the second burst
/// (18 in 9 s); strict admits none, says Retry-After: 2, and a client that
/// waits exactly that long is admitted.
#[test]
fn boundary_burst_ten_then_zero_and_retry_after_is_honoured() {
    let up = Upstream::start();
    let b = T0 + 100;
    let clock = FakeClock::new(b - 1);
    let ng = start_faked(&clock, &up, "UTC", &conf(zones()));
    let first = send(&ng, "/", 10);
    assert_eq!(statuses(&first), [200; 10]);
    let rem: Vec<i64> = first
        .iter()
        .map(|r| r.header_num("RateLimit-Remaining"))
        .collect();
    assert_eq!(rem, [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
    assert_eq!(statuses(&send(&ng, "/e", 10)), [200; 10]);

    clock.set(b + 8);
    let second = send(&ng, "/", 10);
    assert_eq!(statuses(&second), [429; 10], "strict: 10 then 0");
    for r in &second {
        // The first burst leaves the span with its sub-window at b + 10.
        assert_eq!(r.header_num("Retry-After"), 2, "{}", r.describe());
        assert_eq!(r.header_num("RateLimit-Remaining"), 0);
    }
    let est = statuses(&send(&ng, "/e", 10));
    assert_eq!(est.iter().filter(|&&s| s == 200).count(), 8, "{est:?}");

    // The key lookup shows the sub-window counts: 10 in the sub-window of
    // b - 1, five sub-windows before the one of b + 8.
    let r = get(ng.port, "/metrics?zone=s&key=k");
    assert_eq!(r.status, 200, "{}", r.describe());
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["mode"], "strict", "{v}");
    let counts: Vec<u64> = v["sub_window_counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert_eq!(counts, [0, 0, 0, 0, 0, 10, 0], "{v}");
    assert_eq!(v["total"], 10);

    clock.set(b + 9);
    let r = get_key(ng.port, "/", "k");
    assert_eq!((r.status, r.header_num("Retry-After")), (429, 1));
    clock.set(b + 10);
    let r = get_key(ng.port, "/", "k");
    assert_eq!(r.status, 200, "honouring Retry-After: {}", r.describe());
    assert_eq!(r.header_num("RateLimit-Remaining"), 9);
}

/// Parses `$msec` ("1704067200.123") into epoch ms.
fn msec(s: &str) -> u64 {
    let (sec, ms) = s.split_once('.').unwrap();
    sec.parse::<u64>().unwrap() * 1000 + ms.parse::<u64>().unwrap()
}

/// Four workers, 40 connections, one key, real clock for about 7 s: no
/// interval of one window (by each response's `$msec`, the time the
/// decision used) holds more than the limit, and the key still gets most of
/// its limit per window.
#[test]
fn four_workers_forty_connections_never_exceed_the_limit() {
    let (w_ms, limit) = (2_000u64, 20usize);
    let ng = Nginx::builder().workers(4).start(&http_conf(
        "rate_limit_window_zone $http_x_key zone=s:1m window=2s mode=strict;
         server {
             listen 127.0.0.1:{{PORT}} reuseport;
             location = /metrics { rate_limit_window_metrics; }
             location /gif {
                 rate_limit_window zone=s limit=20;
                 add_header X-Msec $msec always;
                 empty_gif;
             }
         }",
    ));
    let start = Instant::now();
    let mut admitted = vec![];
    let mut rejected = 0;
    while start.elapsed() < Duration::from_secs(7) {
        let got = hammer_collect(ng.port, 400, 40, "X-Msec", |_| {
            (
                "/gif".to_string(),
                vec![("X-Key".to_string(), b"k".to_vec())],
            )
        });
        for (status, t) in got {
            match status {
                200 => admitted.push(msec(&t.expect("X-Msec on 200"))),
                429 => rejected += 1,
                s => panic!("status {s}"),
            }
        }
    }
    admitted.sort_unstable();
    let mut lo = 0;
    let mut worst = 0;
    for hi in 0..admitted.len() {
        while admitted[lo] + w_ms <= admitted[hi] {
            lo += 1;
        }
        worst = worst.max(hi - lo + 1);
    }
    let span_ms = admitted.last().unwrap() - admitted[0];
    let per_window = admitted.len() as f64 * w_ms as f64 / (span_ms + w_ms) as f64;
    eprintln!(
        "strict, 4 workers, 40 connections: {} admitted, {rejected} rejected, worst interval {worst}, {per_window:.1} per window",
        admitted.len()
    );
    assert!(rejected > 0);
    assert_eq!(worst, limit, "the limit is reached, never passed");
    // A worker whose cached clock lagged behind another's is refreshed and
    // decided again: that is not a clock step.
    let text = metrics_text(ng.port);
    let back = prom_value(
        &text,
        "rate_limit_window_clock_backwards_total",
        &[("zone", "s")],
    );
    assert_eq!(back, Some(0.0), "{text}");
    assert!(per_window >= 0.7 * limit as f64, "{per_window}");
}

/// A reload keeps a strict zone's counts; changing its mode on reload is
/// refused with the old configuration still serving.
#[test]
fn reload_keeps_counts_and_refuses_a_mode_change() {
    let up = Upstream::start();
    let clock = FakeClock::new(T0 + 1);
    let mut ng = start_faked(&clock, &up, "UTC", &conf(zones()));
    assert_eq!(statuses(&send(&ng, "/", 11))[10], 429);
    ng.reload();
    let r = get_key(ng.port, "/", "k");
    assert_eq!(r.status, 429, "counts survive the reload: {}", r.describe());

    let changed = conf(
        "rate_limit_window_zone $http_x_key zone=s:1m window=10s mode=estimate;
         rate_limit_window_zone $http_x_key zone=e:1m window=10s;",
    );
    let err = ng.try_reload_with(&changed).unwrap_err();
    assert!(
        err.contains("was created with mode=strict; it cannot change to mode=estimate on reload"),
        "{err}"
    );
    assert_eq!(get_key(ng.port, "/", "k").status, 429, "old config serves");
}

/// `nginx -t` refuses `mode=strict` with `redis=` and an unknown mode.
#[test]
fn refused_configurations() {
    let with_redis = conf(
        "rate_limit_window_zone $http_x_key zone=s:1m mode=strict redis=127.0.0.1:6379;
         rate_limit_window_zone $http_x_key zone=e:1m window=10s;",
    );
    let (ok, out) = test_config(&with_redis);
    assert!(!ok);
    assert!(
        out.contains("[emerg]")
            && out.contains("\"mode=strict\" cannot be combined with \"redis=\""),
        "{out}"
    );
    let bogus = conf(
        "rate_limit_window_zone $http_x_key zone=s:1m mode=exact;
         rate_limit_window_zone $http_x_key zone=e:1m window=10s;",
    );
    let (ok, out) = test_config(&bogus);
    assert!(!ok);
    assert!(
        out.contains("invalid mode \"exact\": use \"estimate\" or \"strict\""),
        "{out}"
    );
    let (ok, out) = test_config(&conf(zones()));
    assert!(ok, "{out}");
}

/// Several limits in one location, one of them strict: a rejection by the
/// strict limit consumes nothing of the other; `limit=$var`, the
/// variables and dry run work as in an estimate zone.
#[test]
fn several_limits_variables_and_dry_run() {
    let up = Upstream::start();
    let clock = FakeClock::new(T0 + 1);
    let ng = start_faked(
        &clock,
        &up,
        "UTC",
        &proxy_conf(
            "rate_limit_window_zone $http_x_key zone=s:1m window=10s mode=strict;
             rate_limit_window_zone $http_x_key zone=e:1m window=10s;
             rate_limit_window_zone $http_x_key zone=d:1m window=10s mode=strict;",
            "",
            "add_header X-St $rate_limit_window_status always;
             add_header X-Rem $rate_limit_window_remaining always;
             location = /metrics { rate_limit_window_metrics; }
             location /dry {
                 rate_limit_window zone=d limit=2;
                 rate_limit_window_dry_run on;
                 proxy_pass http://{{UPSTREAM}};
             }",
            "rate_limit_window zone=e limit=100;
             rate_limit_window zone=s limit=$http_x_limit;",
        ),
    );
    let req = |path: &str| {
        request(
            ng.port,
            "GET",
            path,
            &[("X-Key", b"k".as_slice()), ("X-Limit", b"3".as_slice())],
        )
    };
    let rs: Vec<Response> = (0..6).map(|_| req("/")).collect();
    assert_eq!(statuses(&rs), [200, 200, 200, 429, 429, 429]);
    let rem: Vec<&str> = rs.iter().map(|r| r.header("X-Rem").unwrap()).collect();
    assert_eq!(rem[..3], ["2", "1", "0"]);
    assert_eq!(rs[3].header("X-St"), Some("REJECTED"));
    // The estimate zone counted only the three admitted requests.
    let r = get(ng.port, "/metrics?zone=e&key=k");
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["current"], 3, "{v}");

    // Dry run: everything passes, the third is marked.
    let rs: Vec<Response> = (0..3).map(|_| req("/dry")).collect();
    assert_eq!(statuses(&rs), [200, 200, 200]);
    assert_eq!(rs[2].header("X-St"), Some("REJECTED_DRY_RUN"));
}

/// `delay=` on a strict zone: a burst of 8 under limit 5 gets 5 at once;
/// the 3 others are held until the burst's sub-window has left the span
/// (7 sub-windows of 2s / 6 later) and then admitted, so that no interval
/// of one window ever holds more than 5.
#[test]
fn delay_holds_until_the_strict_span_allows() {
    let ng = Nginx::builder().start(&http_conf(
        "rate_limit_window_zone $http_x_key zone=s:1m window=2s mode=strict;
         server {
             listen 127.0.0.1:{{PORT}};
             location /gif {
                 rate_limit_window zone=s limit=5 delay=5s;
                 add_header X-Msec $msec always;
                 add_header X-St $rate_limit_window_status always;
                 empty_gif;
             }
         }",
    ));
    let port = ng.port;
    let handles: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let r = request(port, "GET", "/gif", &[("X-Key", b"k".as_slice())]);
                let t = msec(r.header("X-Msec").expect("X-Msec"));
                (r.status, r.header("X-St").unwrap_or("").to_string(), t)
            })
        })
        .collect();
    let mut got: Vec<(u16, String, u64)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    got.sort_by_key(|g| g.2);
    assert!(got.iter().all(|g| g.0 == 200), "{got:?}");
    let passed: Vec<u64> = got
        .iter()
        .filter(|g| g.1 == "PASSED")
        .map(|g| g.2)
        .collect();
    let delayed: Vec<u64> = got
        .iter()
        .filter(|g| g.1 == "DELAYED")
        .map(|g| g.2)
        .collect();
    assert_eq!((passed.len(), delayed.len()), (5, 3), "{got:?}");
    // No room before the oldest sub-window of the five passed ones leaves
    // the span, 7 sub-windows after it began; all room once the newest has.
    let sub = |t: &u64| t * 6 / 2_000;
    let start = |j: u64| (j * 2_000).div_ceil(6);
    let free_at = start(passed.iter().map(sub).min().unwrap() + 7);
    let all_free = start(passed.iter().map(sub).max().unwrap() + 7);
    for &t in &delayed {
        assert!(t >= free_at, "admitted at {t}, before {free_at}: {got:?}");
        assert!(t < all_free + 1_500, "held too long: {t} vs {all_free}");
    }
    let all: Vec<u64> = got.iter().map(|g| g.2).collect();
    for (i, &t) in all.iter().enumerate() {
        let n = all[..=i].iter().filter(|&&a| a + 2_000 > t).count();
        assert!(n <= 5, "{n} in the window ending at {t}: {got:?}");
    }
}
