//! `calendar=day|week|month|year tz=Area/City`: quotas that reset at the
//! time zone's local midnight, exact across daylight saving, through the
//! real nginx (2 workers) under a frozen libfaketime clock
//! (tests/it/common/clock.rs). nginx's own `TZ` is another zone on
//! purpose: only `tz=` decides the periods.
use crate::common;

use common::*;

/// Requests of a key admitted until the first refusal, and the refusal.
use crate::state::admitted as fill;

/// 2026-11-01T05:10:00Z: 01:10 EDT, in the first local 01:xx hour of New
/// York's fall-back day (local midnight was 04:00Z; the day is 25 h long).
const FALL_FIRST_0110: i64 = 1_793_509_800;
/// 2026-11-01T06:10:00Z: 01:10 EST, the repeated local hour.
const FALL_REPEATED_0110: i64 = 1_793_513_400;
/// 2026-11-02T05:00:00Z: 00:00 EST, the next day's local midnight.
const FALL_NEXT_MIDNIGHT: i64 = 1_793_595_600;
/// 2026-03-08T06:30:00Z: 01:30 EST on New York's spring-forward day
/// (local midnight was 05:00Z; the day is 23 h long).
const SPRING_0130: i64 = 1_772_951_400;
/// 2026-03-08T07:30:00Z: 03:30 EDT, an hour after 01:30 EST (02:xx skipped).
const SPRING_0330: i64 = 1_772_955_000;
/// 2026-03-09T04:00:00Z: 00:00 EDT, the next day's local midnight.
const SPRING_NEXT_MIDNIGHT: i64 = 1_773_028_800;
/// 2027-02-01T00:00:00Z.
const FEB_2027: i64 = 1_801_440_000;

fn conf(zone_args: &str, limit: &str) -> String {
    proxy_conf(
        &format!("rate_limit_window_zone $http_x_key zone=q:1m {zone_args};"),
        "",
        "location = /api { rate_limit_window_metrics; }",
        &format!("rate_limit_window zone=q limit={limit}; rate_limit_window_headers on;"),
    )
}

fn start(clock: &FakeClock, up: &Upstream, zone_args: &str, limit: &str) -> Nginx {
    start_faked(clock, up, "Asia/Tokyo", &conf(zone_args, limit))
}

/// A refusal that tells the client to come back at `at` (Unix seconds)
/// while the clock says `now`: Retry-After and RateLimit-Reset both.
fn assert_back_at(r: &Response, now: i64, at: i64) {
    assert_eq!(r.status, 429, "{}", r.describe());
    assert_eq!(r.header_num("Retry-After"), at - now, "{}", r.describe());
    assert_eq!(
        r.header_num("RateLimit-Reset"),
        at - now,
        "{}",
        r.describe()
    );
}

/// One local day, `limit=3`: 3 admitted at `first`, the 4th refused until
/// `next_midnight` (to the second), still refused at `later` (an hour on)
/// and a second before midnight, admitted at midnight.
fn one_local_day(first: i64, later: i64, next_midnight: i64) {
    let up = Upstream::start();
    let clock = FakeClock::new(first);
    let ng = start(&clock, &up, "calendar=day tz=America/New_York", "3");
    let (n, r) = fill(&ng, "k");
    assert_eq!(n, 3, "the day's quota");
    assert_back_at(&r, first, next_midnight);
    clock.set(later);
    assert_back_at(&get_key(ng.port, "/", "k"), later, next_midnight);
    clock.set(next_midnight - 1);
    assert_back_at(
        &get_key(ng.port, "/", "k"),
        next_midnight - 1,
        next_midnight,
    );
    clock.set(next_midnight);
    let r = get_key(ng.port, "/", "k");
    assert_eq!(r.status, 200, "a new local day: {}", r.describe());
    assert_eq!(r.header_num("RateLimit-Remaining"), 2);
    // 24 local hours to the next midnight (no DST change that day).
    assert_eq!(r.header_num("RateLimit-Reset"), 86_400);
}

