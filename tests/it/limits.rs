//! End-to-end behaviour of rate_limit_window against a real nginx with two
//! workers and a real upstream: rejection with 429 and Retry-After, counting
//! and remaining, several limits, keys (tiers, empty, binary, composite) and
//! limit values (0, invalid `limit=$variable`). Response headers and status
//! are in tests/it/headers.rs; other nginx directives and reload in
//! tests/it/directives.rs.
use crate::common;

use common::limits::{conf, key, start, zone, HOUR_MS};
use common::*;
use std::thread::sleep;
use std::time::Duration;

// ---------------------------------------------------------------------------
// Rejection, Retry-After, remaining
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

// ---------------------------------------------------------------------------
// Several limits
// ---------------------------------------------------------------------------

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
    // api/metrics (per-request accounting); here: still rejected.
    assert_eq!(key(&ng, "D").status, 429);
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

/// A key that is one request header, `$http_NAME`, is read by the module
/// itself (src/ffi/header_in.rs) when nginx has no variable of its own for
/// that header: the value must be nginx's, whoever reads it first. In
/// `/nginx` nginx evaluates `$http_x_key` first (`set`, in the rewrite
/// phase); in `/module` the module does. Both share one zone at 2 per
/// client: a third request of the same headers is refused iff both saw
/// one key, and X-Seen shows the value each saw. Case, `-` and `_`,
/// several headers of one name (joined with ", "), another header of the
/// same length, more headers than one part of nginx's header list (20),
/// and no header at all (exempt).
#[test]
fn header_key_is_nginx_s_own_value() {
    let c = http_conf(
        r#"
        rate_limit_window_zone $http_x_key zone=z:1m window=1h;
        underscores_in_headers on;
        server {
            listen 127.0.0.1:{{PORT}};
            add_header X-Seen "[$http_x_key]" always;
            location /nginx {
                set $seen $http_x_key;
                rate_limit_window zone=z limit=2;
                empty_gif;
            }
            location /module {
                rate_limit_window zone=z limit=2;
                empty_gif;
            }
        }"#,
    );
    let ng = Nginx::builder().start(&c);
    clear_of_boundary(HOUR_MS, 20_000);
    let many: Vec<(String, String)> = (0..25)
        .map(|i| (format!("X-Other-{i}"), format!("v{i}")))
        .collect();
    let mut crowd: Vec<(&str, &[u8])> = many
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_bytes()))
        .collect();
    crowd.push(("X-Key", b"crowd"));
    // (case, request headers, the value both must see)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a [u8])], &'a str);
    let cases: [Case; 7] = [
        ("one header", &[("X-Key", b"k1")], "k1"),
        ("any case", &[("x-KEY", b"k2")], "k2"),
        ("underscore", &[("X_Key", b"k3")], "k3"),
        (
            "two headers",
            &[("X-Key", b"a4"), ("X-Key", b"b4")],
            "a4, b4",
        ),
        (
            "three among others",
            &[
                ("X-Kez", b"zz"),
                ("X-Key", b"a5"),
                ("x_key", b"b5"),
                ("Host", b"localhost"),
                ("X-KEY", b"c5"),
            ],
            "a5, b5, c5",
        ),
        ("a second list part", &crowd, "crowd"),
        ("none", &[("X-Kez", b"zz")], ""),
    ];
    for (case, headers, want) in cases {
        let send = |path: &str| request(ng.port, "GET", path, headers);
        let seen = format!("[{want}]");
        let a = send("/nginx");
        assert_eq!(a.status, 200, "{case}: {}", a.describe());
        assert_eq!(a.header("X-Seen"), Some(seen.as_str()), "{case}, nginx");
        let b = send("/module");
        assert_eq!(b.status, 200, "{case}: {}", b.describe());
        assert_eq!(b.header("X-Seen"), Some(seen.as_str()), "{case}, module");
        // The third request of one key is refused; no key is never limited.
        let third = if want.is_empty() { 200 } else { 429 };
        assert_eq!(send("/module").status, third, "{case}: one key for both");
    }
}
