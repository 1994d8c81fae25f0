//! `redis_mode=sentinel`: one master, one replica and three sentinels. Two
//! gateways share one client's limit; the master is killed mid-test, the
//! sentinels promote the replica, and the gateways follow it: the limit is
//! shared again after the failover, and no request fails meanwhile.
use crate::common;

use common::redis_servers::*;
use common::*;
use std::time::{Duration, Instant};

fn lag(port: u16) -> f64 {
    zone_metric(port, "rate_limit_window_sync_lag_seconds")
}

#[test]
fn gateways_follow_a_failover() {
    let mut set = SentinelSet::start();
    let up = Upstream::start();
    let redis = format!(
        "redis={} redis_mode=sentinel redis_master={SENTINEL_MASTER}",
        set.url()
    );
    let clock = ShiftedClock::new();
    let a = redis_gateway_on(&clock, &redis, &up, 40);
    let b = redis_gateway_on(&clock, &redis, &up, 40);
    clock.clear_of_boundary(60_000, 25_000);

    let before = alternate([a.port, b.port], "before", 60);
    let total = before[0] + before[1];
    eprintln!("before the failover: admitted {before:?} = {total} for limit 40");
    assert!((40..=44).contains(&total), "before: {total} ({before:?})");
    let keys = cli(&[
        "-p",
        &set.master.port.to_string(),
        "--scan",
        "--pattern",
        "rlw:*",
    ]);
    assert!(!keys.trim().is_empty(), "nothing written to the master");

    // Crash the master; requests keep being answered (200 or 429) while
    // the sentinels elect the replica and the gateways find it.
    let replica = set.replica.port;
    set.master.kill();
    let killed = Instant::now();
    let mut promoted = None;
    let mut resumed = None;
    let mut served = 0;
    while resumed.is_none() {
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "no failover within 60 s (promoted after {promoted:?})"
        );
        alternate([a.port, b.port], "during", 2);
        served += 2;
        if promoted.is_none() && set.master_port() == Some(replica) {
            promoted = Some(killed.elapsed());
        }
        if promoted.is_some() && lag(a.port) < 0.5 && lag(b.port) < 0.5 {
            resumed = Some(killed.elapsed());
        }
    }
    let (promoted, resumed) = (promoted.unwrap(), resumed.unwrap());
    eprintln!(
        "failover: replica promoted {} ms after the kill, both gateways syncing again after {} ms \
         ({served} requests served meanwhile, none failed)",
        promoted.as_millis(),
        resumed.as_millis()
    );

    let after = alternate([a.port, b.port], "after", 60);
    let total = after[0] + after[1];
    eprintln!("after the failover: admitted {after:?} = {total} for limit 40");
    assert!((40..=44).contains(&total), "after: {total} ({after:?})");
    assert!(after[0] > 0 && after[1] > 0);
    let keys = cli(&["-p", &replica.to_string(), "--scan", "--pattern", "rlw:*"]);
    assert!(
        keys.lines().count() >= 2,
        "the promoted replica holds no new keys: {keys}"
    );
    let log = a.error_log();
    assert!(
        count_lines(&log, "[emerg]") == 0 && count_lines(&log, "[alert]") == 0,
        "{log}"
    );
}

#[test]
fn unknown_master_is_an_error_and_requests_are_served() {
    let set = SentinelSet::start();
    let up = Upstream::start();
    let clock = ShiftedClock::new();
    let g = redis_gateway_on(
        &clock,
        &format!(
            "redis={} redis_mode=sentinel redis_master=nosuch",
            set.url()
        ),
        &up,
        3,
    );
    clock.clear_of_boundary(60_000, 8_000);
    let statuses: Vec<u16> = (0..5).map(|_| get_key(g.port, "/", "k").status).collect();
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    let (_, line) = outage_line(&g);
    assert!(
        line.contains("[error]") && line.contains("the sentinels know no master"),
        "{line}"
    );
    let text = get(g.port, "/metrics").text();
    let v = prom_value(
        &text,
        "rate_limit_window_sync_failures_total",
        &[("zone", "c"), ("kind", "master")],
    );
    assert!(v.unwrap_or(0.0) > 0.0, "{text}");
}

