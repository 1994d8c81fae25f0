//! The fleet's edges (issue 50): a `cidr=0.0.0.0/0` override is shared
//! through Redis like any range, and an override of the fleet that finds
//! no room in a gateway's table is counted and logged there, and held once
//! room is made. Two gateways
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
    // Room made: 0.0.0.0/0 removed, the override that did not fit is read
    // again (about once a second) and held (the log is read once: it was
    // never read again before).
    let r = request(a.port, "DELETE", "/api?zone=e&cidr=0.0.0.0/0&override", &[]);
    assert_eq!(r.status, 200, "{}", r.describe());
    // The address's own block (not the range's, while it lasts).
    let held = |addr: &str| {
        let o = json(&get(b.port, &format!("/api?zone=e&addr={addr}")))["override"].clone();
        o["action"] == "block" && o["cidr"].is_null()
    };
    let gone = || json(&get(b.port, "/api?zone=e&cidr=0.0.0.0/0"))["override"].is_null();
    let t = std::time::Instant::now();
    let room = wait_for(Duration::from_secs(10), || {
        gone() && held("10.0.0.1") && held("10.0.0.2")
    });
    assert!(
        room,
        "the override that did not fit never came once room was made: {}",
        get(b.port, "/api?zone=e&overrides").text()
    );
    eprintln!("room made: the misfit held on b after {:?}", t.elapsed());
}

/// The ACL line of docs/gateways.md, as printed, with `password`.
pub fn documented_acl(password: &str) -> Vec<String> {
    documented_line("ACL SETUSER gateway on ", password)
}

/// The line of docs/gateways.md that starts with `start`, as arguments,
/// `>PASSWORD` replaced by `>password`.
pub fn documented_line(start: &str, password: &str) -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/gateways.md"))
        .or_else(|_| std::fs::read_to_string("docs/gateways.md"))
        .expect("docs/gateways.md");
    let line = doc
        .lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line {start:?} in docs/gateways.md"));
    line.split_whitespace()
        .map(|w| w.replace(">PASSWORD", &format!(">{password}")))
        .collect()
}

/// A gateway of zone `u` (`$http_x_key`, limit 3, `ban=1h`) whose sync logs
/// in as the documented ACL user.
fn acl_gateway(port: u16, pw_file: &std::path::Path, up: &Upstream) -> Nginx {
    Nginx::builder().upstream_of(up).start(&proxy_conf(
        &format!(
            "rate_limit_window_zone $http_x_key zone=u:1m window=60s \
             redis=redis://gateway:@127.0.0.1:{port} redis_password_file={} \
             sync=100ms secret=fleet-edges-acl-000001;",
            pw_file.display()
        ),
        "reuseport",
        "location = /api { rate_limit_window_metrics write=on; }
         location = /metrics { rate_limit_window_metrics; }",
        "rate_limit_window zone=u limit=3 ban=1h;",
    ))
}

fn action_of(ng: &Nginx, key: &str) -> Option<String> {
    let r = get(ng.port, &format!("/api?zone=u&key={key}"));
    json(&r)["override"]["action"].as_str().map(str::to_string)
}

