//! The fleet's edges (issue 50): a `cidr=0.0.0.0/0` override is shared
//! through Redis like any range, and an override of the fleet that finds
//! no room in a gateway's table is counted and logged there. Two gateways
//! (2 workers each) on a real Redis.
use crate::common;
use crate::overrides::{json, send_body, Redis};

use std::time::Duration;

use common::*;

/// A gateway of zone `e` (`$binary_remote_addr` from `X-Forwarded-For`,
/// limit 100) with room for `overrides` overrides, syncing through Redis.
fn gateway(redis: &Redis, up: &Upstream, overrides: u32) -> Nginx {
    Nginx::builder().upstream_of(up).start(&http_conf(&format!(
        r#"rate_limit_window_zone $binary_remote_addr zone=e:1m window=60s overrides={overrides}
            redis=127.0.0.1:{} sync=100ms secret=fleet-edges-000000001;
        server {{
            listen 127.0.0.1:{{{{PORT}}}} reuseport;
            set_real_ip_from 127.0.0.1;
            real_ip_header X-Forwarded-For;
            location / {{ rate_limit_window zone=e limit=100; proxy_pass http://{{{{UPSTREAM}}}}; }}
            location = /api {{ rate_limit_window_metrics write=on; }}
            location = /metrics {{ rate_limit_window_metrics; }}
        }}"#,
        redis.1
    )))
}

fn put(ng: &Nginx, what: &str) {
    let path = format!("/api?zone=e&{what}");
    let r = send_body(ng.port, "PUT", &path, br#"{"block":true}"#, false);
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(json(&r)["cluster"], "scheduled", "{}", r.describe());
}

fn from(ng: &Nginx, addr: &str) -> u16 {
    let h: &[(&str, &[u8])] = &[("X-Forwarded-For", addr.as_bytes())];
    request(ng.port, "GET", "/", h).status
}

#[test]
fn the_whole_range_is_shared_and_a_misfit_is_counted_and_logged() {
    let redis = Redis::start();
    let up = Upstream::start();
    let (a, b) = (gateway(&redis, &up, 16), gateway(&redis, &up, 2));
    assert_eq!(from(&b, "10.9.9.9"), 200);
    put(&a, "cidr=0.0.0.0/0");
    let shared = wait_for(Duration::from_secs(10), || from(&b, "10.9.9.9") == 429);
    assert!(shared, "b never applied 0.0.0.0/0");
    let r = get(b.port, "/api?zone=e&cidr=0.0.0.0/0");
    assert_eq!(json(&r)["override"]["action"], "block", "{}", r.describe());
    // Two more: b has room for one of them.
    put(&a, "addr=10.0.0.1");
    put(&a, "addr=10.0.0.2");
    let misfits = || {
        prom_value(
            &get(b.port, "/metrics").text(),
            "rate_limit_window_overrides_misfit_total",
            &[("zone", "e")],
        )
        .unwrap_or(0.0)
    };
    assert!(
        wait_for(Duration::from_secs(10), || misfits() >= 1.0),
        "no misfit counted on b"
    );
    assert_eq!(
        prom_value(
            &get(a.port, "/metrics").text(),
            "rate_limit_window_overrides_misfit_total",
            &[("zone", "e")]
        ),
        Some(0.0)
    );
    let logged = wait_for(Duration::from_secs(5), || {
        b.error_log()
            .contains("override(s) of the fleet found no room in this gateway's table (overrides=2")
    });
    assert!(logged, "{}", b.error_log());
}
