//! Deadlines per call (issue 50): a Redis link that answers one byte every
//! 0.25 s (a real TCP proxy in front of a real Redis) bounds each call by
//! its deadline, not each read: the rounds fail as `timeout`, and a reload
//! and `nginx -s quit` finish within 3 s whatever the link does.
use crate::common;
use crate::overrides::Redis;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::fault_proxy::pid_gone;
use common::*;

/// A proxy to `127.0.0.1:upstream` that forwards requests at once and
/// the replies one byte every 250 ms.
struct Trickle {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl Trickle {
    fn start(upstream: u16) -> Trickle {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        thread::spawn(move || {
            for c in l.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = c else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let st = st.clone();
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = c_in.read(&mut buf) {
                        if n == 0 || s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
                thread::spawn(move || trickle(server, client, &st));
            }
        });
        Trickle { port, stop }
    }
}

/// Forwards `from`'s bytes to `to` one every 250 ms.
fn trickle(mut from: TcpStream, mut to: TcpStream, stop: &AtomicBool) {
    let mut b = [0u8; 1];
    while !stop.load(Ordering::SeqCst) {
        match from.read(&mut b) {
            Ok(1) => {}
            _ => break,
        }
        thread::sleep(Duration::from_millis(250));
        if to.write_all(&b).is_err() {
            break;
        }
    }
}

impl Drop for Trickle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Waits until every pid of `pids` exited; the time it took (None: not
/// within 10 s).
fn all_gone(pids: &[i32], since: Instant) -> Option<Duration> {
    wait_for(Duration::from_secs(10), || {
        pids.iter().all(|&p| pid_gone(p))
    })
    .then(|| since.elapsed())
}

#[test]
fn a_trickling_link_times_out_per_call_and_quit_and_reload_finish_in_3s() {
    let redis = Redis::start();
    let link = Trickle::start(redis.1);
    let ng = Nginx::builder().start(&http_conf(&format!(
        r#"rate_limit_window_zone $http_x_key zone=t:1m window=60s redis=127.0.0.1:{} sync=100ms secret=fleet-deadline-00000001;
        server {{
            listen 127.0.0.1:{{{{PORT}}}} reuseport;
            location / {{ rate_limit_window zone=t limit=100; empty_gif; }}
            location = /metrics {{ rate_limit_window_metrics; }}
        }}"#,
        link.port
    )));
    let timeouts = || {
        prom_value(
            &get(ng.port, "/metrics").text(),
            "rate_limit_window_sync_failures_total",
            &[("zone", "t"), ("kind", "timeout")],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(get_key(ng.port, "/", "a").status, 200);
    assert!(
        wait_for(Duration::from_secs(10), || timeouts() >= 2.0),
        "no timeout counted: {}",
        timeouts()
    );
    // A reload: the old workers (their sync thread mid-call) are gone
    // within 3 s.
    let old = ng.worker_pids();
    let t = Instant::now();
    sighup(&ng);
    let took = all_gone(&old, t);
    eprintln!("reload: old workers gone after {took:?}");
    assert!(
        took.is_some_and(|d| d <= Duration::from_secs(3)),
        "old workers after a reload: {took:?}"
    );
    // Let the new workers' sync get mid-call, then quit.
    thread::sleep(Duration::from_millis(1_200));
    let mut pids = ng.worker_pids();
    pids.push(ng.master_pid());
    let t = Instant::now();
    // SAFETY: kill(2) only sends a signal to a pid; it touches no memory.
    unsafe {
        libc::kill(ng.master_pid(), libc::SIGQUIT);
    }
    let took = all_gone(&pids, t);
    eprintln!("quit: nginx gone after {took:?}");
    assert!(
        took.is_some_and(|d| d <= Duration::from_secs(3)),
        "nginx -s quit took {took:?}"
    );
    let log = ng.error_log();
    assert!(!log.contains("[alert]") && !log.contains("[crit]"), "{log}");
}
