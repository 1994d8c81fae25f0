//! `charge=$variable`: a request is admitted by its `cost=` and, once its
//! response is done, counts what the variable says (here the tokens an
//! upstream reports in `X-Tokens`), against real nginx (two workers), a
//! real upstream, and a faked clock (libfaketime) instead of waits.
use crate::common;

use std::time::Duration;

use common::status_upstream::StatusUpstream;
use common::*;

/// A minute-window boundary (2024-01-01T00:00:00Z), Unix seconds.
const T0: i64 = 1_704_067_200;

/// A server limiting by `X-Key` in zone `tok` (`window=`, `zone_params`)
/// with `limit` on `location /`, which proxies to `up` and hides `X-Tokens`.
fn conf(zone_params: &str, limit: &str) -> String {
    http_conf(
        &r#"rate_limit_window_zone $http_x_key zone=tok:1m ZONE;
        server {
            listen 127.0.0.1:{{PORT}};
            location / {
                rate_limit_window zone=tok LIMIT;
                proxy_hide_header X-Tokens;
                proxy_pass http://{{UPSTREAM}};
            }
            location = /metrics { rate_limit_window_metrics; }
        }"#
        .replace("ZONE", zone_params)
        .replace("LIMIT", limit),
    )
}

/// nginx with `conf`, its clock frozen at `clock` (libfaketime).
fn start(clock: &FakeClock, up: &StatusUpstream, conf: &str) -> Nginx {
    let lib = libfaketime()
        .expect("libfaketime not installed: `make test` installs the faketime package");
    Nginx::builder()
        .upstream(&up.addr())
        .env("LD_PRELOAD", lib.to_str().unwrap())
        .env("FAKETIME_TIMESTAMP_FILE", clock.path().to_str().unwrap())
        .env("FAKETIME_FMT", "%s")
        .env("FAKETIME_NO_CACHE", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("TZ", "UTC")
        .start(conf)
}

/// The key's count in the current window, once it reads `want` (the
/// settlement runs as nginx frees the request, just after the response).
fn settled(port: u16, key: &str, want: u64) -> u64 {
    let read = || {
        key_json(port, "tok", key.as_bytes())["current"]
            .as_u64()
            .unwrap()
    };
    wait_for(Duration::from_secs(5), || read() == want);
    read()
}

/// The zone's invalid-charge counter.
fn invalid_charges(port: u16) -> f64 {
    let text = get(port, "/metrics").text();
    prom_value(
        &text,
        "rate_limit_window_invalid_charge_total",
        &[("zone", "tok")],
    )
    .unwrap_or_else(|| panic!("no invalid_charge_total:\n{text}"))
}

#[test]
fn a_token_budget_admits_by_cost_and_counts_the_charge() {
    let up = StatusUpstream::start();
    let clock = FakeClock::new(T0 + 1);
    let ng = start(
        &clock,
        &up,
        &conf("window=1m", "limit=1000 charge=$upstream_http_x_tokens"),
    );
    // Admitted by its cost (1), then counts the 400 tokens it used; the
    // client never sees the upstream's header.
    let r = get_key(ng.port, "/?tokens=400", "a");
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(r.header("X-Tokens"), None);
    assert_eq!(r.header_num("RateLimit-Remaining"), 999, "arrival: cost 1");
    assert_eq!(settled(ng.port, "a", 400), 400);
    // The headers of the next call see the charge.
    let r = get_key(ng.port, "/?tokens=500", "a");
    assert_eq!(r.header_num("RateLimit-Remaining"), 599);
    assert_eq!(settled(ng.port, "a", 900), 900);
    // 900 + 1 fits: admitted, and it overruns the budget by its charge.
    let r = get_key(ng.port, "/?tokens=300", "a");
    assert_eq!(r.status, 200);
    assert_eq!(r.header_num("RateLimit-Remaining"), 99);
    assert_eq!(settled(ng.port, "a", 1200), 1200);
    // Over budget. In the next window the 1,200 weigh 1200 * (60 - e) / 60,
    // under 1,000 from e = 10.001 s: at T0 + 70.001 s, 69.001 s from now.
    let r = get_key(ng.port, "/?tokens=1", "a");
    assert_eq!(r.status, 429);
    assert_eq!(r.header_num("Retry-After"), 70);
    // A second too early is still refused, on time is admitted.
    clock.set(T0 + 70);
    let r = get_key(ng.port, "/?tokens=1", "a");
    assert_eq!(r.status, 429, "{}", r.describe());
    assert_eq!(r.header_num("Retry-After"), 1);
    clock.set(T0 + 71);
    let r = get_key(ng.port, "/?tokens=1", "a");
    assert_eq!(r.status, 200, "{}", r.describe());
    // Another key is untouched; rejected calls never reached the upstream.
    assert_eq!(get_key(ng.port, "/?tokens=7", "b").status, 200);
    assert_eq!(up.received_total(), 5);
    assert_eq!(invalid_charges(ng.port), 0.0);
}

#[test]
fn a_charge_below_the_cost_gives_back_and_cost_still_gates_arrival() {
    let up = StatusUpstream::start();
    let clock = FakeClock::new(T0 + 1);
    let ng = start(
        &clock,
        &up,
        &conf(
            "window=1m",
            "limit=100 cost=40 charge=$upstream_http_x_tokens",
        ),
    );
    // Reserved 40 at arrival, charged 5: 35 given back.
    assert_eq!(get_key(ng.port, "/?tokens=5", "k").status, 200);
    assert_eq!(settled(ng.port, "k", 5), 5);
    // A charge of 0 gives everything back.
    assert_eq!(get_key(ng.port, "/?tokens=0", "k").status, 200);
    assert_eq!(settled(ng.port, "k", 5), 5);
    // 5 + 40 + 40 fit the cost check, 5 + 80 + 40 does not: 2 more, as
    // long as each is still being charged 40.
    assert_eq!(get_key(ng.port, "/?tokens=40", "k").status, 200);
    assert_eq!(get_key(ng.port, "/?tokens=40", "k").status, 200);
    assert_eq!(settled(ng.port, "k", 85), 85);
    let r = get_key(ng.port, "/?tokens=1", "k");
    assert_eq!(r.status, 429, "{}", r.describe());
}

#[test]
fn count_status_gives_back_uncounted_statuses_and_charges_counted_ones() {
    let up = StatusUpstream::start();
    let clock = FakeClock::new(T0 + 1);
    let ng = start(
        &clock,
        &up,
        &conf(
            "window=1m",
            "limit=1000 count_status=2xx charge=$upstream_http_x_tokens",
        ),
    );
    // A failed call reports tokens but is not counted at all.
    let r = get_key(ng.port, "/status/500?tokens=700", "k");
    assert_eq!(r.status, 500);
    assert_eq!(settled(ng.port, "k", 0), 0);
    // Nor a 401 without a charge (no warning either: it is not used).
    assert_eq!(get_key(ng.port, "/status/401", "k").status, 401);
    assert_eq!(settled(ng.port, "k", 0), 0);
    // A successful one is charged.
    assert_eq!(get_key(ng.port, "/?tokens=250", "k").status, 200);
    assert_eq!(settled(ng.port, "k", 250), 250);
    assert_eq!(get_key(ng.port, "/status/503?tokens=900", "k").status, 503);
    assert_eq!(get_key(ng.port, "/?tokens=749", "k").status, 200);
    assert_eq!(settled(ng.port, "k", 999), 999);
    assert_eq!(invalid_charges(ng.port), 0.0);
    assert_eq!(count_lines(&ng.error_log(), "is not a count"), 0);
}

#[test]
fn an_invalid_charge_keeps_the_cost_warns_once_and_is_counted() {
    let up = StatusUpstream::start();
    let clock = FakeClock::new(T0 + 1);
    let ng = start(
        &clock,
        &up,
        &conf("window=1m", "limit=1000 charge=$upstream_http_x_tokens"),
    );
    // Not an integer, no header at all, a negative number: cost=1 each.
    // The charge is read in the LOG phase, after the client has its
    // response, and the next request may go to the other worker: the first
    // must have been counted before the others are sent, so that it is the
    // one that warns.
    assert_eq!(get_key(ng.port, "/?tokens=lots", "k").status, 200);
    assert!(wait_for(Duration::from_secs(5), || invalid_charges(
        ng.port
    ) == 1.0));
    for path in ["/", "/?tokens=-5", "/?tokens=12.5"] {
        assert_eq!(get_key(ng.port, path, "k").status, 200, "{path}");
    }
    assert_eq!(settled(ng.port, "k", 4), 4);
    assert!(wait_for(Duration::from_secs(5), || invalid_charges(
        ng.port
    ) == 4.0));
    let log = ng.error_log();
    assert_eq!(count_lines(&log, "is not a count"), 1, "{log}");
    assert!(
        log.contains("[warn]")
            && log.contains("charge \"lots\" is not a count")
            && log.contains("counting cost=1 instead"),
        "{log}"
    );
    // A valid charge still counts; a new episode a minute later warns again.
    assert_eq!(get_key(ng.port, "/?tokens=10", "k").status, 200);
    assert_eq!(settled(ng.port, "k", 14), 14);
    clock.set(T0 + 1 + 61);
    assert_eq!(get_key(ng.port, "/?tokens=x", "k").status, 200);
    assert!(wait_for(Duration::from_secs(5), || count_lines(
        &ng.error_log(),
        "is not a count"
    ) == 2));
    assert_eq!(invalid_charges(ng.port), 5.0);
}

#[test]
fn strict_zones_and_fixed_charges_are_refused_at_nginx_t() {
    let limit = "limit=10 charge=$upstream_http_x_tokens";
    let (ok, out) = test_config(&conf("window=1m mode=strict", limit));
    assert!(!ok, "{out}");
    assert!(
        out.contains("\"charge=\" cannot be used with zone \"tok\" of mode=strict"),
        "{out}"
    );
    // The zone declared after the limit that charges it: refused too, at
    // the limit's line.
    let late = http_conf(
        r#"server {
            listen 127.0.0.1:{{PORT}};
            location / {
                rate_limit_window zone=late limit=10 charge=$upstream_http_x_tokens;
                proxy_pass http://{{UPSTREAM}};
            }
        }
        rate_limit_window_zone $http_x_key zone=late:1m mode=strict;"#,
    );
    let (ok, out) = test_config(&late);
    assert!(!ok, "{out}");
    assert!(out.contains("of mode=strict"), "{out}");
    assert!(out.contains("nginx.conf:"), "{out}");
    // A fixed charge is a cost.
    let (ok, out) = test_config(&conf("window=1m", "limit=10 charge=5"));
    assert!(!ok, "{out}");
    assert!(out.contains("a fixed count is \"cost=\""), "{out}");
    // The default mode takes it.
    let (ok, out) = test_config(&conf("window=1m", limit));
    assert!(ok, "{out}");
}

