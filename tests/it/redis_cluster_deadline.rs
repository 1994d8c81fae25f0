//! Redis Cluster and Sentinel calls bounded per call (issue 50): the
//! module's own cluster client and sentinel queries read over the bounded
//! socket, so a node or a sentinel that trickles its replies (a byte every
//! 0.25 s, a real TCP proxy in front of a real server) ends each call at
//! its deadline (`kind="timeout"`), and a reload and `nginx -s quit`
//! finish within [`QUIT`]. Slots resharded under the gateways (`ASK` while a slot
//! migrates, `MOVED` after) keep the shared counts; key slots agree with
//! `CLUSTER KEYSLOT`.
use crate::common;

use std::time::{Duration, Instant};

use crate::fleet_deadline::{all_gone, quit};
use crate::redis_cluster::{assert_no_failures, assert_shared, send_rounds, two_gateways, CLIENTS};
use common::fault_proxy::{Fault, FaultProxy};
use common::redis_servers::*;
use common::*;
use rate_limit_window_core::cluster::slot::key_slot;

/// How long `nginx -s quit` may take under a trickling node or sentinel
/// (issue 50: "about a second"; the module's calls last up to 3 s).
const QUIT: Duration = Duration::from_millis(1_500);

/// Longest two failed calls may take from a gateway's start: two calls
/// of 500 ms at most (a connect's or a round's deadline) and the 100 ms nap
/// between them, with room for a loaded machine. A call bounded per read
/// lasts as long as its reply trickles: two took 7.5 s here.
const TWO_CALLS: Duration = Duration::from_secs(5);

/// Waits until zone `c` of the gateway on `port` counted two timeouts
/// (20 s at most); the time it took.
fn two_timeouts(port: u16) -> Option<Duration> {
    let t = Instant::now();
    wait_for(Duration::from_secs(20), || {
        get_key(port, "/", "client-0");
        sync_failures(port, "timeout") >= 2.0
    })
    .then(|| t.elapsed())
}

/// Two timeouts counted within [`TWO_CALLS`]; a reload's old workers gone
/// within [`QUIT`]; then, once the new workers' calls time out too,
/// `nginx -s quit` with a call in flight (once the nap after the last
/// failure, 400 ms at most then, is over) finishes within [`QUIT`].
fn times_out_and_quits(g: &Nginx, what: &str) {
    let took = two_timeouts(g.port);
    eprintln!("{what}: two timeouts counted after {took:?}");
    assert!(
        took.is_some_and(|d| d <= TWO_CALLS),
        "two timeouts took {took:?}: {}",
        get(g.port, "/metrics").text()
    );
    assert_eq!(get_key(g.port, "/", "client-0").status, 200);
    let old = g.worker_pids();
    let t = Instant::now();
    sighup(g);
    let took = all_gone(&old, t);
    eprintln!("reload under a {what}: old workers gone after {took:?}");
    assert!(
        took.is_some_and(|d| d <= QUIT),
        "old workers after a reload: {took:?}"
    );
    let before = sync_failures(g.port, "timeout");
    let new_calls = wait_for(Duration::from_secs(10), || {
        sync_failures(g.port, "timeout") > before
    });
    assert!(new_calls, "the new workers' calls never timed out");
    std::thread::sleep(Duration::from_millis(600));
    let took = quit(g);
    eprintln!("quit under a {what}: nginx gone after {took:?}");
    assert!(
        took.is_some_and(|d| d <= QUIT),
        "nginx -s quit took {took:?}"
    );
}

/// The node of `cluster` that serves `slot` (its `CLUSTER NODES` line
/// marked `myself` lists it).
fn owner_of(cluster: &RedisCluster, slot: u16) -> usize {
    let serves = |range: &str| {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        match (a.parse::<u16>(), b.parse::<u16>()) {
            (Ok(a), Ok(b)) => (a..=b).contains(&slot),
            _ => false,
        }
    };
    (0..cluster.nodes.len())
        .find(|&i| {
            let out = cli(&["-p", &cluster.nodes[i].port.to_string(), "CLUSTER", "NODES"]);
            out.lines()
                .find(|l| l.contains("myself"))
                .is_some_and(|l| l.split(' ').skip(8).any(serves))
        })
        .unwrap_or_else(|| panic!("no node serves slot {slot}"))
}