/// The fall-back day is 25 hours long: the repeated 01:xx hour is the
/// same day, never a new period.
#[test]
fn fall_back_day_is_one_25_hour_period() {
    one_local_day(FALL_FIRST_0110, FALL_REPEATED_0110, FALL_NEXT_MIDNIGHT);
}

/// The spring-forward day is 23 hours long.
#[test]
fn spring_forward_day_is_one_23_hour_period() {
    one_local_day(SPRING_0130, SPRING_0330, SPRING_NEXT_MIDNIGHT);
}

/// A day whose local midnight a transition skips starts at its first
/// instant that exists: America/Santiago's 2026-09-06 starts at 01:00 -03
/// (04:00Z; 00:00 -04 never happens) and is 23 hours long.
#[test]
fn a_skipped_midnight_starts_the_day_at_its_first_instant() {
    // 2026-09-05T12:00:00Z (08:00 -04) and 2026-09-06T04:00:00Z.
    let (now, first) = (1_788_609_600, 1_788_667_200);
    let up = Upstream::start();
    let clock = FakeClock::new(now);
    let ng = start(&clock, &up, "calendar=day tz=America/Santiago", "1");
    let (n, r) = fill(&ng, "k");
    assert_eq!(n, 1);
    assert_back_at(&r, now, first);
    clock.set(first - 1);
    assert_back_at(&get_key(ng.port, "/", "k"), first - 1, first);
    clock.set(first);
    let r = get_key(ng.port, "/", "k");
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(r.header_num("RateLimit-Reset"), 23 * 3_600);
}

/// `calendar=month tz=UTC`: refused on Jan 31 23:59:59 with Retry-After
/// 1, admitted at Feb 1 00:00:00; the January count was from Jan 10.
#[test]
fn month_resets_on_the_first() {
    let up = Upstream::start();
    let clock = FakeClock::new(FEB_2027 - 22 * 86_400);
    let ng = start(&clock, &up, "calendar=month", "2");
    let (n, r) = fill(&ng, "k");
    assert_eq!(n, 2);
    assert_back_at(&r, FEB_2027 - 22 * 86_400, FEB_2027);
    clock.set(FEB_2027 - 1);
    assert_back_at(&get_key(ng.port, "/", "k"), FEB_2027 - 1, FEB_2027);
    clock.set(FEB_2027);
    let (n, r) = fill(&ng, "k");
    assert_eq!(n, 2, "February's quota");
    // February 2027 has 28 days.
    assert_back_at(&r, FEB_2027, FEB_2027 + 28 * 86_400);
}

/// 2100-12-31T23:59:59Z.
const END_2100: i64 = 4_133_980_799;

/// Days past 2100 (the periods' first horizon) still reset at midnight for
/// an nginx started near its end: a configuration tables 30 years past its
/// own, at configuration time. `calendar=day tz=UTC limit=1` from
/// 2100-12-31 23:59:59 to 2101-01-03 (read at 2100, the days from
/// 2101-01-02 on were one period that never ended).
#[test]
fn days_go_on_past_2100() {
    let up = Upstream::start();
    let clock = FakeClock::new(END_2100);
    let ng = start_faked(&clock, &up, "UTC", &conf("calendar=day tz=UTC", "1"));
    let day = 86_400;
    for (now, next_midnight) in [
        (END_2100, END_2100 + 1),
        (END_2100 + 1, END_2100 + 1 + day),
        (END_2100 + 1 + day + day / 2, END_2100 + 1 + 2 * day),
        (END_2100 + 1 + 2 * day, END_2100 + 1 + 3 * day),
    ] {
        clock.set(now);
        let (n, r) = fill(&ng, "k");
        assert_eq!(n, 1, "at {now}");
        assert_back_at(&r, now, next_midnight);
    }
}

