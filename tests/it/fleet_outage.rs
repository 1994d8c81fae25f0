//! `redis_outage=` (issue 50): three gateways (2 workers each) that saw
//! each other through a real Redis, which is then killed. Zone `s`
//! (`redis_outage=share`): one client spread over the three gets at most
//! 1.2 × the limit; zone `c` (`redis_outage=closed`): refused, but an
//! exempt client passes; an invalid `cost=` is charged the share in force,
//! not the limit. The metric and the log say which is in force.
use crate::common;
use crate::overrides::{json, send_body, Redis};

use std::time::Duration;

use common::*;

fn gateway(redis: u16, up: &Upstream) -> Nginx {
    Nginx::builder().upstream_of(up).start(&proxy_conf(
        &format!(
            "rate_limit_window_zone $http_x_key zone=s:1m window=60s redis=127.0.0.1:{redis} \
             sync=100ms secret=fleet-outage-share-001 redis_outage=share;
             rate_limit_window_zone $http_x_key zone=c:1m window=60s redis=127.0.0.1:{redis} \
             sync=100ms secret=fleet-outage-closed-01 redis_outage=closed;"
        ),
        "reuseport",
        "location /c { rate_limit_window zone=c limit=30; proxy_pass http://{{UPSTREAM}}; }
         location /cost { rate_limit_window zone=s limit=30 cost=$arg_cost; proxy_pass http://{{UPSTREAM}}; }
         location = /api { rate_limit_window_metrics write=on; }
         location = /metrics { rate_limit_window_metrics; }",
        "rate_limit_window zone=s limit=30;",
    ))
}

fn zone_value(ng: &Nginx, name: &str, labels: &[(&str, &str)]) -> f64 {
    prom_value(&get(ng.port, "/metrics").text(), name, labels).unwrap_or(-1.0)
}

#[test]
fn share_keeps_a_spread_client_near_the_limit_and_closed_refuses() {
    let redis = Redis::start();
    let up = Upstream::start();
    let gws: Vec<Nginx> = (0..3).map(|_| gateway(redis.1, &up)).collect();
    let r = send_body(
        gws[0].port,
        "PUT",
        "/api?zone=c&key=partner",
        br#"{"exempt":true}"#,
        false,
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    let seen = wait_for(Duration::from_secs(15), || {
        gws.iter().all(|g| {
            ["s", "c"]
                .iter()
                .all(|z| zone_value(g, "rate_limit_window_sync_peers", &[("zone", z)]) == 3.0)
                && get(g.port, "/api?zone=c&key=partner")
                    .text()
                    .contains("\"exempt\"")
        })
    });
    assert!(seen, "the gateways never saw each other");
    drop(redis);
    let out = wait_for(Duration::from_secs(10), || {
        gws.iter().all(|g| {
            zone_value(
                g,
                "rate_limit_window_redis_outage",
                &[("zone", "s"), ("policy", "share")],
            ) == 1.0
                && zone_value(
                    g,
                    "rate_limit_window_redis_outage",
                    &[("zone", "c"), ("policy", "closed")],
                ) == 1.0
        })
    });
    assert!(out, "the outage policy never in force");
    let mut admitted = 0;
    for i in 0..90 {
        if get_key(gws[i % 3].port, "/", "spread").status == 200 {
            admitted += 1;
        }
    }
    eprintln!("redis_outage=share: {admitted} of 90 admitted at limit 30 over 3 gateways");
    assert!(admitted <= 36, "{admitted} admitted, more than 1.2 x 30");
    assert!(
        admitted >= 27,
        "{admitted} admitted: the shares are 10 each"
    );
    // An invalid cost is charged the whole limit in force: the share (10),
    // not the configured 30 (which left the client nothing once Redis came
    // back).
    let r = get_key(gws[1].port, "/cost?cost=lots", "bad-cost");
    assert_eq!(r.status, 200, "{}", r.describe());
    let current = json(&get(gws[1].port, "/api?zone=s&key=bad-cost"))["current"].as_f64();
    assert_eq!(
        current,
        Some(10.0),
        "charged the share of 30 over 3 gateways"
    );
    assert!(gws[1].error_log().contains("charging the whole limit (10)"));
    for g in &gws {
        assert_eq!(get_key(g.port, "/c", "anyone").status, 429);
        assert_eq!(get_key(g.port, "/c", "partner").status, 200);
        let log = g.error_log();
        assert!(log.contains("(redis_outage=share)"), "{log}");
        assert!(
            log.contains("refusing the requests that need the fleet (redis_outage=closed)"),
            "{log}"
        );
    }
}
