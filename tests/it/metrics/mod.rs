//! rate_limit_window_metrics: Prometheus exposition and the JSON key lookup.
use crate::common;

use common::*;
use std::collections::HashMap;
use std::time::Duration;

mod routes;
mod scrape;

const HOUR_MS: u128 = 3_600_000;

/// http{} with `zones`, a limited `location /` and `location = /metrics`.
/// reuseport spreads connections over both workers, so the counters are
/// checked as sums over workers.
fn conf(zones: &str, loc: &str) -> String {
    proxy_conf(
        zones,
        "reuseport",
        "add_header X-Worker $pid always;
         location = /metrics { rate_limit_window_metrics; }",
        loc,
    )
}

struct Metrics {
    samples: Vec<Sample>,
    docs: HashMap<String, String>,
}

impl Metrics {
    /// The value of `metric` with exactly these labels; None if absent.
    fn get(&self, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.metric == metric
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
                    && s.labels.len() == labels.len()
            })
            .map(|s| s.value)
    }
    fn val(&self, metric: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(metric, labels)
            .unwrap_or_else(|| panic!("no sample {metric}{labels:?} in\n{:#?}", self.samples))
    }
    fn requests(&self, zone: &str, result: &str) -> f64 {
        self.val(
            "rate_limit_window_requests_total",
            &[("zone", zone), ("result", result)],
        )
    }
}

fn scrape(port: u16) -> Metrics {
    let r = get(port, "/metrics");
    assert_eq!(r.status, 200, "{}", r.describe());
    let ct = r.header("Content-Type").unwrap_or("");
    assert!(
        ct.starts_with("text/plain; version=0.0.4"),
        "Content-Type {ct:?}"
    );
    let text = r.text();
    let s = Scrape::parse(&text).unwrap_or_else(|e| panic!("unparsable exposition: {e}\n{text}"));
    // Every family has HELP and TYPE lines.
    for fam in [
        ("rate_limit_window_requests_total", "counter"),
        ("rate_limit_window_evictions_total", "counter"),
        ("rate_limit_window_fail_closed_total", "counter"),
        ("rate_limit_window_clock_backwards_total", "counter"),
        ("rate_limit_window_slots", "gauge"),
        ("rate_limit_window_slots_used", "gauge"),
    ] {
        let base = fam.0.trim_end_matches("_total");
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("# HELP {} ", fam.0))
                    || l.starts_with(&format!("# HELP {base} "))),
            "no # HELP for {}:\n{text}",
            fam.0
        );
        assert!(
            text.lines()
                .any(|l| l == format!("# TYPE {} {}", fam.0, fam.1)
                    || l == format!("# TYPE {base} {}", fam.1)),
            "no # TYPE {} {}:\n{text}",
            fam.0,
            fam.1
        );
    }
    Metrics {
        samples: s.samples,
        docs: s.docs,
    }
}

fn lookup(port: u16, zone: &str, key: &[u8]) -> (u16, serde_json::Value) {
    let r = get(
        port,
        &format!(
            "/metrics?zone={}&key={}",
            url_encode(zone.as_bytes()),
            url_encode(key)
        ),
    );
    let v = if r.status == 200 {
        let ct = r.header("Content-Type").unwrap_or("");
        assert!(ct.starts_with("application/json"), "Content-Type {ct:?}");
        serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("bad JSON {e}: {}", r.text()))
    } else {
        serde_json::Value::Null
    };
    (r.status, v)
}

fn num(v: &serde_json::Value, field: &str) -> f64 {
    v.get(field)
        .and_then(|x| x.as_f64())
        .unwrap_or_else(|| panic!("field {field} missing or not a number in {v}"))
}