/// docs/gateways.md's ACL user, created as printed: overrides and bans are
/// shared, nothing is refused; with `del` taken away, a reset's refusal
/// is logged once, naming the command and the fix.
#[test]
fn the_documented_acl_user_shares_overrides_and_bans() {
    use common::redis_servers::AuthRedis;
    let redis = AuthRedis::start();
    let pw = "doc-acl-pw-0001";
    assert!(redis.admin(&["ACL", "DELUSER", "gateway"]).contains('1'));
    let acl = documented_acl(pw);
    let args: Vec<&str> = acl.iter().map(String::as_str).collect();
    assert_eq!(redis.admin(&args).trim(), "OK", "{args:?}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("redis.pw");
    std::fs::write(&file, format!("{pw}\n")).unwrap();
    let up = Upstream::start();
    let (a, b) = (
        acl_gateway(redis.port(), &file, &up),
        acl_gateway(redis.port(), &file, &up),
    );
    let r = send_body(
        a.port,
        "PUT",
        "/api?zone=u&key=op",
        br#"{"block":true}"#,
        false,
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    for _ in 0..4 {
        get_key(a.port, "/", "bad");
    }
    assert_eq!(action_of(&a, "bad").as_deref(), Some("ban"));
    let shared = wait_for(Duration::from_secs(10), || {
        action_of(&b, "op").as_deref() == Some("block")
            && action_of(&b, "bad").as_deref() == Some("ban")
    });
    assert!(
        shared,
        "b: op {:?}, bad {:?}\n{}",
        action_of(&b, "op"),
        action_of(&b, "bad"),
        a.error_log()
    );
    for g in [&a, &b] {
        let key_errors = prom_value(
            &get(g.port, "/metrics").text(),
            "rate_limit_window_sync_failures_total",
            &[("zone", "u"), ("kind", "key")],
        );
        assert_eq!(key_errors, Some(0.0));
        assert!(!g.error_log().contains("NOPERM"), "{}", g.error_log());
    }
    // Without `del`: a reset's `DEL` is refused, and the log says which
    // command and what to add, once.
    assert_eq!(
        redis.admin(&["ACL", "SETUSER", "gateway", "-del"]).trim(),
        "OK"
    );
    for key in ["bad", "op", "bad"] {
        let r = request(a.port, "DELETE", &format!("/api?zone=u&key={key}"), &[]);
        assert_eq!(r.status, 200, "{}", r.describe());
        std::thread::sleep(Duration::from_millis(300));
    }
    let line = "redis refused the command DEL to the sync's user (NOPERM): add \"+del\"";
    let logged = wait_for(Duration::from_secs(15), || a.error_log().contains(line));
    assert!(logged, "{}", a.error_log());
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(count_lines(&a.error_log(), line), 1, "{}", a.error_log());
}

/// One master of three killed (no replica), the one holding the zone's own
/// keys (`rlw:{c}:…`, the overrides and the fleet hash): once the others
/// see the cluster down (`cluster_state:fail`), the failures are counted as
/// the documented `kind="cluster_down"`, not only as `connection`.
#[test]
fn the_zones_own_master_killed_counts_cluster_down() {
    use common::redis_servers::{cli, redis_gateway, RedisCluster};
    let mut cluster = RedisCluster::start();
    let up = Upstream::start();
    let g = redis_gateway(
        &format!("redis={} redis_mode=cluster", cluster.url()),
        &up,
        100,
    );
    assert!(wait_for(Duration::from_secs(10), || {
        prom_value(
            &get(g.port, "/metrics").text(),
            "rate_limit_window_sync_rounds_total",
            &[("zone", "c")],
        )
        .unwrap_or(0.0)
            > 2.0
    }));
    let owner = cluster
        .nodes
        .iter()
        .position(|n| !cli(&["-p", &n.port.to_string(), "TYPE", "rlw:{c}:ovr"]).contains("MOVED"))
        .expect("no node owns rlw:{c}:ovr");
    cluster.nodes[owner].kill();
    let others: Vec<u16> = (0..3)
        .filter(|&i| i != owner)
        .map(|i| cluster.nodes[i].port)
        .collect();
    let failed = wait_for(Duration::from_secs(20), || {
        others
            .iter()
            .all(|p| cli(&["-p", &p.to_string(), "CLUSTER", "INFO"]).contains("cluster_state:fail"))
    });
    assert!(failed, "the cluster never saw itself down");
    let down = || {
        prom_value(
            &get(g.port, "/metrics").text(),
            "rate_limit_window_sync_failures_total",
            &[("zone", "c"), ("kind", "cluster_down")],
        )
        .unwrap_or(0.0)
    };
    let counted = wait_for(Duration::from_secs(10), || down() > 0.0);
    assert!(
        counted,
        "cluster_down not counted:\n{}",
        get(g.port, "/metrics").text()
    );
}
