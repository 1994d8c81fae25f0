//! The long-running deployment test: many clients' long and short
//! requests, `delay=` holds, client aborts and HTTP/2 resets, while the
//! master reloads (same size and resized), workers are SIGKILLed and a
//! cache manager runs. Seeded (`RLW_DEPLOY_SEED`, printed) and bounded: a
//! short run in `make test`, a long one under `make soak`. Checked
//! throughout and at the end: the upstream never has more of a client's
//! requests open than its `in_flight=`, no request found no room (no
//! owners to run out of), and once traffic drains every gauge, place and
//! turn is back to 0.
use super::watch::WatchingUpstream;
use super::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Requests of a client in flight at most.
const IN_FLIGHT: usize = 3;
/// Clients.
const CLIENTS: u64 = 8;

/// A small seeded generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

/// The deployment's configuration: the zone `fl` of `size`, a shed group,
/// a `delay=` zone, a cache (nginx starts a cache manager and loader), an
/// HTTP/1.1 listener and an HTTP/2 one (`h2`).
fn conf(size: &str, h2: &str) -> String {
    http_conf(&format!(
        r#"
        proxy_cache_path {{{{PREFIX}}}}/cache keys_zone=pc:1m;
        rate_limit_window_zone $http_x_client zone=fl:{size} window=1m;
        rate_limit_window_zone $http_x_client zone=dz:1m window=2s;
        server {{
            listen 127.0.0.1:{{{{PORT}}}};
            {h2}
            location /long/ {{
                rate_limit_window_shed zone=g max=64 priority=critical;
                rate_limit_window zone=fl in_flight={IN_FLIGHT};
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location /short/ {{
                rate_limit_window zone=fl in_flight={IN_FLIGHT};
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location /d/ {{
                rate_limit_window zone=dz limit=5 delay=3s;
                rate_limit_window zone=fl in_flight={IN_FLIGHT};
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location /cached/ {{
                proxy_cache pc;
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location = /metrics {{ rate_limit_window_metrics; }}
        }}"#
    ))
}

/// One request of a traffic thread, drawn from `rng`.
fn one_request(rng: &mut Rng, port: u16, port2: u16) {
    let client = format!("c{}", rng.range(0, CLIENTS));
    let h = [("X-Client", client.as_bytes())];
    let send = |path: &str| {
        if let Ok(mut c) = Conn::connect(port) {
            let _ = c.request_checked("GET", path, &h);
        }
    };
    match rng.range(0, 100) {
        0..=34 => send(&format!("/long/x?sleep={}", rng.range(100, 1200))),
        35..=64 => send(&format!("/short/x?sleep={}", rng.range(0, 20))),
        65..=79 => send(&format!("/d/x?sleep={}", rng.range(0, 50))),
        80..=89 => {
            // A client gone while its request is in flight (499).
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                let req = format!(
                    "GET /long/x?sleep=2000 HTTP/1.1\r\nHost: t\r\nX-Client: {client}\r\n\r\n"
                );
                let _ = s.write_all(req.as_bytes());
                thread::sleep(Duration::from_millis(rng.range(20, 300)));
            }
        }
        // Unlimited: of a client of its own.
        90..=94 => {
            drop(Conn::connect(port).map(|mut c| c.request_checked("GET", "/cached/x", &[])))
        }
        _ => h2_resets(port2, &client, rng.range(100, 400)),
    }
}

/// Four HTTP/2 streams of `client` on one connection, reset after `ms`
/// (curl gives up on them: RST_STREAM, then the connection closes).
fn h2_resets(port2: u16, client: &str, ms: u64) {
    let url = format!("https://127.0.0.1:{port2}/long/h2?sleep=2000");
    let _ = std::process::Command::new("curl")
        .args(["-sk", "--http2", "--parallel", "-o", "/dev/null"])
        .args(["--max-time", &format!("{:.3}", ms as f64 / 1000.0)])
        .args(["-H", &format!("X-Client: {client}")])
        .args([&url, &url, &url, &url])
        .output();
}

/// The current generation's workers (not shutting down; not the cache
/// processes).
fn current_workers(ng: &Nginx) -> Vec<i32> {
    ng.worker_pids()
        .into_iter()
        .filter(|p| {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd);
            cmd.contains("worker process") && !cmd.contains("shutting down")
        })
        .collect()
}

/// What the chaos did.
#[derive(Default, Debug)]
struct Chaos {
    reloads: u32,
    resizes: u32,
    killed: Vec<i32>,
}

/// One step of chaos, drawn from `rng`: a reload (same size or resized)
/// or a worker SIGKILLed.
fn chaos_step(rng: &mut Rng, ng: &mut Nginx, h2: &str, c: &mut Chaos) {
    match rng.range(0, 4) {
        0 | 1 => {
            let size = if c.resizes.is_multiple_of(2) {
                "1m"
            } else {
                "2m"
            };
            reload_keeping_old(ng, Some(&conf(size, h2))).expect("reload");
            c.reloads += 1;
        }
        2 => {
            let size = if c.resizes.is_multiple_of(2) {
                "2m"
            } else {
                "1m"
            };
            reload_keeping_old(ng, Some(&conf(size, h2))).expect("resize");
            c.resizes += 1;
        }
        _ => {
            let now = current_workers(ng);
            if !now.is_empty() {
                let victim = now[rng.range(0, now.len() as u64) as usize];
                sigkill(victim);
                c.killed.push(victim);
            }
        }
    }
}

/// The invariants that hold at every moment: no client had more requests
/// open at the upstream than `in_flight=`, none found no room.
fn check_always(port: u16, up: &WatchingUpstream) {
    let (most, client) = up.most();
    assert!(
        most <= IN_FLIGHT,
        "the upstream had {most} of {client} open at once"
    );
    let labels = |r| [("zone", "fl"), ("result", r)];
    for r in ["untracked", "no_room"] {
        let n = metric(port, "rate_limit_window_in_flight_total", &labels(r));
        assert!(n <= 0.0, "{n} requests {r}");
    }
}

/// Runs the deployment for `secs` seconds with `threads` traffic threads.
pub(super) fn deployment(secs: u64, threads: u64) {
    let seed = std::env::var("RLW_DEPLOY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0051);
    eprintln!("deployment run: seed {seed} (RLW_DEPLOY_SEED), {secs} s");
    let up = WatchingUpstream::start();
    let certs = tempfile::tempdir().unwrap();
    let h2 = tls_h2_listen(certs.path()).replace("{{PORT}}", "{{PORT2}}");
    let mut ng = Nginx::builder()
        .upstream(&up.addr())
        .start(&conf("1m", &h2));
    let (port, port2) = (ng.port, ng.port2);
    // A client at its cap before the run, so that the cap is reached
    // whatever the seed: 3 of 4 at once reach the upstream.
    assert_eq!(
        at_once(port, "/long/x?sleep=800", "c0", IN_FLIGHT + 1),
        [200, 200, 200, 429]
    );
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let traffic: Vec<_> = (0..threads)
        .map(|t| {
            let (stop, sent) = (stop.clone(), sent.clone());
            thread::spawn(move || {
                let mut rng = Rng(seed ^ (t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                while !stop.load(Ordering::SeqCst) {
                    one_request(&mut rng, port, port2);
                    sent.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let mut rng = Rng(seed);
    let mut chaos = Chaos::default();
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        thread::sleep(Duration::from_millis(rng.range(200, 700)));
        chaos_step(&mut rng, &mut ng, &h2, &mut chaos);
        check_always(port, &up);
    }
    stop.store(true, Ordering::SeqCst);
    traffic.into_iter().for_each(|t| t.join().unwrap());
    eprintln!(
        "{chaos:?}; {} requests sent, {} reached the upstream",
        sent.load(Ordering::SeqCst),
        up.received()
    );
    drained(&ng, port);
    check_always(port, &up);
    assert!(
        chaos.reloads + chaos.resizes > 0 && up.received() > 50,
        "{chaos:?}"
    );
    // Not vacuous: the upstream had as many of one client open as
    // allowed (the refusals beyond it are asserted at the start; the
    // zone's counters start over with each resize).
    eprintln!("upstream at most {:?} open", up.most());
    assert_eq!(up.most().0, IN_FLIGHT);
    assert!(has_cache_manager(&ng), "no cache manager ran");
    let unexplained = forget_killed_workers(&ng, &chaos.killed);
    assert!(unexplained.is_empty(), "{unexplained:?}");
}

/// Traffic over: every old worker exits, and every gauge, place and turn
/// is back to 0.
fn drained(ng: &Nginx, port: u16) {
    let gauges = || {
        [
            ("rate_limit_window_in_flight", "fl"),
            ("rate_limit_window_shed_in_flight", "g"),
            ("rate_limit_window_delay_held", "dz"),
            ("rate_limit_window_delay_turns", "dz"),
            ("rate_limit_window_delay_held", "fl"),
            ("rate_limit_window_delay_turns", "fl"),
        ]
        .map(|(m, z)| metric(port, m, &[("zone", z)]))
    };
    assert!(
        wait_for(Duration::from_secs(30), || current_workers(ng).len() == 2
            && gauges() == [0.0; 6]),
        "not drained: {:?}, workers {:?}",
        gauges(),
        ng.worker_pids()
    );
}

/// The short run of `make test`.
#[test]
fn a_deployment_keeps_every_limit_and_drains_to_0() {
    deployment(20, 6);
}

/// The long run (`make soak`).
#[test]
#[ignore = "soak: 5 min deployment"]
fn soak_deployment_5_min() {
    deployment(300, 8);
}