/// limit 6, at least 10 requests over connections until both workers have
/// answered: 6 passed and the rest rejected, summed over workers.
#[test]
fn prometheus_counts_passed_and_rejected() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&conf(
        "rate_limit_window_zone $http_x_key zone=z:1m window=1h;",
        "rate_limit_window zone=z limit=6;",
    ));
    clear_of_boundary(HOUR_MS, 20_000);
    let m0 = scrape(ng.port);
    assert_eq!(m0.requests("z", "passed"), 0.0);
    let mut pids = std::collections::BTreeSet::new();
    let mut st = vec![];
    // reuseport hashes each new connection to a worker: ten of them all
    // land on one worker now and then, so go on until both have answered.
    while st.len() < 10 || (pids.len() < 2 && st.len() < 200) {
        let r = get_key(ng.port, "/", "alice");
        pids.insert(r.header("X-Worker").unwrap_or("").to_string());
        st.push(r.status);
    }
    assert!(pids.len() >= 2, "one worker answered everything: {pids:?}");
    let rejected = st.len() - 6;
    assert_eq!(st[..6], [200; 6]);
    assert_eq!(st[6..], vec![429; rejected]);
    let m = scrape(ng.port);
    assert_eq!(m.requests("z", "passed"), 6.0);
    assert_eq!(m.requests("z", "rejected"), rejected as f64);
    assert_eq!(m.requests("z", "rejected_dry_run"), 0.0);
    assert_eq!(m.requests("z", "exempt"), 0.0);
    // An exempt request (no key).
    get(ng.port, "/");
    let m = scrape(ng.port);
    assert_eq!(m.requests("z", "exempt"), 1.0);
    assert_eq!(m.requests("z", "passed"), 6.0);
    assert!(m.val("rate_limit_window_slots", &[("zone", "z")]) > 0.0);
    assert_eq!(m.val("rate_limit_window_slots_used", &[("zone", "z")]), 1.0);
    for kind in ["idle", "live", "over_limit"] {
        assert_eq!(
            m.val(
                "rate_limit_window_evictions_total",
                &[("zone", "z"), ("kind", kind)]
            ),
            0.0
        );
    }
    assert_eq!(
        m.val("rate_limit_window_fail_closed_total", &[("zone", "z")]),
        0.0
    );
    assert_eq!(
        m.val("rate_limit_window_clock_backwards_total", &[("zone", "z")]),
        0.0
    );
    assert!(!m.docs.is_empty());
    // Scraping is not itself counted.
    assert_eq!(scrape(ng.port).requests("z", "passed"), 6.0);
}

#[test]
fn json_lookup() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&conf(
        "rate_limit_window_zone $http_x_key zone=z:1m window=1h;",
        "rate_limit_window zone=z limit=3;",
    ));
    clear_of_boundary(HOUR_MS, 20_000);
    let key = b"a b/c?&=%\xff";
    let st: Vec<u16> = (0..5)
        .map(|_| request(ng.port, "GET", "/", &[("X-Key", key)]).status)
        .collect();
    assert_eq!(st, [200, 200, 200, 429, 429]);
    let (status, v) = lookup(ng.port, "z", key);
    assert_eq!(status, 200);
    assert_eq!(v["zone"], "z");
    assert_eq!(num(&v, "window_seconds"), 3600.0);
    assert_eq!(
        num(&v, "current"),
        3.0,
        "admitted count; rejected ones not counted: {v}"
    );
    assert_eq!(num(&v, "previous"), 0.0);
    assert!((num(&v, "estimate") - 3.0).abs() < 1e-9, "{v}");
    let idx = num(&v, "window_index") as u128;
    let now_idx = now_ms() / HOUR_MS;
    assert!(
        idx == now_idx || idx + 1 == now_idx,
        "window_index {idx} vs {now_idx}"
    );
    let utc = v["window_start_utc"].as_str().expect("window_start_utc");
    assert_eq!(
        strip_zero_fraction(utc),
        rfc3339_utc((idx * 3600) as i64),
        "{v}"
    );
    let local = v["window_start_local"]
        .as_str()
        .expect("window_start_local");
    assert!(
        local.ends_with('Z') || local.contains('+') || local[10..].contains('-'),
        "window_start_local {local:?} must carry an offset"
    );
    // Unknown zone -> 404; absent key -> zeros.
    assert_eq!(lookup(ng.port, "nope", b"x").0, 404);
    let (status, v) = lookup(ng.port, "z", b"never-seen");
    assert_eq!(status, 200);
    assert_eq!(num(&v, "current"), 0.0);
    assert_eq!(num(&v, "previous"), 0.0);
    assert_eq!(num(&v, "estimate"), 0.0);
    assert_eq!(num(&v, "window_seconds"), 3600.0);
    // The lookup is read-only: the key is still at 3, a new key still at 0.
    assert_eq!(num(&lookup(ng.port, "z", key).1, "current"), 3.0);
    assert_eq!(num(&lookup(ng.port, "z", b"never-seen").1, "current"), 0.0);
}

