//! `calendar=day|week|month|year tz=Area/City`: quotas that reset at the
//! time zone's local midnight, exact across daylight saving, through the
//! real nginx (2 workers) under a frozen libfaketime clock
//! (tests/it/common/clock.rs). nginx's own `TZ` is another zone on
//! purpose: only `tz=` decides the periods.
use crate::common;

use common::*;

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
        "",
        &format!("rate_limit_window zone=q limit={limit}; rate_limit_window_headers on;"),
    )
}

fn start(clock: &FakeClock, up: &Upstream, zone_args: &str, limit: &str) -> Nginx {
    start_faked(clock, up, "Asia/Tokyo", &conf(zone_args, limit))
}

/// Sends requests of `key` until the first refusal: how many were
/// admitted, and the refusal.
fn fill(ng: &Nginx, key: &str) -> (usize, Response) {
    for n in 0..100 {
        let r = get_key(ng.port, "/", key);
        if r.status != 200 {
            assert_eq!(r.status, 429, "{}", r.describe());
            return (n, r);
        }
    }
    panic!("{key} was never refused");
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