/// Sum of every gateway's count in the Redis hashes of zone `tok`.
fn redis_total(port: u16) -> i64 {
    let p = port.to_string();
    let cli = |args: &[&str]| {
        let mut all = vec!["-p", &p];
        all.extend_from_slice(args);
        common::redis_servers::cli(&all)
    };
    cli(&["--scan", "--pattern", "rlw:{tok:*"])
        .lines()
        .filter(|k| !k.is_empty() && cli(&["TYPE", k]).trim() == "hash")
        .map(|k| {
            cli(&["HVALS", k])
                .lines()
                .map(|v| v.trim().parse::<i64>().unwrap())
                .sum::<i64>()
        })
        .sum()
}

/// Two gateways (two workers each) share a `redis=` zone: a charge settled
/// on one reaches the other through the normal sync (the threshold of
/// docs/gateways.md counts charges: 600 and 350 are over 1000 / 4), and the
/// store holds each gateway's charged count.
#[test]
fn charges_reach_the_other_gateway_through_redis() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _redis = common::redis_servers::RedisProc::spawn(
        &common::redis_servers::server_bin(),
        dir.path(),
        "redis",
        &format!("bind 127.0.0.1\nport {port}\nsave \"\"\nappendonly no\n"),
        port,
    );
    let up = StatusUpstream::start();
    let zone =
        format!("window=1h redis=127.0.0.1:{port} sync=100ms secret=charge-test-secret-0123456");
    let c = conf(&zone, "limit=1000 charge=$upstream_http_x_tokens");
    let a = Nginx::builder().upstream(&up.addr()).start(&c);
    let b = Nginx::builder().upstream(&up.addr()).start(&c);
    // Counts of one hour: a boundary would split them.
    clear_of_boundary(3_600_000, 120_000);
    let count = |port: u16| key_json(port, "tok", b"k")["current"].as_u64().unwrap();
    let both = |want: u64| {
        wait_for(Duration::from_secs(5), || {
            count(a.port) == want && count(b.port) == want
        })
    };
    // A client's count reaches a gateway once it is active there.
    assert_eq!(get_key(a.port, "/?tokens=600", "k").status, 200);
    assert!(wait_for(Duration::from_secs(5), || count(a.port) == 600));
    assert_eq!(get_key(b.port, "/?tokens=350", "k").status, 200);
    assert!(both(950), "a {} b {}", count(a.port), count(b.port));
    // 950 + 1 fits: let in on either gateway, then the budget is spent.
    assert_eq!(get_key(a.port, "/?tokens=100", "k").status, 200);
    assert!(both(1050), "a {} b {}", count(a.port), count(b.port));
    for port in [a.port, b.port] {
        let r = get_key(port, "/?tokens=1", "k");
        assert_eq!(r.status, 429, "{}", r.describe());
    }
    assert!(wait_for(Duration::from_secs(5), || redis_total(port) == 1050));
    assert_eq!(up.received_total(), 3);
}

