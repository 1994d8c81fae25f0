//! Responses of rate_limit_window against a real nginx with two workers
//! and a real upstream: the RateLimit-* headers (on proxied, static and
//! error responses; `rate_limit_window_headers off` and `ietf`), the
//! rejection status, dry run, `$rate_limit_window_status` and the rejection
//! log line.
use crate::common;

use common::limits::{conf, key, start, zone, HOUR_MS};
use common::*;
use std::time::Duration;

// ---------------------------------------------------------------------------
// RateLimit-* headers
// ---------------------------------------------------------------------------

#[test]
fn headers_on_proxied_static_and_error_responses() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $http_x_key zone=z:1m window=1h;
        server {
            listen 127.0.0.1:{{PORT}};
            rate_limit_window zone=z limit=10;
            location /api/ { proxy_pass http://{{UPSTREAM}}; }
            location / { root html; }
            location /gif { empty_gif; }
        }"#,
    ));
    clear_of_boundary(HOUR_MS, 20_000);
    let checks = [
        ("/api/x", 200, 9, Some("1")),
        ("/", 200, 8, None),
        ("/index.html", 200, 7, None),
        ("/missing.html", 404, 6, None),
        ("/gif", 200, 5, None),
    ];
    for (path, status, remaining, upstream) in checks {
        let r = get_key(ng.port, path, "h");
        assert_eq!(r.status, status, "{path}: {}", r.describe());
        assert_eq!(r.header("X-Upstream"), upstream, "{path}");
        assert_eq!(r.header_num("RateLimit-Limit"), 10, "{path}");
        assert_eq!(r.header_num("RateLimit-Remaining"), remaining, "{path}");
        assert!(r.header("RateLimit-Reset").is_some(), "{path}");
    }
    assert!(get_key(ng.port, "/", "h").text().contains("static index"));
}

#[test]
fn headers_off_mode() {
    let up = Upstream::start();
    let ng = start(
        &up,
        &conf(
            &zone("window=1h"),
            "rate_limit_window zone=z limit=1; rate_limit_window_headers off;",
        ),
    );
    clear_of_boundary(HOUR_MS, 20_000);
    let ok = key(&ng, "o");
    let rej = key(&ng, "o");
    assert_eq!((ok.status, rej.status), (200, 429));
    for r in [&ok, &rej] {
        for h in [
            "RateLimit-Limit",
            "RateLimit-Remaining",
            "RateLimit-Reset",
            "RateLimit",
            "RateLimit-Policy",
        ] {
            assert!(
                r.header(h).is_none(),
                "{h} sent in off mode: {}",
                r.describe()
            );
        }
    }
    assert!(
        rej.header_num("Retry-After") >= 1,
        "Retry-After stays in off mode"
    );
}

/// Splits a structured-field list header into members.
fn members(v: &str) -> Vec<String> {
    v.split(',')
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// `"name";a=1;b=2` -> (name, [(a,1),(b,2)])
fn parse_member(m: &str) -> (String, Vec<(String, String)>) {
    let mut parts = m.split(';').map(str::trim);
    let name = parts.next().unwrap();
    assert!(
        name.starts_with('"') && name.ends_with('"') && name.len() >= 2,
        "member name {name:?} in {m:?}"
    );
    let params = parts
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .unwrap_or_else(|| panic!("param {p:?} in {m:?}"));
            (k.to_string(), v.to_string())
        })
        .collect();
    (name[1..name.len() - 1].to_string(), params)
}

#[test]
fn ietf_headers_format() {
    let up = Upstream::start();
    let ng = start(
        &up,
        &conf(
            "rate_limit_window_zone $http_x_key zone=za:1m window=1h;
             rate_limit_window_zone $http_x_key zone=zb:1m window=60s;",
            "rate_limit_window zone=za limit=5; rate_limit_window zone=zb limit=3;
             rate_limit_window_headers ietf;",
        ),
    );
    clear_of_boundary(HOUR_MS, 20_000);
    clear_of_boundary(60_000, 10_000);
    let r = key(&ng, "i");
    assert_eq!(r.status, 200);
    for h in ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"] {
        assert!(r.header(h).is_none(), "{h} sent in ietf mode");
    }
    let policy = r
        .header("RateLimit-Policy")
        .unwrap_or_else(|| panic!("no RateLimit-Policy: {}", r.describe()));
    let mut pol: Vec<_> = members(policy).iter().map(|m| parse_member(m)).collect();
    pol.sort();
    assert_eq!(
        pol,
        vec![
            (
                "za".into(),
                vec![("q".into(), "5".into()), ("w".into(), "3600".into())]
            ),
            (
                "zb".into(),
                vec![("q".into(), "3".into()), ("w".into(), "60".into())]
            ),
        ],
        "RateLimit-Policy: {policy}"
    );
    let rl = r
        .header("RateLimit")
        .unwrap_or_else(|| panic!("no RateLimit: {}", r.describe()));
    let mut got: Vec<_> = members(rl).iter().map(|m| parse_member(m)).collect();
    got.sort();
    assert_eq!(got.len(), 2, "RateLimit: {rl}");
    let expect = [("za", "4", 3600), ("zb", "2", 60)];
    for ((name, params), (ename, er, wmax)) in got.iter().zip(expect) {
        assert_eq!(name, ename, "RateLimit: {rl}");
        assert_eq!(params.len(), 2, "RateLimit: {rl}");
        assert_eq!(
            params[0],
            ("r".to_string(), er.to_string()),
            "RateLimit: {rl}"
        );
        assert_eq!(params[1].0, "t", "RateLimit: {rl}");
        let t: i64 = params[1].1.parse().unwrap();
        assert!((0..=wmax).contains(&t), "t={t} for {name}");
    }
    // A rejection still carries the ietf pair, and Retry-After.
    key(&ng, "i");
    key(&ng, "i");
    let r = key(&ng, "i");
    assert_eq!(r.status, 429);
    assert!(r.header("Retry-After").is_some());
    assert!(
        r.header("RateLimit").is_some() && r.header("RateLimit-Policy").is_some(),
        "{}",
        r.describe()
    );
}

