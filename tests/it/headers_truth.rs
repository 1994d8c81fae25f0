//! The RateLimit headers tell the truth on every refusal and admission
//! (issues 51 and 52), against a real nginx with two workers: an in-flight
//! refusal reads the rate after its admission was undone; a banned
//! client's refusals elsewhere carry the fields; a strict zone's limit is
//! what it can count; on a refusal `t` and `RateLimit-Reset` are the
//! Retry-After; on an admission `t` is when `r` next grows (libfaketime).
use crate::common;

use common::*;
use std::thread;
use std::time::Duration;

/// 2024-01-01T00:00:00Z, a multiple of every window used here.
const T0: i64 = 1_704_067_200;

/// The `r` and `t` of the `RateLimit` member named `name`.
pub(crate) fn member(r: &Response, name: &str) -> (i64, i64) {
    let rl = r
        .header("RateLimit")
        .unwrap_or_else(|| panic!("no RateLimit: {}", r.describe()));
    let m = rl
        .split(", ")
        .find(|m| m.starts_with(&format!("\"{name}\";")))
        .unwrap_or_else(|| panic!("no member {name}: {rl}"));
    let param = |p: &str| -> i64 {
        m.split(';')
            .find_map(|kv| kv.strip_prefix(&format!("{p}=")))
            .unwrap_or_else(|| panic!("no {p} in {m}"))
            .parse()
            .unwrap()
    };
    (param("r"), param("t"))
}

/// `limit=100 in_flight=1`: a second request while one is in flight is
/// refused with the rate's Remaining after its admission was undone (99:
/// only the one in flight counted).
#[test]
fn an_in_flight_refusal_reads_the_rate_after_undo() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&proxy_conf(
        "rate_limit_window_zone $http_x_key zone=f:1m window=1h;",
        "",
        "",
        "rate_limit_window zone=f limit=100 in_flight=1;",
    ));
    clear_of_boundary(3_600_000, 20_000);
    let port = ng.port;
    let (slow, r) = refused_while_one_is_held(port, &up);
    assert_eq!(r.header_num("RateLimit-Limit"), 100, "{}", r.describe());
    assert_eq!(r.header_num("RateLimit-Remaining"), 99, "{}", r.describe());
    let s = slow.join().unwrap();
    assert_eq!(s.header_num("RateLimit-Remaining"), 99, "{}", s.describe());
}

/// A client banned in `/ban` (zone b) is refused in `/other` (zone b too)
/// by the ban: that refusal carries the RateLimit fields of `/other`'s
/// limit, Reset equal to its Retry-After.
#[test]
fn a_banned_clients_refusals_elsewhere_carry_the_fields() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&proxy_conf(
        "rate_limit_window_zone $http_x_key zone=b:1m window=1m;",
        "",
        "location /other { rate_limit_window zone=b limit=5; proxy_pass http://{{UPSTREAM}}; }",
        "rate_limit_window zone=b limit=2 ban=1h;",
    ));
    clear_of_boundary(60_000, 10_000);
    let st: Vec<u16> = (0..3).map(|_| get_key(ng.port, "/", "v").status).collect();
    assert_eq!(st, [200, 200, 429]);
    let r = get_key(ng.port, "/other", "v");
    assert_eq!(r.status, 429, "{}", r.describe());
    let retry = r.header_num("Retry-After");
    assert!((3_590..=3_600).contains(&retry), "{}", r.describe());
    assert_eq!(r.header_num("RateLimit-Limit"), 5, "{}", r.describe());
    assert_eq!(r.header_num("RateLimit-Remaining"), 0, "{}", r.describe());
    assert_eq!(r.header_num("RateLimit-Reset"), retry, "{}", r.describe());
}

