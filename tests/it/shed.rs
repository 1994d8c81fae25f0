//! `rate_limit_window_shed` (docs/shedding.md): a group's requests in
//! flight, shared by its locations and workers, shed by priority, never
//! counted by the rate limits; reclaimed from killed workers.
use crate::common;

use common::*;
use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

/// Two locations of the group `cap` (max=4, reserve=50%), the first also
/// rate-limited; the priority from `X-Prio`.
fn conf(extra: &str) -> String {
    http_conf(&format!(
        r#"
        rate_limit_window_zone $http_x_client zone=rate:1m window=1m;
        server {{
            listen 127.0.0.1:{{{{PORT}}}};
            add_header X-Status $rate_limit_window_status always;
            location /a/ {{
                rate_limit_window_shed zone=cap max=4 priority=$http_x_prio reserve=50%;
                rate_limit_window zone=rate limit=100;
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location /b/ {{
                rate_limit_window_shed zone=cap max=4 priority=$http_x_prio reserve=50%;
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            {extra}
            location = /metrics {{ rate_limit_window_metrics; }}
        }}"#
    ))
}

/// Starts a request in its own thread; its answer on join.
fn spawn(port: u16, path: &str, prio: &str) -> thread::JoinHandle<Response> {
    let (path, prio) = (path.to_string(), prio.to_string());
    thread::spawn(move || {
        request(
            port,
            "GET",
            &path,
            &[("X-Prio", prio.as_bytes()), ("X-Client", b"c1")],
        )
    })
}

fn shed_metric(port: u16, name: &str, labels: &[(&str, &str)]) -> f64 {
    prom_value(&metrics_text(port), name, labels).unwrap_or(-1.0)
}

/// The issue's case: max=4 reserve=50%: two slow default requests in
/// flight, a third default one gets 503 with Retry-After, a critical one is
/// admitted; `shed` in the metrics; the shed request counted by no rate.
#[test]
fn default_requests_are_shed_first_and_critical_ones_get_the_reserve() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&conf(""));
    let port = ng.port;
    // One in each location: the group counts both.
    let slow = [
        spawn(port, "/a/1?sleep=1500", "default"),
        spawn(port, "/b/2?sleep=1500", ""),
    ];
    assert!(wait_for(Duration::from_secs(5), || up.concurrent("c1") == 2));
    let third = request(
        port,
        "GET",
        "/a/3",
        &[("X-Prio", b"default"), ("X-Client", b"c1")],
    );
    assert_eq!(third.status, 503, "{}", third.describe());
    assert_eq!(third.header("retry-after"), Some("1"));
    assert_eq!(third.header("x-status"), Some("SHED"));
    let critical = spawn(port, "/a/4?sleep=500", "critical");
    assert!(wait_for(Duration::from_secs(5), || {
        shed_metric(port, "rate_limit_window_shed_in_flight", &[("zone", "cap")]) == 3.0
    }));
    assert_eq!(critical.join().unwrap().status, 200);
    for h in slow {
        let r = h.join().unwrap();
        assert_eq!((r.status, r.header("x-status")), (200, Some("PASSED")));
    }
    let m = |name, prio| shed_metric(port, name, &[("zone", "cap"), ("priority", prio)]);
    assert_eq!(m("rate_limit_window_shed_total", "default"), 1.0);
    assert_eq!(m("rate_limit_window_shed_total", "critical"), 0.0);
    assert_eq!(m("rate_limit_window_shed_admitted_total", "default"), 2.0);
    assert_eq!(m("rate_limit_window_shed_admitted_total", "critical"), 1.0);
    assert_eq!(
        shed_metric(port, "rate_limit_window_shed_max", &[("zone", "cap")]),
        4.0
    );
    assert!(wait_for(Duration::from_secs(2), || {
        shed_metric(port, "rate_limit_window_shed_in_flight", &[("zone", "cap")]) == 0.0
    }));
    // Never counted by the rate: /a/ admitted 2 (one default, one critical).
    // The test's few seconds may cross a minute of the real clock, which
    // moves counts into `previous` (current 0 in two loaded runs).
    let j = key_json(port, "rate", b"c1");
    let counted = j["current"].as_u64().unwrap() + j["previous"].as_u64().unwrap();
    assert_eq!(counted, 2, "{j}");
    let log = ng.error_log();
    assert!(
        log.contains(
            "shedding request by rate_limit_window_shed zone \"cap\", in flight: 2, priority: \
             default, limit: 2 of max=4"
        ),
        "{log}"
    );
}

/// `priority=$http_x_prio` is read from the header list by the module
/// itself (as a zone's `$http_NAME` key is): a name in any spelling and a
/// value in any case, as nginx's variable reads them. Two default requests
/// hold the group's default share: a critical one in other spellings is
/// admitted, a default one is shed.
#[test]
fn the_priority_header_is_read_in_any_spelling() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&conf(""));
    let port = ng.port;
    let slow = [
        spawn(port, "/b/1?sleep=2000", "default"),
        spawn(port, "/b/2?sleep=2000", "default"),
    ];
    assert!(wait_for(Duration::from_secs(5), || up.concurrent("c1") == 2));
    for name in ["x-PRIO", "X-pRiO", "x-prio"] {
        let r = request(
            port,
            "GET",
            "/b/3",
            &[(name, b"CRITICAL"), ("X-Client", b"c1")],
        );
        assert_eq!(
            (r.status, r.header("x-status")),
            (200, Some("PASSED")),
            "{name}"
        );
    }
    let shed = request(
        port,
        "GET",
        "/b/4",
        &[("X-PRIO", b"default"), ("X-Client", b"c1")],
    );
    assert_eq!(shed.status, 503, "{}", shed.describe());
    for h in slow {
        assert_eq!(h.join().unwrap().status, 200);
    }
    let m = |prio| {
        shed_metric(
            port,
            "rate_limit_window_shed_admitted_total",
            &[("zone", "cap"), ("priority", prio)],
        )
    };
    assert_eq!((m("critical"), m("default")), (3.0, 2.0));
}