/// Per-request accounting with two limits: `rejected` for the zone that
/// rejected, `passed` in every zone that applied; undone admissions are not
/// left in the other zone's counters.
#[test]
fn accounting_with_two_limits() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&conf(
        "rate_limit_window_zone global zone=all:32k window=1h;
         rate_limit_window_zone $http_x_key zone=per:1m window=1h;",
        "rate_limit_window zone=all limit=5; rate_limit_window zone=per limit=2;",
    ));
    clear_of_boundary(HOUR_MS, 20_000);
    let st: Vec<u16> = ["A", "A", "A", "A", "B", "B", "C", "C"]
        .iter()
        .map(|k| get_key(ng.port, "/", k).status)
        .collect();
    assert_eq!(st, [200, 200, 429, 429, 200, 200, 200, 429]);
    let m = scrape(ng.port);
    assert_eq!(m.requests("all", "passed"), 5.0);
    assert_eq!(m.requests("per", "passed"), 5.0);
    assert_eq!(m.requests("per", "rejected"), 2.0, "A's 3rd and 4th");
    assert_eq!(m.requests("all", "rejected"), 1.0, "C's 2nd");
    assert_eq!(num(&lookup(ng.port, "all", b"global").1, "current"), 5.0);
    assert_eq!(num(&lookup(ng.port, "per", b"A").1, "current"), 2.0);
    assert_eq!(
        num(&lookup(ng.port, "per", b"C").1, "current"),
        1.0,
        "undone admission"
    );
}

#[test]
fn dry_run_and_fail_closed_counters() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $http_x_key zone=dry:1m window=1h;
        rate_limit_window_zone $http_x_key zone=fc:1m window=1h fail=closed;
        server {
            listen 127.0.0.1:{{PORT}};
            location /dry/ { rate_limit_window zone=dry limit=1; rate_limit_window_dry_run on;
                             proxy_pass http://{{UPSTREAM}}; }
            location /fc/ { rate_limit_window zone=fc limit=$http_x_limit; proxy_pass http://{{UPSTREAM}}; }
            location = /metrics { rate_limit_window_metrics; }
        }"#,
    ));
    clear_of_boundary(HOUR_MS, 20_000);
    for _ in 0..3 {
        assert_eq!(get_key(ng.port, "/dry/", "d").status, 200);
    }
    for _ in 0..2 {
        let r = request(
            ng.port,
            "GET",
            "/fc/",
            &[("X-Key", b"f"), ("X-Limit", b"lots")],
        );
        assert_eq!(r.status, 429);
    }
    let m = scrape(ng.port);
    assert_eq!(m.requests("dry", "passed"), 1.0);
    assert_eq!(m.requests("dry", "rejected_dry_run"), 2.0);
    assert_eq!(m.requests("dry", "rejected"), 0.0);
    assert_eq!(
        num(&lookup(ng.port, "dry", b"d").1, "current"),
        1.0,
        "dry run counts like enforcement"
    );
    assert_eq!(
        m.val("rate_limit_window_fail_closed_total", &[("zone", "fc")]),
        2.0,
        "two requests were rejected by the fail=closed policy (invalid limit value)"
    );
}

#[test]
fn counters_survive_reload() {
    let up = Upstream::start();
    let c = |gen: u32| {
        conf(
            "rate_limit_window_zone $http_x_key zone=z:1m window=1h;",
            &format!("rate_limit_window zone=z limit=6; add_header X-Gen {gen} always;"),
        )
    };
    let mut ng = Nginx::builder().upstream_of(&up).start(&c(1));
    clear_of_boundary(HOUR_MS, 30_000);
    let st: Vec<u16> = (0..10).map(|_| get_key(ng.port, "/", "r").status).collect();
    assert_eq!(tally(&st).get(&200), Some(&6));
    ng.reload_with(&c(2));
    assert_eq!(get_key(ng.port, "/", "r").header("X-Gen"), Some("2"));
    let m = scrape(ng.port);
    assert_eq!(m.requests("z", "passed"), 6.0);
    assert_eq!(m.requests("z", "rejected"), 5.0);
    assert_eq!(num(&lookup(ng.port, "z", b"r").1, "current"), 6.0);
}