/// `mode=strict limit=100000`: refused at `nginx -t` with an `[emerg]`,
/// whether the zone is declared before or after the limit.
#[test]
fn a_strict_limit_above_what_it_counts_is_refused() {
    let zone = "rate_limit_window_zone $http_x_key zone=s:1m window=1m mode=strict;";
    let limit = "rate_limit_window zone=s limit=100000;";
    for (before, after) in [(zone, ""), ("", zone)] {
        let conf = http_conf(&format!(
            "{before}
            server {{
                listen 127.0.0.1:{{{{PORT}}}};
                location / {{ {limit} return 204; }}
            }}
            {after}"
        ));
        let (ok, err) = test_config(&conf);
        assert!(!ok, "{err}");
        let want = "limit=100000 is above what the mode=strict zone \"s\" can count (65535)";
        assert!(err.contains("[emerg]") && err.contains(want), "{err}");
    }
    // 65535 is what it counts: accepted.
    let conf = http_conf(&format!(
        "{zone}
        server {{
            listen 127.0.0.1:{{{{PORT}}}};
            location / {{ rate_limit_window zone=s limit=65535; return 204; }}
        }}"
    ));
    let (ok, err) = test_config(&conf);
    assert!(ok, "{err}");
}

/// A strict zone's limit from a variable above 65,535 reads as the 65,535
/// it enforces.
#[test]
fn a_strict_limit_from_a_variable_reads_as_what_it_counts() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&proxy_conf(
        "rate_limit_window_zone $http_x_key zone=s:1m window=1h mode=strict;",
        "",
        "",
        "rate_limit_window zone=s limit=$http_x_limit;",
    ));
    let r = request(
        ng.port,
        "GET",
        "/",
        &[("X-Key", b"k"), ("X-Limit", b"100000")],
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(r.header_num("RateLimit-Limit"), 65_535, "{}", r.describe());
    assert_eq!(
        r.header_num("RateLimit-Remaining"),
        65_534,
        "{}",
        r.describe()
    );
}

/// Zone `z` (window 60 s, limit 3) under `rate_limit_window_headers ietf`
/// and zone `o` (limit 3) with the default headers, on a frozen clock.
fn faked(clock: &FakeClock, up: &Upstream) -> Nginx {
    start_faked(
        clock,
        up,
        "UTC",
        &proxy_conf(
            "rate_limit_window_zone $http_x_key zone=z:1m window=60s;
             rate_limit_window_zone $http_x_key zone=o:1m window=60s;",
            "",
            "location /on { rate_limit_window zone=o limit=3; proxy_pass http://{{UPSTREAM}}; }",
            "rate_limit_window zone=z limit=3; rate_limit_window_headers ietf;",
        ),
    )
}

/// On a refusal, `t` (ietf) and `RateLimit-Reset` (on) are the moment of
/// Retry-After; on an admission, `t` is when `r` next grows: a request
/// `t - 1` s later sees no more room, one `t` s later does.
#[test]
fn t_is_retry_after_on_a_refusal_and_when_r_grows_on_an_admission() {
    let up = Upstream::start();
    let clock = FakeClock::new(T0 + 30);
    let ng = faked(&clock, &up);
    let at = |s: i64| {
        clock.set(T0 + s);
        get_key(ng.port, "/", "k")
    };
    // Three in the window at 30 s: the third has r=0; r grows 1 ms into
    // the next window (floor(3 x 59.999/60) = 2): t = ceil(30.001) = 31.
    at(30);
    at(30);
    let r = at(30);
    assert_eq!(member(&r, "z"), (0, 31), "{}", r.describe());
    // A refusal: t is its Retry-After.
    let rej = at(30);
    assert_eq!(rej.status, 429, "{}", rej.describe());
    let retry = rej.header_num("Retry-After");
    assert_eq!(member(&rej, "z"), (0, retry), "{}", rej.describe());
    assert_eq!(retry, 31);
    // A second before t: still no room; at t, room.
    assert_eq!(at(60).status, 429);
    let r = at(61);
    assert_eq!(r.status, 200, "{}", r.describe());
    // At 61 s: floor(3 x 59/60) = 2 and 1 counted: r=0. It grows once
    // floor(3 x (60-e)/60) <= 1, e > 20 s: 81 s, t = 20.
    assert_eq!(member(&r, "z"), (0, 20), "{}", r.describe());
    assert_eq!(at(80).status, 429);
    let r = at(81);
    assert_eq!(r.status, 200, "{}", r.describe());
    // The default headers: a refusal's RateLimit-Reset is its Retry-After.
    clock.set(T0 + 150);
    for _ in 0..3 {
        assert_eq!(get_key(ng.port, "/on", "o").status, 200);
    }
    let rej = get_key(ng.port, "/on", "o");
    assert_eq!(rej.status, 429, "{}", rej.describe());
    assert_eq!(
        rej.header_num("RateLimit-Reset"),
        rej.header_num("Retry-After"),
        "{}",
        rej.describe()
    );
}

