//! End-to-end behaviour of rate_limit_window against a real nginx with two
//! workers and a real upstream.
mod common;

use common::*;
use std::thread::sleep;
use std::time::Duration;

const HOUR_MS: u128 = 3_600_000;

/// http{} with `zones` at http level and one server whose `location /`
/// holds `loc` and proxies to the upstream. Every response carries the
/// module's variables as X-RLW-Status / X-RLW-Remaining.
fn conf(zones: &str, loc: &str) -> String {
    proxy_conf(
        zones,
        "",
        "add_header X-RLW-Status $rate_limit_window_status always;
         add_header X-RLW-Remaining $rate_limit_window_remaining always;",
        loc,
    )
}

fn zone(args: &str) -> String {
    format!("rate_limit_window_zone $http_x_key zone=z:1m {args};")
}

fn start(up: &Upstream, c: &str) -> Nginx {
    Nginx::builder().upstream_of(up).start(c)
}

fn key(ng: &Nginx, k: &str) -> Response {
    get_key(ng.port, "/", k)
}

// ---------------------------------------------------------------------------
// Rejection, Retry-After, headers
// ---------------------------------------------------------------------------

#[test]
fn rejects_with_429_and_retry_after() {
    let up = Upstream::start();
    let ng = start(
        &up,
        &conf(&zone("window=1h"), "rate_limit_window zone=z limit=3;"),
    );
    clear_of_boundary(HOUR_MS, 20_000);
    for i in 0..3 {
        let r = key(&ng, "alice");
        assert_eq!(r.status, 200, "request {i}: {}", r.describe());
        assert_eq!(r.body, b"upstream ok\n");
        assert!(
            r.header("Retry-After").is_none(),
            "admitted response has Retry-After"
        );
    }
    let r = key(&ng, "alice");
    assert_eq!(r.status, 429, "{}", r.describe());
    let ra = r.header_num("Retry-After");
    assert!((1..=3600).contains(&ra), "Retry-After {ra}");
    assert!(
        r.text().contains("429"),
        "default error page expected: {}",
        r.text()
    );
    assert_eq!(up.received(), 3, "rejected request reached the upstream");
    // Another client is unaffected.
    assert_eq!(key(&ng, "bob").status, 200);
}

/// W=3s, L=3, all requests half a second into a window:
/// - 3 admitted, the 4th rejected with Retry-After 3 (admitted again only
///   just after the next boundary: 2.5 s away);
/// - a retry at once and one after Retry-After-1 s are still rejected;
/// - after Retry-After s it is admitted (estimate 0 + 3*2.5/3 = 2.5 < 3);
/// - the next one is rejected (1 + 2.5) with Retry-After 1 (admitted once
///   1 + 3*(3-e)/3 < 3, i.e. e > 1: 0.5 s away), which also proves the
///   rejected requests of the previous window were not counted;
/// - after 1 s it is admitted (1 + 1.5 = 2.5 < 3).
#[test]
fn retry_after_is_exact() {
    let up = Upstream::start();
    let ng = start(
        &up,
        &conf(&zone("window=3s"), "rate_limit_window zone=z limit=3;"),
    );
    sleep_until_window_offset(3000, 500);
    for _ in 0..3 {
        assert_eq!(key(&ng, "k").status, 200);
    }
    let r = key(&ng, "k");
    assert_eq!(r.status, 429);
    assert_eq!(r.header_num("Retry-After"), 3, "{}", r.describe());
    let t0 = std::time::Instant::now();
    for _ in 0..3 {
        // rejected requests are not counted
        assert_eq!(key(&ng, "k").status, 429, "retry at once must be rejected");
    }
    sleep(Duration::from_secs(2).saturating_sub(t0.elapsed()));
    let r = key(&ng, "k");
    assert_eq!(
        r.status, 429,
        "retry after Retry-After-1 s must be rejected"
    );
    sleep(Duration::from_secs(3).saturating_sub(t0.elapsed()));
    let r = key(&ng, "k");
    assert_eq!(
        r.status,
        200,
        "retry after Retry-After s must be admitted: {}",
        r.describe()
    );
    let r = key(&ng, "k");
    assert_eq!(r.status, 429, "{}", r.describe());
    assert_eq!(r.header_num("Retry-After"), 1, "{}", r.describe());
    sleep(Duration::from_secs(1));
    let r = key(&ng, "k");
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(up.received(), 5);
}