/// A 32k zone flooded with 3000 distinct keys evicts; every fresh key is
/// still admitted, and slots_used never exceeds slots.
#[test]
fn evictions_after_flooding_small_zone() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&conf(
        "rate_limit_window_zone $http_x_key zone=tiny:32k window=1h;",
        "rate_limit_window zone=tiny limit=100;",
    ));
    clear_of_boundary(HOUR_MS, 30_000);
    let port = ng.port;
    let st = hammer_with(port, 3000, 8, |i| {
        (
            "/".to_string(),
            vec![("X-Key".to_string(), format!("client-{i}").into_bytes())],
        )
    });
    assert_eq!(tally(&st).get(&200), Some(&3000), "{:?}", tally(&st));
    let m = scrape(port);
    let ev = m.val(
        "rate_limit_window_evictions_total",
        &[("zone", "tiny"), ("kind", "idle")],
    ) + m.val(
        "rate_limit_window_evictions_total",
        &[("zone", "tiny"), ("kind", "live")],
    );
    assert!(ev > 0.0, "no evictions after 3000 keys in 32k");
    let slots = m.val("rate_limit_window_slots", &[("zone", "tiny")]);
    let used = m.val("rate_limit_window_slots_used", &[("zone", "tiny")]);
    assert!(slots > 0.0 && slots < 3000.0, "slots {slots}");
    assert!(used <= slots && used > 0.0, "used {used} of {slots}");
    assert_eq!(m.requests("tiny", "passed"), 3000.0);
    assert!(
        ev + used >= 3000.0 - 1e-9,
        "every key took a slot: evictions {ev} + used {used}"
    );
}

#[test]
fn access_control_on_metrics() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $http_x_key zone=z:1m window=1h;
        server {
            listen 127.0.0.1:{{PORT}};
            location = /metrics { rate_limit_window_metrics; allow 127.0.0.1; deny all; }
            location = /closed { rate_limit_window_metrics; deny all; }
        }"#,
    ));
    assert_eq!(get(ng.port, "/metrics").status, 200);
    assert_eq!(get(ng.port, "/closed").status, 403);
    assert_eq!(get(ng.port, "/closed?zone=z&key=a").status, 403);
}

/// window_start_local follows the process TZ; window_start_utc does not.
#[test]
fn window_start_local_uses_tz() {
    if !std::path::Path::new("/usr/share/zoneinfo/Asia/Kolkata").exists() {
        eprintln!("tzdata missing: skipped");
        return;
    }
    let up = Upstream::start();
    let ng = Nginx::builder()
        .upstream_of(&up)
        .env("TZ", "Asia/Kolkata")
        .start(&conf(
            "rate_limit_window_zone $http_x_key zone=z:1m window=1h;",
            "rate_limit_window zone=z limit=3;",
        ));
    clear_of_boundary(HOUR_MS, 20_000);
    let (_, v) = lookup(ng.port, "z", b"x");
    let idx = num(&v, "window_index") as i64;
    let utc = v["window_start_utc"].as_str().unwrap();
    let local = v["window_start_local"].as_str().unwrap();
    assert_eq!(strip_zero_fraction(utc), rfc3339_utc(idx * 3600));
    assert_eq!(
        strip_zero_fraction(local),
        rfc3339_offset(idx * 3600, 5 * 3600 + 30 * 60),
        "{v}"
    );
}

#[test]
fn rfc3339_helpers() {
    assert_eq!(rfc3339_utc(1704067204), "2024-01-01T00:00:04Z");
    assert_eq!(
        rfc3339_offset(1704067204, 19800),
        "2024-01-01T05:30:04+05:30"
    );
    assert_eq!(
        rfc3339_offset(1704067204, -3600),
        "2023-12-31T23:00:04-01:00"
    );
    assert_eq!(
        strip_zero_fraction("2024-01-01T00:00:04.000Z"),
        "2024-01-01T00:00:04Z"
    );
    let _ = Duration::from_secs(0);
}

/// `rate_limit_window_near_limit_total`: admitted requests that leave the
/// estimate at or above 80% of the limit, read with a Prometheus parser.
#[test]
fn near_limit_counts_admissions_at_80_percent() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&conf(
        "rate_limit_window_zone $http_x_key zone=near:1m window=1h;
         rate_limit_window_zone $http_x_key zone=far:1m window=1h;",
        "rate_limit_window zone=near limit=10;
         rate_limit_window zone=far limit=1000;",
    ));
    clear_of_boundary(HOUR_MS, 20_000);
    let near =
        |m: &Metrics, zone: &str| m.val("rate_limit_window_near_limit_total", &[("zone", zone)]);
    let m = scrape(ng.port);
    assert_eq!(near(&m, "near"), 0.0);
    assert!(m.docs.contains_key("rate_limit_window_near_limit_total"));
    // Estimates after admission 1..=7 are below 8 (80% of 10).
    for _ in 0..7 {
        assert_eq!(get_key(ng.port, "/", "k").status, 200);
    }
    assert_eq!(near(&scrape(ng.port), "near"), 0.0);
    // 8, 9 and 10 are at or above it; the rejected 11th is not admitted.
    for _ in 0..3 {
        assert_eq!(get_key(ng.port, "/", "k").status, 200);
    }
    assert_eq!(get_key(ng.port, "/", "k").status, 429);
    let m = scrape(ng.port);
    assert_eq!(near(&m, "near"), 3.0);
    assert_eq!(near(&m, "far"), 0.0, "10 of 1000 is far from the limit");
    // Another client starts from zero.
    assert_eq!(get_key(ng.port, "/", "other").status, 200);
    assert_eq!(near(&scrape(ng.port), "near"), 3.0);
}

