//! The fleet's overrides through what production does to Redis (issue
//! 50): one order from Redis, healing after Redis loses its data, writes
//! refused (`READONLY`) written again, values that are not the fleet's
//! (another secret, hostile) ignored and pinning nothing, a million
//! fields in the snapshot while the shared limit holds, and a gateway
//! whose clock is 15 minutes ahead. Real redis-server, real nginx (2
//! workers per gateway), loopback.
use crate::common;
use crate::overrides::{json, send_body};

use std::path::Path;
use std::time::Duration;

use common::redis_servers::{cli, redis_gateway, server_bin, zone_metric, RedisProc};
use common::*;

const SECRET: &str = "fleet-order-secret-0001";

/// A redis-server on `port` in `dir` (its RDB file, if any, loaded).
pub(crate) fn redis_at(dir: &Path, port: u16) -> RedisProc {
    let conf = format!("bind 127.0.0.1\nport {port}\nsave \"\"\nappendonly no\n");
    RedisProc::spawn(&server_bin(), dir, &format!("r{port}"), &conf, port)
}

/// `redis-cli` against the server on `port`.
pub(crate) fn rcli(port: u16, args: &[&str]) -> String {
    let p = port.to_string();
    let mut all = vec!["-p", p.as_str()];
    all.extend_from_slice(args);
    cli(&all)
}

/// A gateway (2 workers) whose zone `f` syncs through Redis on `port`
/// with `secret`.
pub(crate) fn gateway_with(port: u16, up: &Upstream, secret: &str, b: NginxBuilder) -> Nginx {
    b.upstream_of(up).start(&proxy_conf(
        &format!(
            "rate_limit_window_zone $http_x_key zone=f:1m window=60s redis=127.0.0.1:{port} \
             sync=100ms secret={secret};"
        ),
        "reuseport",
        "location /ban { rate_limit_window zone=f limit=1 ban=1h; proxy_pass http://{{UPSTREAM}}; }
         location = /api { rate_limit_window_metrics write=on; }",
        "rate_limit_window zone=f limit=100;",
    ))
}

pub(crate) fn gateway(port: u16, up: &Upstream) -> Nginx {
    gateway_with(port, up, SECRET, Nginx::builder())
}

pub(crate) fn put(ng: &Nginx, key: &str, body: &str) {
    let path = format!("/api?zone=f&key={key}");
    let r = send_body(ng.port, "PUT", &path, body.as_bytes(), false);
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(json(&r)["cluster"], "scheduled", "{}", r.describe());
}

pub(crate) fn delete(ng: &Nginx, key: &str) {
    let path = format!("/api?zone=f&key={key}&override");
    let r = request(ng.port, "DELETE", &path, &[]);
    assert_eq!(r.status, 200, "{}", r.describe());
}