/// `nginx -t` refuses a time zone the system does not know, naming it,
/// and the combinations a calendar cannot keep its promise with.
#[test]
fn nginx_t_refuses_unknown_zones_and_bad_combinations() {
    let cases = [
        (
            conf("calendar=day tz=Mars/Olympus", "3"),
            "[emerg] unknown time zone \"Mars/Olympus\" in \"tz=\": no time zone file",
        ),
        (
            conf("calendar=fortnight", "3"),
            "[emerg] invalid calendar \"fortnight\"",
        ),
        (
            conf("window=1m tz=Europe/Paris", "3"),
            "[emerg] \"tz=\" needs \"calendar=\"",
        ),
        (
            conf("calendar=day window=1d", "3"),
            "[emerg] \"calendar=\" cannot be combined with \"window=\"",
        ),
        (
            conf("calendar=day mode=strict", "3"),
            "[emerg] \"calendar=\" cannot be combined with \"mode=\"",
        ),
        (
            conf("calendar=day", "3 delay=1s"),
            "[emerg] \"delay=\" cannot be used with zone \"q\" of calendar=",
        ),
    ];
    for (c, want) in cases {
        let (ok, out) = test_config(&c);
        assert!(!ok, "{want}: {out}");
        assert!(out.contains(want), "want {want:?} in:\n{out}");
    }
    // delay= before the zone is declared: refused at the end of http{},
    // naming the delay='s line.
    let c = http_conf(
        "server {
            listen 127.0.0.1:{{PORT}};
            location / {
                rate_limit_window zone=q limit=3 delay=1s;
                proxy_pass http://{{UPSTREAM}};
            }
        }
        rate_limit_window_zone $http_x_key zone=q:1m calendar=week;",
    );
    let (ok, out) = test_config(&c);
    assert!(!ok, "{out}");
    assert!(
        out.contains("[emerg] \"delay=\" cannot be used with zone \"q\""),
        "{out}"
    );
    let (ok, out) = test_config(&conf("calendar=year tz=Pacific/Apia", "3"));
    assert!(ok, "{out}");
}

/// 2027-01-15T12:00:00Z, mid-January.
const MID_JAN_2027: i64 = FEB_2027 - 17 * 86_400 + 12 * 3_600;

/// Sends SIGQUIT to `ng`'s master and waits until it and its workers are
/// gone (the workers write the state file as they exit).
fn quit(ng: &Nginx) {
    let mut pids = ng.worker_pids();
    pids.push(ng.master_pid());
    // SAFETY: kill(2) only sends a signal to a pid.
    unsafe { libc::kill(ng.master_pid(), libc::SIGQUIT) };
    let gone = wait_for(std::time::Duration::from_secs(10), || {
        pids.iter()
            .all(|p| !std::path::Path::new(&format!("/proc/{p}/exe")).exists())
    });
    assert!(gone, "nginx did not quit");
}

/// `state=`: a month's count survives a restart (a quit, a new master on
/// the same file), with Retry-After still to the next month's start.
#[test]
fn state_keeps_a_months_count_through_a_restart() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // The workers (user nobody) write the file.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let args = format!(
        "calendar=month tz=Europe/Paris state={}",
        dir.path().join("q.state").display()
    );
    let up = Upstream::start();
    let clock = FakeClock::new(MID_JAN_2027);
    let ng = start(&clock, &up, &args, "5");
    for _ in 0..3 {
        assert_eq!(get_key(ng.port, "/", "k").status, 200);
    }
    quit(&ng);
    drop(ng);
    clock.set(MID_JAN_2027 + 3 * 86_400);
    let ng = start(&clock, &up, &args, "5");
    let (n, r) = fill(&ng, "k");
    assert_eq!(n, 2, "3 of January's 5 were counted before the restart");
    // February starts at 00:00 CET, 2027-01-31T23:00:00Z.
    assert_back_at(&r, MID_JAN_2027 + 3 * 86_400, FEB_2027 - 3_600);
}

