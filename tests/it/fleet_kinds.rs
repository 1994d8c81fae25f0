//! Kinds across a fleet (issue 50): a ban never replaces an operator's
//! state, on one gateway or through Redis. Two gateways (2 workers each)
//! share zone `k` (limit 3 a minute, `ban=3s`) through a real Redis, each
//! through a fault proxy; an operator blocks a client on B while A, which
//! has not seen the block yet, bans it: whichever of the two reaches Redis
//! first, the block ends on every gateway and in Redis, and stays after
//! the ban's end, on a gateway started afterwards too.
use crate::common;
use crate::overrides::{json, send_body, Redis};

use std::time::Duration;

use common::fault_proxy::{Fault, FaultProxy};
use common::*;

/// A gateway whose zone `k` syncs through Redis at `redis_port`.
fn gateway(redis_port: u16, up: &Upstream) -> Nginx {
    Nginx::builder().upstream_of(up).start(&proxy_conf(
        &format!(
            "rate_limit_window_zone $http_x_key zone=k:1m window=60s redis=127.0.0.1:{redis_port} \
             sync=100ms secret=fleet-kinds-0000000001;"
        ),
        "reuseport",
        "location = /api { rate_limit_window_metrics write=on; }",
        "rate_limit_window zone=k limit=3 ban=3s;",
    ))
}

/// The action of `key`'s override on `ng` (None: none).
fn action(ng: &Nginx, key: &str) -> Option<String> {
    let r = get(ng.port, &format!("/api?zone=k&key={key}"));
    assert_eq!(r.status, 200, "{}", r.describe());
    json(&r)["override"]["action"].as_str().map(str::to_string)
}

/// The value of field `fp` in the fleet's snapshot hash (`v3 SEQ EPOCH
/// ORIGIN ACTION VALUE EXPIRES MAC`; None: no field).
fn in_redis(redis: u16, fp: &str) -> Option<String> {
    let v = redis_servers::cli(&["-p", &redis.to_string(), "HGET", "rlw:{k}:ovr3", fp]);
    let v = v.trim();
    (!v.is_empty()).then(|| v.to_string())
}

