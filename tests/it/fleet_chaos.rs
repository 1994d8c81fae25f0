//! A fleet's overrides under chaos (issue 50): three gateways (2 workers
//! each; one 15 minutes ahead, one started mid-way 15 minutes behind) on
//! one real redis-server, random operators' changes (`block`, `exempt`,
//! `limit` with or without a ttl, removals) of clients and of address
//! ranges (`cidr=`, zone `ip`) and bans, with faults between them: Redis
//! restarted without its data and with it, a hostile writer, writes
//! refused (`READONLY`: the server made a replica of nothing), a link 150
//! ms each way, a link that stalls, a link that trickles (a byte every
//! 0.25 s), replies cut mid-pipeline (a write that ran, its reply lost),
//! Redis restarted from a copy older than what the gateways saw (the
//! sequence goes back, as after a failover to a replica that lagged), a
//! gateway started mid-way. After each round's faults end, every gateway's
//! view must equal the reference model (the last operator's change of each
//! client and range), with nothing left to write, within the bound of
//! docs/gateways.md; the next round's changes come after that (a change
//! that has not reached Redis yet is ordered where it arrives).
//!
//! A full table: the gateway started mid-way holds at most [`SMALL`]
//! overrides of zone `f` (`overrides=`); the fleet holds more. What the
//! model expects of it (docs/runtime-control.md): every state it holds is
//! the model's, it holds at most [`SMALL`], and when the model has more
//! live states than that, the ones it lacks are counted in
//! `overrides_misfit_total` (and logged); once operators removed enough
//! (the last phase), it holds exactly the model's, as every gateway (a
//! misfit is read again). Operators change clients on the two other
//! gateways (this one would answer 409 when full), ranges on any.
//!
//! The same with Sentinel (`three_gateways_agree_through_sentinel_failovers`):
//! a master, a replica and three real redis-sentinels; faults are a
//! failover the sentinels are asked for and a master killed (its replica
//! promoted; writes acknowledged and not yet replicated are lost, as a
//! failover loses them), the old master back as a replica. Fixed seeds; a
//! failure prints its seed, the differences and what Redis holds.
use crate::common;
use crate::fleet_order::{action, delete, put, rcli, redis_at};
use crate::overrides::{json, send_body};

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::fault_proxy::{Fault as ProxyFault, FaultProxy};
use common::redis_servers::{server_bin, RedisProc, SentinelSet, SENTINEL_MASTER};
use common::*;

const SEEDS: [u64; 2] = [0x0050_c4a0_5eed_0001, 0x0050_c4a0_5eed_0002];
const CLIENTS: usize = 10;
/// The bound checked after each round's faults end: docs/gateways.md's
/// (a few steps), with room for 2 loaded cores.
const BOUND: Duration = Duration::from_secs(20);
/// The ranges operators change (`cidr=10.K.0.0/16` of zone `ip`).
const RANGES: usize = 4;
/// `overrides=` of zone `f` on the gateway started mid-way.
const SMALL: usize = 6;
const SECRET: &str = "fleet-order-secret-0001";

/// xorshift64*: the same operations for the same seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    None,
    RestartEmpty,
    RestartWithData,
    Hostile,
    ReadOnly,
    /// 150 ms each way on the gateways' link.
    Slow,
    /// No reply reaches the gateways (calls time out) until it ends.
    Stall,
    /// Each connection's replies cut after 200 bytes: writes that ran
    /// whose replies are lost, sent again.
    Cut,
    /// A copy saved at the fault's start, Redis restarted from it at its
    /// end: the changes between are lost, the sequence goes back (as a
    /// failover to a replica that lagged).
    Stale,
    /// Replies trickle, a byte every 250 ms: every call ends at its
    /// deadline.
    Trickle,
}

const FAULTS: [Fault; 10] = [
    Fault::Trickle,
    Fault::None,
    Fault::RestartEmpty,
    Fault::RestartWithData,
    Fault::Hostile,
    Fault::ReadOnly,
    Fault::Slow,
    Fault::Stall,
    Fault::Cut,
    Fault::Stale,
];

