//! `in_flight=N` (docs/in-flight.md): at most N of a client's requests in
//! flight at once, across workers, against a real slow upstream that
//! records its own concurrency per client (`X-Client`); places given back
//! however a request ends (response, 499, upstream timeout), kept across a
//! reload, and reclaimed from workers killed while holding them; a
//! client's places set by an override.
use crate::common;
use crate::overrides::{json, send_body};

use common::*;
use std::collections::BTreeSet;
use std::fs;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

/// One zone keyed by `X-Client`, `/slow/` limited by `line` (the words
/// after `zone=fl`), the status in `X-Status`.
fn conf(zone: &str, line: &str) -> String {
    http_conf(&format!(
        r#"
        rate_limit_window_zone $http_x_client zone=fl:1m window=1m {zone};
        server {{
            listen 127.0.0.1:{{{{PORT}}}};
            add_header X-Status $rate_limit_window_status always;
            add_header X-Retry $rate_limit_window_retry_after always;
            location /slow/ {{
                rate_limit_window zone=fl {line};
                proxy_read_timeout 400ms;
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location /long/ {{
                rate_limit_window zone=fl {line};
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location = /metrics {{ rate_limit_window_metrics; }}
            location = /api {{ rate_limit_window_metrics write=on; }}
        }}"#
    ))
}

/// `n` requests of `client` at once, each in its own thread; their answers.
fn at_once(port: u16, path: &str, client: &str, n: usize) -> Vec<Response> {
    let hs: Vec<_> = (0..n)
        .map(|_| {
            let (path, client) = (path.to_string(), client.to_string());
            thread::spawn(move || as_client(port, &path, &client))
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

/// The worker whose socket is the server end of the client connection
/// from local port `client_port` (/proc/net/tcp, then the workers' fds).
fn worker_of(ng: &Nginx, client_port: u16) -> Option<i32> {
    let tcp = fs::read_to_string("/proc/net/tcp").ok()?;
    let local = format!("0100007F:{:04X}", ng.port);
    let remote = format!("0100007F:{client_port:04X}");
    let inode = tcp.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 9 && f[1] == local && f[2] == remote).then(|| f[9].to_string())
    })?;
    let target = format!("socket:[{inode}]");
    ng.worker_pids().into_iter().find(|pid| {
        fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == target))
    })
}

fn statuses(rs: &[Response]) -> Vec<u16> {
    let mut v: Vec<u16> = rs.iter().map(|r| r.status).collect();
    v.sort_unstable();
    v
}

fn in_flight_total(port: u16, result: &str) -> f64 {
    let text = metrics_text(port);
    prom_value(
        &text,
        "rate_limit_window_in_flight_total",
        &[("zone", "fl"), ("result", result)],
    )
    .unwrap_or(-1.0)
}

fn gauge(port: u16) -> f64 {
    let text = metrics_text(port);
    prom_value(&text, "rate_limit_window_in_flight", &[("zone", "fl")]).unwrap_or(-1.0)
}

/// The issue's case: `in_flight=3`, 8 concurrent 1 s requests of one
/// client: 3 admitted, 5 refused with Retry-After; another client is
/// served meanwhile; 3 more are admitted once the first ones end.
#[test]
fn three_of_eight_concurrent_requests_are_admitted() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .workers(4)
        .upstream_of(&up)
        .start(&conf("", "in_flight=3"));
    let port = ng.port;
    let alice = thread::spawn(move || at_once(port, "/long/a?sleep=1000", "alice", 8));
    assert!(wait_for(Duration::from_secs(5), || up.concurrent("alice") == 3));
    let bob = as_client(port, "/long/b", "bob");
    assert_eq!(bob.status, 200, "{}", bob.describe());
    let rs = alice.join().unwrap();
    assert_eq!(statuses(&rs), [200, 200, 200, 429, 429, 429, 429, 429]);
    for r in &rs {
        let (ok, status) = (r.status == 200, r.header("x-status"));
        if ok {
            assert_eq!(status, Some("PASSED"));
            assert_eq!(r.header("retry-after"), None);
        } else {
            assert_eq!(status, Some("REJECTED_IN_FLIGHT"), "{}", r.describe());
            assert_eq!(r.header("retry-after"), Some("1"));
            assert_eq!(r.header("x-retry"), Some("1"));
        }
    }
    assert_eq!(up.max_concurrent("alice"), 3);
    // The places came back: 3 more at once, not 4.
    let again = at_once(port, "/long/c?sleep=300", "alice", 4);
    assert_eq!(statuses(&again), [200, 200, 200, 429]);
    assert!(wait_for(Duration::from_secs(3), || gauge(port) == 0.0));
    assert_eq!(in_flight_total(port, "taken"), 7.0);
    assert_eq!(in_flight_total(port, "rejected"), 6.0);
    let text = metrics_text(port);
    let rejected = prom_value(
        &text,
        "rate_limit_window_requests_total",
        &[("zone", "fl"), ("result", "rejected")],
    );
    assert_eq!(rejected, Some(6.0), "{text}");
    let log = ng.error_log();
    assert_eq!(
        count_lines(
            &log,
            "limiting requests in flight by zone \"fl\", in flight: 3, in_flight: 3"
        ),
        6,
        "{log}"
    );
    assert!(!log.contains("alice"), "the key is never logged");
}

/// The issue's case: the workers holding a client's 3 places are killed
/// (SIGKILL); their respawned successors take the places back, and the
/// client gets 3 again within a few seconds.
#[test]
fn the_places_of_killed_workers_come_back_within_seconds() {
    let up = Upstream::start();
    let mut ng = Nginx::builder()
        .workers(4)
        .upstream_of(&up)
        .start(&conf("", "in_flight=3"));
    let port = ng.port;
    let held: Vec<TcpStream> = (0..3)
        .map(|_| send_open(port, "/long/k?sleep=30000", "carol"))
        .collect();
    assert!(wait_for(Duration::from_secs(5), || up.concurrent("carol") == 3));
    assert_eq!(as_client(port, "/long/k", "carol").status, 429);
    let holders: BTreeSet<i32> = held
        .iter()
        .map(|s| worker_of(&ng, s.local_addr().unwrap().port()).expect("the holding worker"))
        .collect();
    let others: Vec<i32> = ng
        .worker_pids()
        .into_iter()
        .filter(|p| !holders.contains(p))
        .collect();
    let killed_at = Instant::now();
    for &p in &holders {
        sigkill(p);
    }
    let killed: Vec<i32> = holders.iter().copied().collect();
    assert!(wait_for(Duration::from_secs(10), || {
        let now = ng.worker_pids();
        now.len() == 4 && !now.iter().any(|p| killed.contains(p))
    }));
    // One free place first (the reclaim is done), then 3 at once.
    assert!(
        wait_for(Duration::from_secs(5), || as_client(
            port, "/long/k", "carol"
        )
        .status
            == 200),
        "the places never came back"
    );
    let got = at_once(port, "/long/k?sleep=1000", "carol", 4);
    let recovered = killed_at.elapsed();
    assert_eq!(statuses(&got), [200, 200, 200, 429]);
    assert!(recovered < Duration::from_secs(5), "{recovered:?}");
    eprintln!(
        "places back {recovered:?} after SIGKILL of {} worker(s)",
        killed.len()
    );
    assert_eq!(in_flight_total(port, "reclaimed"), 3.0);
    // The workers that were not killed kept serving all along.
    assert!(others.iter().all(|p| ng.worker_pids().contains(p)));
    drop(held);
    let unexplained = forget_killed_workers(&ng, &killed);
    assert!(unexplained.is_empty(), "{unexplained:?}");
    ng.reload();
}

/// 4 workers, 5,000 requests of one client over 40 connections at
/// `in_flight=8` against a slow upstream: the upstream never serves more
/// than 8 of them at once, and every place taken is given back.
#[test]
fn the_upstream_never_sees_more_than_in_flight_requests_of_a_client() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .workers(4)
        .upstream_of(&up)
        .start(&conf("", "in_flight=8"));
    let statuses = hammer(
        ng.port,
        "/long/load?sleep=20",
        &[("X-Client", b"dave")],
        5_000,
        40,
    );
    let t = tally(&statuses);
    let (ok, refused) = (
        t.get(&200).copied().unwrap_or(0),
        t.get(&429).copied().unwrap_or(0),
    );
    assert_eq!(ok + refused, 5_000, "{t:?}");
    let most = up.max_concurrent("dave");
    eprintln!("admitted {ok}, refused {refused}, upstream concurrency at most {most}");
    assert!(most <= 8, "the upstream saw {most} of the client at once");
    // Not vacuous: the client's places were filled at once (seen by the
    // upstream), and more than two rounds of them were admitted (32 of
    // 5,000 on a loaded 2-core machine, where 40 was asked before).
    assert!(
        most >= 4 && ok >= 16,
        "no load reached the upstream: {t:?}, {most}"
    );
    assert_eq!(up.received() as usize, ok);
    assert!(wait_for(Duration::from_secs(3), || gauge(ng.port) == 0.0));
    assert_eq!(in_flight_total(ng.port, "taken"), ok as f64);
    assert_eq!(in_flight_total(ng.port, "rejected"), refused as f64);
}