/// `CLUSTER KEYSLOT key` asked of `port`.
fn keyslot(port: u16, key: &str) -> u16 {
    let out = cli(&["-p", &port.to_string(), "CLUSTER", "KEYSLOT", key]);
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("KEYSLOT {key}: {out}"))
}

#[test]
fn key_slots_agree_with_cluster_keyslot() {
    let cluster = RedisCluster::start();
    let port = cluster.nodes[0].port;
    let keys = [
        "123456789",
        "foo",
        "{user1000}.following",
        "foo{}{bar}",
        "foo{{bar}}zap",
        "rlw:{c}:fleet",
        "rlw:{c:00f3a2b1c4d5e6}:29123456",
        "rlw:{c}:hot:29123456",
    ];
    for k in keys {
        assert_eq!(key_slot(k.as_bytes()), keyslot(port, k), "slot of {k}");
    }
}

/// The node that serves zone `c`'s own keys (`rlw:{c}:…`: the fleet's
/// profiles and the overrides) answers a byte every 250 ms, through a
/// proxy it announces as its address (`cluster-announce-port`); the seed is
/// another node, so the slot map is read at once. Every call to that node
/// ends at its deadline as `timeout`, and a reload and `nginx -s quit`
/// finish within [`QUIT`]. The crate's cluster client bounded each read
/// only: a call lasted as long as its replies took to trickle (quit: more
/// than 10 s on main).
#[test]
fn a_trickling_cluster_node_times_out_per_call_and_quit_and_reload_finish_within_1_5s() {
    let cluster = RedisCluster::start();
    let n = owner_of(&cluster, keyslot(cluster.nodes[0].port, "rlw:{c}:fleet"));
    let proxy = FaultProxy::start(cluster.nodes[n].port);
    proxy.set(Fault::Trickle(250));
    let node = cluster.nodes[n].port.to_string();
    let p = proxy.port.to_string();
    let out = cli(&["-p", &node, "CONFIG", "SET", "cluster-announce-port", &p]);
    assert!(out.contains("OK"), "{out}");
    let seed = cluster.nodes[(n + 1) % 3].port;
    let announced = format!("127.0.0.1:{p}@");
    assert!(
        wait_for(Duration::from_secs(20), || {
            cli(&["-p", &seed.to_string(), "CLUSTER", "NODES"]).contains(&announced)
        }),
        "the seed never learnt the proxy's address"
    );
    let up = Upstream::start();
    let redis = format!("redis=redis://127.0.0.1:{seed} redis_mode=cluster");
    let g = redis_gateway(&redis, &up, 1000);
    times_out_and_quits(&g, "trickling cluster node");
}

/// The first seed node listed answers a byte every 250 ms (a proxy in
/// front of a healthy node; the slot map names the nodes' own addresses):
/// it costs its share of the connect's 500 ms, the next seed gives the
/// slot map, and the gateways share their clients' limits with no failure
/// counted.
#[test]
fn a_trickling_first_seed_costs_its_share_and_limits_are_shared() {
    let cluster = RedisCluster::start();
    let proxy = FaultProxy::start(cluster.nodes[0].port);
    proxy.set(Fault::Trickle(250));
    let url = cluster
        .url()
        .replacen("redis://", &format!("redis://127.0.0.1:{},", proxy.port), 1);
    let redis = format!("redis={url} redis_mode=cluster");
    let up = Upstream::start();
    let (_clock, a, b) = two_gateways(&redis, &up, 30, 15_000);
    let mut admitted = [[0u32; 2]; CLIENTS];
    send_rounds([a.port, b.port], 40, &mut admitted);
    assert_shared(&admitted, 30, " past a trickling seed");
    assert!(proxy.accepted() >= 2, "the trickling seed was never asked");
    assert_no_failures(&[&a, &b]);
}