/// `rate_limit_window_metrics reset=on;`: DELETE clears one client's counts
/// (current and previous window) and answers what it cleared; 405 without
/// reset=on; allow/deny apply; logged at notice without the key.
#[test]
fn delete_resets_one_client_with_reset_on() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&proxy_conf(
        "rate_limit_window_zone $http_x_key zone=z:1m window=1h;",
        "",
        "location = /ops { rate_limit_window_metrics reset=on; allow 127.0.0.1; deny all; }
         location = /plain { rate_limit_window_metrics; }
         location = /denied { rate_limit_window_metrics reset=on; deny 127.0.0.1; }",
        "rate_limit_window zone=z limit=3;",
    ));
    clear_of_boundary(HOUR_MS, 20_000);
    let key = "secret-api-key-7f3a";
    for _ in 0..3 {
        assert_eq!(get_key(ng.port, "/", key).status, 200);
    }
    assert_eq!(get_key(ng.port, "/", key).status, 429);
    assert_eq!(get_key(ng.port, "/", "other").status, 200);
    let q = format!("?zone=z&key={key}");
    let delete = |loc: &str, q: &str| request(ng.port, "DELETE", &format!("{loc}{q}"), &[]);
    let current = |k: &str| {
        let r = get(ng.port, &format!("/plain?zone=z&key={k}"));
        assert_eq!(r.status, 200, "{}", r.describe());
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        num(&v, "current")
    };
    // Without reset=on, or from a denied address: nothing is cleared.
    assert_eq!(delete("/plain", &q).status, 405);
    assert_eq!(delete("/denied", &q).status, 403);
    assert_eq!(current(key), 3.0);
    // Cleared, and the answer says what was.
    let r = delete("/ops", &q);
    assert_eq!(r.status, 200, "{}", r.describe());
    assert!(r
        .header("Content-Type")
        .unwrap_or("")
        .starts_with("application/json"));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["zone"], "z");
    assert_eq!(v["cleared"]["current"], 3, "{v}");
    assert_eq!(v["cleared"]["previous"], 0, "{v}");
    assert_eq!(v["cluster"], serde_json::Value::Null, "{v}");
    assert_eq!(current(key), 0.0);
    assert_eq!(current("other"), 1.0, "another client is untouched");
    let r = get_key(ng.port, "/", key);
    assert_eq!(r.status, 200, "the client starts over: {}", r.describe());
    assert_eq!(r.header_num("RateLimit-Remaining"), 2);
    // GET still serves the metrics there; bad requests are refused.
    assert_eq!(get(ng.port, "/ops").status, 200);
    assert_eq!(delete("/ops", "?zone=nope&key=x").status, 404);
    assert_eq!(delete("/ops", "?zone=z").status, 400);
    let log = ng.error_log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("of zone \"z\" reset by 127.0.0.1 (cleared: current 3, previous 0)"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains("[notice]"), "{log}");
    assert!(!lines[0].contains(key), "the key is never logged: {log}");
    assert_eq!(up.received(), 5);
}