/// A request the location's rate limit rejects gives its group place back
/// at once; one on a keep-alive connection after another sees its place.
#[test]
fn a_rate_rejection_gives_the_group_place_back() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&conf(
        "location /c/ {
            rate_limit_window_shed zone=cap max=4 priority=critical reserve=50%;
            rate_limit_window zone=rate limit=0;
            proxy_pass http://{{UPSTREAM}};
        }",
    ));
    for _ in 0..10 {
        let r = request(ng.port, "GET", "/c/x", &[("X-Client", b"c2")]);
        assert_eq!((r.status, r.header("x-status")), (429, Some("REJECTED")));
    }
    assert_eq!(
        shed_metric(
            ng.port,
            "rate_limit_window_shed_in_flight",
            &[("zone", "cap")]
        ),
        0.0
    );
    assert_eq!(up.received(), 0);
}

/// A limit read from a variable beside a group: an invalid value under
/// `fail=closed` is refused and gives its place back at once; under
/// `fail=open` (and an empty value, which sets no limit) the request goes
/// on and keeps its place until it ends.
#[test]
fn invalid_and_empty_limits_beside_a_group_under_both_fail_policies() {
    let up = Upstream::start();
    let group = "rate_limit_window_shed zone=cap max=4 priority=critical reserve=50%;";
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(&format!(
        r#"
        rate_limit_window_zone $http_x_client zone=open:1m window=1m;
        rate_limit_window_zone $http_x_client zone=closed:1m window=1m fail=closed;
        server {{
            listen 127.0.0.1:{{{{PORT}}}};
            add_header X-Status $rate_limit_window_status always;
            location /fc/ {{
                {group} rate_limit_window zone=closed limit=$http_x_limit;
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location /fo/ {{
                {group} rate_limit_window zone=open limit=$http_x_limit;
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location = /metrics {{ rate_limit_window_metrics; }}
        }}"#
    )));
    let port = ng.port;
    let in_flight = || shed_metric(port, "rate_limit_window_shed_in_flight", &[("zone", "cap")]);
    let send = |path: &str, limit: &'static [u8]| {
        let path = path.to_string();
        thread::spawn(move || {
            request(
                port,
                "GET",
                &path,
                &[("X-Client", b"v"), ("X-Limit", limit)],
            )
        })
    };
    // fail=closed, not a number: refused, never upstream, no place kept.
    for _ in 0..6 {
        let r = send("/fc/x?sleep=300", b"lots").join().unwrap();
        assert_eq!((r.status, r.header("x-status")), (429, Some("REJECTED")));
    }
    assert_eq!(in_flight(), 0.0);
    assert_eq!(up.received(), 0);
    let text = metrics_text(port);
    assert_eq!(
        prom_value(
            &text,
            "rate_limit_window_fail_closed_total",
            &[("zone", "closed")]
        ),
        Some(6.0),
        "{text}"
    );
    // fail=open, not a number, and an empty value: admitted, each holding
    // its place while upstream, all back once they ended.
    let held = [
        send("/fo/x?sleep=1500", b"lots"),
        send("/fo/x?sleep=1500", b""),
        send("/fc/x?sleep=1500", b""),
    ];
    assert!(
        wait_for(Duration::from_secs(3), || in_flight() == 3.0),
        "in flight: {}",
        in_flight()
    );
    for h in held {
        assert_eq!(h.join().unwrap().status, 200);
    }
    assert!(wait_for(Duration::from_secs(3), || in_flight() == 0.0));
    assert_eq!(up.received(), 3);
}

/// A worker killed while it holds group places: they are reclaimed within
/// seconds (the same mechanism as `in_flight=`).
#[test]
fn a_killed_workers_group_places_are_reclaimed() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&conf(""));
    let port = ng.port;
    // Sent on connections left open: their workers die before answering.
    let _held: Vec<TcpStream> = (0..4)
        .map(|i| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let req = format!(
                "GET /b/{i}?sleep=20000 HTTP/1.1\r\nHost: t\r\nX-Prio: critical\r\nX-Client: c1\r\n\r\n"
            );
            s.write_all(req.as_bytes()).unwrap();
            s
        })
        .collect();
    assert!(wait_for(Duration::from_secs(5), || up.concurrent("c1") == 4));
    let r = request(port, "GET", "/b/x", &[("X-Prio", b"critical")]);
    assert_eq!(r.status, 503);
    let killed = ng.worker_pids();
    for &p in &killed {
        sigkill(p);
    }
    assert!(
        wait_for(Duration::from_secs(5), || {
            shed_metric(port, "rate_limit_window_shed_in_flight", &[("zone", "cap")]) == 0.0
        }),
        "the dead workers' places were not reclaimed"
    );
    assert_eq!(request(port, "GET", "/b/y", &[]).status, 200);
    let unexplained = forget_killed_workers(&ng, &killed);
    assert!(unexplained.is_empty(), "{unexplained:?}");
}