/// Calls in flight are each let in by their cost: the budget is overrun by
/// at most their charges (docs/charge.md), and then refuses until it allows.
#[test]
fn concurrent_calls_overrun_by_at_most_their_own_charges() {
    let up = StatusUpstream::start();
    let clock = FakeClock::new(T0 + 1);
    let ng = start(
        &clock,
        &up,
        &conf("window=1m", "limit=1000 charge=$upstream_http_x_tokens"),
    );
    // 900 used: one more token fits, so every call that arrives now fits.
    assert_eq!(get_key(ng.port, "/?tokens=900", "k").status, 200);
    assert_eq!(settled(ng.port, "k", 900), 900);
    // Four calls in flight together (the upstream answers after 500 ms):
    // at arrival each counts 1, 904 at most, so all four are let in.
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let port = ng.port;
            std::thread::spawn(move || get_key(port, "/?tokens=300&sleep=500", "k").status)
        })
        .collect();
    let statuses: Vec<u16> = calls.into_iter().map(|c| c.join().unwrap()).collect();
    assert_eq!(statuses, [200; 4]);
    // 900 + 4 x 300: over the budget by 1,100, within the four charges.
    assert_eq!(settled(ng.port, "k", 2100), 2100);
    assert_eq!(get_key(ng.port, "/?tokens=1", "k").status, 429);
}

