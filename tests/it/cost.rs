//! `cost=N|$variable`: one request counts `cost` requests, against real
//! nginx (two workers) and a real upstream.
use crate::common;

use common::*;

const HOUR_MS: u128 = 3_600_000;

/// Zones `z` (fail=open) and `c` (fail=closed), keyed by `X-Key`;
/// `locations` inside the server, plus the metrics location.
fn start(up: &Upstream, locations: &str) -> Nginx {
    let conf = http_conf(
        &r#"rate_limit_window_zone $http_x_key zone=z:1m window=1h;
        rate_limit_window_zone $http_x_key zone=c:1m window=1h fail=closed;
        rate_limit_window_zone $http_x_key zone=b:1m window=1h;
        server {
            listen 127.0.0.1:{{PORT}};
            add_header X-RLW $rate_limit_window_status always;
            LOCATIONS
            location = /metrics { rate_limit_window_metrics; }
        }"#
        .replace("LOCATIONS", locations),
    );
    Nginx::builder().upstream_of(up).start(&conf)
}

fn current(port: u16, zone: &str, key: &str) -> u64 {
    key_json(port, zone, key.as_bytes())["current"]
        .as_u64()
        .unwrap()
}

#[test]
fn costs_exhaust_the_limit_in_fewer_requests() {
    let up = Upstream::start();
    let ng = start(
        &up,
        "location /bulk/ { rate_limit_window zone=z limit=100 cost=30; proxy_pass http://{{UPSTREAM}}; }
         location /one/ { rate_limit_window zone=z limit=100; proxy_pass http://{{UPSTREAM}}; }",
    );
    clear_of_boundary(HOUR_MS, 20_000);
    for rem in [70, 40, 10] {
        let r = get_key(ng.port, "/bulk/x", "k");
        assert_eq!(r.status, 200, "{}", r.describe());
        assert_eq!(r.header_num("RateLimit-Remaining"), rem);
        assert_eq!(r.header_num("RateLimit-Limit"), 100);
    }
    // 90 counted: a cost of 30 no longer fits, and Retry-After says when
    // the whole cost will: in the next window, once the 90 weigh less than
    // 71 (19/90 of the hour, 760 s, after the boundary).
    let r = get_key(ng.port, "/bulk/x", "k");
    assert_eq!(r.status, 429, "{}", r.describe());
    let retry = r.header_num("Retry-After");
    assert!((761..=3_600 + 761).contains(&retry), "Retry-After {retry}");
    assert_eq!(current(ng.port, "z", "k"), 90);
    // Single requests still fit the last ten.
    for rem in (0..10).rev() {
        let r = get_key(ng.port, "/one/x", "k");
        assert_eq!(r.status, 200, "{}", r.describe());
        assert_eq!(r.header_num("RateLimit-Remaining"), rem);
    }
    assert_eq!(get_key(ng.port, "/one/x", "k").status, 429);
    assert_eq!(current(ng.port, "z", "k"), 100);
    assert_eq!(up.received(), 3 + 10);
}

#[test]
fn costs_from_variables_and_bad_costs() {
    let up = Upstream::start();
    let ng = start(
        &up,
        "location /open/ { rate_limit_window zone=z limit=10 cost=$http_x_cost; proxy_pass http://{{UPSTREAM}}; }
         location /closed/ { rate_limit_window zone=c limit=10 cost=$http_x_cost; proxy_pass http://{{UPSTREAM}}; }",
    );
    clear_of_boundary(HOUR_MS, 20_000);
    let req = |path: &str, key: &str, cost: &str| {
        let mut h: Vec<(&str, &[u8])> = vec![("X-Key", key.as_bytes())];
        if cost != "-" {
            h.push(("X-Cost", cost.as_bytes()));
        }
        request(ng.port, "GET", path, &h)
    };
    // A cost of 4 from the request: two fit in 10, the third does not.
    let st: Vec<u16> = (0..3).map(|_| req("/open/x", "v", "4").status).collect();
    assert_eq!(st, [200, 200, 429]);
    assert_eq!(current(ng.port, "z", "v"), 8);
    // Bad costs: not a number, empty, zero, negative, too long. Never a
    // way past the limit: fail=open charges the whole limit (10), so the
    // first one, in an empty window, is served and counts 10, every later
    // one is refused; fail=closed rejects. Each is counted; the first of
    // an episode is logged, once per zone.
    let bad = ["abc", "-", "", "0", "-1", "1e3", "0x5", "99999999999"];
    for (i, b) in bad.iter().enumerate() {
        let r = req("/open/x", "bad", b);
        let want = if i == 0 {
            (200, "PASSED")
        } else {
            (429, "REJECTED")
        };
        assert_eq!(
            (r.status, r.header("X-RLW")),
            (want.0, Some(want.1)),
            "cost {b:?}"
        );
        let r = req("/closed/x", "bad", b);
        assert_eq!(r.status, 429, "cost {b:?}: {}", r.describe());
    }
    assert_eq!(current(ng.port, "z", "bad"), 10);
    assert_eq!(current(ng.port, "c", "bad"), 0);
    let m = metrics_text(ng.port);
    let n = bad.len() as f64;
    for zone in ["z", "c"] {
        assert_eq!(
            prom_value(
                &m,
                "rate_limit_window_invalid_limit_total",
                &[("zone", zone)]
            ),
            Some(n),
            "{m}"
        );
    }
    assert_eq!(
        prom_value(&m, "rate_limit_window_fail_closed_total", &[("zone", "c")]),
        Some(n),
        "{m}"
    );
    let log = ng.error_log();
    assert_eq!(count_lines(&log, "invalid cost"), 2, "{log}");
    assert_eq!(
        count_lines(
            &log,
            "invalid cost \"abc\" for zone \"z\" (an integer from 1), charging the whole limit \
             (10) under fail=open"
        ),
        1,
        "{log}"
    );
    assert_eq!(
        count_lines(&log, "invalid cost \"abc\" for zone \"c\""),
        1,
        "{log}"
    );
    // A cost above the limit is no bad value: it never fits, so it is
    // rejected under either policy, counted by neither, not logged as
    // invalid.
    for path in ["/open/x", "/closed/x"] {
        let r = req(path, "big", "11");
        assert_eq!(r.status, 429, "{path}: {}", r.describe());
    }
    assert_eq!(current(ng.port, "z", "big"), 0);
    assert_eq!(count_lines(&ng.error_log(), "invalid cost \"11\""), 0);
    // A good cost on the closed zone still works.
    assert_eq!(req("/closed/x", "ok", "10").status, 200);
    assert_eq!(req("/closed/x", "ok", "1").status, 429);
}

#[test]
fn dry_run_and_undo_follow_the_cost() {
    let up = Upstream::start();
    let ng = start(
        &up,
        "location /dry/ { rate_limit_window_dry_run on; rate_limit_window zone=z limit=10 cost=4; proxy_pass http://{{UPSTREAM}}; }
         location /two/ { rate_limit_window zone=z limit=100 cost=10; rate_limit_window zone=b limit=1; proxy_pass http://{{UPSTREAM}}; }",
    );
    clear_of_boundary(HOUR_MS, 20_000);
    let st: Vec<String> = (0..3)
        .map(|_| {
            let r = get_key(ng.port, "/dry/x", "d");
            assert_eq!(r.status, 200);
            r.header("X-RLW").unwrap_or("").to_string()
        })
        .collect();
    assert_eq!(st, ["PASSED", "PASSED", "REJECTED_DRY_RUN"]);
    assert_eq!(
        current(ng.port, "z", "d"),
        8,
        "the would-be rejection is not counted"
    );
    // The second request is rejected by zone b: its cost of 10 in zone z
    // is given back whole.
    assert_eq!(get_key(ng.port, "/two/x", "u").status, 200);
    assert_eq!(get_key(ng.port, "/two/x", "u").status, 429);
    assert_eq!(current(ng.port, "z", "u"), 10);
    assert_eq!(current(ng.port, "b", "u"), 1);
}

#[test]
fn nginx_t_refuses_bad_fixed_costs() {
    for (params, msg) in [
        ("limit=10 cost=11", "cost=11 is above limit=10"),
        ("limit=10 cost=0", "invalid cost \"0\""),
        ("limit=10 cost=x", "invalid cost \"x\""),
        ("limit=10 cost=2 cost=3", "duplicate parameter \"cost=\""),
    ] {
        let conf = http_conf(&format!(
            "rate_limit_window_zone $binary_remote_addr zone=z:1m;
             server {{ listen 127.0.0.1:{{{{PORT}}}}; location / {{ rate_limit_window zone=z {params}; }} }}"
        ));
        let (ok, out) = test_config(&conf);
        assert!(!ok && out.contains(msg), "{params}: {out}");
    }
    let conf = http_conf(
        "rate_limit_window_zone $binary_remote_addr zone=z:1m;
         server { listen 127.0.0.1:{{PORT}}; location / { rate_limit_window zone=z limit=10 cost=10; } }",
    );
    assert!(test_config(&conf).0);
}