// ---------------------------------------------------------------------------
// Status, dry run, log
// ---------------------------------------------------------------------------

#[test]
fn custom_status_503() {
    let up = Upstream::start();
    let ng = start(
        &up,
        &conf(
            &zone("window=1h"),
            "rate_limit_window zone=z limit=1; rate_limit_window_status 503;",
        ),
    );
    clear_of_boundary(HOUR_MS, 20_000);
    assert_eq!(key(&ng, "s").status, 200);
    let r = key(&ng, "s");
    assert_eq!(r.status, 503, "{}", r.describe());
    assert!(r.header_num("Retry-After") >= 1);
    assert!(r.text().contains("503"));
}

#[test]
fn dry_run_counts_but_passes() {
    let up = Upstream::start();
    let ng = start(
        &up,
        &conf(
            &zone("window=1h"),
            "rate_limit_window zone=z limit=2; rate_limit_window_dry_run on;",
        )
        .replace(
            "access_log logs/access.log;",
            "log_format rlw '$request_uri $status rlw=$rate_limit_window_status';
                 access_log logs/access.log rlw;",
        ),
    );
    clear_of_boundary(HOUR_MS, 20_000);
    let rs: Vec<Response> = (0..5).map(|_| key(&ng, "d")).collect();
    let statuses: Vec<u16> = rs.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200; 5]);
    let st: Vec<&str> = rs
        .iter()
        .map(|r| r.header("X-RLW-Status").unwrap_or(""))
        .collect();
    assert_eq!(
        st,
        [
            "PASSED",
            "PASSED",
            "REJECTED_DRY_RUN",
            "REJECTED_DRY_RUN",
            "REJECTED_DRY_RUN"
        ]
    );
    for r in &rs {
        assert!(
            r.header("Retry-After").is_none(),
            "dry run must not send Retry-After"
        );
        assert_eq!(r.body, b"upstream ok\n");
    }
    assert_eq!(up.received(), 5);
    // The access log shows the verdicts (each worker writes its line
    // after its response: wait for all five).
    assert!(wait_for(Duration::from_secs(5), || {
        let log = ng.access_log();
        log.matches("rlw=REJECTED_DRY_RUN").count() == 3 && log.matches("rlw=PASSED").count() >= 2
    }));
    assert_eq!(
        ng.access_log().matches("rlw=PASSED").count(),
        2,
        "{}",
        ng.access_log()
    );
    // would-be rejections are logged at the log level (default error).
    assert!(ng.error_log().contains("zone \"z\""), "{}", ng.error_log());
}

#[test]
fn status_variable_empty_without_limit() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $http_x_key zone=z:1m window=1h;
        server {
            listen 127.0.0.1:{{PORT}};
            add_header X-RLW-Status "[$rate_limit_window_status]" always;
            location / { proxy_pass http://{{UPSTREAM}}; }
        }"#,
    ));
    let r = get_key(ng.port, "/", "x");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("X-RLW-Status"), Some("[]"));
    assert!(r.header("RateLimit-Limit").is_none());
}

/// One line per rejection at the configured level, with the zone name and
/// never the raw key.
#[test]
fn rejection_log_line_level_and_no_key() {
    let up = Upstream::start();
    let ng = start(
        &up,
        &conf(
            &zone("window=1h"),
            "rate_limit_window zone=z limit=1; rate_limit_window_log_level warn;",
        ),
    );
    clear_of_boundary(HOUR_MS, 20_000);
    let off = ng.error_log_len();
    let secret = "SECRET-KEY-8c1f2e";
    assert_eq!(key(&ng, secret).status, 200);
    assert_eq!(key(&ng, secret).status, 429);
    assert_eq!(key(&ng, secret).status, 429);
    assert!(wait_for(Duration::from_secs(2), || ng
        .error_log_since(off)
        .lines()
        .filter(|l| l.contains("zone \"z\""))
        .count()
        == 2));
    let log = ng.error_log_since(off);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("zone \"z\"")).collect();
    for l in &lines {
        assert!(l.contains("[warn]"), "level: {l}");
        for word in ["estimate", "limit", "window"] {
            assert!(l.contains(word), "rejection line lacks the {word}: {l}");
        }
    }
    assert!(!log.contains(secret), "raw key in error.log:\n{log}");
    // Level notice: lines at [notice].
    let ng2 = start(
        &up,
        &conf(
            &zone("window=1h"),
            "rate_limit_window zone=z limit=0; rate_limit_window_log_level notice;",
        ),
    );
    assert_eq!(key(&ng2, "x").status, 429);
    assert!(wait_for(Duration::from_secs(2), || ng2
        .error_log()
        .lines()
        .any(|l| l.contains("zone \"z\"") && l.contains("[notice]"))));
}
