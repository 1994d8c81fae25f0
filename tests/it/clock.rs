//! Exact sliding-window arithmetic under a controlled clock.
//!
//! nginx runs with libfaketime preloaded and reads the wall clock from a
//! timestamp file that the test rewrites (FAKETIME_NO_CACHE=1: every clock
//! read sees the file). The clock is frozen at whole seconds, so window
//! positions, Retry-After, RateLimit-Reset and estimates are exact.
//! Monotonic time is left real so nginx's own timers keep working.
//! Fails when libfaketime is not installed; `make test` installs it.
use crate::common;

use common::*;

/// 2024-01-01T00:00:00Z, a multiple of every window used here.
const T0: i64 = 1_704_067_200;

fn conf(zones: &str, loc: &str) -> String {
    proxy_conf(
        zones,
        "",
        "add_header X-Msec $msec always;
         location = /metrics { rate_limit_window_metrics; }",
        loc,
    )
}

fn k(ng: &Nginx) -> Response {
    get_key(ng.port, "/", "k")
}

fn json(ng: &Nginx, zone: &str, key: &str) -> serde_json::Value {
    let r = get(ng.port, &format!("/metrics?zone={zone}&key={key}"));
    assert_eq!(r.status, 200, "{}", r.describe());
    serde_json::from_slice(&r.body).unwrap()
}

fn f(v: &serde_json::Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}

/// Admits requests until the first rejection; returns (admitted, the
/// rejection, the admitted responses).
fn fill(ng: &Nginx) -> (usize, Response, Vec<Response>) {
    let mut ok = vec![];
    for _ in 0..1000 {
        let r = k(ng);
        if r.status != 200 {
            assert_eq!(r.status, 429, "{}", r.describe());
            return (ok.len(), r, ok);
        }
        ok.push(r);
    }
    panic!("never rejected");
}

/// W=4s, L=10. Estimate = current + previous*(W-elapsed)/W; admitted iff
/// estimate < L; rejected requests are not counted.
#[test]
fn sliding_window_exact() {
    let up = Upstream::start();
    let clock = FakeClock::new(T0 + 1);
    let ng = start_faked(
        &clock,
        &up,
        "UTC",
        &conf(
            "rate_limit_window_zone $http_x_key zone=z:1m window=4s;",
            "rate_limit_window zone=z limit=10;",
        ),
    );
    // The clock really is faked for the workers.
    assert_eq!(
        k(&ng).header("X-Msec"),
        Some(format!("{}.000", T0 + 1).as_str())
    );

    // Window [T0, T0+4), elapsed 1 s: 1 already admitted above, 9 more.
    let (n, rej, ok) = fill(&ng);
    assert_eq!(n, 9);
    let rem: Vec<i64> = ok
        .iter()
        .map(|r| r.header_num("RateLimit-Remaining"))
        .collect();
    assert_eq!(rem, [8, 7, 6, 5, 4, 3, 2, 1, 0]);
    for r in &ok {
        assert_eq!(
            r.header_num("RateLimit-Reset"),
            3,
            "seconds to the next boundary"
        );
        assert_eq!(r.header_num("RateLimit-Limit"), 10);
    }
    // A refusal's reset is its Retry-After: the same moment.
    assert_eq!(rej.header_num("RateLimit-Reset"), 4, "{}", rej.describe());
    // A retry at T0+4 (3 s later) sees 0 + 10*4/4 = 10, not < 10: rejected;
    // at T0+5 (4 s later) 7.5: admitted. So Retry-After is 4.
    assert_eq!(rej.header_num("Retry-After"), 4, "{}", rej.describe());

    clock.set(T0 + 4);
    let r = k(&ng);
    assert_eq!(r.status, 429, "estimate exactly at the limit is rejected");
    assert_eq!(r.header_num("Retry-After"), 1);
    assert_eq!(r.header_num("RateLimit-Reset"), 1, "its Retry-After");
    let v = json(&ng, "z", "k");
    assert_eq!(f(&v, "window_index") as i64, (T0 + 4) / 4);
    assert_eq!(
        strip_zero_fraction(v["window_start_utc"].as_str().unwrap()),
        "2024-01-01T00:00:04Z"
    );
    // TZ=UTC: the local time carries offset Z (or the equivalent +00:00).
    let local =
        strip_zero_fraction(v["window_start_local"].as_str().unwrap()).replace("+00:00", "Z");
    assert_eq!(local, "2024-01-01T00:00:04Z");
    assert_eq!(
        (f(&v, "current"), f(&v, "previous"), f(&v, "estimate")),
        (0.0, 10.0, 10.0)
    );

    // T0+5: previous weighs 3/4 -> 7.5; admits at 7.5, 8.5, 9.5; then 10.5.
    clock.set(T0 + 5);
    let (n, rej, ok) = fill(&ng);
    assert_eq!(n, 3);
    let rem: Vec<i64> = ok
        .iter()
        .map(|r| r.header_num("RateLimit-Remaining"))
        .collect();
    assert_eq!(rem, [2, 1, 0], "remaining = requests still admissible now");
    // 3 + 10*(4-e)/4 < 10  <=>  e > 1.2: 0.2 s away.
    assert_eq!(rej.header_num("Retry-After"), 1);
    assert_eq!(rej.header_num("RateLimit-Reset"), 1, "its Retry-After");
    let v = json(&ng, "z", "k");
    assert_eq!((f(&v, "current"), f(&v, "previous")), (3.0, 10.0));
    // Checked at the end, so that the later steps run either way.
    let estimate_at_5 = v.clone();

    // T0+6: 3 + 5 = 8 -> admits at 8 and 9, rejects at 10 (Retry-After 1).
    clock.set(T0 + 6);
    let (n, rej, _) = fill(&ng);
    assert_eq!(n, 2);
    assert_eq!(rej.header_num("Retry-After"), 1);

    // T0+8: new window, previous = 5 at full weight: 5 admitted.
    clock.set(T0 + 8);
    assert_eq!(fill(&ng).0, 5);
    // T0+13: previous = 5 weighs 3/4 = 3.75: admitted while c + 3.75 < 10.
    clock.set(T0 + 13);
    assert_eq!(fill(&ng).0, 7);
    // Two windows later nothing is left.
    clock.set(T0 + 40);
    assert_eq!(fill(&ng).0, 10);
    assert_eq!(up.received(), 10 + 3 + 2 + 5 + 7 + 10);
    // The reported estimate is the exact one, 3 + 10*3/4 = 10.5 (not a
    // rounded 10 or 11).
    assert!(
        (f(&estimate_at_5, "estimate") - 10.5).abs() < 1e-3,
        "estimate at T0+5 should be 10.5: {estimate_at_5}"
    );
}