#[test]
fn master_password_from_a_file() {
    let password = "m4ster-S3cret";
    let set = SentinelSet::start_with(Some(password));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("master.pw");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    let up = Upstream::start();
    let redis = format!(
        "redis={} redis_mode=sentinel redis_master={SENTINEL_MASTER} redis_password_file={}",
        set.url(),
        file.display()
    );
    let clock = ShiftedClock::new();
    let a = redis_gateway_on(&clock, &redis, &up, 40);
    let b = redis_gateway_on(&clock, &redis, &up, 40);
    clock.clear_of_boundary(60_000, 8_000);
    let admitted = alternate([a.port, b.port], "client", 60);
    let total = admitted[0] + admitted[1];
    eprintln!("sentinel, master with a password: admitted {admitted:?} = {total} for limit 40");
    assert!((40..=44).contains(&total), "{total} ({admitted:?})");
    assert_eq!(
        zone_metric(a.port, "rate_limit_window_sync_failures_total"),
        0.0
    );
    assert!(!a.error_log().contains(password));
}

/// A sentinel listed first that accepts connections and never answers: the
/// sync asks the next sentinel within its share of the connect deadline,
/// rounds go on, the limit is shared, and worker 0 keeps its threads and
/// descriptors (issue 33: with the crate's sentinel client, 0 rounds in
/// 30 s and a thread and a socket more every 1.5 s).
#[test]
fn a_hung_sentinel_listed_first_neither_stops_nor_leaks() {
    let set = SentinelSet::start();
    let hung = HungServer::start();
    let up = Upstream::start();
    let url = set
        .url()
        .replacen("redis://", &format!("redis://127.0.0.1:{},", hung.port), 1);
    let redis = format!("redis={url} redis_mode=sentinel redis_master={SENTINEL_MASTER}");
    let clock = ShiftedClock::new();
    let a = redis_gateway_on(&clock, &redis, &up, 40);
    let b = redis_gateway_on(&clock, &redis, &up, 40);
    clock.clear_of_boundary(60_000, 20_000);
    let rounds = |g: &Nginx| zone_metric(g.port, "rate_limit_window_sync_rounds_total");
    assert!(
        wait_for(Duration::from_secs(10), || rounds(&a) > 5.0
            && rounds(&b) > 5.0),
        "no rounds through the healthy sentinels: {} / {}",
        rounds(&a),
        rounds(&b)
    );
    assert!(hung.accepted() >= 2, "the hung sentinel was never asked");
    let admitted = alternate([a.port, b.port], "client", 60);
    let total = admitted[0] + admitted[1];
    eprintln!("hung first sentinel: admitted {admitted:?} = {total} for limit 40");
    assert!((40..=44).contains(&total), "{total} ({admitted:?})");
    // Reconnects through the hung sentinel (each round's link is dropped by
    // killing its master connection) never add a thread or a descriptor.
    let before = rounds(&a);
    let master = set.master.port.to_string();
    assert_usage_constant(&a, 8, || {
        cli(&["-p", &master, "CLIENT", "KILL", "TYPE", "normal"]);
    });
    let after = rounds(&a);
    eprintln!(
        "rounds during 8 s of dropped connections: {}",
        after - before
    );
    assert!(
        after - before >= 10.0,
        "rounds stopped: {before} -> {after}"
    );
}

/// Every sentinel hung: each connect fails on its timeout, counted as
/// `timeout`, requests are decided locally, and worker 0's threads and
/// descriptors stay constant while the sync keeps retrying.
#[test]
fn hung_sentinels_time_out_without_leaking() {
    let hung = [HungServer::start(), HungServer::start()];
    let up = Upstream::start();
    let redis = format!(
        "redis=redis://127.0.0.1:{},127.0.0.1:{} redis_mode=sentinel redis_master={SENTINEL_MASTER}",
        hung[0].port, hung[1].port
    );
    let g = redis_gateway(&redis, &up, 3);
    let timeouts = || {
        prom_value(
            &get(g.port, "/metrics").text(),
            "rate_limit_window_sync_failures_total",
            &[("zone", "c"), ("kind", "timeout")],
        )
        .unwrap_or(0.0)
    };
    assert!(wait_for(Duration::from_secs(10), || timeouts() >= 2.0));
    let first = timeouts();
    assert_usage_constant(&g, 8, || {
        get_key(g.port, "/", "k");
    });
    let later = timeouts();
    eprintln!("timeouts counted: {first} then {later} 8 s later");
    assert!(
        later >= first + 4.0,
        "the sync stopped retrying: {first} -> {later}"
    );
    let asked = [hung[0].accepted(), hung[1].accepted()];
    assert!(
        asked[1] >= 4,
        "the second sentinel was never asked: {asked:?}"
    );
}