/// A `charge=` zone's quota is not counted in requests: its
/// `RateLimit-Policy` member says so (`rlw-unit="charge"`); a zone without
/// `charge=` keeps the draft's default unit.
#[test]
fn a_charge_zones_policy_names_its_unit() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&proxy_conf(
        "rate_limit_window_zone $http_x_key zone=tok:1m window=1m;
         rate_limit_window_zone $http_x_key zone=req:1m window=1m;",
        "",
        "rate_limit_window_headers ietf;",
        "rate_limit_window zone=tok limit=1000 charge=$upstream_http_x_tokens;
         rate_limit_window zone=req limit=10;",
    ));
    let r = get_key(ng.port, "/", "k");
    assert_eq!(r.status, 200, "{}", r.describe());
    let policy = r.header("RateLimit-Policy").unwrap_or_default();
    assert!(
        policy.contains("\"tok\";q=1000;w=60;rlw-unit=\"charge\""),
        "{policy}"
    );
    assert!(
        policy.contains("\"req\";q=10;w=60") && !policy.contains("\"req\";q=10;w=60;"),
        "{policy}"
    );
}

/// `limit=100 in_flight=1` under `ietf`: a second request while one is in
/// flight is refused, and its `t` is when `r` next grows from what is
/// counted after its admission was undone, not the admission's own (which
/// was the window's end): ten requests in the window before (in a location
/// of the same zone without `in_flight=`: a request's place is given back
/// when nginx frees it, which a loaded machine may do after the client
/// sent the next one), the clock 5 s into this one: r = 100 - floor(10 x
/// 55/60 + 1) = 90, and r grows once 10 x (1 - e/60) < 9, 6.001 s into the
/// window: t = ceil(1.001) = 2.
#[test]
fn an_in_flight_refusals_t_is_after_undo() {
    let up = Upstream::start();
    let clock = FakeClock::new(T0 + 30);
    let ng = start_faked(
        &clock,
        &up,
        "UTC",
        &proxy_conf(
            "rate_limit_window_zone $http_x_key zone=f:1m window=60s;",
            "",
            "location /prime { rate_limit_window zone=f limit=100; proxy_pass http://{{UPSTREAM}}; }",
            "rate_limit_window zone=f limit=100 in_flight=1; rate_limit_window_headers ietf;",
        ),
    );
    for _ in 0..10 {
        assert_eq!(get_key(ng.port, "/prime", "k").status, 200);
    }
    clock.set(T0 + 65);
    let port = ng.port;
    let (slow, r) = refused_while_one_is_held(port, &up);
    assert_eq!(member(&r, "f"), (90, 2), "{}", r.describe());
    let s = slow.join().unwrap();
    assert_eq!(s.status, 200, "{}", s.describe());
    assert_eq!(member(&s, "f"), (90, 2), "{}", s.describe());
}

/// The parameters of the `name` member of header `h` (`RateLimit` or
/// `RateLimit-Policy`), as written.
fn params(r: &Response, h: &str, name: &str) -> String {
    let v = r
        .header(h)
        .unwrap_or_else(|| panic!("no {h}: {}", r.describe()));
    v.split(", ")
        .find_map(|m| m.strip_prefix(&format!("\"{name}\";")))
        .unwrap_or_else(|| panic!("no member {name} in {h}: {v}"))
        .to_string()
}

