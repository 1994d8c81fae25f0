//! The phases matrix of `rate_limit_window_shed` (docs/shedding.md): both
//! phases × every way a request reaches a location of a group with
//! `max=1` (internal redirects before the decision, an `error_page` after
//! it, subrequests of `auth_request` and `mirror`, HTTP/2 streams of one
//! connection). Each row sends two requests at once to a slow upstream:
//! one holds the group's place, the other is shed (503); once both ended
//! the gauge is back at 0 and a third is admitted. A subrequest never
//! takes a place nor is shed: the counters count main requests only.
//! Then the other ends: client gone (499), upstream timeout (504), and a
//! priority read from `$remote_addr` after realip.
use super::common;
use super::{counted, slow_locations, slow_path, Route, PHASES, SLOW};

use super::in_flight::curl_h2_parallel;
use common::*;
use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

const ROUTES: [Route; 10] = [
    Route::Direct,
    Route::ErrorPageNamed,
    Route::ErrorPageUri,
    Route::ErrorPageAfter,
    Route::TryFiles,
    Route::RewriteLast,
    Route::AuthRequest,
    Route::Mirror,
    Route::AccessDenied,
    Route::Http2,
];

/// The locations of one phase (suffix `-{phase}`), all of group `g-{phase}`;
/// the `auth_request` subrequest's location decides too.
fn locations(s: &str) -> String {
    let lim = format!(
        "rate_limit_window_phase {s}; \
         rate_limit_window_shed zone=g-{s} max=1 priority=$http_x_prio reserve=0%;"
    );
    let own = format!(
        r#"
        location /ar-{s}/ {{ auth_request /_yes-{s}; {lim} proxy_pass http://{{{{UPSTREAM}}}}; }}
        location = /_yes-{s} {{ internal; {lim} proxy_pass http://{{{{UPSTREAM}}}}/auth?sleep=0; }}
        "#
    );
    slow_locations(s, &lim) + &own
}

fn matrix_conf(tls: &str) -> String {
    let locs: String = PHASES.iter().map(|p| locations(p)).collect();
    http_conf(&format!(
        r#"
        server {{
            listen 127.0.0.1:{{{{PORT}}}};
            {tls}
            location = /_no {{ internal; return 401; }}
            location = /metrics {{ rate_limit_window_metrics; }}
            {locs}
        }}"#
    ))
}

/// Two requests at once; their statuses, sorted.
fn two_at_once(port: u16, port2: u16, route: Route, phase: &str) -> Vec<u16> {
    let p = slow_path(route, phase);
    let mut got = if route == Route::Http2 {
        curl_h2_parallel(&format!("https://127.0.0.1:{port2}{p}"), "10.0.0.1", 2)
    } else {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let p = p.clone();
                thread::spawn(move || request(port, "GET", &p, &[]).status)
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    };
    got.sort_unstable();
    got
}

fn gauge(port: u16, zone: &str) -> Option<f64> {
    prom_value(
        &metrics_text(port),
        "rate_limit_window_shed_in_flight",
        &[("zone", zone)],
    )
}

/// (admitted, shed) main requests of a phase's rows, and the rows wrong.
type Tally = (u32, u32, Vec<String>);

/// Every row of `phase`, one after the other (they share the group).
fn rows(port: u16, port2: u16, phase: &str) -> Tally {
    let (mut admitted, mut shed, mut wrong) = (0, 0, vec![]);
    let zone = format!("g-{phase}");
    for route in ROUTES {
        // The row before's last request gives its place back when nginx
        // frees it, just after its last byte: wait for it.
        if !wait_for(Duration::from_secs(3), || gauge(port, &zone) == Some(0.0)) {
            wrong.push(format!(
                "{phase} {route:?}: the place before never came back"
            ));
        }
        let got = two_at_once(port, port2, route, phase);
        let want = if counted(phase, route) {
            admitted += 1;
            shed += 1;
            vec![200, 503]
        } else {
            vec![200, 200]
        };
        if got != want {
            wrong.push(format!("{phase} {route:?}: {got:?}, want {want:?}"));
        }
        // Both ended: the place came back, once.
        if !wait_for(Duration::from_secs(3), || gauge(port, &zone) == Some(0.0)) {
            wrong.push(format!("{phase} {route:?}: the place never came back"));
            continue;
        }
        let p = slow_path(route, phase).replace(SLOW, "sleep=0");
        let again = request(port, "GET", &p, &[]).status;
        admitted += u32::from(counted(phase, route));
        if again != 200 {
            wrong.push(format!("{phase} {route:?}: then {again}, want 200"));
        }
    }
    (admitted, shed, wrong)
}

#[test]
fn shed_matrix() {
    let up = Upstream::start();
    let certs = tempfile::tempdir().unwrap();
    let tls = tls_h2_listen(certs.path()).replace(
        "listen 127.0.0.1:{{PORT}} ssl;",
        "listen 127.0.0.1:{{PORT2}} ssl;",
    );
    let ng = Nginx::builder().upstream_of(&up).start(&matrix_conf(&tls));
    let (port, port2) = (ng.port, ng.port2);
    let hs: Vec<_> = PHASES
        .iter()
        .map(|&ph| (ph, thread::spawn(move || rows(port, port2, ph))))
        .collect();
    for (phase, h) in hs {
        let (admitted, shed, wrong) = h.join().unwrap();
        assert!(
            wrong.is_empty(),
            "{} rows wrong:\n{}",
            wrong.len(),
            wrong.join("\n")
        );
        let text = metrics_text(port);
        let zone = format!("g-{phase}");
        let total = |name: &str| {
            let labels = [("zone", zone.as_str()), ("priority", "default")];
            prom_value(&text, name, &labels).unwrap_or(-1.0)
        };
        // Once per main request: no subrequest took a place or was shed.
        let admitted_total = total("rate_limit_window_shed_admitted_total");
        assert_eq!(admitted_total, f64::from(admitted), "{phase}: {text}");
        assert_eq!(
            total("rate_limit_window_shed_total"),
            f64::from(shed),
            "{phase}: {text}"
        );
        assert_eq!(gauge(port, &zone), Some(0.0), "{phase}");
    }
}

/// Groups for the other ends: `end` (max=1, no reserve) behind a slow upstream and a
/// short proxy_read_timeout; `ri` (max=2, reserve=50%) whose priority is
/// mapped from `$remote_addr`, after realip.
fn ends_conf() -> String {
    http_conf(
        r#"
        set_real_ip_from 127.0.0.1; real_ip_header X-Via-Http;
        map $remote_addr $prio_by_addr { 10.255.0.1 critical; default default; }
        server {
            listen 127.0.0.1:{{PORT}};
            location /slow/ {
                rate_limit_window_shed zone=end max=1 priority=default reserve=0%;
                proxy_pass http://{{UPSTREAM}};
            }
            location /to/ {
                rate_limit_window_shed zone=end max=1 priority=default reserve=0%;
                proxy_read_timeout 300ms;
                proxy_pass http://{{UPSTREAM}};
            }
            location /ri/ {
                rate_limit_window_shed zone=ri max=2 priority=$prio_by_addr reserve=50%;
                proxy_pass http://{{UPSTREAM}};
            }
            location = /metrics { rate_limit_window_metrics; }
        }"#,
    )
}

/// A client that goes away while its request waits on the upstream (499)
/// gives its place back at once, long before the upstream would answer.
#[test]
fn a_client_gone_gives_its_place_back() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&ends_conf());
    let mut s = TcpStream::connect(("127.0.0.1", ng.port)).unwrap();
    s.write_all(b"GET /slow/gone?sleep=6000 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert!(wait_for(Duration::from_secs(3), || gauge(ng.port, "end")
        == Some(1.0)));
    assert_eq!(
        request(ng.port, "GET", "/slow/other?sleep=0", &[]).status,
        503
    );
    drop(s);
    assert!(
        wait_for(Duration::from_secs(3), || gauge(ng.port, "end")
            == Some(0.0)),
        "the place of a client gone was not given back before the upstream's answer"
    );
    assert_eq!(
        request(ng.port, "GET", "/slow/after?sleep=0", &[]).status,
        200
    );
    assert!(
        wait_for(Duration::from_secs(2), || ng
            .access_log()
            .contains("\"GET /slow/gone?sleep=6000 HTTP/1.1\" 499")),
        "{}",
        ng.access_log()
    );
}

/// An upstream timeout (504) gives the place back.
#[test]
fn an_upstream_timeout_gives_its_place_back() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&ends_conf());
    let r = request(ng.port, "GET", "/to/x?sleep=3000", &[]);
    assert_eq!(r.status, 504, "{}", r.describe());
    assert!(wait_for(Duration::from_secs(2), || gauge(ng.port, "end")
        == Some(0.0)));
    assert_eq!(
        request(ng.port, "GET", "/slow/after?sleep=0", &[]).status,
        200
    );
    let m = |name| {
        let labels = [("zone", "end"), ("priority", "default")];
        prom_value(&metrics_text(ng.port), name, &labels)
    };
    assert_eq!(m("rate_limit_window_shed_admitted_total"), Some(2.0));
    assert_eq!(m("rate_limit_window_shed_total"), Some(0.0));
}