/// Two gateways sharing a Redis fleet, their clocks 2 s apart: one
/// month, one count (the period index is the window index in Redis). The
/// clocks run (the sync's rounds follow them), shifted past a month's end
/// when one is less than two minutes away.
#[test]
fn two_gateways_with_skewed_clocks_share_one_months_count() {
    let redis = crate::overrides::Redis::start();
    let up = Upstream::start();
    let (ca, cb) = (ShiftedClock::new(), ShiftedClock::new());
    cb.advance(2_000);
    let (_, _, day, h, m, _) = civil((cb.now_ms() / 1000) as i64 + 120);
    if day == 1 && h == 0 && m < 3 {
        ca.advance(240_000);
        cb.advance(240_000);
    }
    let conf = conf(
        &format!(
            "calendar=month redis=127.0.0.1:{} sync=100ms secret=calendar-fleet-secret-01",
            redis.1
        ),
        "10",
    )
    .replace(
        "location = /api",
        "add_header X-Msec $msec always; location = /api",
    );
    let a = ca.builder().upstream_of(&up).start(&conf);
    let b = cb.builder().upstream_of(&up).start(&conf);
    for _ in 0..6 {
        assert_eq!(get_key(a.port, "/", "k").status, 200);
    }
    // b syncs the clients it has seen: one request there, then the
    // fleet's count reaches it within a few sync rounds.
    assert_eq!(get_key(b.port, "/", "k").status, 200);
    let seen = wait_for(std::time::Duration::from_secs(15), || {
        let r = get(b.port, "/api?zone=q&key=k");
        serde_json::from_slice::<serde_json::Value>(&r.body)
            .map(|v| v["current"].as_f64() == Some(7.0))
            .unwrap_or(false)
    });
    assert!(seen, "{}", get(b.port, "/api?zone=q&key=k").describe());
    let (n, r) = fill(&b, "k");
    assert_eq!(n, 3, "one count for the month across the fleet");
    // Retry-After from b's clock lands on the first of the next month,
    // 00:00:00 UTC.
    let msec: f64 = r.header("X-Msec").unwrap().parse().unwrap();
    let back = msec as i64 + r.header_num("Retry-After");
    assert_eq!(r.header_num("RateLimit-Reset"), r.header_num("Retry-After"));
    let (_, _, d, h, m, s) = civil(back);
    assert_eq!((d, h, m, s), (1, 0, 0, 0), "{}", r.describe());
    assert!(civil(back - 1).2 >= 28, "{}", r.describe());
}

/// nginx-conf/quotas.conf as its comments say: a free key's 100 a day on
/// Los Angeles's fall-back day (25 hours), refused until 00:00 PST; a pro
/// key unaffected; the next day admitted again.
#[test]
fn quotas_example_resets_at_midnight_pacific() {
    // 2026-11-01T08:30:00Z: 01:30 PDT, the first of Los Angeles's two
    // 01:30s; the next midnight is 2026-11-02T08:00:00Z (00:00 PST).
    let (now, midnight) = (1_793_521_800, 1_793_606_400);
    let up = Upstream::start();
    let clock = FakeClock::new(now);
    let ng = clock
        .builder()
        .upstream_of(&up)
        .start(&crate::examples::example("quotas.conf"));
    let api = |ng: &Nginx, key: &str| {
        request(
            ng.port,
            "GET",
            "/v1/items",
            &[("X-API-Key", key.as_bytes())],
        )
    };
    let free = |ng: &Nginx| api(ng, "k-free-1");
    for i in 0..100 {
        let r = free(&ng);
        assert_eq!(r.status, 200, "request {i}: {}", r.describe());
    }
    let r = free(&ng);
    assert_back_at(&r, now, midnight);
    assert_eq!(r.header_num("RateLimit-Limit"), 100, "{}", r.describe());
    // An hour later it is 01:30 PST: the same day.
    clock.set(now + 3_600);
    assert_back_at(&free(&ng), now + 3_600, midnight);
    let pro = api(&ng, "k-pro-8d2e6b0a5c71");
    assert_eq!(pro.status, 200, "{}", pro.describe());
    clock.set(midnight);
    let r = free(&ng);
    assert_eq!(r.status, 200, "{}", r.describe());
    // The monthly quota (2,000) counted yesterday's 100 and this one.
    assert_eq!(r.header_num("RateLimit-Remaining"), 99, "{}", r.describe());
    assert_eq!(up.received(), 102, "the upstream saw only the admitted");
}