/// `?zone=NAME&addr=TEXT`: a client looked up (GET) and reset (DELETE) by
/// its address in text, masked like the zone (`ipv6_prefix=64` here, the
/// clients behind realip); a bad address, `addr=` on a zone not keyed by
/// `$binary_remote_addr`, or a `key=` there that is no address's 4 or 16
/// bytes: 400 with a JSON error that says what to do.
#[test]
fn lookup_and_reset_by_address() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"
        set_real_ip_from 127.0.0.1;
        real_ip_header X-Forwarded-For;
        rate_limit_window_zone $binary_remote_addr zone=ip:1m window=1h ipv6_prefix=64;
        rate_limit_window_zone $http_x_key zone=k:1m window=1h;
        server {
            listen 127.0.0.1:{{PORT}};
            location / { rate_limit_window zone=ip limit=10; proxy_pass http://{{UPSTREAM}}; }
            location = /ops { rate_limit_window_metrics reset=on; }
        }"#,
    ));
    clear_of_boundary(HOUR_MS, 20_000);
    for ip in ["2001:db8::1", "2001:db8::1", "2001:db8::2", "192.0.2.1"] {
        let r = request(ng.port, "GET", "/", &[("X-Forwarded-For", ip.as_bytes())]);
        assert_eq!(r.status, 200, "{}", r.describe());
    }
    let get_json = |q: &str| {
        let r = get(ng.port, &format!("/ops?{q}"));
        let v: serde_json::Value = serde_json::from_slice(&r.body)
            .unwrap_or_else(|e| panic!("{q}: bad JSON {e}: {}", r.describe()));
        (r.status, v)
    };
    // Any address of the /64 finds its three requests; IPv4 its one.
    for q in [
        "zone=ip&addr=2001:db8::99",
        "zone=ip&addr=2001%3Adb8%3A%3A1",
        "zone=ip&addr=[2001:db8::ffff:1]",
    ] {
        let (st, v) = get_json(q);
        assert_eq!((st, num(&v, "current")), (200, 3.0), "{q}: {v}");
    }
    let (st, v) = get_json("zone=ip&addr=192.0.2.1");
    assert_eq!((st, num(&v, "current")), (200, 1.0), "{v}");
    let (st, v) = get_json("zone=ip&key=%C0%00%02%01");
    assert_eq!(
        (st, num(&v, "current")),
        (200, 1.0),
        "4 bytes are an address: {v}"
    );
    // Mistakes: 400, with what to do.
    let errors = [
        ("zone=ip&addr=not-an-ip", "invalid address \"not-an-ip\""),
        ("zone=ip&addr=10.0.0", "invalid address"),
        ("zone=k&addr=192.0.2.1", "use key="),
        ("zone=ip&key=127.0.0.1", "look an address up with addr="),
        ("zone=ip&key=1.2.3.4&addr=1.2.3.4", "not both"),
    ];
    for (q, want) in errors {
        let (st, v) = get_json(q);
        assert_eq!(st, 400, "{q}: {v}");
        let e = v["error"].as_str().unwrap_or_default();
        assert!(e.contains(want), "{q}: {e}");
    }
    // DELETE by address clears the /64's count.
    let del = |q: &str| request(ng.port, "DELETE", &format!("/ops?{q}"), &[]);
    assert_eq!(del("zone=ip&addr=nonsense").status, 400);
    let r = del("zone=ip&addr=2001:db8::5");
    assert_eq!(r.status, 200, "{}", r.describe());
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["cleared"]["current"], 3, "{v}");
    assert_eq!(num(&get_json("zone=ip&addr=2001:db8::1").1, "current"), 0.0);
    assert_eq!(num(&get_json("zone=ip&addr=192.0.2.1").1, "current"), 1.0);
}

/// The strict exposition parser the tests above scrape with refuses what
/// Prometheus would (so that a malformed line from the module fails them).
#[test]
fn the_exposition_parser_refuses_malformed_lines() {
    let good = "# HELP a_total Things.\n# TYPE a_total counter\n\
                a_total{zone=\"z\\\"q\\\\\",result=\"passed\"} 3\nb 1.5\nc +Inf\n";
    let s = Scrape::parse(good).unwrap();
    assert_eq!(s.samples.len(), 3);
    assert_eq!(s.samples[0].labels["zone"], "z\"q\\");
    assert_eq!(s.samples[0].value, 3.0);
    assert_eq!(s.docs["a_total"], "Things.");
    for bad in [
        "a_total{zone=\"z\"} x",
        "a_total{zone=\"z} 1",
        "a_total{zone=z} 1",
        "a_total{zone=\"a\\x\"} 1",
        "a_total{zone=\"a\",zone=\"b\"} 1",
        "1a 1",
        "a-b 1",
        "a_total{1z=\"a\"} 1",
        "a_total 1 1700000000",
        "a_total",
        "# TYPE a_total countr",
    ] {
        assert!(Scrape::parse(bad).is_err(), "accepted {bad:?}");
    }
}