/// `$rate_limit_window_charge` in the access log: what each request
/// counted once settled (its charge, its cost when the charge was invalid,
/// 0 when count_status= gave it back); empty on a rejected request.
#[test]
fn the_charge_variable_logs_what_each_request_counted() {
    let up = StatusUpstream::start();
    let clock = FakeClock::new(T0 + 1);
    let c = http_conf(
        r#"log_format charge "$http_x_key $status charge=$rate_limit_window_charge";
        rate_limit_window_zone $http_x_key zone=tok:1m window=1m;
        server {
            listen 127.0.0.1:{{PORT}};
            location / {
                access_log logs/charge.log charge;
                rate_limit_window zone=tok limit=100 cost=2 count_status=2xx charge=$upstream_http_x_tokens;
                proxy_pass http://{{UPSTREAM}};
            }
            location = /metrics { rate_limit_window_metrics; }
        }"#,
    );
    let ng = start(&clock, &up, &c);
    for path in [
        "/?tokens=40",
        "/?tokens=bad",
        "/status/500?tokens=9",
        "/?tokens=57",
    ] {
        get_key(ng.port, path, "k");
    }
    // 40 + 2 + 0 + 57 = 99: the next call (cost 2) does not fit.
    assert_eq!(settled(ng.port, "k", 99), 99);
    assert_eq!(get_key(ng.port, "/?tokens=1", "k").status, 429);
    let log_path = ng.prefix().join("logs/charge.log");
    let read = || std::fs::read_to_string(&log_path).unwrap_or_default();
    wait_for(Duration::from_secs(5), || read().lines().count() == 5);
    // Each worker writes its own lines after its response is sent: with
    // two workers the order of lines is not the order of requests.
    let mut lines: Vec<String> = read().lines().map(String::from).collect();
    lines.sort();
    let mut want = [
        "k 200 charge=40",
        "k 200 charge=2",
        "k 500 charge=0",
        "k 200 charge=57",
        "k 429 charge=",
    ];
    want.sort();
    assert_eq!(lines, want);
}