/// With several limits the Retry-After is the time after which *every*
/// limit admits: here the 60 s window, not the 4 s one that is checked
/// first.
#[test]
fn retry_after_with_several_limits_is_the_longest() {
    let up = Upstream::start();
    let clock = FakeClock::new(T0 + 1);
    let ng = start_faked(
        &clock,
        &up,
        "UTC",
        &conf(
            "rate_limit_window_zone $http_x_key zone=short:1m window=4s;
             rate_limit_window_zone $http_x_key zone=long:1m window=60s;",
            "rate_limit_window zone=short limit=2; rate_limit_window zone=long limit=2;",
        ),
    );
    let (n, rej, _) = fill(&ng);
    assert_eq!(n, 2);
    // short admits again after T0+4, long only after T0+60: 59 s + epsilon.
    assert_eq!(rej.header_num("Retry-After"), 60, "{}", rej.describe());
    clock.set(T0 + 5);
    assert_eq!(k(&ng).status, 429, "the long window still rejects");
    clock.set(T0 + 61);
    assert_eq!(k(&ng).status, 200);
}

/// Windows are aligned to the UTC epoch whatever the local time zone:
/// RateLimit-Reset is the distance to the next UTC-aligned boundary.
#[test]
fn windows_are_utc_aligned_in_any_time_zone() {
    if !std::path::Path::new("/usr/share/zoneinfo/Asia/Kolkata").exists() {
        eprintln!("tzdata missing: skipped");
        return;
    }
    let up = Upstream::start();
    // 2024-01-01 20:00:00 as the file says; how libfaketime reads it under
    // a non-UTC TZ does not matter: the test learns the epoch from $msec.
    let clock = FakeClock::new(T0 + 20 * 3600);
    let ng = start_faked(
        &clock,
        &up,
        "Asia/Kolkata",
        &conf(
            "rate_limit_window_zone $http_x_key zone=m:1m window=1m;
             rate_limit_window_zone $http_x_key zone=h:1m window=1h;
             rate_limit_window_zone $http_x_key zone=d:1m window=24h;",
            "rate_limit_window zone=m limit=100; rate_limit_window zone=h limit=100;
             rate_limit_window zone=d limit=100; rate_limit_window_headers ietf;",
        ),
    );
    // Increasing times: stepping back would be a clock-backwards event.
    for offset in [3 * 3600 + 1, 20 * 3600 + 59, 20 * 3600 + 30 * 60 + 15] {
        clock.set(T0 + offset);
        let r = k(&ng);
        assert_eq!(r.status, 200);
        let now: i64 = r
            .header("X-Msec")
            .unwrap()
            .split('.')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let rl = r.header("RateLimit").expect("RateLimit header");
        for (zone, w) in [("m", 60i64), ("h", 3600), ("d", 86400)] {
            // `t` is when `r` next grows: this window's count weighs one
            // less 1 ms after the UTC boundary, so a second after it.
            let expect = w - now.rem_euclid(w) + 1;
            let member = rl
                .split(',')
                .map(str::trim)
                .find(|m| m.starts_with(&format!("\"{zone}\";")))
                .unwrap_or_else(|| panic!("no member for {zone} in {rl}"));
            assert!(
                member.ends_with(&format!(";t={expect}")),
                "zone {zone} at {now}: {member} (expected t={expect})"
            );
        }
        let v = json(&ng, "d", "k");
        let start = now - now.rem_euclid(86400);
        assert_eq!(
            strip_zero_fraction(v["window_start_utc"].as_str().unwrap()),
            rfc3339_utc(start)
        );
        assert_eq!(
            strip_zero_fraction(v["window_start_local"].as_str().unwrap()),
            rfc3339_offset(start, 19800),
            "{v}"
        );
    }
}

