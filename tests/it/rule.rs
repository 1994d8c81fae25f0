//! The rule in the engine, end to end against a real nginx (2 workers) and
//! a real upstream (issue 51): a dry run never sheds; only a refusal by the
//! count bans; a bad cost is never a way past the limit and floods no log;
//! a held request woken exempt or shed gives its hold back; a refusal for
//! a client's share of `delay=` says when its turn comes; an invalid
//! `limit=` value under `fail=open` has one name.
use crate::common;

use crate::delay::{delayed, held};
use common::*;
use std::thread;
use std::time::Duration;

/// One request of client `client` (X-Client, which the upstream counts)
/// and key `key` to `path`.
fn client_get(port: u16, path: &str, key: &str, client: &str) -> Response {
    request(
        port,
        "GET",
        path,
        &[("X-Key", key.as_bytes()), ("X-Client", client.as_bytes())],
    )
}

/// `rate_limit_window_dry_run on` beside a shed group of max=1: a request
/// beyond the group is let through (logged "would shed"), never a 503.
#[test]
fn a_dry_run_never_sheds() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $http_x_key zone=rate:1m window=1m;
        server {
            listen 127.0.0.1:{{PORT}};
            add_header X-RLW $rate_limit_window_status always;
            location /s/ {
                rate_limit_window_dry_run on;
                rate_limit_window_shed zone=cap max=1 priority=critical;
                rate_limit_window zone=rate limit=100;
                proxy_pass http://{{UPSTREAM}};
            }
            location = /metrics { rate_limit_window_metrics; }
        }"#,
    ));
    let port = ng.port;
    let slow = thread::spawn(move || client_get(port, "/s/1?sleep=2000", "k", "c1"));
    assert!(wait_for(Duration::from_secs(5), || up.concurrent("c1") == 1));
    for i in 0..3 {
        let r = client_get(port, &format!("/s/{i}"), "k", "c2");
        assert_eq!(
            (r.status, r.header("X-RLW")),
            (200, Some("PASSED")),
            "{}",
            r.describe()
        );
    }
    assert_eq!(slow.join().unwrap().status, 200);
    let text = metrics_text(port);
    let shed = prom_value(
        &text,
        "rate_limit_window_shed_total",
        &[("zone", "cap"), ("priority", "critical")],
    );
    assert_eq!(shed, Some(0.0), "{text}");
    let log = ng.error_log();
    assert_eq!(
        count_lines(
            &log,
            "dry run, would shed request by rate_limit_window_shed zone \"cap\", in flight: 1, priority: critical"
        ),
        3,
        "{log}"
    );
    assert_eq!(count_lines(&log, "shedding request"), 0, "{log}");
}

/// `limit=5 cost=$http_x_cost ban=15m`: a cost of 6 can never fit; it is
/// refused without a ban, and so is an invalid cost (fail=closed). A
/// refusal by the count still bans.
#[test]
fn only_a_refusal_by_the_count_bans() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&proxy_conf(
        "rate_limit_window_zone $http_x_key zone=b:1m window=1m fail=closed;",
        "",
        "add_header X-RLW $rate_limit_window_status always;",
        "rate_limit_window zone=b limit=5 cost=$http_x_cost ban=15m;",
    ));
    let req = |key: &str, cost: &str| {
        request(
            ng.port,
            "GET",
            "/",
            &[("X-Key", key.as_bytes()), ("X-Cost", cost.as_bytes())],
        )
    };
    clear_of_boundary(60_000, 10_000);
    for bad in ["6", "abc"] {
        let r = req("k", bad);
        assert_eq!(r.status, 429, "cost {bad}: {}", r.describe());
        assert!(r.header_num("Retry-After") < 900, "{}", r.describe());
        let r = req("k", "1");
        assert_eq!(r.status, 200, "banned by cost {bad}: {}", r.describe());
    }
    // 1 + 1 counted: a cost of 4 does not fit the 3 left, and bans.
    assert_eq!(req("k", "3").status, 200);
    let r = req("k", "4");
    assert_eq!(r.status, 429, "{}", r.describe());
    assert!(r.header_num("Retry-After") >= 900, "{}", r.describe());
    assert_eq!(req("k", "1").status, 429, "banned");
    let log = ng.error_log();
    assert_eq!(count_lines(&log, "banned for 900s"), 1, "{log}");
}