/// `nginx -t`: a group's locations must agree on max= and reserve=.
#[test]
fn configuration_errors() {
    let (ok, out) = test_config(&conf(
        "location /d/ { rate_limit_window_shed zone=cap max=5 priority=x; return 204; }",
    ));
    assert!(!ok);
    assert!(
        out.contains(
            "rate_limit_window_shed zone \"cap\" is already declared with max=4 reserve=50%"
        ),
        "{out}"
    );
    let (ok, out) = test_config(&conf(
        "location /d/ { rate_limit_window_shed zone=other max=0 priority=x; return 204; }",
    ));
    assert!(!ok);
    assert!(out.contains("invalid max \"0\""), "{out}");
    let (ok, out) = test_config(&conf(
        "location /d/ { rate_limit_window_shed zone=o2 max=8 priority=x reserve=20% \
         reserve_high=30%; return 204; }",
    ));
    assert!(!ok);
    assert!(out.contains("[emerg]"), "{out}");
    assert!(
        out.contains("invalid reserves reserve_high=30% reserve=20% reserve_low=20%"),
        "{out}"
    );
    let (ok, out) = test_config(&conf(
        "location /d/ { rate_limit_window_shed zone=o3 max=8 priority=x reserve_low=half; \
         return 204; }",
    ));
    assert!(!ok);
    assert!(out.contains("invalid reserve_low \"half\""), "{out}");
    let (ok, out) = test_config(&conf(""));
    assert!(ok, "{out}");
}

/// docs/shedding.md's alert recipes name metrics that are exposed.
#[test]
fn alert_recipes_name_exposed_metrics() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&conf(""));
    assert_eq!(request(ng.port, "GET", "/b/x", &[]).status, 200);
    let text = metrics_text(ng.port);
    for name in recipe_metrics("docs/shedding.md", "## Metrics and alerts") {
        assert!(
            text.contains(&format!("\n{name}{{")),
            "{name} is not exposed:\n{text}"
        );
    }
}