/// The priority is read after realip: the client 10.255.0.1 (through the
/// proxy 127.0.0.1) is critical and takes the reserve a default one may not.
#[test]
fn the_priority_is_read_after_realip() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&ends_conf());
    let port = ng.port;
    let via = |ip: &'static str| [("X-Via-Http", ip.as_bytes())];
    let held =
        thread::spawn(move || request(port, "GET", "/ri/a?sleep=1500", &via("10.1.1.1")).status);
    assert!(wait_for(Duration::from_secs(3), || gauge(port, "ri") == Some(1.0)));
    let default = request(port, "GET", "/ri/b?sleep=0", &via("10.1.1.2"));
    assert_eq!(default.status, 503, "{}", default.describe());
    let critical = request(port, "GET", "/ri/c?sleep=0", &via("10.255.0.1"));
    assert_eq!(critical.status, 200, "{}", critical.describe());
    assert_eq!(held.join().unwrap(), 200);
    let m = |name, prio| {
        let labels = [("zone", "ri"), ("priority", prio)];
        prom_value(&metrics_text(port), name, &labels)
    };
    assert_eq!(m("rate_limit_window_shed_total", "default"), Some(1.0));
    assert_eq!(
        m("rate_limit_window_shed_admitted_total", "critical"),
        Some(1.0)
    );
    assert_eq!(
        m("rate_limit_window_shed_admitted_total", "default"),
        Some(1.0)
    );
}