/// A call that ends in the next window is charged in the window it was
/// counted in, now the previous one (still weighed by the estimate).
#[test]
fn a_call_across_a_window_boundary_is_charged_in_its_arrival_window() {
    let up = StatusUpstream::start();
    let clock = FakeClock::new(T0 + 59);
    let ng = start(
        &clock,
        &up,
        &conf("window=1m", "limit=1000 charge=$upstream_http_x_tokens"),
    );
    let port = ng.port;
    let call = std::thread::spawn(move || get_key(port, "/?tokens=500&sleep=800", "k").status);
    // The call is in flight (counted 1 in the window [T0, T0 + 60)).
    assert!(wait_for(Duration::from_secs(5), || up.received_total() == 1));
    clock.set(T0 + 61);
    // Another call of the client moves it into the next window.
    assert_eq!(get_key(port, "/?tokens=3", "k").status, 200);
    assert_eq!(call.join().unwrap(), 200);
    let read = || {
        let v = key_json(port, "tok", b"k");
        (
            v["previous"].as_u64().unwrap(),
            v["current"].as_u64().unwrap(),
        )
    };
    wait_for(Duration::from_secs(5), || read() == (500, 3));
    assert_eq!(read(), (500, 3));
}

/// `delay=`: a request held until its cost fits is charged once admitted,
/// in the window it was admitted in (real time: nginx's timers hold it).
#[test]
fn a_held_request_is_charged_once_admitted() {
    let up = StatusUpstream::start();
    let ng = Nginx::builder().upstream(&up.addr()).start(&conf(
        "window=2s",
        "limit=10 delay=3s charge=$upstream_http_x_tokens",
    ));
    sleep_until_window_offset(2_000, 100);
    let boundary = (now_ms() / 2_000 + 1) * 2_000;
    let r = get_key(ng.port, "/?tokens=10", "d");
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(settled(ng.port, "d", 10), 10);
    // At its limit: held until the next window weighs the 10 below 10,
    // then admitted and charged its 4 tokens there.
    let r = get_key(ng.port, "/?tokens=4", "d");
    let admitted_at = now_ms();
    assert_eq!(r.status, 200, "{}", r.describe());
    assert!(
        admitted_at >= boundary,
        "admitted before the window moved on"
    );
    assert_eq!(settled(ng.port, "d", 4), 4);
    assert_eq!(up.received_total(), 2);
    assert_eq!(invalid_charges(ng.port), 0.0);
}
