//! Reliability: exactness under concurrency, worker crashes, reloads under
//! load, clock steps and DST (libfaketime), and hostile input.
//!
//! Short variants (about a minute in all on 2 cores); the long ones are in
//! tests/it/soak.rs (`make soak`). Each test prints its numbers on stderr
//! (`cargo test --test it reliability -- --nocapture` shows them).
use crate::common;
use crate::common::scenarios;

use common::*;
use scenarios::*;
use std::collections::BTreeSet;
use std::time::Duration;

mod flood;

// ---------------------------------------------------------------------------
// Exactness under concurrency
// ---------------------------------------------------------------------------

/// 4 workers, one key, limit 1000: 5000 requests over 40 parallel keep-alive
/// connections admit exactly 1000, and the upstream sees exactly 1000.
#[test]
fn exact_admission_across_four_workers() {
    let up = Upstream::start();
    // Frozen ten minutes into the hour: one window, whatever the run's length.
    let clock = FakeClock::new(FROZEN_MID_HOUR);
    let ng = clock
        .builder()
        .workers(4)
        .upstream_of(&up)
        .start(&one_key_conf(1000));
    let res = hammer_collect(ng.port, 5000, 40, "X-Worker", |_| {
        ("/".into(), vec![("X-Key".into(), b"one".to_vec())])
    });
    let st: Vec<u16> = res.iter().map(|r| r.0).collect();
    let t = tally(&st);
    let workers: BTreeSet<String> = res.iter().filter_map(|r| r.1.clone()).collect();
    let admitted_by: BTreeSet<String> = res
        .iter()
        .filter(|r| r.0 == 200)
        .filter_map(|r| r.1.clone())
        .collect();
    eprintln!(
        "exact: limit 1000, {t:?}, upstream {}, workers serving {workers:?} (admitting {admitted_by:?})",
        up.received()
    );
    assert_eq!(t.get(&200).copied().unwrap_or(0), 1000, "{t:?}");
    assert_eq!(t.get(&429).copied().unwrap_or(0), 4000, "{t:?}");
    assert_eq!(st.len(), 5000);
    assert_eq!(up.received(), 1000);
    assert!(
        workers.len() >= 2,
        "only workers {workers:?} served: reuseport did not spread the load"
    );
    assert!(
        admitted_by.len() >= 2,
        "only {admitted_by:?} admitted: the test did not race workers"
    );
    assert_eq!(current(ng.port, "z", b"one"), 1000);
    assert_eq!(
        metric(
            ng.port,
            "rate_limit_window_requests_total",
            &[("zone", "z"), ("result", "passed")]
        ),
        1000.0
    );
    assert_eq!(
        metric(
            ng.port,
            "rate_limit_window_requests_total",
            &[("zone", "z"), ("result", "rejected")]
        ),
        4000.0
    );
}

// ---------------------------------------------------------------------------
// Worker crashes
// ---------------------------------------------------------------------------

#[test]
fn killed_workers_never_over_admit() {
    // About 8,000 admissions take 1.5-3 s on 2 shared cores, so workers die
    // while the key is being admitted, not only after it is exhausted.
    let run = kill_workers_under_load(8000, 16, Duration::from_secs(3), Duration::from_millis(300));
    assert!(
        run.kills_while_admitting >= 2,
        "only {} kills while admitting: the limit was exhausted too fast to test crashes during admission",
        run.kills_while_admitting
    );
}

// ---------------------------------------------------------------------------
// Reload under load
// ---------------------------------------------------------------------------

#[test]
fn reload_under_load_keeps_counts() {
    let n = reload_under_load(20_000, 16, Duration::from_secs(3));
    assert!(
        n >= 3,
        "only {n} reloads while admitting: the limit was exhausted too fast"
    );
}

/// A zone of `size` keyed by X-Key (or `key`), limit 5 per minute (a
/// slot's recency is known to 1/256 of the window: 234 ms).
fn sized_conf(key: &str, size: &str) -> String {
    conf(
        &format!("rate_limit_window_zone {key} zone=z:{size} window=1m;"),
        "rate_limit_window zone=z limit=5;",
        "",
    )
}