/// The only sentinel listed answers a byte every 250 ms: every connect
/// (the sentinel's query) ends at its deadline as `timeout`, and a reload
/// and `nginx -s quit` finish within [`QUIT`]. The crate's connection
/// bounded each read only: a query lasted as long as its reply took to
/// trickle (two took 7.5 s on main).
#[test]
fn a_trickling_sentinel_times_out_per_call_and_quit_and_reload_finish_within_1_5s() {
    let set = SentinelSet::start();
    let proxy = FaultProxy::start(set.sentinels[0].port);
    proxy.set(Fault::Trickle(250));
    let up = Upstream::start();
    let redis = format!(
        "redis=redis://127.0.0.1:{} redis_mode=sentinel redis_master={SENTINEL_MASTER}",
        proxy.port
    );
    let g = redis_gateway(&redis, &up, 1000);
    times_out_and_quits(&g, "trickling sentinel");
}

/// `CLUSTER MYID` of node `i`.
fn id_of(cluster: &RedisCluster, i: usize) -> String {
    let port = cluster.nodes[i].port.to_string();
    cli(&["-p", &port, "CLUSTER", "MYID"]).trim().to_owned()
}

/// The slots of the clients' count keys (`rlw:{c:FP}:W`), with the node
/// that holds them.
fn client_slots(cluster: &RedisCluster) -> Vec<(u16, usize)> {
    let mut slots = Vec::new();
    for (i, keys) in cluster.keys_per_node().iter().enumerate() {
        for k in keys.iter().filter(|k| k.starts_with("rlw:{c:")) {
            let s = keyslot(cluster.nodes[i].port, k);
            if !slots.contains(&(s, i)) {
                slots.push((s, i));
            }
        }
    }
    slots
}

/// Starts moving `slot` from node `from` to node `to` the way
/// `redis-cli --cluster reshard` does (IMPORTING, MIGRATING, then its keys
/// with MIGRATE): from now on `from` answers `ASK` for its keys.
fn start_migration(cluster: &RedisCluster, slot: u16, from: usize, to: usize) {
    let (fp, tp) = (
        cluster.nodes[from].port.to_string(),
        cluster.nodes[to].port.to_string(),
    );
    let s = slot.to_string();
    let ok = |out: String| assert!(out.contains("OK"), "{out}");
    ok(cli(&[
        "-p",
        &tp,
        "CLUSTER",
        "SETSLOT",
        &s,
        "IMPORTING",
        &id_of(cluster, from),
    ]));
    ok(cli(&[
        "-p",
        &fp,
        "CLUSTER",
        "SETSLOT",
        &s,
        "MIGRATING",
        &id_of(cluster, to),
    ]));
    let keys = cli(&["-p", &fp, "CLUSTER", "GETKEYSINSLOT", &s, "1000"]);
    for k in keys.lines().filter(|k| !k.is_empty()) {
        ok(cli(&[
            "-p",
            &fp,
            "MIGRATE",
            "127.0.0.1",
            &tp,
            k,
            "0",
            "5000",
        ]));
    }
}

/// Ends the migration of `slot`: every node says `to` serves it, so a
/// gateway that still sends it to the old node gets `MOVED`.
fn end_migration(cluster: &RedisCluster, slot: u16, to: usize) {
    let id = id_of(cluster, to);
    for n in &cluster.nodes {
        let p = n.port.to_string();
        let out = cli(&[
            "-p",
            &p,
            "CLUSTER",
            "SETSLOT",
            &slot.to_string(),
            "NODE",
            &id,
        ]);
        assert!(out.contains("OK"), "{out}");
    }
}

