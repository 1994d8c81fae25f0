//! Cluster-wide limits through Redis (`redis=` zones): two gateways, each
//! with 2 workers, share one limit; a Redis outage never fails a request.
mod common;

use common::*;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// A real redis-server on a free port, killed on drop.
struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    fn start_on(port: u16) -> RedisServer {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server not found: `make test` installs the redis-server package");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on port {port}"
            );
            sleep(Duration::from_millis(20));
        }
        RedisServer { child, port }
    }

    fn start() -> RedisServer {
        Self::start_on(free_port())
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A gateway whose zone `c` (limit `limit` per minute) syncs through Redis.
fn gateway(redis_port: u16, upstream: &Upstream, limit: u32) -> Nginx {
    let conf = http_conf(&format!(
        r#"
        rate_limit_window_zone $http_x_key zone=c:1m window=1m redis=127.0.0.1:{redis_port} sync=100ms secret=s3cret;
        server {{
            listen 127.0.0.1:{{{{PORT}}}} reuseport;
            location / {{
                rate_limit_window zone=c limit={limit};
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location = /metrics {{ rate_limit_window_metrics; }}
        }}"#
    ));
    Nginx::builder()
        .workers(2)
        .upstream_of(upstream)
        .start(&conf)
}

/// Sum of every gateway's count in the hashes whose keys match `pattern`,
/// read with redis-cli.
fn redis_total(port: u16, pattern: &str) -> i64 {
    let cli = |args: &[&str]| {
        let out = Command::new("redis-cli")
            .arg("-p")
            .arg(port.to_string())
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    cli(&["--scan", "--pattern", pattern])
        .lines()
        .filter(|k| !k.is_empty())
        .map(|k| {
            cli(&["HVALS", k])
                .lines()
                .map(|v| {
                    v.trim()
                        .parse::<i64>()
                        .unwrap_or_else(|_| panic!("bad value {v:?} in a hash"))
                })
                .sum::<i64>()
        })
        .sum()
}

fn metric(port: u16, name: &str) -> f64 {
    let text = get(port, "/metrics").text();
    text.lines()
        .find(|l| l.starts_with(name) && l.contains("zone=\"c\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

#[test]
fn two_gateways_share_one_limit() {
    let redis = RedisServer::start();
    let up = Upstream::start();
    let a = gateway(redis.port, &up, 40);
    let b = gateway(redis.port, &up, 40);
    // The counts of a window boundary are not what this test checks.
    clear_of_boundary(60_000, 8_000);

    // One client alternating between the gateways at about 20 requests/s.
    let mut admitted = [0u32; 2];
    let mut rejected = 0;
    for i in 0..80 {
        let port = if i % 2 == 0 { a.port } else { b.port };
        let r = get_key(port, "/", "client-1");
        match r.status {
            200 => admitted[i % 2] += 1,
            429 => rejected += 1,
            s => panic!("unexpected status {s}: {}", r.describe()),
        }
        sleep(Duration::from_millis(50));
    }
    let total = admitted[0] + admitted[1];
    eprintln!("admitted {admitted:?} = {total}, rejected {rejected}");
    // Without the sync each gateway would admit 40 (80 in all). The bound
    // is about one sync interval of traffic: 100 ms x 20 req/s = 2.
    assert!(
        (40..=44).contains(&total),
        "cluster admitted {total} for limit 40 (per gateway {admitted:?})"
    );
    assert!(admitted[0] > 0 && admitted[1] > 0);
    assert_eq!(
        up.received(),
        u64::from(total),
        "the upstream saw exactly the admitted requests"
    );

    // Both gateways' counts agree within a sync interval.
    sleep(Duration::from_millis(400));
    let ja: serde_json::Value =
        serde_json::from_slice(&get(a.port, "/metrics?zone=c&key=client-1").body).unwrap();
    let jb: serde_json::Value =
        serde_json::from_slice(&get(b.port, "/metrics?zone=c&key=client-1").body).unwrap();
    let (ca, cb) = (
        ja["current"].as_f64().unwrap(),
        jb["current"].as_f64().unwrap(),
    );
    assert_eq!(ca, cb, "gateways disagree after sync: {ja} vs {jb}");
    assert_eq!(ca, f64::from(total), "{ja}");
    assert_eq!(
        redis_total(redis.port, "rlw:{c:*"),
        i64::from(total),
        "the store holds each gateway's admitted count once"
    );
    assert!(metric(a.port, "rate_limit_window_sync_rounds_total") > 0.0);
    assert_eq!(metric(a.port, "rate_limit_window_sync_errors_total"), 0.0);
}

#[test]
fn redis_outage_keeps_serving_and_is_visible() {
    let mut redis = RedisServer::start();
    let redis_port = redis.port;
    let up = Upstream::start();
    let a = gateway(redis_port, &up, 1000);
    let b = gateway(redis_port, &up, 1000);
    for i in 0..20 {
        assert_eq!(
            get_key(if i % 2 == 0 { a.port } else { b.port }, "/", "k").status,
            200
        );
    }
    sleep(Duration::from_millis(300));
    assert_eq!(metric(a.port, "rate_limit_window_sync_errors_total"), 0.0);

    redis.kill();
    let started = Instant::now();
    let mut statuses = vec![];
    while started.elapsed() < Duration::from_secs(2) {
        for port in [a.port, b.port] {
            let t = Instant::now();
            statuses.push(get_key(port, "/", "k").status);
            // Requests never wait for Redis.
            assert!(
                t.elapsed() < Duration::from_millis(500),
                "a request waited {:?}",
                t.elapsed()
            );
        }
        sleep(Duration::from_millis(20));
    }
    assert!(
        statuses.iter().all(|&s| s == 200),
        "statuses during the outage: {statuses:?}"
    );
    let errors = metric(a.port, "rate_limit_window_sync_errors_total");
    assert!(errors > 0.0, "sync errors not counted");
    assert!(metric(a.port, "rate_limit_window_sync_lag_seconds") >= 0.5);
    let log = a.error_log();
    assert_eq!(
        log.matches("redis sync failing").count(),
        1,
        "one log line per outage:\n{log}"
    );

    // Redis comes back: the sync resumes.
    let _redis = RedisServer::start_on(redis_port);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        get_key(a.port, "/", "k");
        if metric(a.port, "rate_limit_window_sync_lag_seconds") < 0.5 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sync did not resume after redis came back"
        );
        sleep(Duration::from_millis(100));
    }
}

#[test]
fn sync_thread_stops_on_reload_and_quit() {
    // Counts carried across reloads are checked within one window: at a
    // minute boundary the earlier requests would only count in part.
    clear_of_boundary(60_000, 20_000);
    let redis = RedisServer::start();
    let up = Upstream::start();
    let mut a = gateway(redis.port, &up, 5);
    for _ in 0..3 {
        assert_eq!(get_key(a.port, "/", "r").status, 200);
    }
    sleep(Duration::from_millis(300));
    for _ in 0..3 {
        let t = Instant::now();
        a.reload();
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "reload took {:?}",
            t.elapsed()
        );
    }
    // The new worker 0 took the sync over without pushing anything twice:
    // the cluster total is still the 3 admitted requests.
    sleep(Duration::from_millis(500));
    assert_eq!(
        redis_total(redis.port, "rlw:{c:*"),
        3,
        "cluster total after reloads"
    );
    // Counts survived the reloads: 2 left of 5.
    assert_eq!(get_key(a.port, "/", "r").status, 200);
    assert_eq!(get_key(a.port, "/", "r").status, 200);
    assert_eq!(get_key(a.port, "/", "r").status, 429);
    let master = a.master_pid();
    let t = Instant::now();
    drop(a);
    // SAFETY: kill with signal 0 only checks that the process exists.
    let alive = unsafe { libc::kill(master, 0) } == 0;
    assert!(!alive, "nginx master still running after quit");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "quit took {:?}",
        t.elapsed()
    );
}