/// The Redis of the fleet, restartable on its port, and the proxy the
/// gateways reach it through.
struct Server<'d> {
    dir: &'d Path,
    port: u16,
    proc: Option<RedisProc>,
    proxy: FaultProxy,
}

impl Server<'_> {
    fn restart(&mut self, keep_data: bool) {
        if keep_data {
            assert!(rcli(self.port, &["SAVE"]).contains("OK"));
        } else {
            let _ = std::fs::remove_file(self.dir.join("dump.rdb"));
        }
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
        self.proc = Some(redis_at(self.dir, self.port));
    }

    /// Begins fault `f` (ended by [`Server::end`]).
    fn begin(&mut self, f: Fault, rng: &mut Rng) {
        match f {
            Fault::None => {}
            Fault::RestartEmpty => self.restart(false),
            Fault::RestartWithData => self.restart(true),
            Fault::Hostile => {
                for i in 0..5 {
                    let f = format!("{:014x}", rng.next() >> 8);
                    let seq = (u64::MAX >> 12) - i;
                    let v = format!(
                        "v3 {seq} ffffffffffffffff 0000000000000001.1 exempt 0 0 {}",
                        "0".repeat(32)
                    );
                    rcli(self.port, &["HSET", "rlw:{f}:ovr3", &f, &v]);
                    let m = format!("{seq} {f} 0000000000000001.1 block 0 0 junk");
                    rcli(
                        self.port,
                        &["ZADD", "rlw:{f}:ovr3:log", &seq.to_string(), &m],
                    );
                }
            }
            Fault::ReadOnly => {
                let nowhere = free_port().to_string();
                assert!(rcli(self.port, &["REPLICAOF", "127.0.0.1", &nowhere]).contains("OK"));
            }
            Fault::Slow => self.proxy.set_latency(150),
            Fault::Stall => self.proxy.set(ProxyFault::Stall),
            Fault::Cut => self.proxy.set(ProxyFault::CutAfter(200)),
            Fault::Trickle => self.proxy.set(ProxyFault::Trickle(250)),
            Fault::Stale => assert!(rcli(self.port, &["SAVE"]).contains("OK")),
        }
    }

    fn end(&mut self, f: Fault) {
        match f {
            Fault::ReadOnly => {
                assert!(rcli(self.port, &["REPLICAOF", "NO", "ONE"]).contains("OK"));
            }
            Fault::Stale => {
                // Let the round's changes reach Redis, then lose them.
                std::thread::sleep(Duration::from_millis(1500));
                if let Some(mut p) = self.proc.take() {
                    p.kill();
                }
                self.proc = Some(redis_at(self.dir, self.port));
            }
            _ => {}
        }
        self.proxy.set(ProxyFault::Pass);
        self.proxy.set_latency(0);
    }
}

