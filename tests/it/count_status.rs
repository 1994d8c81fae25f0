//! `count_status=`: requests are checked before they run, and stay counted
//! only when their final status is in the list, against real nginx (two
//! workers) and a real upstream that answers the status it is asked for.
use crate::common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::status_upstream::StatusUpstream;
use common::*;

const HOUR_MS: u128 = 3_600_000;

/// A server limiting by `X-Key` with `params` on `location /`, plus the
/// metrics location and `extra` locations.
fn start(up: &StatusUpstream, params: &str, extra: &str) -> Nginx {
    let conf = http_conf(
        &r#"rate_limit_window_zone $http_x_key zone=z:1m window=1h;
        server {
            listen 127.0.0.1:{{PORT}};
            proxy_read_timeout 1s;
            location / {
                rate_limit_window zone=z PARAMS;
                proxy_pass http://{{UPSTREAM}};
            }
            location = /metrics { rate_limit_window_metrics; }
            EXTRA
        }"#
        .replace("PARAMS", params)
        .replace("EXTRA", extra),
    );
    Nginx::builder().upstream(&up.addr()).start(&conf)
}

/// The key's count in the current window, once it has settled on `want`
/// (a request's give-back runs as nginx frees it, just after the response).
fn settled(port: u16, key: &str, want: u64) -> u64 {
    let read = || {
        key_json(port, "z", key.as_bytes())["current"]
            .as_u64()
            .unwrap()
    };
    wait_for(Duration::from_secs(5), || read() == want);
    read()
}

#[test]
fn only_failed_requests_count() {
    let up = StatusUpstream::start();
    let ng = start(
        &up,
        "limit=3 count_status=401,403",
        "location /redir/ {
            rate_limit_window zone=z limit=3 count_status=401;
            proxy_intercept_errors on;
            error_page 401 = @fine;
            proxy_pass http://{{UPSTREAM}}/status/;
        }
        location @fine { return 200 \"fine\\n\"; }",
    );
    clear_of_boundary(HOUR_MS, 30_000);
    // Successful requests cost nothing, however many.
    // (A request's admission is given back when its pool is freed, after
    // the client has the response: each is settled before the next is sent.)
    for i in 0..10 {
        let r = get_key(ng.port, "/ok", "good");
        assert_eq!(r.status, 200, "request {i}: {}", r.describe());
        assert_eq!(settled(ng.port, "good", 0), 0, "request {i}");
    }
    // 401 and 200 in a mix: only the 401s and 403s count.
    let mix = [
        "/status/401",
        "/ok",
        "/ok",
        "/status/403",
        "/ok",
        "/status/401",
    ];
    let mut failed = 0;
    for p in mix {
        assert_eq!(
            get_key(ng.port, p, "mix").status,
            p.get(8..).map_or(200, |s| s.parse().unwrap())
        );
        failed += u64::from(p.starts_with("/status/"));
        assert_eq!(settled(ng.port, "mix", failed), failed, "{p}");
    }
    assert_eq!(failed, 3);
    // Three failures: the fourth request, whatever it is, gets 429.
    for p in ["/status/401", "/ok"] {
        let r = get_key(ng.port, p, "mix");
        assert_eq!(r.status, 429, "{}", r.describe());
        assert!(r.header_num("Retry-After") >= 1);
    }
    assert_eq!(settled(ng.port, "mix", 3), 3);
    // A status not in the list (404, 500) is given back too.
    for p in ["/status/404", "/status/500"] {
        assert_eq!(
            get_key(ng.port, p, "other").status,
            p[8..].parse::<u16>().unwrap()
        );
    }
    assert_eq!(settled(ng.port, "other", 0), 0);
    // An error_page that turns the 401 into a 200: the final status counts.
    for _ in 0..5 {
        let r = get_key(ng.port, "/redir/401", "redir");
        assert_eq!(r.status, 200, "{}", r.describe());
        assert_eq!(r.text(), "fine\n");
    }
    assert_eq!(settled(ng.port, "redir", 0), 0);
    assert_eq!(up.received(401) + up.received(403), 3 + 5);
}

#[test]
fn concurrent_failing_requests_never_pass_the_limit() {
    let up = StatusUpstream::start();
    let ng = start(&up, "limit=5 count_status=4xx", "");
    clear_of_boundary(HOUR_MS, 30_000);
    // 60 failing requests at once over 8 connections: each is reserved as
    // it is admitted, so exactly 5 reach the upstream.
    let st = hammer(
        ng.port,
        "/status/401?sleep=50",
        &[("X-Key", b"brute")],
        60,
        8,
    );
    let t = tally(&st);
    assert_eq!(t.get(&401), Some(&5), "{t:?}");
    assert_eq!(t.get(&429), Some(&55), "{t:?}");
    assert_eq!(up.received(401), 5);
    assert_eq!(settled(ng.port, "brute", 5), 5);
    // Concurrent successes with a limit of 5: none stays counted, so all
    // 40 pass, at most 4 of them in flight (reserved) at once.
    let st = hammer(ng.port, "/ok?sleep=20", &[("X-Key", b"busy")], 40, 4);
    assert_eq!(tally(&st).get(&200), Some(&40), "{:?}", tally(&st));
    assert_eq!(settled(ng.port, "busy", 0), 0);
}

#[test]
fn reservation_given_back_after_upstream_timeout() {
    let up = StatusUpstream::start();
    // proxy_read_timeout is 1s: the upstream's 401 comes too late, nginx
    // answers 504, which is not counted.
    let ng = start(&up, "limit=2 count_status=401", "");
    clear_of_boundary(HOUR_MS, 30_000);
    let r = get_key(ng.port, "/status/401?sleep=2500", "slow");
    assert_eq!(r.status, 504, "{}", r.describe());
    assert_eq!(settled(ng.port, "slow", 0), 0);
    drop(ng);
    // The same with 504 in the list stays counted: the give-back follows
    // the final status.
    let ng = start(&up, "limit=2 count_status=401,504", "");
    let r = get_key(ng.port, "/status/401?sleep=2500", "slow");
    assert_eq!(r.status, 504, "{}", r.describe());
    assert_eq!(settled(ng.port, "slow", 1), 1);
}

#[test]
fn reservation_given_back_after_client_abort() {
    let up = StatusUpstream::start();
    let ng = start(&up, "limit=2 count_status=401", "");
    clear_of_boundary(HOUR_MS, 30_000);
    let mut s = TcpStream::connect(("127.0.0.1", ng.port)).unwrap();
    s.write_all(b"GET /status/401?sleep=3000 HTTP/1.1\r\nHost: x\r\nX-Key: gone\r\n\r\n")
        .unwrap();
    // While the request runs, its admission is held.
    assert_eq!(settled(ng.port, "gone", 1), 1);
    drop(s);
    // The client went away (499): given back, long before the upstream's
    // 401 would have come.
    assert_eq!(settled(ng.port, "gone", 0), 0);
    assert!(
        wait_for(Duration::from_secs(5), || ng
            .access_log()
            .contains("\"GET /status/401?sleep=3000 HTTP/1.1\" 499")),
        "{}",
        ng.access_log()
    );
}
