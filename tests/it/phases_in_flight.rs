//! The phases matrix of in-flight places (docs/in-flight.md): both phases
//! × every way a request reaches a location with `in_flight=1` (internal
//! redirects before the decision, an `error_page` after it, subrequests of
//! `auth_request` and `mirror`, HTTP/2 streams of one connection), realip
//! at http level. Each row's client sends two requests at once to a slow
//! upstream: one holds the place, the other is refused; once both ended, a
//! third gets the place (given back, once). A subrequest never takes one.
use super::common;
use super::{counted, slow_locations, slow_path, Route, PHASES, SLOW};

use common::*;
use std::thread;
use std::time::Duration;

const ROUTES: [Route; 11] = [
    Route::Direct,
    Route::ErrorPageNamed,
    Route::ErrorPageUri,
    Route::ErrorPageAfter,
    Route::TryFiles,
    Route::RewriteLast,
    Route::AuthRequest,
    Route::SatisfyAny,
    Route::Mirror,
    Route::AccessDenied,
    Route::Http2,
];

/// The locations of one phase (suffix `-{phase}`).
fn locations(phase: &str) -> String {
    let lim = format!("rate_limit_window_phase {phase}; rate_limit_window zone=fl in_flight=1;");
    let s = phase;
    let own = format!(
        r#"
        location /ar-{s}/ {{ auth_request /_yes; {lim} proxy_pass http://{{{{UPSTREAM}}}}; }}
        location /sa-{s}/ {{
            satisfy any; allow 10.0.0.0/8; deny all;
            auth_basic "matrix"; auth_basic_user_file htpasswd;
            {lim} proxy_pass http://{{{{UPSTREAM}}}};
        }}
        "#
    );
    slow_locations(phase, &lim) + &own
}

fn matrix_conf(tls: &str) -> String {
    let locs: String = PHASES.iter().map(|p| locations(p)).collect();
    http_conf(&format!(
        r#"
        set_real_ip_from 127.0.0.1; real_ip_header X-Via-Http;
        rate_limit_window_zone $binary_remote_addr zone=fl:4m window=1h;
        server {{
            listen 127.0.0.1:{{{{PORT}}}};
            {tls}
            location = /_yes {{ internal; return 204; }}
            location = /_no {{ internal; return 401; }}
            location = /metrics {{ rate_limit_window_metrics; }}
            {locs}
        }}"#
    ))
}

/// `n` GETs of `url` at once as streams of one HTTP/2 connection, as `ip`.
pub(super) fn curl_h2_parallel(url: &str, ip: &str, n: usize) -> Vec<u16> {
    curl_h2(
        &vec![url.to_string(); n],
        &format!("X-Via-Http: {ip}"),
        true,
    )
}

/// Two requests of one row's client at once; their statuses, sorted.
fn two_at_once(port: u16, port2: u16, route: Route, phase: &str, ip: &str) -> Vec<u16> {
    let p = slow_path(route, phase);
    let mut got = if route == Route::Http2 {
        curl_h2_parallel(&format!("https://127.0.0.1:{port2}{p}"), ip, 2)
    } else {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let (p, ip) = (p.clone(), ip.to_string());
                thread::spawn(move || {
                    request(port, "GET", &p, &[("X-Via-Http", ip.as_bytes())]).status
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    };
    got.sort_unstable();
    got
}

#[test]
fn in_flight_matrix() {
    let up = Upstream::start();
    let certs = tempfile::tempdir().unwrap();
    let tls = tls_h2_listen(certs.path()).replace(
        "listen 127.0.0.1:{{PORT}} ssl;",
        "listen 127.0.0.1:{{PORT2}} ssl;",
    );
    let ng = Nginx::builder()
        .upstream_of(&up)
        .file("conf/htpasswd", "nobody:{PLAIN}secret\n")
        .start(&matrix_conf(&tls));
    let (port, port2) = (ng.port, ng.port2);
    let mut rows = vec![];
    for (i, phase) in PHASES.iter().enumerate() {
        for (j, route) in ROUTES.into_iter().enumerate() {
            let ip = format!("10.{}.{}.7", 100 + i, j + 1);
            let phase = phase.to_string();
            rows.push((
                phase.clone(),
                route,
                ip.clone(),
                thread::spawn(move || two_at_once(port, port2, route, &phase, &ip)),
            ));
        }
    }
    let mut wrong = vec![];
    let (mut taken, mut rejected) = (0, 0);
    for (phase, route, ip, h) in rows {
        let got = h.join().unwrap();
        let want = if counted(&phase, route) {
            taken += 1;
            rejected += 1;
            vec![200, 429]
        } else {
            vec![200, 200]
        };
        if got != want {
            wrong.push(format!("{phase} {route:?} {ip}: {got:?}, want {want:?}"));
            continue;
        }
        // Both ended: the place came back, once.
        // (A place is given back when nginx frees the request, just after
        // its last byte, or a mirror's subrequest ended: a refusal meanwhile
        // is counted too.)
        let p = slow_path(route, &phase).replace(SLOW, "sleep=0");
        let again = || {
            let status = request(port, "GET", &p, &[("X-Via-Http", ip.as_bytes())]).status;
            rejected += u32::from(status == 429);
            status == 200
        };
        if !wait_for(Duration::from_secs(3), again) {
            wrong.push(format!("{phase} {route:?} {ip}: the place never came back"));
        }
        if counted(&phase, route) {
            taken += 1;
        }
    }
    assert!(
        wrong.is_empty(),
        "{} rows wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    let text = metrics_text(port);
    let total = |result: &str| {
        prom_value(
            &text,
            "rate_limit_window_in_flight_total",
            &[("zone", "fl"), ("result", result)],
        )
        .unwrap_or(-1.0)
    };
    // Once per main request: no subrequest took a place or was refused.
    assert_eq!(total("taken"), f64::from(taken), "{text}");
    assert_eq!(total("rejected"), f64::from(rejected), "{text}");
    assert!(wait_for(Duration::from_secs(3), || {
        prom_value(
            &metrics_text(port),
            "rate_limit_window_in_flight",
            &[("zone", "fl")],
        ) == Some(0.0)
    }));
}