/// A reload reads the time zone again: with `TZDIR` (the master's
/// environment) naming a database whose `Test/Zone` changes from New
/// York's rules to Tokyo's, the day's count stays (the same local date)
/// and Retry-After follows the new midnight.
#[test]
fn a_reload_picks_up_a_tzdata_update() {
    let db = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(db.path().join("Test")).unwrap();
    let zone_file = db.path().join("Test/Zone");
    let copy = |from: &str| std::fs::copy(format!("/usr/share/zoneinfo/{from}"), &zone_file);
    copy("America/New_York").unwrap();
    // 2026-06-15T12:00:00Z: 08:00 EDT, 21:00 JST, both on June 15.
    let now = 1_781_524_800;
    let up = Upstream::start();
    let clock = FakeClock::new(now);
    let mut ng = clock
        .builder()
        .upstream_of(&up)
        .env("TZDIR", db.path().to_str().unwrap())
        .start(&conf("calendar=day tz=Test/Zone", "2"));
    let (n, r) = fill(&ng, "k");
    assert_eq!(n, 2);
    // Midnight EDT: 2026-06-16T04:00:00Z.
    assert_back_at(&r, now, now + 16 * 3_600);
    copy("Asia/Tokyo").unwrap();
    ng.reload();
    let fresh = wait_for(std::time::Duration::from_secs(10), || {
        get_key(ng.port, "/", "k").header_num("Retry-After") == 3 * 3_600
    });
    // Midnight JST: 2026-06-15T15:00:00Z; the count of June 15 kept.
    assert!(fresh, "{}", get_key(ng.port, "/", "k").describe());
    assert_back_at(&get_key(ng.port, "/", "k"), now, now + 3 * 3_600);
    // Another period, or a sliding window, is another zone: refused, and
    // the running one keeps serving.
    for (args, was) in [
        ("calendar=week tz=Test/Zone", "calendar=day"),
        ("window=1d", "calendar=day"),
    ] {
        let e = ng.try_reload_with(&conf(args, "2")).unwrap_err();
        let new = args.split(' ').next().unwrap();
        let want = format!("{new} cannot replace the running {was} on reload");
        assert!(e.contains(&want), "{want:?} in {e}");
    }
    assert_back_at(&get_key(ng.port, "/", "k"), now, now + 3 * 3_600);
}