/// A place is given back however the request ends: a client gone (499), an
/// upstream timeout (504); and one taken before a reload is still counted
/// by the new workers, and given back by the old one.
#[test]
fn places_are_given_back_on_499_and_504_and_kept_across_a_reload() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .upstream_of(&up)
        .start(&conf("", "in_flight=1"));
    let port = ng.port;
    // 499: the client closes while the upstream sleeps.
    let s = send_open(port, "/long/gone?sleep=3000", "erin");
    assert!(wait_for(Duration::from_secs(3), || up.concurrent("erin") == 1));
    assert_eq!(as_client(port, "/long/x", "erin").status, 429);
    drop(s);
    assert!(
        wait_for(Duration::from_secs(2), || as_client(
            port, "/long/x", "erin"
        )
        .status
            == 200),
        "the 499's place was not given back"
    );
    assert_eq!(
        up.concurrent("erin"),
        1,
        "given back before the upstream answered"
    );
    // 504: proxy_read_timeout 400ms.
    let t = Instant::now();
    let timed_out = as_client(port, "/slow/t?sleep=2500", "frank");
    assert_eq!(timed_out.status, 504);
    assert!(t.elapsed() < Duration::from_secs(2));
    // (A place is given back when nginx frees the request, just after its
    // last byte: a new connection may reach another worker a moment
    // before.)
    let free = || as_client(port, "/long/x", "frank").status == 200;
    assert!(wait_for(Duration::from_secs(1), free));
    wait_for(Duration::from_secs(5), || ng.access_log().contains(" 499 "));
    assert!(ng.access_log().contains(" 499 "), "{}", ng.access_log());
    // A reload while a place is held: the new workers see it.
    let held = thread::spawn(move || as_client(port, "/long/r?sleep=2500", "gina"));
    assert!(wait_for(Duration::from_secs(3), || up.concurrent("gina") == 1));
    let old = ng.worker_pids();
    sighup(&ng);
    assert!(wait_for(Duration::from_secs(10), || {
        ng.worker_pids().iter().filter(|p| !old.contains(p)).count() == 2
    }));
    assert!(
        old.iter().any(|p| ng.worker_pids().contains(p)),
        "the old worker still serves"
    );
    assert_eq!(as_client(port, "/long/x", "gina").status, 429);
    assert_eq!(held.join().unwrap().status, 200);
    let free = || as_client(port, "/long/x", "gina").status == 200;
    assert!(wait_for(Duration::from_secs(1), free));
    assert!(wait_for(Duration::from_secs(3), || gauge(port) == 0.0));
}