/// A gateway (2 workers) whose zones sync through `redis` (the zone
/// directive's Redis parameters): `f` keyed by `X-Key` (`overrides=`
/// `table`, `ban=` at `/ban`) and `ip` keyed by the address (ranges).
fn chaos_gateway(redis: &str, up: &Upstream, b: NginxBuilder, table: usize) -> Nginx {
    b.upstream_of(up).start(&proxy_conf(
        &format!(
            "rate_limit_window_zone $http_x_key zone=f:1m window=60s {redis} \
             sync=100ms secret={SECRET} overrides={table};
             rate_limit_window_zone $binary_remote_addr zone=ip:1m window=60s {redis} \
             sync=100ms secret={SECRET};"
        ),
        "reuseport",
        "location /ban { rate_limit_window zone=f limit=1 ban=1h; proxy_pass http://{{UPSTREAM}}; }
         location /ip { rate_limit_window zone=ip limit=100; proxy_pass http://{{UPSTREAM}}; }
         location = /api { rate_limit_window_metrics write=on; }",
        "rate_limit_window zone=f limit=100;",
    ))
}

/// A gateway whose clock is 15 minutes behind (libfaketime, a relative
/// offset re-read on every clock read; monotonic time real), its table of
/// zone `f` [`SMALL`].
fn behind(redis: &str, up: &Upstream, dir: &Path) -> Nginx {
    let file = dir.join("behind.rc");
    std::fs::write(&file, "-900\n").unwrap();
    let lib = libfaketime().expect("libfaketime: `make test` installs the faketime package");
    let b = Nginx::builder()
        .env("LD_PRELOAD", lib.to_str().unwrap())
        .env("FAKETIME_TIMESTAMP_FILE", file.to_str().unwrap())
        .env("FAKETIME_NO_CACHE", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    chaos_gateway(redis, up, b, SMALL)
}

/// The range operators change as `r` (0..RANGES): `cidr=10.r.0.0/16`.
fn range(r: usize) -> String {
    format!("cidr=10.{r}.0.0/16")
}

/// The action of range `what` (`cidr=…`) on `ng` ("" when none).
fn range_action(ng: &Nginx, what: &str) -> String {
    let r = get(ng.port, &format!("/api?zone=ip&{what}"));
    json(&r)["override"]["action"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// One operator's change of range `what` on `g`; the action it sets.
fn range_change(g: &Nginx, what: &str, rng: &mut Rng) -> &'static str {
    let path = format!("/api?zone=ip&{what}");
    let (body, want) = match rng.below(4) {
        0 => (r#"{"block":true}"#.to_string(), "block"),
        1 => (r#"{"exempt":true,"ttl":3600}"#.to_string(), "exempt"),
        2 => (format!("{{\"limit\":{}}}", 1 + rng.below(50)), "limit"),
        _ => {
            let r = request(g.port, "DELETE", &format!("{path}&override"), &[]);
            assert_eq!(r.status, 200, "{}", r.describe());
            return "";
        }
    };
    let r = send_body(g.port, "PUT", &path, body.as_bytes(), false);
    assert_eq!(r.status, 200, "{}", r.describe());
    want
}

/// One operator's change of `key` on `g`; the action it sets ("" for a
/// removal).
fn change(g: &Nginx, key: &str, rng: &mut Rng) -> &'static str {
    let n = 1 + rng.below(50);
    match rng.below(5) {
        0 => {
            put(g, key, r#"{"block":true}"#);
            "block"
        }
        1 => {
            put(g, key, r#"{"exempt":true,"ttl":3600}"#);
            "exempt"
        }
        2 => {
            put(g, key, &format!("{{\"limit\":{n}}}"));
            "limit"
        }
        3 => {
            put(g, key, &format!("{{\"limit\":{n},\"ttl\":3600}}"));
            "limit"
        }
        _ => {
            delete(g, key);
            ""
        }
    }
}

/// The differences between the model and each gateway's view, and the
/// changes a gateway still has to write (a change is in the fleet's order
/// once Redis gave it its place: until then a later change elsewhere may
/// come before it).
///
/// `small`: the gateway whose table of zone `f` holds [`SMALL`] (see the
/// module doc for what the model expects of it while the fleet holds
/// more).
fn differences(
    gws: &[Nginx],
    model: &BTreeMap<String, String>,
    small: Option<usize>,
) -> Vec<String> {
    let mut out = Vec::new();
    let live_f = live_f(model);
    for (i, g) in gws.iter().enumerate() {
        let text = get(g.port, "/api").text();
        for zone in ["f", "ip"] {
            let unsent = prom_value(&text, "rate_limit_window_fleet_unsent", &[("zone", zone)]);
            if unsent != Some(0.0) {
                out.push(format!(
                    "gateway {i}: {unsent:?} changes of {zone} not yet in Redis"
                ));
            }
        }
        let full = small == Some(i) && live_f > SMALL;
        let (mut held, mut lacking) = (0, Vec::new());
        for (key, want) in model {
            let got = if key.starts_with("cidr=") {
                range_action(g, key)
            } else {
                action(g, key)
            };
            held += usize::from(!got.is_empty() && !key.starts_with("cidr="));
            // A full table lacks some of the fleet's states, never holds
            // another.
            let lacks = full && got.is_empty() && !key.starts_with("cidr=");
            if lacks && !want.is_empty() {
                lacking.push(format!("{key}={want}"));
            }
            if &got != want && !lacks {
                out.push(format!("gateway {i}: {key} is {got:?}, want {want:?}"));
            }
        }
        if full {
            // What it lacks was counted: an operator's state as a misfit,
            // a ban as a misfit or as evicted for an operator's state.
            let count = |name| prom_value(&text, name, &[("zone", "f")]).unwrap_or(0.0);
            let misfits = count("rate_limit_window_overrides_misfit_total");
            let evicted = count("rate_limit_window_bans_evicted_total");
            let operators = lacking.iter().any(|l| !l.ends_with("=ban"));
            let counted = if operators {
                misfits > 0.0
            } else {
                misfits + evicted > 0.0
            };
            if held > SMALL || !counted {
                out.push(format!(
                    "gateway {i} (overrides={SMALL}, the fleet holds {live_f}): holds {held}, \
                     lacks {lacking:?}, misfits {misfits}, bans evicted {evicted}"
                ));
            }
        }
    }
    out
}

/// The live states of zone `f` in the model (bans included).
fn live_f(model: &BTreeMap<String, String>) -> usize {
    model
        .iter()
        .filter(|(k, v)| !k.starts_with("cidr=") && !v.is_empty())
        .count()
}

/// One operator's step on a random gateway (any for a range, one of the
/// first `clients_on` for a client): a ban (on a client of its own), a change of a
/// range, or a change of a client (`free`: the clients and ranges not yet
/// changed this round); recorded in `model`.
fn operate(
    (gws, clients_on): (&[Nginx], usize),
    model: &mut BTreeMap<String, String>,
    rng: &mut Rng,
    at: (usize, usize),
    free: &mut (Vec<usize>, Vec<usize>),
    seed: u64,
) {
    let (round, step) = at;
    let kind = rng.below(6);
    let range_op = matches!(kind, 1 | 2) && !free.1.is_empty();
    let g = &gws[rng.below(if range_op { gws.len() } else { clients_on })];
    match kind {
        0 => {
            let b = format!("ban{round}-{step}");
            get_key(g.port, "/ban", &b);
            get_key(g.port, "/ban", &b);
            model.insert(b, "ban".into());
        }
        // Each client and range changes once a round (two changes of one
        // in flight on two gateways are ordered by their arrival at Redis).
        1 | 2 if !free.1.is_empty() => {
            let what = range(free.1.swap_remove(rng.below(free.1.len())));
            let want = range_change(g, &what, rng);
            assert_eq!(range_action(g, &what), want, "seed {seed:#x}");
            model.insert(what, want.to_string());
        }
        _ => {
            let k = free.0.swap_remove(rng.below(free.0.len()));
            let key = format!("c{k}");
            let want = change(g, &key, rng);
            // Applied at once where it was made.
            assert_eq!(action(g, &key), want, "seed {seed:#x}");
            model.insert(key, want.to_string());
        }
    }
}

/// Waits until every gateway agrees with the model; on failure, panics
/// with the seed, the differences and `dump` (what Redis holds).
fn agree(
    gws: &[Nginx],
    model: &BTreeMap<String, String>,
    small: Option<usize>,
    what: &str,
    dump: impl FnOnce() -> String,
) {
    let t = Instant::now();
    let mut left = Vec::new();
    let ok = wait_for(BOUND, || {
        left = differences(gws, model, small);
        left.is_empty()
    });
    if !ok {
        let lists: Vec<String> = gws
            .iter()
            .map(|g| get(g.port, "/api?zone=f&overrides").text())
            .collect();
        panic!(
            "{what}: no agreement within {BOUND:?}: {left:#?}\n{}\nlists: {lists:#?}",
            dump()
        );
    }
    eprintln!("{what}: agreed after {:?}", t.elapsed());
}

/// The last phase: operators remove every state of zone `f` but two
/// clients' (bans included), so the small table has room; then every
/// gateway, the small one too, holds exactly the model's.
fn make_room(ops: &[Nginx], model: &mut BTreeMap<String, String>, keep: &[&str]) {
    for (key, want) in model.iter_mut() {
        if key.starts_with("cidr=") || want.is_empty() || keep.contains(&key.as_str()) {
            continue;
        }
        delete(&ops[0], key);
        want.clear();
    }
}

fn run(seed: u64) {
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut redis = Server {
        dir: dir.path(),
        port,
        proc: Some(redis_at(dir.path(), port)),
        proxy: FaultProxy::start(port),
    };
    let link = format!("redis=127.0.0.1:{}", redis.proxy.port);
    let up = Upstream::start();
    let ahead = ShiftedClock::new();
    ahead.advance(15 * 60_000);
    let mut gws = vec![
        chaos_gateway(&link, &up, Nginx::builder(), 1024),
        chaos_gateway(&link, &up, ahead.builder(), 1024),
    ];
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    // Every fault once, in an order of the seed's.
    let mut faults = FAULTS;
    for i in (1..faults.len()).rev() {
        faults.swap(i, rng.below(i + 1));
    }
    let late = 1 + rng.below(faults.len() / 2);
    let mut full = 0;
    let dump = || {
        let hash = rcli(port, &["HGETALL", "rlw:{f}:ovr3"]);
        let log = rcli(port, &["ZRANGE", "rlw:{f}:ovr3:log", "-12", "-1"]);
        format!("snapshot:\n{hash}\nlog:\n{log}")
    };
    for (round, fault) in faults.into_iter().enumerate() {
        if round == late {
            gws.push(behind(&link, &up, dir.path()));
        }
        let at = rng.below(4);
        let mut free: (Vec<usize>, Vec<usize>) = ((0..CLIENTS).collect(), (0..RANGES).collect());
        for step in 0..4 {
            if step == at {
                redis.begin(fault, &mut rng);
            }
            // Clients' changes on the two full-size tables (the small one
            // answers 409 when full), ranges' on any.
            operate(
                (&gws, 2),
                &mut model,
                &mut rng,
                (round, step),
                &mut free,
                seed,
            );
            std::thread::sleep(Duration::from_millis(rng.below(300) as u64));
        }
        redis.end(fault);
        let small = (gws.len() == 3).then_some(2);
        let live = live_f(&model);
        full += usize::from(small.is_some() && live > SMALL);
        let what = format!("seed {seed:#x} round {round} ({fault:?}, zone f holds {live})");
        agree(&gws, &model, small, &what, dump);
    }
    assert!(full > 0, "seed {seed:#x}: the small table was never full");
    make_room(&gws[..2], &mut model, &["c0", "c1"]);
    let what = format!("seed {seed:#x}, room made in the small table");
    agree(&gws, &model, None, &what, dump);
}

#[test]
fn three_gateways_agree_with_the_model_after_every_fault() {
    for seed in SEEDS {
        run(seed);
    }
}

/// A Sentinel fault: a failover the sentinels are asked for, or the
/// master killed (its replica promoted), the old master back as a replica.
#[derive(Clone, Copy, Debug)]
enum Failover {
    None,
    Asked,
    Killed,
}

/// The master and replica of `set` as processes: (master, replica).
fn roles(set: &mut SentinelSet) -> (&mut RedisProc, &mut RedisProc) {
    let m = set.master_port();
    if m == Some(set.replica.port) {
        (&mut set.replica, &mut set.master)
    } else {
        (&mut set.master, &mut set.replica)
    }
}

/// Begins `f` on `set`; returns the master's port before it.
fn fail_over(set: &mut SentinelSet, f: Failover) -> Option<u16> {
    let before = set.master_port();
    match f {
        Failover::None => {}
        Failover::Asked => {
            let s = set.sentinels[0].port;
            // The replica must be known good (in sync, seen by the
            // sentinels) after the last failover: asked until it is.
            let asked = wait_for(Duration::from_secs(30), || {
                rcli(s, &["SENTINEL", "FAILOVER", SENTINEL_MASTER]).contains("OK")
            });
            assert!(asked, "the sentinels never started the failover");
        }
        Failover::Killed => roles(set).0.kill(),
    }
    before
}

/// Ends `f`: the sentinels name the other server and it is a writable
/// master; a killed master is back, as a replica of the new one.
fn failed_over(set: &mut SentinelSet, f: Failover, before: Option<u16>) {
    if matches!(f, Failover::None) {
        return;
    }
    let moved = wait_for(Duration::from_secs(60), || {
        let m = set.master_port();
        m.is_some() && m != before && rcli(m.unwrap(), &["ROLE"]).starts_with("master")
    });
    assert!(moved, "{f:?}: no new master within 60 s");
    if matches!(f, Failover::Killed) {
        let master = set.master_port().unwrap();
        let dir = set.dir.path().to_path_buf();
        let old = roles(set).1;
        let conf = format!(
            "bind 127.0.0.1\nport {}\nsave \"\"\nappendonly no\nreplicaof 127.0.0.1 {master}\n",
            old.port
        );
        *old = RedisProc::spawn(
            &server_bin(),
            &dir,
            &format!("back{}", old.port),
            &conf,
            old.port,
        );
    }
}

fn run_sentinel(seed: u64) {
    let mut rng = Rng(seed);
    let mut set = SentinelSet::start();
    let link = format!(
        "redis={} redis_mode=sentinel redis_master={SENTINEL_MASTER}",
        set.url()
    );
    let up = Upstream::start();
    let gws: Vec<Nginx> = (0..3)
        .map(|_| chaos_gateway(&link, &up, Nginx::builder(), 1024))
        .collect();
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    let mut faults = [
        Failover::Asked,
        Failover::Killed,
        Failover::Asked,
        Failover::None,
    ];
    for i in (1..faults.len()).rev() {
        faults.swap(i, rng.below(i + 1));
    }
    for (round, fault) in faults.into_iter().enumerate() {
        let at = rng.below(4);
        let mut free: (Vec<usize>, Vec<usize>) = ((0..CLIENTS).collect(), (0..RANGES).collect());
        let mut before = None;
        for step in 0..4 {
            if step == at {
                before = fail_over(&mut set, fault);
            }
            operate(
                (&gws, 3),
                &mut model,
                &mut rng,
                (round, step),
                &mut free,
                seed,
            );
            std::thread::sleep(Duration::from_millis(rng.below(300) as u64));
        }
        failed_over(&mut set, fault, before);
        let master = set.master_port().unwrap_or(0);
        let what = format!("seed {seed:#x} sentinel round {round} ({fault:?})");
        agree(&gws, &model, None, &what, || {
            let hash = rcli(master, &["HGETALL", "rlw:{f}:ovr3"]);
            let ranges = rcli(master, &["HGETALL", "rlw:{ip}:ovr3"]);
            let log = rcli(
                master,
                &["ZRANGE", "rlw:{ip}:ovr3:log", "0", "-1", "WITHSCORES"],
            );
            let seq = rcli(master, &["GET", "rlw:{ip}:ovr3:seq"]);
            let ep = rcli(master, &["GET", "rlw:{ip}:ovr3:epoch"]);
            format!("master {master}, snapshot:\n{hash}\nip snapshot:\n{ranges}\nip log:\n{log}\nip seq {seq} epoch {ep}")
        });
    }
}

#[test]
fn three_gateways_agree_through_sentinel_failovers() {
    run_sentinel(SEEDS[0]);
}