/// `in_flight=` under `ietf`: its `RateLimit-Policy` member counts
/// concurrent requests (the draft's quota unit `qu="concurrent-requests"`,
/// no window), beside the rate's; `RateLimit` says the places the client
/// has left; a refusal by it says `r=0` and `t` its Retry-After. A line
/// with `in_flight=` alone has that member alone.
#[test]
fn an_in_flight_limits_policy_counts_concurrent_requests() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&proxy_conf(
        "rate_limit_window_zone $http_x_key zone=f:1m window=1h;
         rate_limit_window_zone $http_x_key zone=g:1m window=1h;",
        "",
        "location /alone {
            rate_limit_window zone=g in_flight=1;
            rate_limit_window_headers ietf;
            proxy_pass http://{{UPSTREAM}};
        }",
        "rate_limit_window zone=f limit=100 in_flight=2; rate_limit_window_headers ietf;",
    ));
    clear_of_boundary(3_600_000, 20_000);
    let port = ng.port;
    let slow: Vec<_> = (0..2)
        .map(|_| {
            thread::spawn(move || {
                request(
                    port,
                    "GET",
                    "/?sleep=1500",
                    &[("X-Key", b"k"), ("X-Client", b"c")],
                )
            })
        })
        .collect();
    assert!(wait_for(Duration::from_secs(5), || up.concurrent("c") == 2));
    let rej = get_key(port, "/", "k");
    assert_eq!(rej.status, 429, "{}", rej.describe());
    assert_eq!(rej.header_num("Retry-After"), 1, "{}", rej.describe());
    let pol = "q=2;qu=\"concurrent-requests\"";
    assert_eq!(params(&rej, "RateLimit-Policy", "f-in-flight"), pol);
    assert_eq!(params(&rej, "RateLimit-Policy", "f"), "q=100;w=3600");
    assert_eq!(params(&rej, "RateLimit", "f-in-flight"), "r=0;t=1");
    for h in slow {
        assert_eq!(h.join().unwrap().status, 200);
    }
    // One in flight now, this one: one place left (once nginx has freed
    // the two slow requests, which a loaded machine may do after their
    // answers reached the client).
    let mut last = None;
    assert!(
        wait_for(Duration::from_secs(5), || {
            let ok = get_key(port, "/", "k");
            let done = ok.status == 200 && params(&ok, "RateLimit", "f-in-flight") == "r=1";
            last = Some(ok);
            done
        }),
        "{}",
        last.map(|r| r.describe()).unwrap_or_default()
    );
    let ok = last.unwrap();
    assert_eq!(params(&ok, "RateLimit-Policy", "f-in-flight"), pol);
    // `in_flight=` alone.
    let a = get_key(port, "/alone", "k");
    assert_eq!(a.status, 200, "{}", a.describe());
    let only = a.header("RateLimit-Policy").unwrap_or_default();
    assert_eq!(only, "\"g-in-flight\";q=1;qu=\"concurrent-requests\"");
    assert_eq!(a.header("RateLimit"), Some("\"g-in-flight\";r=0"));
}

/// Client `k`'s request held 1.5 s by the upstream, then another of `k`
/// refused by `in_flight=1` (asserted 429): the held one's thread and the
/// refusal.
fn refused_while_one_is_held(port: u16, up: &Upstream) -> (thread::JoinHandle<Response>, Response) {
    let slow = thread::spawn(move || {
        request(
            port,
            "GET",
            "/?sleep=1500",
            &[("X-Key", b"k"), ("X-Client", b"c")],
        )
    });
    assert!(wait_for(Duration::from_secs(5), || up.concurrent("c") == 1));
    let r = get_key(port, "/", "k");
    assert_eq!(r.status, 429, "{}", r.describe());
    (slow, r)
}