#[test]
fn remaining_counts_down() {
    let up = Upstream::start();
    let ng = start(
        &up,
        &conf(&zone("window=1h"), "rate_limit_window zone=z limit=5;"),
    );
    clear_of_boundary(HOUR_MS, 20_000);
    for expect in [4, 3, 2, 1, 0] {
        let r = key(&ng, "c");
        assert_eq!(r.status, 200);
        assert_eq!(r.header_num("RateLimit-Limit"), 5);
        assert_eq!(
            r.header_num("RateLimit-Remaining"),
            expect,
            "{}",
            r.describe()
        );
        assert_eq!(
            r.header_num("X-RLW-Remaining"),
            expect,
            "$rate_limit_window_remaining"
        );
        assert_eq!(r.header("X-RLW-Status"), Some("PASSED"));
        let reset = r.header_num("RateLimit-Reset");
        assert!((0..=3600).contains(&reset), "RateLimit-Reset {reset}");
        let to_boundary = ((HOUR_MS - now_ms() % HOUR_MS) / 1000) as i64;
        assert!(
            (reset - to_boundary).abs() <= 1,
            "Reset {reset} vs {to_boundary} s to the hour"
        );
    }
    let r = key(&ng, "c");
    assert_eq!(r.status, 429);
    assert_eq!(r.header_num("RateLimit-Limit"), 5);
    assert_eq!(r.header_num("RateLimit-Remaining"), 0);
    assert!(r.header("RateLimit-Reset").is_some());
    assert_eq!(r.header("X-RLW-Status"), Some("REJECTED"));
    assert!(r.header("Retry-After").is_some());
}

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

/// With several limits, the RateLimit-* trio is the one with the fewest
/// remaining (not simply the smallest limit).
#[test]
fn several_limits_trio_is_fewest_remaining() {
    let up = Upstream::start();
    let ng = start(
        &up,
        &conf(
            "rate_limit_window_zone $http_x_key zone=per:1m window=1h;
             rate_limit_window_zone global zone=all:32k window=1h;",
            "rate_limit_window zone=per limit=3; rate_limit_window zone=all limit=10;",
        ),
    );
    clear_of_boundary(HOUR_MS, 20_000);
    let trio = |r: &Response| {
        (
            r.status,
            r.header_num("RateLimit-Limit"),
            r.header_num("RateLimit-Remaining"),
        )
    };
    // Remaining per zone after each admission; the trio is the smaller.
    for (k, exp) in [
        ("k1", (200, 3, 2)), // per 2, all 9
        ("k1", (200, 3, 1)), // per 1, all 8
        ("k1", (200, 3, 0)), // per 0, all 7
        ("k2", (200, 3, 2)), // per 2, all 6
        ("k2", (200, 3, 1)), // per 1, all 5
        ("k2", (200, 3, 0)), // per 0, all 4
        ("k3", (200, 3, 2)), // per 2, all 3
    ] {
        let r = key(&ng, k);
        assert_eq!(trio(&r), exp, "{k}: {}", r.describe());
    }
    // k3 second: per remaining 1, all remaining 2 -> per (3,1)
    assert_eq!(trio(&key(&ng, "k3")), (200, 3, 1));
    // k4 first: per remaining 2, all remaining 1 -> all (10,1)
    assert_eq!(trio(&key(&ng, "k4")), (200, 10, 1));
    // k4 second: per 1, all 0 -> all (10,0)
    assert_eq!(trio(&key(&ng, "k4")), (200, 10, 0));
    // k5: rejected by the global limit
    let r = key(&ng, "k5");
    assert_eq!(r.status, 429);
    assert_eq!(r.header_num("RateLimit-Limit"), 10);
    assert_eq!(r.header_num("RateLimit-Remaining"), 0);
}