/// A clock step backwards is survived and counted.
#[test]
fn clock_going_backwards_is_counted() {
    let up = Upstream::start();
    let clock = FakeClock::new(T0 + 41);
    let ng = start_faked(
        &clock,
        &up,
        "UTC",
        &conf(
            "rate_limit_window_zone $http_x_key zone=z:1m window=4s;",
            "rate_limit_window zone=z limit=10;",
        ),
    );
    for _ in 0..3 {
        assert_eq!(k(&ng).status, 200);
    }
    clock.set(T0 + 1); // ten windows back
    for _ in 0..3 {
        let r = k(&ng);
        assert!(r.status == 200 || r.status == 429, "{}", r.describe());
    }
    let m = get(ng.port, "/metrics").text();
    let line = m
        .lines()
        .find(|l| {
            l.starts_with("rate_limit_window_clock_backwards_total{") && l.contains("zone=\"z\"")
        })
        .unwrap_or_else(|| panic!("no clock_backwards sample:\n{m}"));
    let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(v >= 1.0, "{line}");
    // Time moves forward again: limiting works as before.
    clock.set(T0 + 100);
    assert_eq!(fill(&ng).0, 10);
}

/// A client idle for exactly 2^24 windows (194 days at `window=1s`) comes
/// back to its old window index modulo 2^24. Worker 0's sweep cleared its
/// stale counts meanwhile, so it is a new client, not one still over its
/// limit; the sweep leaves a client of the previous window its counts.
#[test]
fn long_idle_clients_are_swept_not_revived() {
    let up = Upstream::start();
    let clock = FakeClock::new(T0 + 10);
    let ng = start_faked(
        &clock,
        &up,
        "UTC",
        &conf(
            // The smallest zone: two sweep ticks (1,024 slots each) cover it.
            "rate_limit_window_zone $http_x_key zone=z:32k window=1s;",
            "rate_limit_window zone=z limit=3;",
        ),
    );
    let use_up = |key: &str| {
        for _ in 0..3 {
            let r = get_key(ng.port, "/", key);
            assert_eq!(r.status, 200, "{key}: {}", r.describe());
        }
        assert_eq!(get_key(ng.port, "/", key).status, 429, "{key}");
    };
    let m = metrics_text(ng.port);
    let slots = prom_value(&m, "rate_limit_window_slots", &[("zone", "z")])
        .unwrap_or_else(|| panic!("{m}"));
    assert!(slots <= 2_048.0, "{slots} slots: more than two sweep ticks");
    use_up("idle");
    clock.set(T0 + 11);
    use_up("previous");
    // "idle" is two windows old; give the sweep (once a second) three ticks.
    clock.set(T0 + 12);
    std::thread::sleep(std::time::Duration::from_millis(3_500));
    // At the start of its window, the previous window weighs in full.
    assert_eq!(get_key(ng.port, "/", "previous").status, 429);
    // Only "idle" was stale when the sweep ran.
    let m = metrics_text(ng.port);
    assert_eq!(
        prom_value(&m, "rate_limit_window_swept_total", &[("zone", "z")]),
        Some(1.0),
        "{m}"
    );
    clock.set(T0 + 10 + (1 << 24));
    let r = get_key(ng.port, "/", "idle");
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(
        r.header("RateLimit-Remaining"),
        Some("2"),
        "{}",
        r.describe()
    );
}

/// Counts two minutes ahead of the clock (the clock then steps back): the
/// counts hold until their window starts, and Retry-After includes that
/// lead. A client that obeys it is admitted; a second earlier it is not.
#[test]
fn retry_after_a_step_back_includes_the_lead() {
    let up = Upstream::start();
    let clock = FakeClock::new(T0 + 130);
    let ng = start_faked(
        &clock,
        &up,
        "UTC",
        &conf(
            "rate_limit_window_zone $http_x_key zone=z:1m window=1m;",
            "rate_limit_window zone=z limit=3;",
        ),
    );
    assert_eq!(fill(&ng).0, 3);
    clock.set(T0 + 10); // two windows back
    let r = k(&ng);
    // 110 s until the counts' window starts, then full for its 60 s: one
    // more fits 1 ms into the window after.
    assert_eq!(
        (r.status, r.header_num("Retry-After")),
        (429, 171),
        "{}",
        r.describe()
    );
    clock.set(T0 + 10 + 170);
    assert_eq!(k(&ng).status, 429, "a second before Retry-After");
    clock.set(T0 + 10 + 171);
    assert_eq!(k(&ng).status, 200, "at Retry-After");
}