/// (carried, dropped) from the resize notice in `log`.
fn resize_notice(log: &str, from: usize, to: usize) -> (u64, u64) {
    let want = format!("rate_limit_window_zone \"z\" resized from {from} to {to} bytes");
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(&want)).collect();
    assert_eq!(lines.len(), 1, "{want}: {log}");
    assert!(lines[0].contains("[notice]"), "{}", lines[0]);
    let num_before = |what: &str| -> u64 {
        let head = lines[0].split(what).next().unwrap();
        head.rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{}", lines[0]))
    };
    (num_before(" live clients carried"), num_before(" dropped"))
}

/// `zone=z:1m` -> 2m -> 256k -> 32k -> 64k (another key) on reload, while 4
/// connections keep sending: live clients keep their counts (a client at
/// its limit stays limited), growing carries all of them, shrinking keeps
/// the most recently seen that fit, each resize logs one `notice` with the
/// numbers, and a resize that also changes the key logs a `warn`.
#[test]
fn resize_on_reload_carries_counts_under_load() {
    let up = Upstream::start();
    // nginx's clock jumps instead of the test sleeping (libfaketime).
    let clock = ShiftedClock::new();
    let mut ng = clock
        .builder()
        .upstream_of(&up)
        .start(&sized_conf("$http_x_key", "1m"));
    clock.clear_of_boundary(60_000, 25_000);
    let port = ng.port;
    for _ in 0..5 {
        assert_eq!(get_key(port, "/", "hot").status, 200);
    }
    assert_eq!(get_key(port, "/", "hot").status, 429);
    for i in 0..300 {
        assert_eq!(get_key(port, "/", &format!("c{i}")).status, 200);
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The load client's key exists before the reload, whenever its thread
    // gets its first request in.
    assert_eq!(get_key(port, "/", "load").status, 200);
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || load_until(port, 4, "/", &[("X-Key", b"load")], stop, true))
    };
    // Grow: all 302 live clients (hot, c0..c299, load) carried.
    let off = ng.error_log_len();
    ng.reload_with(&sized_conf("$http_x_key", "2m"));
    assert_eq!(
        resize_notice(&ng.error_log_since(off), 1 << 20, 2 << 20),
        (302, 0)
    );
    assert_eq!(
        get_key(port, "/", "hot").status,
        429,
        "a limited client stays limited"
    );
    assert_eq!(current(port, "z", b"c7"), 1);
    // Shrink, all still fit.
    let off = ng.error_log_len();
    ng.reload_with(&sized_conf("$http_x_key", "256k"));
    assert_eq!(
        resize_notice(&ng.error_log_since(off), 2 << 20, 256 << 10),
        (302, 0)
    );
    assert_eq!(get_key(port, "/", "hot").status, 429);
    // Shrink below the live clients: the most recently seen are kept.
    for i in 0..3000 {
        get_key(port, "/", &format!("n{i}"));
    }
    // Seen later than the others by more than a slot's recency step.
    clock.advance(600);
    for _ in 0..2 {
        assert_eq!(get_key(port, "/", "late").status, 200);
    }
    let off = ng.error_log_len();
    ng.reload_with(&sized_conf("$http_x_key", "32k"));
    let (carried, dropped) = resize_notice(&ng.error_log_since(off), 256 << 10, 32 << 10);
    eprintln!("shrink to 32k: {carried} carried, {dropped} dropped of 3303");
    assert_eq!(carried + dropped, 3303);
    assert!(dropped > 0 && carried > 500, "{carried} / {dropped}");
    assert_eq!(
        current(port, "z", b"late"),
        2,
        "the most recent client was kept"
    );
    // A resize that changes the key too: counts start over, said at warn.
    let off = ng.error_log_len();
    ng.reload_with(&sized_conf("$http_x_other", "64k"));
    let log = ng.error_log_since(off);
    assert!(
        log.contains("[warn]")
            && log.contains("resized from 32768 to 65536 bytes: the key changed from \"$http_x_key\" to \"$http_x_other\", so every client's counts start over"),
        "{log}"
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let stats = load.join().unwrap();
    assert!(stats.responses() > 0);
    let log = ng.error_log();
    assert!(
        !log.contains("[alert]") && !log.contains("[emerg]"),
        "{log}"
    );
}

// ---------------------------------------------------------------------------
// Clock (libfaketime)
// ---------------------------------------------------------------------------