// ---------------------------------------------------------------------------
// Keys, tiers, exemption
// ---------------------------------------------------------------------------

#[test]
fn tiers_via_map() {
    let up = Upstream::start();
    let ng = start(
        &up,
        &conf(
            "map $http_x_plan $plan_limit { pro 5; default 2; }
             rate_limit_window_zone $http_x_key zone=z:1m window=1h;",
            "rate_limit_window zone=z limit=$plan_limit;",
        ),
    );
    clear_of_boundary(HOUR_MS, 20_000);
    let free: Vec<u16> = (0..4).map(|_| key(&ng, "free-user").status).collect();
    assert_eq!(free, [200, 200, 429, 429]);
    let pro: Vec<Response> = (0..7)
        .map(|_| {
            request(
                ng.port,
                "GET",
                "/",
                &[("X-Key", b"pro-user"), ("X-Plan", b"pro")],
            )
        })
        .collect();
    let st: Vec<u16> = pro.iter().map(|r| r.status).collect();
    assert_eq!(st, [200, 200, 200, 200, 200, 429, 429]);
    assert_eq!(pro[0].header_num("RateLimit-Limit"), 5);
    assert_eq!(pro[0].header_num("RateLimit-Remaining"), 4);
}

#[test]
fn empty_key_is_exempt() {
    let up = Upstream::start();
    let ng = start(
        &up,
        &conf(&zone("window=1h"), "rate_limit_window zone=z limit=1;"),
    );
    for _ in 0..20 {
        let r = get(ng.port, "/");
        assert_eq!(r.status, 200, "{}", r.describe());
        assert_eq!(r.header("X-RLW-Status"), Some("EXEMPT"));
        assert!(
            r.header("RateLimit-Limit").is_none(),
            "exempt request got limit headers"
        );
    }
    assert_eq!(up.received(), 20);
    // An empty limit variable exempts too.
    let ng2 = start(
        &up,
        &conf(
            &zone("window=1h"),
            "rate_limit_window zone=z limit=$http_x_limit;",
        ),
    );
    // The last request below must find the one before it still counted
    // in full, so not right after an hour boundary.
    clear_of_boundary(HOUR_MS, 20_000);
    for _ in 0..5 {
        let r = key(&ng2, "someone");
        assert_eq!(r.status, 200);
        assert_eq!(r.header("X-RLW-Status"), Some("EXEMPT"));
    }
    let r = request(
        ng2.port,
        "GET",
        "/",
        &[("X-Key", b"someone"), ("X-Limit", b"1")],
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("X-RLW-Status"), Some("PASSED"));
    let r = request(
        ng2.port,
        "GET",
        "/",
        &[("X-Key", b"someone"), ("X-Limit", b"1")],
    );
    assert_eq!(
        r.status, 429,
        "exempt requests must not have been counted either way"
    );
}

/// Keys are compared as bytes: binary and 70 KB values are distinct
/// clients, each limited on its own.
#[test]
fn binary_and_huge_keys() {
    let up = Upstream::start();
    let ng = start(
        &up,
        &conf(&zone("window=1h"), "rate_limit_window zone=z limit=2;")
            .replace(
                "access_log logs/access.log;",
                "access_log logs/access.log; large_client_header_buffers 4 128k;",
            )
            .to_string(),
    );
    clear_of_boundary(HOUR_MS, 20_000);
    let huge_a = vec![b'a'; 70 * 1024];
    let mut huge_b = huge_a.clone();
    *huge_b.last_mut().unwrap() = b'b';
    let bin1: Vec<u8> = (0x80u8..=0xff).chain([b'x', 0x01, 0x7f]).collect();
    let bin2: Vec<u8> = (0x80u8..=0xff).chain([b'y', 0x01, 0x7f]).collect();
    for k in [&huge_a, &huge_b, &bin1, &bin2] {
        let st: Vec<u16> = (0..3)
            .map(|_| request(ng.port, "GET", "/", &[("X-Key", k)]).status)
            .collect();
        assert_eq!(st, [200, 200, 429], "key of {} bytes", k.len());
    }
    assert_eq!(up.received(), 8);
}