/// `ASKING` calls node `i` served.
fn asking_calls(cluster: &RedisCluster, i: usize) -> u64 {
    let port = cluster.nodes[i].port.to_string();
    let out = cli(&["-p", &port, "INFO", "commandstats"]);
    out.lines()
        .find_map(|l| l.strip_prefix("cmdstat_asking:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// The slots of the clients' keys migrate while two gateways count them:
/// first half-way (`ASK`: the gateways send `ASKING` and the command to the
/// new node, which counts the `ASKING` calls), then for good (`MOVED`). No
/// count is lost: every client is admitted its limit across the gateways,
/// no more (a round in flight may add a few).
#[test]
fn slots_migrating_under_the_gateways_keep_counts_through_ask_and_moved() {
    let cluster = RedisCluster::start();
    let up = Upstream::start();
    let redis = format!("redis={} redis_mode=cluster", cluster.url());
    let (_clock, a, b) = two_gateways(&redis, &up, 60, 50_000);
    let mut admitted = [[0u32; 2]; CLIENTS];
    send_rounds([a.port, b.port], 30, &mut admitted);
    let slots = client_slots(&cluster);
    assert!(!slots.is_empty(), "no client key in the cluster");
    let asking_before: Vec<u64> = (0..3).map(|i| asking_calls(&cluster, i)).collect();
    for &(s, from) in &slots {
        start_migration(&cluster, s, from, (from + 1) % 3);
    }
    send_rounds([a.port, b.port], 30, &mut admitted);
    let asked: u64 = (0..3)
        .map(|i| asking_calls(&cluster, i) - asking_before[i])
        .sum();
    eprintln!("slots {slots:?} migrating: {asked} ASKING calls");
    assert!(asked > 0, "no ASK redirection was followed");
    for &(s, from) in &slots {
        end_migration(&cluster, s, (from + 1) % 3);
    }
    send_rounds([a.port, b.port], 30, &mut admitted);
    assert_shared(&admitted, 60, " across ASK and MOVED");
    let after = client_slots(&cluster);
    for &(s, from) in &slots {
        assert!(!after.contains(&(s, from)), "slot {s} still on node {from}");
    }
    assert_eq!(sync_failures(a.port, "reply"), 0.0);
}

/// docs/gateways.md's ACL user, created as printed on every node of a
/// cluster (the fleet's line, then the cluster's): every node connection
/// logs in as it, the slot map is read, counts are shared by two gateways,
/// an operator's block made on one reaches the other (the overrides'
/// scripts, by `EVALSHA`, on the node of the zone's slot), and nothing is
/// refused or failed. Without `cluster|slots`, the log names it and its fix.
#[test]
fn the_documented_acl_user_works_on_a_cluster() {
    use crate::fleet_edges::{documented_acl, documented_line};
    let cluster = RedisCluster::start();
    let pw = "doc-acl-cluster-pw-01";
    for n in &cluster.nodes {
        let port = n.port.to_string();
        for line in [
            documented_acl(pw),
            documented_line("ACL SETUSER gateway +cluster", pw),
        ] {
            let mut args = vec!["-p", port.as_str()];
            args.extend(line.iter().map(String::as_str));
            assert_eq!(cli(&args).trim(), "OK", "{args:?}");
        }
    }
    let seeds: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let up = Upstream::start();
    let redis = format!(
        "redis=redis://gateway:{pw}@{} redis_mode=cluster",
        seeds.join(",")
    );
    let clock = ShiftedClock::new();
    let a = api_gateway_on(&clock, &redis, &up);
    let b = api_gateway_on(&clock, &redis, &up);
    clock.clear_of_boundary(60_000, 20_000);
    let mut admitted = [[0u32; 2]; CLIENTS];
    send_rounds([a.port, b.port], 40, &mut admitted);
    assert_shared(&admitted, 30, " as the ACL user");
    let r = crate::overrides::send_body(
        a.port,
        "PUT",
        "/api?zone=c&key=op",
        br#"{"block":true}"#,
        false,
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    assert!(
        wait_for(Duration::from_secs(15), || get_key(b.port, "/", "op")
            .status
            == 429),
        "the block never reached b: {}",
        get(b.port, "/metrics").text()
    );
    for g in [&a, &b] {
        let text = get(g.port, "/metrics").text();
        for kind in [
            "timeout",
            "connection",
            "reply",
            "auth",
            "key",
            "cluster_down",
        ] {
            let n = prom_value(
                &text,
                "rate_limit_window_sync_failures_total",
                &[("zone", "c"), ("kind", kind)],
            );
            assert_eq!(n, Some(0.0), "kind {kind}:\n{}", g.error_log());
        }
        assert!(!g.error_log().contains("NOPERM"), "{}", g.error_log());
    }
    // Without the cluster's line: the slot map is refused, counted as
    // `auth`, and the log names the command and the fix, once.
    for n in &cluster.nodes {
        let out = cli(&[
            "-p",
            &n.port.to_string(),
            "ACL",
            "SETUSER",
            "gateway",
            "-cluster|slots",
        ]);
        assert_eq!(out.trim(), "OK");
    }
    let c = api_gateway_on(&clock, &redis, &up);
    let line = "redis refused the command CLUSTER|SLOTS to the sync's user (NOPERM): \
                add \"+cluster|slots\"";
    // Worker 0 logs it from its sweep timer (once a second).
    let logged = wait_for(Duration::from_secs(15), || c.error_log().contains(line));
    assert!(logged, "no line {line:?}:\n{}", c.error_log());
    assert!(sync_failures(c.port, "auth") > 0.0);
    assert_eq!(get_key(c.port, "/", "fresh").status, 200);
    assert_eq!(count_lines(&c.error_log(), line), 1, "{}", c.error_log());
}

/// A gateway of zone `c` (limit 30 per `X-Key`, the overrides API) on
/// `redis`, its clock on `clock`.
fn api_gateway_on(clock: &ShiftedClock, redis: &str, up: &Upstream) -> Nginx {
    clock.builder().workers(2).upstream_of(up).start(&http_conf(&format!(
        r#"rate_limit_window_zone $http_x_key zone=c:1m window=1m {redis} sync=100ms secret=cluster-acl-secret-0001;
        server {{
            listen 127.0.0.1:{{{{PORT}}}} reuseport;
            location / {{
                rate_limit_window zone=c limit=30;
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location = /api {{ rate_limit_window_metrics write=on; }}
            location = /metrics {{ rate_limit_window_metrics; }}
        }}"#
    )))
}

/// Whether the gateway on `port` refuses `key` (an operator's block).
fn blocked(port: u16, key: &str) -> bool {
    get_key(port, "/", key).status == 429
}

/// The slot of the zone's own keys (`rlw:{c}:…`: the overrides' log,
/// hash and sequence, the fleet's profiles) migrates under two gateways:
/// a block made before, one made while the slot migrates (its script's
/// keys partly moved: `ASK`, or `TRYAGAIN` until the move ends) and one
/// made after (`MOVED`) all reach the other gateway, and the first stays.
#[test]
fn the_zones_own_slot_migrating_keeps_overrides_shared() {
    let cluster = RedisCluster::start();
    let up = Upstream::start();
    let redis = format!("redis={} redis_mode=cluster", cluster.url());
    let clock = ShiftedClock::new();
    let a = api_gateway_on(&clock, &redis, &up);
    let b = api_gateway_on(&clock, &redis, &up);
    let block = |key: &str| {
        let path = format!("/api?zone=c&key={key}");
        let r = crate::overrides::send_body(a.port, "PUT", &path, br#"{"block":true}"#, false);
        assert_eq!(r.status, 200, "{}", r.describe());
        let shared = wait_for(Duration::from_secs(20), || blocked(b.port, key));
        assert!(shared, "{key} never reached b: {}", b.error_log());
    };
    block("op-before");
    let slot = keyslot(cluster.nodes[0].port, "rlw:{c}:fleet");
    let from = owner_of(&cluster, slot);
    let to = (from + 1) % 3;
    let asked = asking_calls(&cluster, to);
    start_migration(&cluster, slot, from, to);
    block("op-during");
    assert!(
        asking_calls(&cluster, to) > asked,
        "no ASK followed to node {to}"
    );
    end_migration(&cluster, slot, to);
    block("op-after");
    assert_eq!(owner_of(&cluster, slot), to);
    assert!(blocked(b.port, "op-before") && blocked(b.port, "op-during"));
    let keys = &cluster.keys_per_node()[from];
    assert!(
        !keys.iter().any(|k| k.starts_with("rlw:{c}:")),
        "zone keys left on node {from}: {keys:?}"
    );
}