fn clock_conf(window: &str, limit: u32) -> String {
    http_conf(&format!(
        "rate_limit_window_zone $http_x_key zone=z:1m window={window};
         server {{
            listen 127.0.0.1:{{{{PORT}}}};
            add_header X-Msec $msec always;
            location / {{ rate_limit_window zone=z limit={limit}; proxy_pass http://{{{{UPSTREAM}}}}; }}
            location = /metrics {{ rate_limit_window_metrics; }}
         }}"
    ))
}

fn msec_secs(r: &Response) -> i64 {
    r.header("X-Msec")
        .unwrap_or_else(|| panic!("no X-Msec: {}", r.describe()))
        .split('.')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The incident, replayed in nginx: TZ=America/New_York, 2026-11-01 during
/// the second pass through 01:xx (EST, after the fall-back), window 1m,
/// limit 600. 550 requests at 01:47:55 EST, 550 at 01:48:05 EST: the second
/// burst sees an estimate of 550*55/60 = 504.2 and admits exactly 96.
#[test]
fn incident_replay_dst_fall_back() {
    if !std::path::Path::new("/usr/share/zoneinfo/America/New_York").exists() {
        eprintln!("tzdata missing: skipped");
        return;
    }
    // 2026-11-01T06:47:52Z = 01:47:52 EST (the second 01:47:52 that day).
    const E0: i64 = 1_793_515_672;
    assert_eq!(rfc3339_utc(E0), "2026-11-01T06:47:52Z");
    let up = Upstream::start();
    let clock = FakeClock::new(E0);
    let ng = start_faked(&clock, &up, "America/New_York", &clock_conf("1m", 600));
    let key = b"198.51.100.9";
    let v = key_json(ng.port, "z", key);
    let r = get(ng.port, "/metrics?zone=z&key=x");
    assert_eq!(msec_secs(&r), E0, "nginx does not see the faked instant");
    assert_eq!(
        strip_zero_fraction(v["window_start_utc"].as_str().unwrap()),
        "2026-11-01T06:47:00Z",
        "{v}"
    );
    assert_eq!(
        strip_zero_fraction(v["window_start_local"].as_str().unwrap()),
        "2026-11-01T01:47:00-05:00",
        "local label must be EST (-05:00), the repeated hour: {v}"
    );

    let burst = |n: usize| {
        let st = hammer(ng.port, "/", &[("X-Key", key)], n, 32);
        tally(&st)
    };
    clock.set(E0 + 3); // 01:47:55 EST
    let first = burst(550);
    clock.set(E0 + 13); // 01:48:05 EST
    let second = burst(550);
    let v = key_json(ng.port, "z", key);
    eprintln!("incident replay: limit 600, first burst at 01:47:55 EST {first:?}, second at 01:48:05 EST {second:?}; {v}");
    assert_eq!(first.get(&200).copied().unwrap_or(0), 550, "{first:?}");
    let admitted = second.get(&200).copied().unwrap_or(0);
    assert!(
        (1..=96).contains(&admitted),
        "second burst admitted {admitted} (must be at most 96)"
    );
    assert_eq!(
        admitted, 96,
        "frozen clock: 550*55/60 = 504.2, so exactly 96 fit under 600"
    );
    assert_eq!(second.get(&429).copied().unwrap_or(0), 454, "{second:?}");
    assert_eq!(up.received(), 550 + 96);
    assert_eq!(
        strip_zero_fraction(v["window_start_local"].as_str().unwrap()),
        "2026-11-01T01:48:00-05:00",
        "{v}"
    );
    assert_eq!(
        (v["current"].as_f64(), v["previous"].as_f64()),
        (Some(96.0), Some(550.0)),
        "{v}"
    );
}

/// 2024-01-01T00:00:00Z.
const T0: i64 = 1_704_067_200;

/// Step the clock back two minutes mid-run: the key's counts are not
/// forgotten, the event is counted and logged once.
#[test]
fn clock_step_back_keeps_counts() {
    let up = Upstream::start();
    let t = T0 + 90; // 30 s into a 1m window
    let clock = FakeClock::new(t);
    let ng = start_faked(&clock, &up, "UTC", &clock_conf("1m", 10));
    let off = ng.error_log_len();
    for i in 0..6 {
        let r = get_key(ng.port, "/", "k");
        assert_eq!(r.status, 200, "{}", r.describe());
        assert_eq!(msec_secs(&r), t);
        assert_eq!(r.header_num("RateLimit-Remaining"), 9 - i);
    }
    // Two minutes back: two windows older than the key's.
    clock.set(t - 120);
    let mut back = 0;
    let mut statuses = vec![];
    for _ in 0..10 {
        let r = get_key(ng.port, "/", "k");
        assert_eq!(msec_secs(&r), t - 120);
        statuses.push(r.status);
        if r.status == 200 {
            back += 1;
        } else {
            assert_eq!(r.status, 429, "{}", r.describe());
        }
    }
    let backwards = metric(
        ng.port,
        "rate_limit_window_clock_backwards_total",
        &[("zone", "z")],
    );
    // Forward again, same window as before the step.
    clock.set(t + 1);
    let fwd = admit_until_rejected(ng.port, "/", b"k", 10);
    let log = ng.error_log_since(off);
    let lines = count_lines(&log, "the clock went backwards");
    eprintln!(
        "clock step back: limit 10, 6 admitted before, {back} while 2 min back ({statuses:?}), {fwd} after \
         returning; clock_backwards_total {backwards}; {lines} log line(s)"
    );
    assert!(
        back <= 4,
        "the step back reset the key: {back} admitted with 4 left"
    );
    assert_eq!(
        6 + back + fwd,
        10,
        "the window admitted {} in all (limit 10)",
        6 + back + fwd
    );
    assert!(
        backwards > 0.0,
        "rate_limit_window_clock_backwards_total = {backwards}"
    );
    assert_eq!(lines, 1, "one warning per episode, not per request:\n{log}");
    assert!(
        log.lines().any(|l| l.contains("the clock went backwards")
            && l.contains("[warn]")
            && l.contains("\"z\"")),
        "{log}"
    );
    assert_eq!(up.received(), 10);
}

// ---------------------------------------------------------------------------
// Hostile input
// ---------------------------------------------------------------------------

fn big_headers(c: String) -> String {
    c.replace(
        "access_log logs/access.log;",
        "access_log logs/access.log; large_client_header_buffers 4 128k;",
    )
}

/// 70 KB keys are hashed whole: limited exactly like short ones, and two
/// that differ only in the last byte are two clients. A thousand distinct
/// 70 KB keys do not grow the workers.
#[test]
fn huge_keys_limited_like_short_keys() {
    let up = Upstream::start();
    let clock = FakeClock::new(FROZEN_MID_HOUR);
    let ng = clock.builder().upstream_of(&up).start(&big_headers(conf(
        "rate_limit_window_zone $http_x_key zone=z:1m window=1h;",
        "rate_limit_window zone=z limit=1000;",
        "rate_limit_window zone=z limit=3;",
    )));
    let a = vec![b'a'; 70 * 1024];
    let mut b = a.clone();
    *b.last_mut().unwrap() = b'b';
    let send = |k: &[u8]| request(ng.port, "GET", "/hot", &[("X-Key", k)]).status;
    let sa: Vec<u16> = (0..3).map(|_| send(&a)).collect();
    let sb: Vec<u16> = (0..4).map(|_| send(&b)).collect();
    let sa2 = send(&a);
    let short: Vec<u16> = (0..4).map(|_| send(b"short")).collect();
    eprintln!("huge keys: limit 3, 70 KB key A {sa:?}+{sa2}, B (last byte differs) {sb:?}, short key {short:?}");
    assert_eq!(sa, [200, 200, 200]);
    assert_eq!(sb, [200, 200, 200, 429], "B is its own client");
    assert_eq!(sa2, 429);
    assert_eq!(short, [200, 200, 200, 429]);
    assert_eq!(current(ng.port, "z", &a), 3);
    assert_eq!(current(ng.port, "z", &b), 3);

    // Distinct huge keys: memory stays flat.
    let warm = |n: usize, base: usize| {
        hammer_with(ng.port, n, 8, move |i| {
            let mut k = vec![b'k'; 70 * 1024];
            let tag = format!("{}-", base + i);
            k[..tag.len()].copy_from_slice(tag.as_bytes());
            ("/".into(), vec![("X-Key".into(), k)])
        })
    };
    let st = warm(200, 0);
    assert_eq!(tally(&st).get(&200), Some(&200));
    let before = worker_rss_kb(&ng);
    let st = warm(1000, 1000);
    let after = worker_rss_kb(&ng);
    let growth = rss_growth(&before, &after);
    eprintln!("huge keys: worker VmRSS before {before:?} KiB, after 1000 distinct 70 KB keys {after:?} KiB (max growth {growth} KiB)");
    assert_eq!(tally(&st).get(&200), Some(&1000), "{:?}", tally(&st));
    assert!(growth < 4096, "a worker grew by {growth} KiB");
    assert_eq!(up.received(), 3 + 3 + 3 + 1200);
}

/// Keys with control bytes, bytes >= 0x7f, quotes, backslashes and
/// %-sequences are limited like any other, and the JSON lookup finds each
/// of them from its percent-encoding.
#[test]
fn odd_byte_keys_limited_and_found_in_metrics() {
    let up = Upstream::start();
    let clock = FakeClock::new(FROZEN_MID_HOUR);
    let ng = clock.builder().upstream_of(&up).start(&conf(
        "rate_limit_window_zone $http_x_key zone=z:1m window=1h;",
        "rate_limit_window zone=z limit=3;",
        "",
    ));
    let keys: Vec<Vec<u8>> = vec![
        (0x01u8..=0x08).chain(*b"ctl").collect(),
        (0x7fu8..=0xff).collect(),
        (0x80u8..=0xfe).collect(), // a prefix of the previous one minus 0x7f
        b"\"quoted\" 'single'".to_vec(),
        b"back\\slash\\".to_vec(),
        b"back\\slash/".to_vec(),
        b"%41%00%zz%".to_vec(),
        b"A".to_vec(), // what %41 would decode to: a different client
        b"a+b c".to_vec(),
        b"a b c".to_vec(),
        b"\xc3\xa9t\xc3\xa9 \xe2\x82\xac".to_vec(),
    ];
    for k in &keys {
        let st: Vec<u16> = (0..4)
            .map(|_| request(ng.port, "GET", "/", &[("X-Key", k)]).status)
            .collect();
        assert_eq!(
            st,
            [200, 200, 200, 429],
            "key {:?}",
            String::from_utf8_lossy(k)
        );
    }
    for k in &keys {
        let v = key_json(ng.port, "z", k);
        assert_eq!(
            v["current"].as_f64(),
            Some(3.0),
            "lookup of {:?} ({}): {v}",
            String::from_utf8_lossy(k),
            url_encode(k)
        );
    }
    // A key never sent reads as zero (not another key's count).
    assert_eq!(
        key_json(ng.port, "z", b"%41%00%zz")["current"].as_f64(),
        Some(0.0)
    );
    eprintln!(
        "odd keys: {} keys, each 3 x 200 then 429 (limit 3), each found by the metrics lookup",
        keys.len()
    );
    assert_eq!(up.received(), 3 * keys.len() as u64);
    let text = metrics_text(ng.port);
    assert_eq!(
        prom_value(
            &text,
            "rate_limit_window_requests_total",
            &[("zone", "z"), ("result", "passed")]
        ),
        Some(3.0 * keys.len() as f64)
    );
    assert_eq!(
        prom_value(
            &text,
            "rate_limit_window_requests_total",
            &[("zone", "z"), ("result", "rejected")]
        ),
        Some(keys.len() as f64)
    );
}

/// Malformed `limit=$variable` values: fail=open passes (an [error] line
/// naming the zone), fail=closed rejects; both count them; an empty value
/// exempts.
#[test]
fn invalid_limit_values_apply_fail_policy() {
    let up = Upstream::start();
    let clock = FakeClock::new(FROZEN_MID_HOUR);
    let ng = clock.builder().upstream_of(&up).start(&http_conf(
        r#"
        map $http_x_case $lim {
            abc "abc"; neg "-5"; exp "1e3"; big "99999999999"; lsp " 5"; tsp "5 "; hex "0x10";
            empty ""; good "5"; default "nothing-matched";
        }
        rate_limit_window_zone $http_x_key zone=zopen:1m window=1h fail=open;
        rate_limit_window_zone $http_x_key zone=zclosed:1m window=1h fail=closed;
        server {
            listen 127.0.0.1:{{PORT}};
            add_header X-RLW-Status $rate_limit_window_status always;
            location /open/ { rate_limit_window zone=zopen limit=$lim; proxy_pass http://{{UPSTREAM}}; }
            location /closed/ { rate_limit_window zone=zclosed limit=$lim; proxy_pass http://{{UPSTREAM}}; }
            location = /metrics { rate_limit_window_metrics; }
        }"#,
    ));
    let off = ng.error_log_len();
    let bad = [
        ("abc", "abc"),
        ("neg", "-5"),
        ("exp", "1e3"),
        ("big", "99999999999"),
        ("lsp", " 5"),
        ("tsp", "5 "),
        ("hex", "0x10"),
    ];
    for (case, value) in bad {
        for _ in 0..2 {
            let r = request(
                ng.port,
                "GET",
                "/open/",
                &[("X-Key", b"v"), ("X-Case", case.as_bytes())],
            );
            // Skipped: exempt from the limit, one name everywhere.
            assert_eq!(
                (r.status, r.header("X-RLW-Status")),
                (200, Some("EXEMPT")),
                "fail=open, limit {value:?}: {}",
                r.describe()
            );
            let r = request(
                ng.port,
                "GET",
                "/closed/",
                &[("X-Key", b"v"), ("X-Case", case.as_bytes())],
            );
            assert_eq!(
                r.status,
                429,
                "fail=closed, limit {value:?}: {}",
                r.describe()
            );
        }
    }
    let n_bad = 2 * bad.len();
    // Empty: exempt in both zones, whatever the fail policy.
    for loc in ["/open/", "/closed/"] {
        let r = request(
            ng.port,
            "GET",
            loc,
            &[("X-Key", b"v"), ("X-Case", b"empty")],
        );
        assert_eq!(
            (r.status, r.header("X-RLW-Status")),
            (200, Some("EXEMPT")),
            "{loc}: {}",
            r.describe()
        );
    }
    // A valid value still limits.
    let good: Vec<u16> = (0..6)
        .map(|_| {
            request(
                ng.port,
                "GET",
                "/closed/",
                &[("X-Key", b"g"), ("X-Case", b"good")],
            )
            .status
        })
        .collect();
    assert_eq!(good, [200, 200, 200, 200, 200, 429]);
    let text = metrics_text(ng.port);
    let inv = |z| {
        prom_value(
            &text,
            "rate_limit_window_invalid_limit_total",
            &[("zone", z)],
        )
    };
    let ex = |z| {
        prom_value(
            &text,
            "rate_limit_window_requests_total",
            &[("zone", z), ("result", "exempt")],
        )
    };
    let log = ng.error_log_since(off);
    eprintln!(
        "invalid limits: {} bad values x2 per zone; invalid_limit_total open {:?} closed {:?}; exempt open {:?} closed {:?}",
        bad.len(), inv("zopen"), inv("zclosed"), ex("zopen"), ex("zclosed")
    );
    eprintln!(
        "invalid limits: fail_closed_total zclosed {:?} (README: zone-full rejections only)",
        prom_value(
            &text,
            "rate_limit_window_fail_closed_total",
            &[("zone", "zclosed")]
        )
    );
    assert_eq!(inv("zopen"), Some(n_bad as f64), "{text}");
    assert_eq!(inv("zclosed"), Some(n_bad as f64), "{text}");
    // fail=open's skipped ones are exempt, counted so, with the empty one.
    assert_eq!(ex("zopen"), Some(n_bad as f64 + 1.0));
    assert_eq!(ex("zclosed"), Some(1.0));
    // Every one counted; the first of an episode logged, once per zone.
    for zone in ["zopen", "zclosed"] {
        let needle = format!("for zone \"{zone}\"");
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("[error]") && l.contains("invalid limit") && l.contains(&needle))
            .collect();
        assert_eq!(lines.len(), 1, "[error] lines {needle}:\n{log}");
        assert!(lines[0].contains("invalid limit \"abc\""), "{log}");
    }
    assert_eq!(up.received(), (n_bad + 2 + 5) as u64);
}

// ---------------------------------------------------------------------------
// A flood of new clients cannot free a client over its limit (issue 36)
// ---------------------------------------------------------------------------
