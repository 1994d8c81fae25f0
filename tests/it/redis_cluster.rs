//! `redis_mode=cluster`: a Redis Cluster of three masters made with
//! `redis-cli --cluster create`. Two gateways share the limits of clients
//! whose keys land on different nodes.
use crate::common;

use common::redis_servers::*;
use common::*;
use std::thread::sleep;
use std::time::Duration;

pub(crate) const CLIENTS: usize = 6;

/// `rounds` rounds of one request per client (`client-0`..), 50 ms apart,
/// alternating between the two gateways (the clients start on different
/// ones); counts each client's 200s per gateway in `admitted`.
pub(crate) fn send_rounds(ports: [u16; 2], rounds: usize, admitted: &mut [[u32; 2]; CLIENTS]) {
    for round in 0..rounds {
        for (c, adm) in admitted.iter_mut().enumerate() {
            let g = (round + c) % 2;
            let r = get_key(ports[g], "/", &format!("client-{c}"));
            match r.status {
                200 => adm[g] += 1,
                429 => {}
                s => panic!("unexpected status {s}: {}", r.describe()),
            }
        }
        sleep(Duration::from_millis(50));
    }
}

/// Two gateways of limit `limit` on `redis` (`redis_gateway_on`), their
/// clock kept clear of a window boundary for `clear_ms`.
pub(crate) fn two_gateways(
    redis: &str,
    up: &Upstream,
    limit: u32,
    clear_ms: u128,
) -> (ShiftedClock, Nginx, Nginx) {
    let clock = ShiftedClock::new();
    let a = redis_gateway_on(&clock, redis, up, limit);
    let b = redis_gateway_on(&clock, redis, up, limit);
    clock.clear_of_boundary(60_000, clear_ms);
    (clock, a, b)
}

/// No sync failure of any kind counted by `gateways`.
pub(crate) fn assert_no_failures(gateways: &[&Nginx]) {
    for g in gateways {
        assert_eq!(
            zone_metric(g.port, "rate_limit_window_sync_failures_total"),
            0.0,
            "{}",
            g.error_log()
        );
    }
}

/// Every client of `admitted` was admitted `limit` over the two gateways,
/// a few more at most (a round in flight).
pub(crate) fn assert_shared(admitted: &[[u32; 2]; CLIENTS], limit: u32, what: &str) {
    for (c, adm) in admitted.iter().enumerate() {
        let total = adm[0] + adm[1];
        eprintln!("client-{c}: admitted {adm:?} = {total} for limit {limit}{what}");
        assert!(
            (limit..=limit + 4).contains(&total),
            "client-{c}: {total} ({adm:?}){what}"
        );
    }
}

#[test]
fn clients_on_different_nodes_share_limits() {
    let cluster = RedisCluster::start();
    let up = Upstream::start();
    let redis = format!("redis={} redis_mode=cluster", cluster.url());
    let (_clock, a, b) = two_gateways(&redis, &up, 30, 10_000);

    // Every client sends 60 requests at 20 requests/s, alternating
    // between the gateways (the clients start on different gateways).
    let mut admitted = [[0u32; 2]; CLIENTS];
    send_rounds([a.port, b.port], 60, &mut admitted);
    assert_shared(&admitted, 30, "");
    let per_node: Vec<usize> = cluster.keys_per_node().iter().map(Vec::len).collect();
    eprintln!("keys per cluster node: {per_node:?}");
    assert!(per_node.iter().sum::<usize>() >= CLIENTS, "{per_node:?}");
    assert!(
        per_node.iter().filter(|&&n| n > 0).count() >= 2,
        "every client landed on one node: {per_node:?}"
    );
    assert_eq!(
        zone_metric(a.port, "rate_limit_window_sync_failures_total"),
        0.0
    );
    assert!(zone_metric(b.port, "rate_limit_window_sync_rounds_total") > 0.0);
}