// ---------------------------------------------------------------------------
// Several limits
// ---------------------------------------------------------------------------

/// global (limit 5) is checked first, then per-key (limit 2). Requests that
/// per-key rejects must not consume global quota (the global admission is
/// undone), and a request the global limit rejects is not counted per key.
#[test]
fn rejection_by_one_limit_consumes_no_other_quota() {
    let up = Upstream::start();
    let ng = start(
        &up,
        &conf(
            "rate_limit_window_zone global zone=all:32k window=1h;
             rate_limit_window_zone $http_x_key zone=per:1m window=1h;",
            "rate_limit_window zone=all limit=5; rate_limit_window zone=per limit=2;",
        ),
    );
    clear_of_boundary(HOUR_MS, 20_000);
    let a: Vec<u16> = (0..6).map(|_| key(&ng, "A").status).collect();
    assert_eq!(a, [200, 200, 429, 429, 429, 429]);
    let b: Vec<u16> = (0..2).map(|_| key(&ng, "B").status).collect();
    assert_eq!(b, [200, 200], "B must not be hurt by A's rejected requests");
    // global: 4 used. C's first passes (5), the second is rejected globally.
    assert_eq!(key(&ng, "C").status, 200);
    let r = key(&ng, "C");
    assert_eq!(r.status, 429, "global limit exhausted");
    assert_eq!(up.received(), 5);
    // D: global exhausted as well, so per-key for D must stay untouched;
    // with per-key counting undone, the JSON lookup would show 0. Checked in
    // metrics.rs (per-request accounting); here: still rejected.
    assert_eq!(key(&ng, "D").status, 429);
}

