//! A fleet's overrides under chaos (issue 50): three gateways (2 workers
//! each; one 15 minutes ahead, one started mid-way 15 minutes behind) on
//! one real redis-server, random operators' changes (`block`, `exempt`,
//! `limit` with or without a ttl, removals) and bans, with faults between
//! them: Redis restarted without its data and with it, a hostile writer,
//! writes refused (`READONLY`: the server made a replica of nothing), a
//! link 150 ms each way, a link that stalls, replies cut mid-pipeline (a
//! write that ran, its reply lost), Redis restarted from a copy older than
//! what the gateways saw (the sequence goes back, as after a failover to a
//! replica that lagged), a gateway started mid-way. After each round's faults end, every gateway's
//! view must equal the reference model (the last operator's change of each
//! client), with nothing left to write, within the bound of
//! docs/gateways.md; the next round's changes come after that (a change
//! that has not reached Redis yet is ordered where it arrives). Fixed
//! seeds; a failure prints its seed, the differences and what Redis holds.
use crate::common;
use crate::fleet_order::{action, delete, gateway, gateway_with, put, rcli, redis_at};

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::fault_proxy::{Fault as ProxyFault, FaultProxy};
use common::redis_servers::RedisProc;
use common::*;

const SEEDS: [u64; 2] = [0x0050_c4a0_5eed_0001, 0x0050_c4a0_5eed_0002];
const ROUNDS: usize = 6;
const CLIENTS: usize = 10;
/// The bound checked after each round's faults end: docs/gateways.md's
/// (a few steps), with room for 2 loaded cores.
const BOUND: Duration = Duration::from_secs(20);

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
}

const FAULTS: [Fault; 9] = [
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

/// A gateway whose clock is 15 minutes behind (libfaketime, a relative
/// offset re-read on every clock read; monotonic time real).
fn behind(port: u16, up: &Upstream, dir: &Path) -> Nginx {
    let file = dir.join("behind.rc");
    std::fs::write(&file, "-900\n").unwrap();
    let lib = libfaketime().expect("libfaketime: `make test` installs the faketime package");
    let b = Nginx::builder()
        .env("LD_PRELOAD", lib.to_str().unwrap())
        .env("FAKETIME_TIMESTAMP_FILE", file.to_str().unwrap())
        .env("FAKETIME_NO_CACHE", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    gateway_with(port, up, "fleet-order-secret-0001", b)
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
fn differences(gws: &[Nginx], model: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (i, g) in gws.iter().enumerate() {
        let text = get(g.port, "/api").text();
        let unsent = prom_value(&text, "rate_limit_window_fleet_unsent", &[("zone", "f")]);
        if unsent != Some(0.0) {
            out.push(format!("gateway {i}: {unsent:?} changes not yet in Redis"));
        }
        for (key, want) in model {
            let got = action(g, key);
            if &got != want {
                out.push(format!("gateway {i}: {key} is {got:?}, want {want:?}"));
            }
        }
    }
    out
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
    let link = redis.proxy.port;
    let up = Upstream::start();
    let ahead = ShiftedClock::new();
    ahead.advance(15 * 60_000);
    let mut gws = vec![
        gateway(link, &up),
        gateway_with(link, &up, "fleet-order-secret-0001", ahead.builder()),
    ];
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    let late = 1 + rng.below(ROUNDS - 1);
    for round in 0..ROUNDS {
        if round == late {
            gws.push(behind(link, &up, dir.path()));
        }
        let fault = FAULTS[rng.below(FAULTS.len())];
        let at = rng.below(4);
        let mut keys: Vec<usize> = (0..CLIENTS).collect();
        for step in 0..4 {
            if step == at {
                redis.begin(fault, &mut rng);
            }
            let k = keys.swap_remove(rng.below(keys.len()));
            let g = &gws[rng.below(gws.len())];
            let key = format!("c{k}");
            if rng.below(6) == 0 {
                // A ban, on a client of its own (no operator's state).
                let b = format!("ban{round}-{step}");
                get_key(g.port, "/ban", &b);
                get_key(g.port, "/ban", &b);
                model.insert(b, "ban".into());
            } else {
                let want = change(g, &key, &mut rng);
                // Applied at once where it was made.
                assert_eq!(action(g, &key), want, "seed {seed:#x}");
                model.insert(key, want.to_string());
            }
            std::thread::sleep(Duration::from_millis(rng.below(300) as u64));
        }
        redis.end(fault);
        let t = Instant::now();
        let mut left = Vec::new();
        let ok = wait_for(BOUND, || {
            left = differences(&gws, &model);
            left.is_empty()
        });
        if !ok {
            let hash = rcli(port, &["HGETALL", "rlw:{f}:ovr3"]);
            let log = rcli(port, &["ZRANGE", "rlw:{f}:ovr3:log", "-12", "-1"]);
            let lists: Vec<String> = gws
                .iter()
                .map(|g| get(g.port, "/api?zone=f&overrides").text())
                .collect();
            panic!(
                "seed {seed:#x}, round {round} ({fault:?}): no agreement within {BOUND:?}: \
                 {left:#?}\nsnapshot:\n{hash}\nlog:\n{log}\nlists: {lists:#?}"
            );
        }
        eprintln!(
            "seed {seed:#x} round {round} ({fault:?}): agreed after {:?}",
            t.elapsed()
        );
    }
}

#[test]
fn three_gateways_agree_with_the_model_after_every_fault() {
    for seed in SEEDS {
        run(seed);
    }
}
