//! The limit in force and the whole cost: an override or tier below a
//! request's cost admits nothing (rejected, never skipped), a block holds
//! whatever the line's limit reads, and a ban never shortens Retry-After.
use super::*;

/// Zone `c` at `/c` (`limit=100 cost=10`), zone `t` at `/tier` (a `map`
/// tier of 5 for `X-Tier: small`, `cost=10`), zone `v` at `/var`
/// (`limit=$http_x_limit`, fail=open), the writable API at `/api`.
fn cost_conf() -> String {
    proxy_conf(
        "rate_limit_window_zone $http_x_key zone=c:1m window=60s;
         rate_limit_window_zone $http_x_key zone=t:1m window=60s;
         rate_limit_window_zone $http_x_key zone=v:1m window=60s;
         map $http_x_tier $tier { default 100; small 5; }",
        "",
        "add_header X-RLW $rate_limit_window_status always;
         location /c { rate_limit_window zone=c limit=100 cost=10; proxy_pass http://{{UPSTREAM}}; }
         location /tier { rate_limit_window zone=t limit=$tier cost=10; proxy_pass http://{{UPSTREAM}}; }
         location /var { rate_limit_window zone=v limit=$http_x_limit; proxy_pass http://{{UPSTREAM}}; }
         location = /api { rate_limit_window_metrics write=on; }
         location = /ro { rate_limit_window_metrics; }",
        "return 404;",
    )
}

/// An operator's throttle below the request's cost (`{"limit":5}`, or 0)
/// and a `map` tier of 5 with `cost=10`: the whole cost can never fit
/// under the limit in force, so every request is rejected (never skipped
/// as an invalid cost), with a Retry-After; other clients keep theirs.
#[test]
fn a_limit_in_force_below_the_cost_admits_nothing() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&cost_conf());
    for (key, body) in [("low", r#"{"limit":5}"#), ("zero", r#"{"limit":0}"#)] {
        assert_eq!(put(&ng, "c", key, body).status, 200);
        let (s, _) = burst(&ng, "/c", key, 5);
        assert_eq!(admitted(&s), 0, "{key}: {s:?}");
        let r = get_key(ng.port, "/c", key);
        assert_eq!(r.header("X-RLW"), Some("REJECTED"), "{}", r.describe());
        assert!(r.header_num("Retry-After") >= 1, "{}", r.describe());
    }
    let tier = |key: &str, t: &str| {
        request(
            ng.port,
            "GET",
            "/tier",
            &[("X-Key", key.as_bytes()), ("X-Tier", t.as_bytes())],
        )
    };
    let s: Vec<u16> = (0..5).map(|_| tier("small", "small").status).collect();
    assert_eq!(s, [429; 5]);
    let s: Vec<u16> = (0..11).map(|_| tier("big", "x").status).collect();
    assert_eq!(s.iter().filter(|&&c| c == 200).count(), 10, "{s:?}");
    // An override above the configured limit: its limit is the one in force.
    put(&ng, "c", "high", r#"{"limit":200}"#);
    let (s, _) = burst(&ng, "/c", "high", 21);
    assert_eq!(admitted(&s), 20, "{s:?}");
    let (s, _) = burst(&ng, "/c", "other", 11);
    assert_eq!(admitted(&s), 10, "{s:?}");
    let log = ng.error_log();
    assert_eq!(count_lines(&log, "invalid cost"), 0, "{log}");
    assert!(
        count_lines(&log, "cost above the limit in force") >= 10,
        "{log}"
    );
    assert_eq!(
        metric(
            &ng,
            "rate_limit_window_invalid_limit_total",
            &[("zone", "c")]
        ),
        0.0
    );
    assert_eq!(up.received(), 10 + 20 + 10);
}

/// A `block` holds whatever the client's `limit=$var` reads: empty (which
/// alone exempts the client) or invalid (which alone skips the limit under
/// fail=open).
#[test]
fn a_block_holds_with_an_empty_or_invalid_limit() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&cost_conf());
    let var = |key: &str, limit: Option<&str>| {
        let mut h: Vec<(&str, &[u8])> = vec![("X-Key", key.as_bytes())];
        if let Some(l) = limit {
            h.push(("X-Limit", l.as_bytes()));
        }
        request(ng.port, "GET", "/var", &h)
    };
    assert_eq!(var("free", None).header("X-RLW"), Some("EXEMPT"));
    assert_eq!(var("free", Some("abc")).status, 200);
    assert_eq!(
        put(&ng, "v", "eve", r#"{"block":true,"ttl":600}"#).status,
        200
    );
    for limit in [None, Some("abc"), Some("50")] {
        let r = var("eve", limit);
        assert_eq!(r.status, 429, "limit {limit:?}: {}", r.describe());
        assert_eq!(r.header_num("Retry-After"), 600, "{}", r.describe());
    }
    // An exempt override exempts a client whose limit alone would count.
    put(&ng, "v", "vip", r#"{"exempt":true}"#);
    for _ in 0..3 {
        assert_eq!(var("vip", Some("1")).header("X-RLW"), Some("EXEMPT"));
    }
}

/// `window=1h limit=3 ban=1m`: the rejection that bans the client says
/// when its count lets it in again (the next hour), not the ban's minute;
/// a client that obeys Retry-After is admitted at once.
#[test]
fn a_ban_never_shortens_retry_after() {
    let up = Upstream::start();
    let clock = FakeClock::new(T0 + 600);
    let ng = start_faked(
        &clock,
        &up,
        "UTC",
        &proxy_conf(
            "rate_limit_window_zone $http_x_key zone=h:1m window=1h;",
            "",
            "location = /api { rate_limit_window_metrics write=on; }
             location = /ro { rate_limit_window_metrics; }",
            "rate_limit_window zone=h limit=3 ban=1m;",
        ),
    );
    let (s, _) = burst(&ng, "/", "obey", 3);
    assert_eq!(admitted(&s), 3);
    let r = get_key(ng.port, "/", "obey");
    // 3 counted at 600 s into the hour: one more fits 1 ms into the next.
    assert_eq!(
        (r.status, r.header_num("Retry-After")),
        (429, 3001),
        "{}",
        r.describe()
    );
    assert_eq!(lookup(&ng, "h", "obey")["override"]["action"], "ban");
    // The ban's minute is over, the count's wait is not.
    clock.set(T0 + 661);
    let r = get_key(ng.port, "/", "obey");
    assert_eq!(
        (r.status, r.header_num("Retry-After")),
        (429, 2940),
        "{}",
        r.describe()
    );
    clock.set(T0 + 661 + 2940);
    assert_eq!(get_key(ng.port, "/", "obey").status, 200);
}