/// `in_flight=` beside `limit=`: a request refused for its places is
/// counted by neither; a line with `in_flight=$var` reads it per request
/// (empty: no place; invalid: `fail=`).
#[test]
fn in_flight_with_a_rate_and_from_a_variable() {
    // The counts below are of one minute window (`current`).
    clear_of_boundary(60_000, 15_000);
    let up = Upstream::start();
    let ng = Nginx::builder()
        .upstream_of(&up)
        .start(&conf("", "limit=5 in_flight=$http_x_slots"));
    let port = ng.port;
    let slots = |n: &str| {
        let h: Vec<(&str, &[u8])> = vec![("X-Client", b"hal"), ("X-Slots", n.as_bytes())];
        h.into_iter()
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .collect::<Vec<_>>()
    };
    let burst = |n: &'static str, count: usize| {
        let hs: Vec<_> = (0..count)
            .map(|_| {
                let h = slots(n);
                thread::spawn(move || {
                    let hv: Vec<(&str, &[u8])> =
                        h.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect();
                    request(port, "GET", "/long/v?sleep=600", &hv)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(statuses(&burst("2", 3)), [200, 200, 429]);
    // The refused one was not counted by the rate: 2 of 5.
    let k = key_json(port, "fl", b"hal");
    assert_eq!(k["current"], 2, "{k}");
    // An empty value takes no place: 3 at once pass (the rate has 3 left).
    assert_eq!(statuses(&burst("", 3)), [200, 200, 200]);
    // An invalid value under fail=open: no place, an error line.
    let r = request(
        port,
        "GET",
        "/long/v",
        &[("X-Client", b"hal2"), ("X-Slots", b"lots")],
    );
    assert_eq!(r.status, 200);
    assert!(ng
        .error_log()
        .contains("invalid in_flight \"lots\" for zone \"fl\""));
    // The rate's own rejection is REJECTED, not REJECTED_IN_FLIGHT.
    let r = request(
        port,
        "GET",
        "/long/v",
        &[("X-Client", b"hal"), ("X-Slots", b"9")],
    );
    assert_eq!((r.status, r.header("x-status")), (429, Some("REJECTED")));
}

/// `fail=closed`: an invalid `in_flight=` value is refused; a line with
/// `in_flight=` alone counts no rate.
#[test]
fn in_flight_alone_and_fail_closed() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .upstream_of(&up)
        .start(&conf("fail=closed", "in_flight=$http_x_slots"));
    let port = ng.port;
    let r = request(
        port,
        "GET",
        "/long/v",
        &[("X-Client", b"ivy"), ("X-Slots", b"x")],
    );
    assert_eq!(
        (r.status, r.header("x-status")),
        (429, Some("REJECTED_IN_FLIGHT"))
    );
    assert!(ng
        .error_log()
        .contains("invalid in_flight value, rejecting (fail=closed)"));
    // One keep-alive connection: nginx frees each request (and gives its
    // place back) before it reads the next one.
    let mut c = Conn::connect(port).unwrap();
    for _ in 0..20 {
        let r = c
            .request("GET", "/long/v", &[("X-Client", b"ivy"), ("X-Slots", b"1")])
            .unwrap();
        assert_eq!(r.status, 200, "no rate: {}", r.describe());
    }
    drop(c);
    let k = key_json(port, "fl", b"ivy");
    assert_eq!(k["current"], 0, "{k}");
    let idle = || key_json(port, "fl", b"ivy")["in_flight"] == 0;
    assert!(wait_for(Duration::from_secs(1), idle));
}

/// `nginx -t` refuses what cannot work.
#[test]
fn configuration_errors() {
    let refused = |line: &str, want: &str| {
        let (ok, out) = test_config(&conf("", line));
        assert!(!ok, "{line} accepted");
        assert!(out.contains(want), "{line}: {out}");
    };
    refused(
        "in_flight=70000",
        "invalid in_flight \"70000\": an integer from 0 to 65535, or a variable",
    );
    refused(
        "in_flight=3 delay=1s",
        "\"delay=\" needs \"limit=\": a line with \"in_flight=\" alone counts no rate",
    );
    refused(
        "limit=5 in_flight=3 in_flight=4",
        "duplicate parameter \"in_flight=\"",
    );
    let (ok, out) = test_config(&conf("", "in_flight=3"));
    assert!(ok, "{out}");
}

/// docs/in-flight.md's alert recipes name metrics that are exposed.
#[test]
fn alert_recipes_name_exposed_metrics() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .upstream_of(&up)
        .start(&conf("", "in_flight=1"));
    assert_eq!(as_client(ng.port, "/long/x", "kim").status, 200);
    let text = metrics_text(ng.port);
    for name in recipe_metrics("docs/in-flight.md", "## Metrics and alerts") {
        assert!(
            text.contains(&format!("\n{name}{{")),
            "{name} is not exposed:\n{text}"
        );
    }
}

/// PUT of `body` as the override of `client` in zone `fl`: the answer.
fn put_places(port: u16, client: &str, body: &str) -> Response {
    let path = format!("/api?zone=fl&key={client}");
    send_body(port, "PUT", &path, body.as_bytes(), false)
}

/// Each refused request of `rs` was refused for its places, with
/// `Retry-After: 1`.
fn refused_for_places(rs: &[Response]) {
    for r in rs.iter().filter(|r| r.status != 200) {
        assert_eq!(r.status, 429, "{}", r.describe());
        assert_eq!(r.header("x-status"), Some("REJECTED_IN_FLIGHT"));
        assert_eq!(r.header("retry-after"), Some("1"), "{}", r.describe());
    }
}

/// Issue 44: an override sets a client's places. `in_flight=3`,
/// `{"in_flight":1}` for alice: 1 of 3 concurrent requests admitted, the
/// others refused for their places; bob still gets 3; GET, the list and
/// the metrics show it; DELETE gives alice 3 again; `{"in_flight":0}`
/// admits none of hers (refused for places, never invalid); the rate
/// stays the line's.
#[test]
fn an_override_sets_a_clients_places() {
    // The rate counted below is of one minute window (`current`).
    clear_of_boundary(60_000, 20_000);
    let up = Upstream::start();
    let ng = Nginx::builder()
        .workers(2)
        .upstream_of(&up)
        .start(&conf("", "limit=100 in_flight=3"));
    let port = ng.port;
    let r = put_places(port, "alice", r#"{"in_flight": 1}"#);
    assert_eq!(r.status, 200, "{}", r.describe());
    let o = &json(&r)["override"];
    assert_eq!(
        (o["action"].as_str(), o["in_flight"].as_i64()),
        (Some("in_flight"), Some(1))
    );
    assert!(o["limit"].is_null(), "{o}");
    let rs = at_once(port, "/long/a?sleep=800", "alice", 3);
    assert_eq!(statuses(&rs), [200, 429, 429]);
    refused_for_places(&rs);
    assert_eq!(up.max_concurrent("alice"), 1);
    let rs = at_once(port, "/long/b?sleep=500", "bob", 4);
    assert_eq!(statuses(&rs), [200, 200, 200, 429]);
    refused_for_places(&rs);
    // Shown by the lookup and the list.
    let k = key_json(port, "fl", b"alice");
    assert_eq!(k["override"]["in_flight"], 1, "{k}");
    let l = json(&get(port, "/metrics?zone=fl&overrides"));
    let items = l["overrides"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{l}");
    assert_eq!(
        (items[0]["action"].as_str(), items[0]["in_flight"].as_i64()),
        (Some("in_flight"), Some(1))
    );
    // Removed: the line's 3 again.
    let r = request(port, "DELETE", "/api?zone=fl&key=alice&override", &[]);
    assert_eq!(json(&r)["removed"]["in_flight"], 1, "{}", r.describe());
    let rs = at_once(port, "/long/c?sleep=500", "alice", 4);
    assert_eq!(statuses(&rs), [200, 200, 200, 429]);
    refused_for_places(&rs);
    // None: every request refused for its places, never invalid.
    assert_eq!(put_places(port, "alice", r#"{"in_flight":0}"#).status, 200);
    let rs = at_once(port, "/long/d", "alice", 2);
    assert_eq!(statuses(&rs), [429, 429]);
    refused_for_places(&rs);
    assert_eq!(up.max_concurrent("alice"), 3);
    // The rate is the line's: 1 + 3 admitted, the refused ones uncounted.
    assert_eq!(key_json(port, "fl", b"alice")["current"], 4);
    assert!(wait_for(Duration::from_secs(3), || gauge(port) == 0.0));
    let text = metrics_text(port);
    let changes = |a| {
        prom_value(
            &text,
            "rate_limit_window_overrides_total",
            &[("zone", "fl"), ("action", a)],
        )
    };
    assert_eq!(
        (changes("in_flight"), changes("remove")),
        (Some(2.0), Some(1.0))
    );
    let log = ng.error_log();
    let line =
        |n| format!("limiting requests in flight by zone \"fl\", in flight: {n}, in_flight: {n}");
    assert_eq!(count_lines(&log, &line(1)), 2, "{log}");
    assert_eq!(count_lines(&log, "in flight: 0, in_flight: 0"), 2, "{log}");
    assert!(
        log.contains("in zone \"fl\" changed by 127.0.0.1: in_flight 1"),
        "{log}"
    );
    assert!(!log.contains("invalid in_flight"), "{log}");
}

/// The override holds whatever the line's value reads: on a line with
/// `in_flight=$http_x_slots` alone, an empty value (which alone takes no
/// place) and an invalid one (which alone is refused, `fail=closed`) both
/// get the override's 2. A body with a limit and places, or places out of
/// range, is refused and changes nothing.
#[test]
fn an_override_of_places_holds_whatever_the_value_reads() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .upstream_of(&up)
        .start(&conf("fail=closed", "in_flight=$http_x_slots"));
    let port = ng.port;
    let slots = |v: &'static [u8]| {
        let hs: Vec<_> = (0..3)
            .map(|_| {
                thread::spawn(move || {
                    let h: [(&str, &[u8]); 2] = [("X-Client", b"joe"), ("X-Slots", v)];
                    request(port, "GET", "/long/s?sleep=500", &h)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(statuses(&slots(b"")), [200, 200, 200]);
    assert_eq!(statuses(&slots(b"x")), [429, 429, 429]);
    for (body, want) in [
        (
            r#"{"limit":5,"in_flight":2}"#,
            "give one of limit, in_flight, block or exempt (e.g. {\"limit\": 100}), not two",
        ),
        (
            r#"{"in_flight":65536}"#,
            "\"in_flight\" must be an integer from 0 to 65535",
        ),
    ] {
        let r = put_places(port, "joe", body);
        assert_eq!((r.status, json(&r)["error"].as_str()), (400, Some(want)));
    }
    assert!(key_json(port, "fl", b"joe")["override"].is_null());
    assert_eq!(
        put_places(port, "joe", r#"{"in_flight":2,"ttl":60}"#).status,
        200
    );
    for v in [&b""[..], b"x", b"1"] {
        let rs = slots(v);
        assert_eq!(statuses(&rs), [200, 200, 429], "X-Slots {v:?}");
        refused_for_places(&rs);
    }
    assert_eq!(up.max_concurrent("joe"), 3);
}