/// `cost=$http_x_cost` at `limit=5`, a client sending `X-Cost: abc` 200
/// times: under fail=open it is charged the whole limit (1 admitted),
/// under fail=closed refused; one log line per zone.
#[test]
fn a_bad_cost_is_never_a_way_past_the_limit() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $http_x_key zone=o:1m window=1m;
        rate_limit_window_zone $http_x_key zone=c:1m window=1m fail=closed;
        server {
            listen 127.0.0.1:{{PORT}};
            location /o/ { rate_limit_window zone=o limit=5 cost=$http_x_cost; proxy_pass http://{{UPSTREAM}}; }
            location /c/ { rate_limit_window zone=c limit=5 cost=$http_x_cost; proxy_pass http://{{UPSTREAM}}; }
            location = /metrics { rate_limit_window_metrics; }
        }"#,
    ));
    clear_of_boundary(60_000, 20_000);
    let mut admitted = [0, 0];
    for _ in 0..200 {
        for (i, path) in ["/o/x", "/c/x"].iter().enumerate() {
            let r = request(
                ng.port,
                "GET",
                path,
                &[("X-Key", b"flood"), ("X-Cost", b"abc")],
            );
            admitted[i] += u32::from(r.status == 200);
        }
    }
    assert_eq!(admitted, [1, 0], "admitted of 200 (fail=open, fail=closed)");
    assert_eq!(up.received(), 1);
    let text = metrics_text(ng.port);
    for zone in ["o", "c"] {
        let n = prom_value(
            &text,
            "rate_limit_window_invalid_limit_total",
            &[("zone", zone)],
        );
        assert_eq!(n, Some(200.0), "{text}");
    }
    let log = ng.error_log();
    assert_eq!(count_lines(&log, "invalid cost"), 2, "{log}");
    assert_eq!(
        count_lines(&log, "invalid cost \"abc\" for zone \"o\""),
        1,
        "{log}"
    );
}

/// Zone `z` (window 4 s, overrides), `/` limited by `loc`, the writable
/// API at `/api`; responses carry the status and the delay.
fn hold_conf(loc: &str, extra: &str) -> String {
    proxy_conf(
        "rate_limit_window_zone $http_x_key zone=z:1m window=4s;",
        "",
        &format!(
            "add_header X-RLW $rate_limit_window_status always;
             add_header X-RLW-Delay $rate_limit_window_delay always;
             location = /api {{ rate_limit_window_metrics write=on; }}
             location = /metrics {{ rate_limit_window_metrics; }}
             {extra}"
        ),
        loc,
    )
}

/// A held request exempted by an operator while it waits: exempt when it
/// wakes, its hold given back (the `delay_held` gauge back to 0, counted
/// admitted, not abandoned), its wait in `$rate_limit_window_delay`, and a
/// log line.
#[test]
fn a_held_request_woken_exempt_gives_its_hold_back() {
    let clock = ShiftedClock::new();
    let up = Upstream::start();
    let ng = clock.builder().upstream_of(&up).start(&hold_conf(
        "rate_limit_window zone=z limit=1 delay=6s delay_max_held=1;",
        "",
    ));
    clock.jump_to_window_offset(4_000, 100);
    assert_eq!(get_key(ng.port, "/", "v").status, 200);
    let port = ng.port;
    let waiting = thread::spawn(move || get_key(port, "/", "v"));
    assert!(wait_for(Duration::from_secs(5), || held(port) == 1.0));
    let put = crate::overrides::send_body(
        port,
        "PUT",
        "/api?zone=z&key=v",
        br#"{"exempt":true}"#,
        false,
    );
    assert_eq!(put.status, 200, "{}", put.describe());
    let r = waiting.join().unwrap();
    assert_eq!(
        (r.status, r.header("X-RLW")),
        (200, Some("EXEMPT")),
        "{}",
        r.describe()
    );
    assert!(r.header_num("X-RLW-Delay") > 0, "{}", r.describe());
    assert_eq!(held(port), 0.0);
    assert_eq!(delayed(port, "admitted"), 1.0);
    assert_eq!(delayed(port, "abandoned"), 0.0);
    let log = ng.error_log();
    assert_eq!(
        count_lines(&log, "delayed request exempt when it woke"),
        1,
        "{log}"
    );
}