// ---------------------------------------------------------------------------
// Dry run, status, log
// ---------------------------------------------------------------------------

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
    // The access log shows the verdicts.
    assert!(wait_for(Duration::from_secs(2), || ng
        .access_log()
        .matches("rlw=REJECTED_DRY_RUN")
        .count()
        == 3));
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
fn limit_zero_rejects_everything() {
    let up = Upstream::start();
    let ng = start(
        &up,
        &conf(&zone("window=1h"), "rate_limit_window zone=z limit=0;"),
    );
    for k in ["a", "b", "a"] {
        let r = key(&ng, k);
        assert_eq!(r.status, 429, "{}", r.describe());
        assert_eq!(r.header("X-RLW-Status"), Some("REJECTED"));
        assert_eq!(r.header_num("RateLimit-Limit"), 0);
        assert_eq!(r.header_num("RateLimit-Remaining"), 0);
        if let Some(ra) = r.header("Retry-After") {
            assert!(ra.parse::<u64>().is_ok(), "Retry-After {ra:?}");
        }
    }
    assert_eq!(up.received(), 0);
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

// ---------------------------------------------------------------------------
// Counting once per main request
// ---------------------------------------------------------------------------

#[test]
fn error_page_keeps_retry_after_and_counts_once() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .upstream_of(&up)
        .file("html/too_many.html", "<h1>slow down</h1>\n")
        .file("html/notfound.html", "<h1>custom 404</h1>\n")
        .start(&http_conf(
            r#"rate_limit_window_zone $http_x_key zone=z:1m window=1h;
            server {
                listen 127.0.0.1:{{PORT}};
                rate_limit_window zone=z limit=4;
                error_page 429 /too_many.html;
                error_page 404 /notfound.html;
                location / { proxy_pass http://{{UPSTREAM}}; }
                location /files/ { root html; }
                location = /too_many.html { root html; }
                location = /notfound.html { root html; }
                location /named/ { error_page 429 @limited; proxy_pass http://{{UPSTREAM}}; }
                location @limited { return 429 "named page\n"; }
            }"#,
        ));
    clear_of_boundary(HOUR_MS, 20_000);
    // Two admitted requests end in 404 -> error_page: each counts once.
    for rem in [3, 2] {
        let r = get_key(ng.port, "/files/nope", "e");
        assert_eq!(r.status, 404);
        assert!(r.text().contains("custom 404"), "{}", r.describe());
        assert_eq!(r.header_num("RateLimit-Remaining"), rem, "{}", r.describe());
    }
    assert_eq!(get_key(ng.port, "/", "e").status, 200);
    assert_eq!(get_key(ng.port, "/", "e").status, 200);
    let r = get_key(ng.port, "/", "e");
    assert_eq!(r.status, 429, "{}", r.describe());
    assert!(
        r.text().contains("slow down"),
        "custom error page: {}",
        r.describe()
    );
    assert!(
        r.header_num("Retry-After") >= 1,
        "Retry-After on custom error page"
    );
    assert_eq!(r.header_num("RateLimit-Remaining"), 0);
    // error_page to a named location.
    let r = get_key(ng.port, "/named/x", "e");
    assert_eq!(r.status, 429, "{}", r.describe());
    assert_eq!(r.text(), "named page\n");
    assert!(
        r.header_num("Retry-After") >= 1,
        "Retry-After after named error_page: {}",
        r.describe()
    );
    assert_eq!(up.received(), 2);
}

#[test]
fn try_files_and_rewrite_count_once() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $http_x_key zone=z:1m window=1h;
        server {
            listen 127.0.0.1:{{PORT}};
            rate_limit_window zone=z limit=3;
            location /tf/ { root html; try_files $uri @app; }
            location @app { proxy_pass http://{{UPSTREAM}}; }
            location /old/ { rewrite ^/old/(.*)$ /new/$1 last; }
            location /new/ { proxy_pass http://{{UPSTREAM}}; }
        }"#,
    ));
    clear_of_boundary(HOUR_MS, 20_000);
    for (path, k) in [("/tf/nothing", "t"), ("/old/thing", "r")] {
        let rs: Vec<Response> = (0..5).map(|_| get_key(ng.port, path, k)).collect();
        let st: Vec<u16> = rs.iter().map(|r| r.status).collect();
        assert_eq!(st, [200, 200, 200, 429, 429], "{path}");
        let rem: Vec<i64> = rs[..3]
            .iter()
            .map(|r| r.header_num("RateLimit-Remaining"))
            .collect();
        assert_eq!(rem, [2, 1, 0], "{path}");
        assert_eq!(rs[0].header("X-Upstream"), Some("1"));
    }
    assert_eq!(up.received(), 6);
    assert!(up.paths().iter().any(|p| p == "/new/thing"));
}

/// Like limit_req: a level with no rate_limit_window inherits all from
/// above; a level with any replaces the inherited list.
#[test]
fn limits_inherit_like_limit_req() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $http_x_key zone=a:1m window=1h;
        rate_limit_window_zone $http_x_key zone=b:1m window=1h;
        rate_limit_window zone=a limit=1;
        server {
            listen 127.0.0.1:{{PORT}};
            location /inherit/ { proxy_pass http://{{UPSTREAM}}; }
            location /own/ { rate_limit_window zone=b limit=3; proxy_pass http://{{UPSTREAM}}; }
        }
        server {
            listen 127.0.0.1:{{PORT2}};
            rate_limit_window zone=b limit=2;
            location / { proxy_pass http://{{UPSTREAM}}; }
            location /none/ { rate_limit_window zone=a limit=0; proxy_pass http://{{UPSTREAM}}; }
        }"#,
    ));
    clear_of_boundary(HOUR_MS, 20_000);
    let st = |port, path: &str, k: &str| -> Vec<u16> {
        (0..4).map(|_| get_key(port, path, k).status).collect()
    };
    assert_eq!(st(ng.port, "/inherit/", "i"), [200, 429, 429, 429]);
    assert_eq!(st(ng.port, "/own/", "o"), [200, 200, 200, 429]);
    assert_eq!(st(ng.port2, "/", "s"), [200, 200, 429, 429]);
    assert_eq!(st(ng.port2, "/none/", "n"), [429, 429, 429, 429]);
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

// ---------------------------------------------------------------------------
// limit=$variable with an invalid value: the zone's fail policy
// ---------------------------------------------------------------------------

#[test]
fn invalid_limit_variable_follows_fail_policy() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $http_x_key zone=zopen:1m window=1h fail=open;
        rate_limit_window_zone $http_x_key zone=zclosed:1m window=1h fail=closed;
        server {
            listen 127.0.0.1:{{PORT}};
            add_header X-RLW-Status $rate_limit_window_status always;
            location /open/ { rate_limit_window zone=zopen limit=$http_x_limit; proxy_pass http://{{UPSTREAM}}; }
            location /closed/ { rate_limit_window zone=zclosed limit=$http_x_limit; proxy_pass http://{{UPSTREAM}}; }
        }"#,
    ));
    let off = ng.error_log_len();
    for bad in ["abc", "-1", "12x", "99999999999999999999"] {
        let r = request(
            ng.port,
            "GET",
            "/open/",
            &[("X-Key", b"v"), ("X-Limit", bad.as_bytes())],
        );
        assert_eq!(r.status, 200, "fail=open, limit {bad:?}: {}", r.describe());
        let r = request(
            ng.port,
            "GET",
            "/closed/",
            &[("X-Key", b"v"), ("X-Limit", bad.as_bytes())],
        );
        assert_eq!(
            r.status,
            429,
            "fail=closed, limit {bad:?}: {}",
            r.describe()
        );
    }
    assert_eq!(up.received(), 4);
    assert!(
        wait_for(Duration::from_secs(2), || {
            let log = ng.error_log_since(off);
            log.lines()
                .any(|l| l.contains("[error]") && l.contains("zopen"))
                && log
                    .lines()
                    .any(|l| l.contains("[error]") && l.contains("zclosed"))
        }),
        "an [error] line naming each zone expected:\n{}",
        ng.error_log_since(off)
    );
    // A valid value applies normally.
    let r = request(
        ng.port,
        "GET",
        "/open/",
        &[("X-Key", b"w"), ("X-Limit", b"1")],
    );
    assert_eq!((r.status, r.header("X-RLW-Status")), (200, Some("PASSED")));
    let r = request(
        ng.port,
        "GET",
        "/open/",
        &[("X-Key", b"w"), ("X-Limit", b"1")],
    );
    assert_eq!(r.status, 429);
}

// ---------------------------------------------------------------------------
// Reload
// ---------------------------------------------------------------------------

fn reload_conf(key: &str, window: &str, limit: u32, gen: u32) -> String {
    conf(
        &format!("rate_limit_window_zone {key} zone=z:1m window={window};"),
        &format!("rate_limit_window zone=z limit={limit}; add_header X-Gen {gen} always;"),
    )
}

#[test]
fn reload_keeps_counts_and_new_limit_applies() {
    let up = Upstream::start();
    let mut ng = start(&up, &reload_conf("$http_x_key", "1h", 5, 1));
    clear_of_boundary(HOUR_MS, 30_000);
    for _ in 0..3 {
        assert_eq!(key(&ng, "r").status, 200);
    }
    // Same zone, limit 4: one more passes.
    ng.reload_with(&reload_conf("$http_x_key", "1h", 4, 2));
    let r = key(&ng, "r");
    assert_eq!(r.header("X-Gen"), Some("2"), "{}", r.describe());
    assert_eq!(r.status, 200);
    assert_eq!(r.header_num("RateLimit-Remaining"), 0);
    assert_eq!(key(&ng, "r").status, 429);
    // Plain reload: counts kept.
    ng.reload();
    assert_eq!(key(&ng, "r").status, 429);
    // Raise the limit: the kept count (4) leaves 6 of 10.
    ng.reload_with(&reload_conf("$http_x_key", "1h", 10, 3));
    let r = key(&ng, "r");
    assert_eq!((r.status, r.header("X-Gen")), (200, Some("3")));
    assert_eq!(r.header_num("RateLimit-Remaining"), 5);
    // Lower it below the count: rejected at once.
    ng.reload_with(&reload_conf("$http_x_key", "1h", 2, 4));
    let r = key(&ng, "r");
    assert_eq!((r.status, r.header("X-Gen")), (429, Some("4")));
    assert_eq!(up.received(), 5);
}

#[test]
fn reload_with_changed_key_or_window_fails_and_old_config_serves() {
    let up = Upstream::start();
    let mut ng = start(&up, &reload_conf("$http_x_key", "1h", 2, 1));
    clear_of_boundary(HOUR_MS, 30_000);
    assert_eq!(key(&ng, "k").status, 200);
    assert_eq!(key(&ng, "k").status, 200);
    for (what, bad) in [
        ("key", reload_conf("$http_x_other", "1h", 2, 2)),
        ("window", reload_conf("$http_x_key", "30m", 2, 2)),
    ] {
        let err = ng
            .try_reload_with(&bad)
            .expect_err(&format!("reload with changed {what} must fail"));
        assert!(
            err.lines()
                .any(|l| l.contains("[emerg]") && l.contains("is already bound")),
            "changed {what}: {err}"
        );
        let r = key(&ng, "k");
        assert_eq!(
            (r.status, r.header("X-Gen")),
            (429, Some("1")),
            "old config must keep limiting"
        );
        let other = format!("other-{what}");
        let st: Vec<u16> = (0..3).map(|_| key(&ng, &other).status).collect();
        assert_eq!(st, [200, 200, 429], "old config, fresh key");
        // The unchanged config still reloads fine and keeps the counts.
        ng.reload_with(&reload_conf("$http_x_key", "1h", 2, 1));
        assert_eq!(key(&ng, "k").status, 429);
        assert_eq!(key(&ng, &other).status, 429);
    }
}

// ---------------------------------------------------------------------------
// Key forms: one variable (read directly) and composite keys (script engine)
// ---------------------------------------------------------------------------

#[test]
fn composite_and_braced_keys_limit_per_value_and_empty_is_exempt() {
    let up = Upstream::start();
    let ng = start(
        &up,
        &conf(
            "rate_limit_window_zone $http_x_a:$http_x_b zone=pair:1m window=1h;
             rate_limit_window_zone ${http_x_key} zone=braced:1m window=1h;
             rate_limit_window_zone $http_x_c$http_x_d zone=joined:1m window=1h;",
            "rate_limit_window zone=pair limit=2;
             rate_limit_window zone=braced limit=3;
             rate_limit_window zone=joined limit=1;",
        ),
    );
    clear_of_boundary(HOUR_MS, 20_000);
    let send = |h: &[(&str, &[u8])]| request(ng.port, "GET", "/", h).status;
    // "1:1" twice, then rejected by the pair zone; "1:2" is another client.
    assert_eq!(send(&[("X-A", b"1"), ("X-B", b"1")]), 200);
    assert_eq!(send(&[("X-A", b"1"), ("X-B", b"1")]), 200);
    assert_eq!(send(&[("X-A", b"1"), ("X-B", b"1")]), 429);
    assert_eq!(send(&[("X-A", b"1"), ("X-B", b"2")]), 200);
    // No headers at all: the pair key is ":" (one client), the others empty.
    assert_eq!(send(&[]), 200);
    assert_eq!(send(&[]), 200);
    assert_eq!(send(&[]), 429);
    // ${http_x_key} is the same key as $http_x_key; 3 per value. The pair
    // zone also applies: vary X-A so that it never trips.
    for (i, want) in [200, 200, 200, 429].into_iter().enumerate() {
        let a = format!("k{i}");
        let st = send(&[("X-Key", b"k"), ("X-A", a.as_bytes())]);
        assert_eq!(st, want, "request {i} for X-Key k");
    }
    // $http_x_c$http_x_d concatenates: "ab" + "" and "a" + "b" are one client.
    assert_eq!(send(&[("X-C", b"ab"), ("X-A", b"j1")]), 200);
    assert_eq!(send(&[("X-C", b"a"), ("X-D", b"b"), ("X-A", b"j2")]), 429);
    assert_eq!(up.received(), 9);
}
