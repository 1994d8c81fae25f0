//! Floods of new clients: memory stays bounded and evictions visible under
//! `fail=open`, a known key stays limited under `fail=closed`, and a flood
//! never frees a client over its limit (both modes).
use super::*;

/// Distinct clients in the short floods: six times the 1,264 slots of their
/// 32k zone (`flood_common` checks at least four). The 120,000-client
/// floods are in tests/it/soak.rs.
const FLOOD_CLIENTS: usize = 8_000;

#[test]
fn flood_fail_open_evicts_visibly_and_stays_bounded() {
    flood_fail_open(FLOOD_CLIENTS);
}

#[test]
fn flood_fail_closed_keeps_hot_key_limited() {
    flood_fail_closed(FLOOD_CLIENTS);
}

/// Floods `port` with new X-Keys (wrk runs of 2 s, bench/keys.lua, each
/// run starting where the last stopped) until `enough()` holds, 1M keys were
/// sent or 60 s passed; returns the requests completed.
fn flood_new_keys(port: u16, enough: impl Fn() -> bool) -> u64 {
    // wrk saturates both cores of a small machine: one flood at a time, so
    // that parallel test threads do not halve each one's rate.
    static ONE_FLOOD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_FLOOD.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = std::time::Instant::now();
    let mut sent = 0;
    while sent < 1_000_000 && t0.elapsed() < Duration::from_secs(60) && !enough() {
        sent += wrk_new_keys(port, 2, sent);
    }
    sent
}

/// Runs wrk for `secs` s against `port`, every request with a new X-Key
/// (bench/keys.lua, 1M distinct keys, from `offset`); returns requests
/// completed.
fn wrk_new_keys(port: u16, secs: u32, offset: u64) -> u64 {
    let script = manifest_dir().join("bench/keys.lua");
    let out = std::process::Command::new("wrk")
        .args(["-t2", "-c32", &format!("-d{secs}s"), "-s"])
        .arg(&script)
        .arg(format!("http://127.0.0.1:{port}/"))
        .args(["--", "1000000", &(offset / 2).to_string(), "2"])
        .output()
        .expect("wrk is required for this test (apt-get install wrk)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "wrk failed: {text}");
    let line = text
        .lines()
        .find(|l| l.contains("requests in"))
        .unwrap_or_else(|| panic!("no wrk summary: {text}"));
    line.split_whitespace().next().unwrap().parse().unwrap()
}

/// 100 abusers at their limit (10 per hour) in a 128 KB zone (some 8,000
/// slots), then a wrk flood of new keys until four times the zone's slots
/// were evicted (fail=open) or refused (fail=closed) (1M keys or 60 s at
/// most): every abuser is still refused by its own
/// count (no fail-closed refusal among theirs), as fail= has it. `mode`:
/// the zone's `mode=`. nginx's clock is frozen ten minutes into the hour
/// window (libfaketime), so the flood never meets a window boundary.
fn abusers_survive_a_flood(fail: &str, mode: &str) {
    let conf = http_conf(&format!(
        "rate_limit_window_zone $http_x_key zone=z:128k window=1h fail={fail} mode={mode};
         access_log off;
         server {{
             listen 127.0.0.1:{{{{PORT}}}};
             location = /metrics {{ rate_limit_window_metrics; }}
             location / {{
                 error_log logs/flood.log warn;
                 rate_limit_window_log_level info;
                 rate_limit_window zone=z limit=10;
                 empty_gif;
             }}
         }}"
    ));
    let clock = FakeClock::new(FROZEN_MID_HOUR);
    let ng = clock.builder().start(&conf);
    let abusers: Vec<String> = (0..100).map(|i| format!("abuser-{i}")).collect();
    for a in &abusers {
        for _ in 0..10 {
            assert_eq!(get_key(ng.port, "/", a).status, 200);
        }
        assert_eq!(get_key(ng.port, "/", a).status, 429);
    }
    let m = |name: &str, labels: &[(&str, &str)]| {
        prom_value(&metrics_text(ng.port), name, labels).unwrap_or(0.0)
    };
    let churned = || match fail {
        "open" => m(
            "rate_limit_window_evictions_total",
            &[("zone", "z"), ("kind", "live")],
        ),
        _ => m("rate_limit_window_fail_closed_total", &[("zone", "z")]),
    };
    let slots = m("rate_limit_window_slots", &[("zone", "z")]);
    assert!(slots > 1_000.0, "{slots} slots");
    let churn = 4.0 * slots;
    let sent = flood_new_keys(ng.port, || churned() > churn);
    // wrk's last requests can still be in nginx's sockets when it exits
    // (under load): read the counters once they stop moving.
    let moving = || {
        let before = churned();
        std::thread::sleep(Duration::from_millis(300));
        churned() != before
    };
    assert!(
        wait_for(Duration::from_secs(15), || !moving()),
        "the flood's counters never settled"
    );
    let live = m(
        "rate_limit_window_evictions_total",
        &[("zone", "z"), ("kind", "live")],
    );
    let over = m(
        "rate_limit_window_evictions_total",
        &[("zone", "z"), ("kind", "over_limit")],
    );
    let closed_before = m("rate_limit_window_fail_closed_total", &[("zone", "z")]);
    eprintln!("mode={mode} fail={fail}: {sent} flood requests, evictions live {live}, over_limit {over}, fail_closed {closed_before}");
    match fail {
        // At least four times the zone's slots went through it.
        "open" => assert!(
            live > churn,
            "the flood did not churn the zone: {live} evictions of {slots} slots"
        ),
        _ => assert!(
            closed_before > churn,
            "the flood did not fill the zone: {closed_before} refused, {slots} slots"
        ),
    }
    assert_eq!(over, 0.0, "a client at its limit was evicted");
    let statuses: Vec<u16> = abusers
        .iter()
        .map(|a| get_key(ng.port, "/", a).status)
        .collect();
    let freed = statuses.iter().filter(|&&s| s != 429).count();
    assert_eq!(freed, 0, "{freed} of 100 abusers freed by the flood");
    let closed_after = m("rate_limit_window_fail_closed_total", &[("zone", "z")]);
    assert_eq!(
        closed_after, closed_before,
        "abusers refused as new clients, not by their count"
    );
}

#[test]
fn flood_of_new_clients_keeps_abusers_refused() {
    abusers_survive_a_flood("open", "estimate");
}

#[test]
fn flood_of_new_clients_keeps_abusers_refused_fail_closed() {
    abusers_survive_a_flood("closed", "estimate");
}

#[test]
fn flood_of_new_clients_keeps_abusers_refused_strict() {
    abusers_survive_a_flood("open", "strict");
}