/// The zone's other features on a calendar zone, through nginx: a cost,
/// a limit from a variable, an operator's override (the client's quota
/// for the period), `count_status=`, `ban=`, dry run, the variables and
/// the metrics.
#[test]
fn costs_overrides_bans_dry_run_and_variables_compose() {
    // 2026-06-15T12:00:00Z: 14:00 in Berlin (CEST); midnight is 22:00Z.
    let now = 1_781_524_800;
    let midnight = now + 10 * 3_600;
    let up = Upstream::start();
    let clock = FakeClock::new(now);
    let conf = proxy_conf(
        "map $http_x_plan $quota { pro 8; default 5; }
         rate_limit_window_zone $http_x_key zone=q:1m calendar=day tz=Europe/Berlin;
         rate_limit_window_zone $http_x_key zone=b:1m calendar=week tz=Europe/Berlin;",
        "",
        "location = /api { rate_limit_window_metrics write=on; }
         location = /metrics { rate_limit_window_metrics; }
         location /dry/ {
             rate_limit_window_dry_run on;
             rate_limit_window zone=q limit=1;
             add_header X-Status $rate_limit_window_status always;
             proxy_pass http://{{UPSTREAM}};
         }
         location /cs/ {
             rate_limit_window zone=q limit=2 count_status=404;
             empty_gif;
         }
         location /ban/ {
             rate_limit_window zone=b limit=1 ban=1h;
             proxy_pass http://{{UPSTREAM}};
         }",
        "rate_limit_window zone=q limit=$quota cost=$http_x_cost;
         add_header X-Reset $rate_limit_window_reset always;
         add_header X-Retry $rate_limit_window_retry_after always;",
    );
    let ng = start_faked(&clock, &up, "UTC", &conf);
    let ask = |key: &str, cost: &str, plan: &str| {
        let h: [(&str, &[u8]); 3] = [
            ("X-Key", key.as_bytes()),
            ("X-Cost", cost.as_bytes()),
            ("X-Plan", plan.as_bytes()),
        ];
        request(ng.port, "GET", "/", &h)
    };
    // 3 + 3 > 5: the second is refused whole, counted by none; 2 fits.
    assert_eq!(ask("c", "3", "").status, 200);
    let r = ask("c", "3", "");
    assert_back_at(&r, now, midnight);
    assert_eq!(r.header_num("X-Retry"), midnight - now);
    let r = ask("c", "2", "");
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(r.header_num("X-Reset"), midnight - now);
    assert_eq!(ask("c", "1", "").status, 429);
    // The pro plan's 8 from the map: 3 more.
    assert_eq!(ask("c", "3", "pro").status, 200);
    // The operator raises this client's quota for the period.
    let put = crate::overrides::send_body(
        ng.port,
        "PUT",
        "/api?zone=q&key=c",
        br#"{"limit": 20}"#,
        false,
    );
    assert_eq!(put.status, 200, "{}", put.describe());
    assert_eq!(ask("c", "10", "").status, 200);
    assert_back_at(&ask("c", "3", ""), now, midnight);
    // Dry run: let through, said so.
    for status in ["PASSED", "REJECTED_DRY_RUN"] {
        let r = get_key(ng.port, "/dry/", "d");
        assert_eq!(r.status, 200);
        assert_eq!(r.header("X-Status"), Some(status), "{}", r.describe());
    }
    // count_status=: a 200 is given back in its period when it ends.
    for _ in 0..4 {
        assert_eq!(get_key(ng.port, "/cs/", "s").status, 200);
    }
    // Each is given back in the log phase, after its response was sent.
    let current = || -> serde_json::Value {
        serde_json::from_slice(&get(ng.port, "/api?zone=q&key=s").body).unwrap()
    };
    let settled = crate::common::wait_for(std::time::Duration::from_secs(3), || {
        current()["current"].as_f64() == Some(0.0)
    });
    assert!(settled, "{}", current());
    // A ban of an hour on a weekly quota: Retry-After never shorter than
    // the count's wait, to Monday 00:00 CEST (2026-06-21T22:00:00Z).
    assert_eq!(get_key(ng.port, "/ban/", "x").status, 200);
    let monday = now + 6 * 86_400 + 10 * 3_600;
    assert_back_at(&get_key(ng.port, "/ban/", "x"), now, monday);
    let m = get(ng.port, "/metrics").text();
    assert_eq!(
        prom_value(&m, "rate_limit_window_window_seconds", &[("zone", "b")]),
        Some(604_800.0),
        "{m}"
    );
}

/// The draft's headers (`rate_limit_window_headers ietf`) on the 25-hour
/// day: an admission's `t` is when `r` grows (the next local midnight), a
/// refusal's `t` its Retry-After; the policy's `w` is the nominal day.
#[test]
fn ietf_headers_tell_the_next_local_midnight() {
    let up = Upstream::start();
    let clock = FakeClock::new(FALL_FIRST_0110);
    let ng = start_faked(
        &clock,
        &up,
        "UTC",
        &proxy_conf(
            "rate_limit_window_zone $http_x_key zone=q:1m calendar=day tz=America/New_York;",
            "",
            "",
            "rate_limit_window zone=q limit=2; rate_limit_window_headers ietf;",
        ),
    );
    let left = FALL_NEXT_MIDNIGHT - FALL_FIRST_0110;
    let member = crate::headers_truth::member;
    let r = get_key(ng.port, "/", "k");
    assert_eq!(member(&r, "q"), (1, left), "{}", r.describe());
    assert_eq!(r.header("RateLimit-Policy"), Some("\"q\";q=2;w=86400"));
    assert_eq!(member(&get_key(ng.port, "/", "k"), "q"), (0, left));
    let rej = get_key(ng.port, "/", "k");
    assert_eq!(rej.header_num("Retry-After"), left, "{}", rej.describe());
    assert_eq!(member(&rej, "q"), (0, left), "{}", rej.describe());
}