/// A held request whose location's shed group is full when it wakes: shed
/// (503), its hold given back (gauge 0, counted rejected, not abandoned).
#[test]
fn a_held_request_woken_shed_gives_its_hold_back() {
    let clock = ShiftedClock::new();
    let up = Upstream::start();
    let ng = clock.builder().upstream_of(&up).start(&hold_conf(
        "rate_limit_window_shed zone=cap max=1 priority=critical;
         rate_limit_window zone=z limit=1 delay=6s;",
        "",
    ));
    clock.jump_to_window_offset(4_000, 100);
    let port = ng.port;
    assert_eq!(client_get(port, "/", "v", "a").status, 200);
    // Its group place comes back when its pool is freed, after the answer.
    let group = || {
        let text = metrics_text(port);
        prom_value(
            &text,
            "rate_limit_window_shed_in_flight",
            &[("zone", "cap")],
        )
    };
    assert!(wait_for(Duration::from_secs(3), || group() == Some(0.0)));
    let waiting = thread::spawn(move || client_get(port, "/", "v", "a"));
    if !wait_for(Duration::from_secs(5), || held(port) == 1.0) {
        let r = waiting.join().unwrap();
        panic!("not held: {}\n{}", r.describe(), ng.error_log());
    }
    // Another client fills the group (one place) until after the wake.
    let slow = thread::spawn(move || client_get(port, "/?sleep=6000", "w", "b"));
    assert!(wait_for(Duration::from_secs(5), || up.concurrent("b") == 1));
    let r = waiting.join().unwrap();
    assert_eq!(
        (r.status, r.header("X-RLW")),
        (503, Some("SHED")),
        "{}",
        r.describe()
    );
    assert_eq!(held(port), 0.0);
    assert_eq!(delayed(port, "rejected"), 1.0);
    assert_eq!(delayed(port, "abandoned"), 0.0);
    let log = ng.error_log();
    assert_eq!(
        count_lines(&log, "delayed request shed when it woke"),
        1,
        "{log}"
    );
    assert_eq!(slow.join().unwrap().status, 200);
}

/// `limit=1 delay=12s`, window 10 s: the second request is held until the
/// next window; the third, behind it, would be admitted a window later
/// still (past its delay): refused at once, with the Retry-After of its
/// own turn (about 20 s), not of the count alone (about 10 s).
#[test]
fn a_share_full_refusal_waits_for_its_turn() {
    let clock = ShiftedClock::new();
    let up = Upstream::start();
    let ng = clock.builder().upstream_of(&up).start(&proxy_conf(
        "rate_limit_window_zone $http_x_key zone=z:1m window=10s;",
        "",
        "add_header X-RLW $rate_limit_window_status always;
         location = /metrics { rate_limit_window_metrics; }",
        "rate_limit_window zone=z limit=1 delay=12s;",
    ));
    clock.jump_to_window_offset(10_000, 100);
    let port = ng.port;
    assert_eq!(get_key(port, "/", "s").status, 200);
    let first = thread::spawn(move || get_key(port, "/", "s"));
    assert!(wait_for(Duration::from_secs(5), || held(port) == 1.0));
    let sent = clock.now_ms();
    let r = get_key(port, "/", "s");
    assert_eq!(
        (r.status, r.header("X-RLW")),
        (429, Some("REJECTED")),
        "{}",
        r.describe()
    );
    // Its turn: the held one is admitted 1 ms into the next window, this
    // one 1 ms into the window after.
    let turn = (sent / 10_000 + 2) * 10_000 + 1;
    let want = (turn - sent).div_ceil(1_000) as i64;
    let retry = r.header_num("Retry-After");
    assert!(
        (want - 1..=want).contains(&retry),
        "Retry-After {retry}, its turn in {} ms",
        turn - sent
    );
    assert!(retry >= 19, "Retry-After {retry}");
    let log = ng.error_log();
    assert_eq!(count_lines(&log, "its share of delay"), 1, "{log}");
    drop(ng);
    let _ = first.join();
}

/// An invalid `limit=$var` under fail=open skips the limit: `EXEMPT` in
/// `$rate_limit_window_status`, in the zone's exempt count and in the
/// module's decided count alike.
#[test]
fn an_invalid_limit_under_fail_open_has_one_name() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&proxy_conf(
        "rate_limit_window_zone $http_x_key zone=z:1m window=1m;",
        "",
        "add_header X-RLW $rate_limit_window_status always;
         location = /metrics { rate_limit_window_metrics; }",
        "rate_limit_window zone=z limit=$http_x_limit;",
    ));
    for _ in 0..3 {
        let r = request(
            ng.port,
            "GET",
            "/",
            &[("X-Key", b"i"), ("X-Limit", b"lots")],
        );
        assert_eq!((r.status, r.header("X-RLW")), (200, Some("EXEMPT")));
    }
    let text = metrics_text(ng.port);
    let zone = prom_value(
        &text,
        "rate_limit_window_requests_total",
        &[("zone", "z"), ("result", "exempt")],
    );
    let decided = prom_value(
        &text,
        "rate_limit_window_decided_total",
        &[("result", "exempt")],
    );
    assert_eq!((zone, decided), (Some(3.0), Some(3.0)), "{text}");
}