/// The action of `key`'s override on `ng` ("" when none).
pub(crate) fn action(ng: &Nginx, key: &str) -> String {
    let r = get(ng.port, &format!("/api?zone=f&key={key}"));
    json(&r)["override"]["action"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// The fingerprint of the one override `ng` lists (14 hex digits).
fn only_fingerprint(ng: &Nginx) -> String {
    let l = json(&get(ng.port, "/api?zone=f&overrides"));
    let all = l["overrides"].as_array().cloned().unwrap_or_default();
    assert_eq!(all.len(), 1, "{l}");
    all[0]["fingerprint"].as_str().unwrap_or("").to_string()
}

fn metric(ng: &Nginx, name: &str) -> f64 {
    let text = get(ng.port, "/api").text();
    prom_value(&text, name, &[("zone", "f")]).unwrap_or(-1.0)
}

/// A directory, a port and a redis-server on it, an upstream.
fn setup() -> (tempfile::TempDir, u16, RedisProc, Upstream) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let redis = redis_at(dir.path(), port);
    (dir, port, redis, Upstream::start())
}

fn all_agree(gws: &[&Nginx], key: &str, want: &str, secs: u64) -> bool {
    wait_for(Duration::from_secs(secs), || {
        gws.iter().all(|g| action(g, key) == want)
    })
}

#[test]
fn a_new_gateway_after_an_empty_redis_restart_blocks_the_blocked_client() {
    let (dir, port, mut redis, up) = setup();
    let (a, b) = (gateway(port, &up), gateway(port, &up));
    let t = std::time::Instant::now();
    put(&a, "mallory", r#"{"block":true}"#);
    assert!(all_agree(&[&a, &b], "mallory", "block", 5));
    eprintln!(
        "loopback: a change reached the other gateway in {:?}",
        t.elapsed()
    );
    put(&b, "nick", r#"{"limit":5,"ttl":3600}"#);
    assert!(all_agree(&[&a, &b], "nick", "limit", 5));
    // Redis restarts without data.
    redis.kill();
    let _redis = redis_at(dir.path(), port);
    let t = std::time::Instant::now();
    let c = gateway(port, &up);
    assert!(
        wait_for(Duration::from_secs(10), || get_key(c.port, "/", "mallory")
            .status
            == 429),
        "the new gateway never blocked the blocked client"
    );
    eprintln!(
        "empty restart: the new gateway blocked in {:?} from its start",
        t.elapsed()
    );
    assert!(all_agree(&[&c], "nick", "limit", 5));
    let healed = |g: &Nginx| metric(g, "rate_limit_window_fleet_heals_total") >= 1.0;
    assert!(
        wait_for(Duration::from_secs(5), || healed(&a) && healed(&b)),
        "no write-back counted"
    );
    // The fleet goes on: a removal on the new gateway reaches the others.
    delete(&c, "mallory");
    assert!(all_agree(&[&a, &b, &c], "mallory", "", 5), "removal lost");
    assert_eq!(get_key(a.port, "/", "mallory").status, 200);
}

#[test]
fn a_restart_with_data_and_a_write_refused_readonly_lose_nothing() {
    let (dir, port, mut redis, up) = setup();
    let (a, b) = (gateway(port, &up), gateway(port, &up));
    put(&a, "olga", r#"{"exempt":true}"#);
    assert!(all_agree(&[&a, &b], "olga", "exempt", 5));
    // Restart with its data (an RDB file), then a write it refuses: the
    // server became a replica (of nothing reachable).
    assert!(rcli(port, &["SAVE"]).contains("OK"));
    redis.kill();
    let redis = redis_at(dir.path(), port);
    let nowhere = free_port().to_string();
    assert!(rcli(port, &["REPLICAOF", "127.0.0.1", &nowhere]).contains("OK"));
    put(&a, "pat", r#"{"block":true}"#);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(action(&b, "pat"), "", "written to a read-only replica?");
    let text = get(a.port, "/api").text();
    let refused = prom_value(
        &text,
        "rate_limit_window_sync_failures_total",
        &[("zone", "f"), ("kind", "key")],
    );
    assert!(
        refused.unwrap_or(0.0) >= 1.0,
        "refused writes not counted: {refused:?}"
    );
    assert!(rcli(port, &["REPLICAOF", "NO", "ONE"]).contains("OK"));
    assert!(
        all_agree(&[&a, &b], "pat", "block", 5),
        "the refused write was never written again"
    );
    assert!(all_agree(&[&a, &b], "olga", "exempt", 1));
    drop(redis);
}

/// Writes `value` to field `f` of the snapshot hash and, at `seq`, to the
/// log: what another writer (a bug, an attacker without the secret) can do.
fn hostile(port: u16, f: &str, seq: &str, body: &str) {
    let value = format!("v3 {seq} ffffffffffffffff {body}");
    assert!(!rcli(port, &["HSET", "rlw:{f}:ovr3", f, &value]).contains("ERR"));
    let member = format!("{seq} {f} {body}");
    assert!(!rcli(port, &["ZADD", "rlw:{f}:ovr3:log", seq, &member]).contains("ERR"));
}

#[test]
fn values_not_of_this_fleet_are_ignored_counted_logged_once_and_pin_nothing() {
    let (_dir, port, _redis, up) = setup();
    let (a, b) = (gateway(port, &up), gateway(port, &up));
    // Another fleet (another secret) on the same Redis and zone name.
    let other = gateway_with(port, &up, "another-fleet-secret-9", Nginx::builder());
    put(&other, "mallory", r#"{"exempt":true}"#);
    put(&a, "mallory", r#"{"block":true}"#);
    assert!(all_agree(&[&a, &b], "mallory", "block", 5));
    let fp = only_fingerprint(&a);
    // Values with huge sequences and no valid MAC, in the hash and the log.
    let mac = "0".repeat(32);
    hostile(
        port,
        &fp,
        "999999999999999",
        &format!("0000000000000001.1 exempt 0 0 {mac}"),
    );
    hostile(port, &fp, "999999999999998", "garbage");
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(action(&a, "mallory"), "block");
    assert_eq!(action(&b, "mallory"), "block");
    // Nothing is pinned: a removal and a new block still go through.
    delete(&b, "mallory");
    assert!(
        all_agree(&[&a, &b], "mallory", "", 5),
        "the removal was pinned"
    );
    put(&b, "mallory", r#"{"limit":3}"#);
    assert!(all_agree(&[&a, &b], "mallory", "limit", 5));
    // A new gateway reads the snapshot: the hostile value is not applied.
    let c = gateway(port, &up);
    assert!(all_agree(&[&c], "mallory", "limit", 10));
    assert_eq!(
        action(&other, "mallory"),
        "exempt",
        "the other fleet keeps its own"
    );
    for g in [&a, &c] {
        assert!(metric(g, "rate_limit_window_fleet_values_ignored_total") >= 1.0);
    }
    let logged = |g: &Nginx| g.error_log().matches("are not this fleet's").count();
    assert!(
        wait_for(Duration::from_secs(3), || logged(&a) == 1),
        "{}",
        a.error_log()
    );
    hostile(port, &fp, "999999999999999", "more garbage");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(logged(&a), 1, "logged once");
    let log = a.error_log();
    assert!(!log.contains(SECRET), "the secret in the log");
}

#[test]
fn a_million_fields_in_the_snapshot_keep_the_shared_limit() {
    let (_dir, port, _redis, up) = setup();
    // 1,000,000 fields in zone c's snapshot (none with this fleet's MAC:
    // each is read, checked and counted).
    let fill = "for i = 1, 1000000 do redis.call('HSET', KEYS[1], string.format('%014x', i), \
                'v3 ' .. i .. ' e 0000000000000001.1 ban 0 0 ' .. string.rep('0', 32)) end \
                return redis.call('HLEN', KEYS[1])";
    let n = rcli(port, &["EVAL", fill, "1", "rlw:{c}:ovr3"]);
    assert_eq!(n.trim(), "1000000", "{n}");
    let url = format!("redis=127.0.0.1:{port}");
    let (a, b) = (redis_gateway(&url, &up, 20), redis_gateway(&url, &up, 20));
    let rounds = |g: &Nginx| zone_metric(g.port, "rate_limit_window_sync_rounds_total");
    let before = rounds(&a);
    let admitted = common::redis_servers::alternate([a.port, b.port], "shared", 40);
    let total = admitted[0] + admitted[1];
    eprintln!("1,000,000 fields: admitted {admitted:?} = {total} of 40 at limit 20");
    assert!(
        total <= 24,
        "{total} of 40 admitted at a shared limit of 20"
    );
    // About 2 s of requests: count rounds went on (more than 2 a second
    // while the snapshot was read).
    let done = rounds(&a) - before;
    eprintln!("1,000,000 fields: {done} count rounds during the 40 requests");
    assert!(done >= 5.0, "count rounds stalled: {done}");
    // The snapshot is read to its end across rounds.
    let ignored = |g: &Nginx| zone_metric(g.port, "rate_limit_window_fleet_values_ignored_total");
    assert!(
        wait_for(Duration::from_secs(120), || ignored(&a) >= 1_000_000.0),
        "the snapshot was never read to its end: {}",
        ignored(&a)
    );
}

#[test]
fn a_gateway_15_minutes_ahead_deletes_nothing_and_is_not_alone() {
    let (_dir, port, _redis, up) = setup();
    let ahead = ShiftedClock::new();
    ahead.advance(15 * 60_000);
    let a = gateway(port, &up);
    let z = gateway_with(port, &up, SECRET, ahead.builder());
    put(&a, "tina", r#"{"limit":5,"ttl":600}"#);
    let tina = only_fingerprint(&a);
    put(&a, "ursula", r#"{"block":true}"#);
    assert!(all_agree(&[&a, &z], "tina", "limit", 5));
    assert!(all_agree(&[&a, &z], "ursula", "block", 5));
    delete(&a, "ursula");
    put(&z, "vera", r#"{"exempt":true,"ttl":600}"#);
    assert!(all_agree(&[&a, &z], "vera", "exempt", 5));
    std::thread::sleep(Duration::from_secs(3));
    // Both still hold the ttl'd entries, with their time left; Redis too.
    for g in [&a, &z] {
        assert_eq!(action(g, "tina"), "limit");
        assert_eq!(action(g, "ursula"), "");
        let r = json(&get(g.port, "/api?zone=f&key=tina"));
        let left = r["override"]["expires_in"].as_f64().unwrap_or(0.0);
        assert!((590.0..=600.0).contains(&left), "time left {left}: {r}");
    }
    assert_eq!(rcli(port, &["HEXISTS", "rlw:{f}:ovr3", &tina]).trim(), "1");
    for g in [&a, &z] {
        assert!(
            wait_for(Duration::from_secs(3), || metric(
                g,
                "rate_limit_window_sync_peers"
            ) == 2.0),
            "a gateway counts itself alone"
        );
    }
    assert_eq!(rcli(port, &["HLEN", "rlw:{f}:fleet"]).trim(), "2");
}

#[test]
fn changes_of_one_client_on_two_gateways_at_once_end_the_same_everywhere() {
    let (_dir, port, _redis, up) = setup();
    let gws: Vec<Nginx> = (0..3).map(|_| gateway(port, &up)).collect();
    std::thread::scope(|s| {
        for i in 0..20usize {
            for (g, body) in [(0, r#"{"limit":7}"#), (1, r#"{"exempt":true}"#)] {
                let gws = &gws;
                s.spawn(move || put(&gws[g], &format!("d{i}"), body));
            }
        }
    });
    let views =
        |i: usize| -> Vec<String> { gws.iter().map(|g| action(g, &format!("d{i}"))).collect() };
    for i in 0..20 {
        let one = || {
            let v = views(i);
            v.iter().all(|a| a == &v[0]) && (v[0] == "limit" || v[0] == "exempt")
        };
        assert!(
            wait_for(Duration::from_secs(10), one),
            "d{i}: {:?}",
            views(i)
        );
    }
    // It stays: the order is Redis's, the same for every gateway.
    let before: Vec<Vec<String>> = (0..20).map(views).collect();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!((0..20).map(views).collect::<Vec<_>>(), before);
}

#[test]
fn a_redis_300_ms_away_still_carries_changes_within_seconds() {
    let (_dir, port, _redis, up) = setup();
    let proxy = common::fault_proxy::FaultProxy::start(port);
    proxy.set_latency(150);
    let (a, b) = (gateway(proxy.port, &up), gateway(proxy.port, &up));
    let t = std::time::Instant::now();
    put(&a, "wendy", r#"{"block":true}"#);
    let ok = all_agree(&[&b], "wendy", "block", 10);
    eprintln!(
        "300 ms round trips: a change reached the other gateway in {:?}",
        t.elapsed()
    );
    let text = get(b.port, "/api").text();
    let failures: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("sync_failures_total{"))
        .collect();
    assert!(ok, "b never got the block: {failures:#?}");
    delete(&b, "wendy");
    assert!(all_agree(&[&a, &b], "wendy", "", 10));
}

/// The heal script (what a gateway writes back when Redis lost data)
/// against a real redis-server: never over the very value the gateway
/// read. A state written back once (`v3 200 E/100 …`: sequence 200,
/// carrying the state of sequence 100) and read by another gateway at 200
/// must not be written back again by it: a new sequence would make that
/// old state replace a later change that Redis lost after a failover
/// (an operator's DELETE came back in the Sentinel chaos run). A state
/// the gateway holds at a later sequence is written back.
#[test]
fn a_heal_never_rewrites_the_value_it_read() {
    use rate_limit_window_core::overrides::remote::HEAL;
    let (_dir, port, _redis, _up) = setup();
    let keys = [
        "rlw:{h}:ovr3",
        "rlw:{h}:ovr3:seq",
        "rlw:{h}:ovr3:log",
        "rlw:{h}:ovr3:epoch",
    ];
    rcli(port, &["HSET", keys[0], "f", "v3 200 E/100 OLD"]);
    rcli(port, &["SET", keys[1], "200"]);
    let heal = |held_at: &str, body: &str| {
        let mut args = vec!["EVAL", HEAL.text, "4"];
        args.extend(keys);
        args.extend(["f", body, "0", "1000", "60000", "E", held_at]);
        rcli(port, &args).trim().to_string()
    };
    assert_eq!(
        heal("200", "SAME"),
        "0",
        "the value read was written back again"
    );
    assert!(rcli(port, &["HGET", keys[0], "f"]).contains("OLD"));
    // Older than the state it carries: refused too.
    assert_eq!(heal("90", "OLDER"), "0");
    // A later state than the one carried: written back, over it.
    let s: u64 = heal("300", "LATER").parse().unwrap();
    assert!(s > 200, "{s}");
    let v = rcli(port, &["HGET", keys[0], "f"]);
    assert!(v.starts_with(&format!("v3 {s} E/300 LATER")), "{v}");
}