/// `charge=`: a call is admitted by its cost and then counts what it used,
/// in its period; over the day's budget, refused until local midnight.
#[test]
fn charge_counts_what_calls_used_until_local_midnight() {
    let up = common::status_upstream::StatusUpstream::start();
    let clock = FakeClock::new(FALL_FIRST_0110);
    let conf = http_conf(
        "rate_limit_window_zone $http_x_key zone=q:1m calendar=day tz=America/New_York;
        server {
            listen 127.0.0.1:{{PORT}};
            location / {
                rate_limit_window zone=q limit=1000 charge=$upstream_http_x_tokens;
                proxy_pass http://{{UPSTREAM}};
            }
            location = /api { rate_limit_window_metrics; }
        }",
    );
    let ng = clock.builder().upstream(&up.addr()).start(&conf);
    let counted = |want: f64| {
        let read = || {
            let r = get(ng.port, "/api?zone=q&key=a");
            serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()["current"].as_f64()
        };
        wait_for(std::time::Duration::from_secs(5), || read() == Some(want));
        read()
    };
    assert_eq!(get_key(ng.port, "/?tokens=900", "a").status, 200);
    assert_eq!(counted(900.0), Some(900.0));
    // 900 + its cost of 1 fits; it then counts the 200 it used.
    assert_eq!(get_key(ng.port, "/?tokens=200", "a").status, 200);
    assert_eq!(counted(1100.0), Some(1100.0));
    assert_back_at(
        &get_key(ng.port, "/?tokens=1", "a"),
        FALL_FIRST_0110,
        FALL_NEXT_MIDNIGHT,
    );
    clock.set(FALL_NEXT_MIDNIGHT);
    assert_eq!(get_key(ng.port, "/?tokens=1", "a").status, 200);
}

/// Gateways that share a calendar zone in Redis must count the same days:
/// one in another time zone is told apart (the fleet's mismatch gauge and
/// a `[warn]` on both sides), and the two in the same zone see each other.
#[test]
fn a_gateway_in_another_time_zone_is_seen_by_the_fleet() {
    let redis = crate::overrides::Redis::start();
    let up = Upstream::start();
    let clock = ShiftedClock::new();
    let gateway = |tz: &str| {
        let zone = format!(
            "calendar=day tz={tz} redis=127.0.0.1:{} sync=100ms secret=calendar-fleet-secret-02",
            redis.1
        );
        let conf = conf(&zone, "10").replace(
            "location = /api",
            "location = /metrics { rate_limit_window_metrics; } location = /api",
        );
        clock.builder().upstream_of(&up).start(&conf)
    };
    let (a, b, c) = (
        gateway("Europe/Paris"),
        gateway("Europe/Paris"),
        gateway("Asia/Tokyo"),
    );
    let fleet = |g: &Nginx| {
        let m = get(g.port, "/metrics").text();
        let v = |name| prom_value(&m, name, &[("zone", "q")]).unwrap_or(-1.0);
        (
            v("rate_limit_window_sync_peers"),
            v("rate_limit_window_sync_peers_mismatched"),
        )
    };
    let seen = wait_for(std::time::Duration::from_secs(15), || {
        fleet(&a) == (2.0, 1.0) && fleet(&b) == (2.0, 1.0) && fleet(&c) == (1.0, 2.0)
    });
    assert!(seen, "{:?} {:?} {:?}", fleet(&a), fleet(&b), fleet(&c));
    let warned = wait_for(std::time::Duration::from_secs(10), || {
        c.error_log()
            .contains("2 other gateway(s) use this zone name in redis with another mode")
    });
    assert!(warned, "{}", c.error_log());
}