/// Blocks `key` on `ng`; its fingerprint.
fn block(ng: &Nginx, key: &str) -> String {
    let r = send_body(
        ng.port,
        "PUT",
        &format!("/api?zone=k&key={key}"),
        br#"{"block":true}"#,
        false,
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    json(&r)["fingerprint"].as_str().unwrap().to_string()
}

/// Sends `key`'s requests to `ng` until one is banned (at most 6).
fn get_banned(ng: &Nginx, key: &str) {
    for _ in 0..6 {
        if get_key(ng.port, "/", key).status == 429 && action(ng, key).as_deref() == Some("ban") {
            return;
        }
    }
    panic!("{key} was never banned: {:?}", action(ng, key));
}

#[test]
fn a_ban_never_replaces_an_operators_block_on_any_gateway() {
    let redis = Redis::start();
    let up = Upstream::start();
    let (pa, pb) = (FaultProxy::start(redis.1), FaultProxy::start(redis.1));
    let (a, b) = (gateway(pa.port, &up), gateway(pb.port, &up));
    let blocked = |key: &str| {
        action(&a, key).as_deref() == Some("block") && action(&b, key).as_deref() == Some("block")
    };
    // 1. The block reaches Redis first; A, cut from Redis's replies, bans
    // the client after it (a newer version): Redis keeps the block, and A
    // takes it once its link is back.
    pa.set(Fault::Stall);
    let early = block(&b, "early");
    let wrote = wait_for(Duration::from_secs(10), || {
        in_redis(redis.1, &early).is_some_and(|v| v.contains(" block 0 0 "))
    });
    assert!(wrote, "B's block never reached Redis");
    get_banned(&a, "early");
    std::thread::sleep(Duration::from_millis(500));
    let v = in_redis(redis.1, &early);
    assert!(
        v.as_deref().is_some_and(|v| v.contains(" block 0 0 ")),
        "{v:?}"
    );
    pa.set(Fault::Pass);
    // 2. The ban reaches Redis first (B cut from Redis's replies), the
    // block after it, older by version: it replaces the ban everywhere.
    pb.set(Fault::Stall);
    let late = block(&b, "late");
    std::thread::sleep(Duration::from_millis(100));
    get_banned(&a, "late");
    let banned = wait_for(Duration::from_secs(5), || {
        in_redis(redis.1, &late).is_some_and(|v| v.contains(" ban "))
    });
    assert!(banned, "A's ban never reached Redis first");
    pb.set(Fault::Pass);
    let settled = wait_for(Duration::from_secs(20), || {
        blocked("early") && blocked("late")
    });
    assert!(
        settled,
        "early {:?} {:?}, late {:?} {:?}",
        action(&a, "early"),
        action(&b, "early"),
        action(&a, "late"),
        action(&b, "late")
    );
    // After the bans' end: still blocked, in Redis, on A and B and on a
    // gateway started now.
    std::thread::sleep(Duration::from_secs(4));
    let c = gateway(redis.1, &up);
    let everywhere = wait_for(Duration::from_secs(10), || {
        ["early", "late"]
            .iter()
            .all(|k| blocked(k) && action(&c, k).as_deref() == Some("block"))
    });
    assert!(
        everywhere,
        "c: {:?} {:?}",
        action(&c, "early"),
        action(&c, "late")
    );
    for (key, fp) in [("early", &early), ("late", &late)] {
        let v = in_redis(redis.1, fp);
        assert!(
            v.as_deref().is_some_and(|v| v.contains(" block 0 0 ")),
            "{v:?}"
        );
        for g in [&a, &b, &c] {
            assert_eq!(get_key(g.port, "/", key).status, 429);
        }
    }
}

/// One gateway, zone `ip` keyed by `$binary_remote_addr` (from
/// `X-Forwarded-For`): limit 3, `ban=1h`, room for 4 overrides.
fn ip_gateway(up: &Upstream) -> Nginx {
    Nginx::builder().upstream_of(up).start(&http_conf(
        r#"rate_limit_window_zone $binary_remote_addr zone=ip:1m window=60s overrides=4;
        server {
            listen 127.0.0.1:{{PORT}} reuseport;
            set_real_ip_from 127.0.0.1;
            real_ip_header X-Forwarded-For;
            location / { rate_limit_window zone=ip limit=3 ban=1h; proxy_pass http://{{UPSTREAM}}; }
            location = /api { rate_limit_window_metrics write=on; }
            location = /metrics { rate_limit_window_metrics; }
        }"#,
    ))
}

/// `n` requests from `addr`: how many were admitted.
fn admitted(ng: &Nginx, addr: &str, n: usize) -> usize {
    let h: &[(&str, &[u8])] = &[("X-Forwarded-For", addr.as_bytes())];
    (0..n)
        .filter(|_| request(ng.port, "GET", "/", h).status == 200)
        .count()
}

fn put_range(ng: &Nginx, cidr: &str, body: &str) -> Response {
    let path = format!("/api?zone=ip&cidr={cidr}");
    send_body(ng.port, "PUT", &path, body.as_bytes(), false)
}

fn ip_metric(ng: &Nginx, name: &str) -> f64 {
    common::scenarios::metric(ng.port, name, &[("zone", "ip")])
}

/// A range's `limit` stops `ban=` banning its clients (as a client's own
/// override does); and when bans fill the table, an operator's change
/// still gets in: the ban nearest its end makes room.
#[test]
fn a_ranges_limit_stops_bans_and_bans_make_room_for_operators() {
    let up = Upstream::start();
    let ng = ip_gateway(&up);
    let r = put_range(&ng, "10.1.0.0/16", r#"{"limit":2}"#);
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(admitted(&ng, "10.1.2.3", 5), 2);
    assert_eq!(ip_metric(&ng, "rate_limit_window_bans_total"), 0.0);
    // Outside the range: banned after 3. Three bans fill the table.
    for i in 1..=3 {
        assert_eq!(admitted(&ng, &format!("10.2.0.{i}"), 5), 3);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(ip_metric(&ng, "rate_limit_window_bans_total"), 3.0);
    // A fourth finds no room (a ban never evicts).
    assert_eq!(admitted(&ng, "10.2.0.4", 5), 3);
    assert_eq!(ip_metric(&ng, "rate_limit_window_bans_total"), 3.0);
    let r = put_range(&ng, "10.3.0.0/16", r#"{"block":true}"#);
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(admitted(&ng, "10.3.9.9", 1), 0);
    assert_eq!(ip_metric(&ng, "rate_limit_window_bans_evicted_total"), 1.0);
    // The first ban ended soonest: it went; the others stay.
    let ban_of = |a: &str| {
        let r = get(ng.port, &format!("/api?zone=ip&addr={a}"));
        json(&r)["override"]["action"].as_str().map(str::to_string)
    };
    assert_eq!(ban_of("10.2.0.1"), None);
    assert_eq!(ban_of("10.2.0.2").as_deref(), Some("ban"));
    assert_eq!(ban_of("10.2.0.3").as_deref(), Some("ban"));
}

/// A client seen as `::ffff:10.0.0.5` is `10.0.0.5`: `addr=10.0.0.5` and
/// `cidr=…/32` overrides apply to it, and its requests count with the
/// address's.
#[test]
fn an_ipv4_mapped_client_is_its_ipv4_address() {
    let up = Upstream::start();
    let ng = ip_gateway(&up);
    let r = send_body(
        ng.port,
        "PUT",
        "/api?zone=ip&addr=10.0.0.5",
        br#"{"block":true}"#,
        false,
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    let r = put_range(&ng, "10.0.0.6/32", r#"{"exempt":true}"#);
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(admitted(&ng, "::ffff:10.0.0.5", 2), 0);
    assert_eq!(admitted(&ng, "::ffff:10.0.0.6", 10), 10);
    assert_eq!(admitted(&ng, "10.0.0.7", 2), 2);
    assert_eq!(admitted(&ng, "::ffff:10.0.0.7", 3), 1);
    // A plain IPv6 client is its own.
    assert_eq!(admitted(&ng, "2001:db8::5", 3), 3);
}