#[test]
fn cluster_down_keeps_serving_and_is_counted() {
    let mut cluster = RedisCluster::start();
    let up = Upstream::start();
    let g = gateway_with_hot_clients(&cluster, &up);
    // The clients and the setup client (a loaded machine's first rounds
    // wait on a cluster that has just started: 10 s was missed once).
    assert!(wait_for(Duration::from_secs(30), || zone_metric(
        g.port,
        "rate_limit_window_sync_keys_pushed_total"
    ) >= (CLIENTS + 1)
        as f64));
    // A loaded machine can time a startup round out: an episode of its
    // own, logged before the one under test.
    let before = count_lines(&g.error_log(), "redis sync failing");
    // One master of three dies (no replica): after the node timeout the
    // others answer CLUSTERDOWN. Requests are still decided locally.
    cluster.nodes[0].kill();
    let text = || get(g.port, "/metrics").text();
    let down = |t: &str| {
        prom_value(
            t,
            "rate_limit_window_sync_failures_total",
            &[("zone", "c"), ("kind", "cluster_down")],
        )
        .unwrap_or(0.0)
    };
    let ok = wait_for(Duration::from_secs(20), || {
        for c in 0..CLIENTS {
            let s = get_key(g.port, "/", &format!("client-{c}")).status;
            assert_eq!(s, 200, "a request failed while the cluster is down");
        }
        down(&text()) > 0.0
    });
    assert!(ok, "cluster_down not counted:\n{}", text());
    // The sync thread counts the failure before it marks the outage, which
    // the next request or worker 0's sweep (once a second) then logs.
    let failing = || count_lines(&g.error_log(), "redis sync failing");
    let logged = wait_for(Duration::from_secs(5), || {
        assert_eq!(get_key(g.port, "/", "client-0").status, 200);
        failing() > before
    });
    assert!(logged, "the outage was not logged:\n{}", g.error_log());
    // One line for the outage, however many requests saw it.
    for c in 0..CLIENTS {
        assert_eq!(get_key(g.port, "/", &format!("client-{c}")).status, 200);
    }
    let log = g.error_log();
    assert_eq!(count_lines(&log, "redis sync failing"), before + 1, "{log}");
}

#[test]
fn limits_survive_a_slot_migration() {
    let cluster = RedisCluster::start();
    let up = Upstream::start();
    let redis = format!("redis={} redis_mode=cluster", cluster.url());
    let (_clock, a, b) = two_gateways(&redis, &up, 60, 40_000);
    let send = |rounds: usize, admitted: &mut [[u32; 2]; CLIENTS]| {
        send_rounds([a.port, b.port], rounds, admitted);
    };
    let mut admitted = [[0u32; 2]; CLIENTS];
    send(30, &mut admitted);
    let before: Vec<usize> = cluster.keys_per_node().iter().map(Vec::len).collect();
    // Move the slots of a node that holds keys: the gateways' slot maps
    // are now stale and Redis answers MOVED.
    let from = before.iter().position(|&n| n > 0).unwrap();
    let to = (from + 1) % 3;
    cluster.move_all_slots(from, to);
    let after: Vec<usize> = cluster.keys_per_node().iter().map(Vec::len).collect();
    eprintln!("keys per node before {before:?}, after moving node {from}'s slots {after:?}");
    assert_eq!(after[from], 0, "{after:?}");
    send(60, &mut admitted);
    assert_shared(&admitted, 60, " across a migration");
}

/// One node hung (SIGSTOP: the kernel still completes connects, nothing
/// answers): every round that needs it fails on its timeout, counted, the
/// sync thread keeps trying without a thread or descriptor more, requests
/// are decided locally, and sharing resumes once the node is back.
#[test]
fn a_hung_node_neither_stops_rounds_nor_leaks() {
    let cluster = RedisCluster::start();
    let up = Upstream::start();
    let g = gateway_with_hot_clients(&cluster, &up);
    let rounds = || zone_metric(g.port, "rate_limit_window_sync_rounds_total");
    let failures = || zone_metric(g.port, "rate_limit_window_sync_failures_total");
    assert!(wait_for(Duration::from_secs(10), || rounds() > 3.0));
    cluster.nodes[0].signal(libc::SIGSTOP);
    let hung_at = failures();
    assert_usage_constant(&g, 8, || {
        for c in 0..CLIENTS {
            let s = get_key(g.port, "/", &format!("client-{c}")).status;
            assert_eq!(s, 200, "a request failed while a node hangs");
        }
    });
    let failed = failures() - hung_at;
    eprintln!("hung node: {failed} failed rounds in 8 s");
    assert!(failed >= 4.0, "the sync stopped trying: {failed} failures");
    cluster.nodes[0].signal(libc::SIGCONT);
    let back = rounds();
    assert!(
        wait_for(Duration::from_secs(30), || {
            get_key(g.port, "/", "client-0");
            rounds() >= back + 5.0
        }),
        "rounds did not resume after the node came back: {back} -> {}",
        rounds()
    );
}

/// A gateway on `cluster` whose CLIENTS clients have each sent one request
/// and are hot (T = 1), so their counts are written and read on every node.
fn gateway_with_hot_clients(cluster: &RedisCluster, up: &Upstream) -> Nginx {
    let redis = format!("redis={} redis_mode=cluster", cluster.url());
    let g = redis_gateway(&redis, up, 1000);
    every_client_hot(g.port);
    for c in 0..CLIENTS {
        assert_eq!(get_key(g.port, "/", &format!("client-{c}")).status, 200);
    }
    g
}
