//! Calendar zones (`calendar=`, `tz=`) against the reference model of
//! `testing::calendar`, which finds every instant's period with jiff's own
//! arithmetic on its zoned date and time: the calendar's table of
//! boundaries over random instants from 1970 to 2100 in zones with DST,
//! half-hour DST, a skipped midnight and a skipped day; then the table's
//! decisions (admission, remaining, Retry-After, reset, give-backs) over
//! random requests across period boundaries.

use std::collections::HashMap;
use std::sync::OnceLock;

use jiff::tz::TimeZone;
use proptest::prelude::*;
use rate_limit_window_core::conf::zone_opts::{calendar_window, CalendarSpec};
use rate_limit_window_core::rule::calendar::Period;
use rate_limit_window_core::testing::calendar::{period_at, CalendarModel};
use rate_limit_window_core::testing::Region;
use rate_limit_window_core::*;

/// Zones with a 25/23-hour day, 30-minute DST (Lord Howe), midnight
/// skipped (Havana, Santiago), a whole day skipped (Apia, 2011-12-30),
/// no DST (Kolkata), and UTC.
const ZONES: [&str; 8] = [
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "America/Havana",
    "America/Santiago",
    "Pacific/Apia",
    "Asia/Kolkata",
    "UTC",
];
const PERIODS: [Period; 4] = [Period::Day, Period::Week, Period::Month, Period::Year];
/// 2100-12-31T23:59:59.999Z.
const END_2100_MS: u64 = 4_133_980_799_999;

fn tz(name: &str) -> TimeZone {
    if name == "UTC" {
        return TimeZone::UTC;
    }
    let data = std::fs::read(format!("/usr/share/zoneinfo/{name}")).unwrap();
    TimeZone::tzif(name, &data).unwrap()
}

/// Each zone's window of each period, built once (as nginx -t would).
fn window(zone: usize, period: usize) -> Window {
    static ALL: OnceLock<HashMap<(usize, usize), Window>> = OnceLock::new();
    ALL.get_or_init(|| {
        let dir = std::path::Path::new("/usr/share/zoneinfo");
        let mut m = HashMap::new();
        for (z, name) in ZONES.iter().enumerate() {
            for (p, &period) in PERIODS.iter().enumerate() {
                let spec = CalendarSpec {
                    period,
                    tz: name.as_bytes().to_vec(),
                };
                m.insert((z, p), calendar_window(&spec, dir).unwrap());
            }
        }
        m
    })[&(zone, period)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4_000, ..ProptestConfig::default() })]

    /// Any instant from 1970 to 2100: the calendar's period (index, start,
    /// end) is the model's, and the window's index, start and time left
    /// follow from it.
    #[test]
    fn periods_match_the_model(z in 0..ZONES.len(), p in 0..PERIODS.len(), t in 0..=END_2100_MS) {
        let w = window(z, p);
        let cal = w.calendar_of().unwrap();
        let s = cal.span(t);
        let m = period_at(PERIODS[p], &tz(ZONES[z]), t);
        prop_assert_eq!((s.index, s.start_ms, s.end_ms), (m.index, m.start_ms, m.end_ms));
        prop_assert_eq!(w.index(t), 2 * m.index);
        prop_assert_eq!(w.start_ms(w.index(t)), m.start_ms);
        prop_assert_eq!(w.start_ms(w.index(t) + 1), m.end_ms);
        prop_assert_eq!(w.left_ms(t), m.end_ms - t);
    }

    /// The same at the instants around a boundary, where it matters: the
    /// last ms of a period and the first of the next.
    #[test]
    fn boundaries_match_the_model(z in 0..ZONES.len(), p in 0..PERIODS.len(), t in 0..END_2100_MS - 400 * 86_400_000) {
        let w = window(z, p);
        let zone = tz(ZONES[z]);
        let end = period_at(PERIODS[p], &zone, t).end_ms;
        for at in [end - 1, end, end + 1] {
            let s = w.calendar_of().unwrap().span(at);
            let m = period_at(PERIODS[p], &zone, at);
            prop_assert_eq!((s.index, s.start_ms, s.end_ms), (m.index, m.start_ms, m.end_ms));
        }
    }
}

/// One request to a calendar table: time step, client, limit, cost, and
/// whether its admission is then given back (`count_status=`) or charged
/// more (`charge=`).
#[derive(Clone, Debug)]
struct Ask {
    dt: u64,
    client: u64,
    limit: u32,
    cost: u32,
    settle: Option<u32>,
}

fn ask() -> impl Strategy<Value = Ask> {
    (
        prop_oneof![4 => 0u64..2_000, 1 => 0u64..4_000_000, 1 => 0u64..40 * 86_400_000],
        0u64..3,
        0u32..6,
        0u32..4,
        prop_oneof![3 => Just(None), 1 => (0u32..5).prop_map(Some)],
    )
        .prop_map(|(dt, client, limit, cost, settle)| Ask {
            dt,
            client,
            limit,
            cost,
            settle,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Random requests from 2 s before a random period's end on: every
    /// answer is the model's (admitted iff the period's count plus the
    /// whole cost is at most the limit; remaining; Retry-After and the
    /// reset to the next period's local start; nothing counted when
    /// refused), and give-backs and charges settle in their period only.
    #[test]
    fn table_decides_as_the_model(
        z in 0..ZONES.len(),
        p in 0..PERIODS.len(),
        t0 in 0..END_2100_MS - 500 * 86_400_000,
        asks in proptest::collection::vec(ask(), 1..60),
    ) {
        let w = window(z, p);
        let mut model = CalendarModel::new(PERIODS[p], tz(ZONES[z]));
        let mut region = Region::new(64 * 1024);
        let table = region.table_of(w, [7, 9]);
        let mut now = model.period_at(t0).end_ms.saturating_sub(2_000);
        for a in asks {
            now += a.dt;
            let key = table.hash_key(&a.client.to_le_bytes());
            let d = table.acquire_cost(key, now, a.limit, a.cost, FailPolicy::Open, 0);
            let end = model.period_at(now).end_ms;
            let to_end = (end - now).div_ceil(1000) as u32;
            let fits = a.limit > 0 && model.fits(a.client, now, a.limit, a.cost);
            prop_assert_eq!(d.outcome == Outcome::Admitted, fits, "{:?} at {}", a, now);
            prop_assert_eq!(d.estimate, model.count(a.client, now));
            prop_assert_eq!(d.reset_s, to_end);
            if fits {
                let after = model.count(a.client, now) + a.cost.max(1);
                prop_assert_eq!(d.remaining, a.limit - after);
                prop_assert_eq!(d.retry_after_s, 0);
                let at = model.add(a.client, now, a.cost);
                let adm = d.admission.unwrap();
                prop_assert_eq!(adm.window_index(), at);
                if let Some(count) = a.settle {
                    table.settle(&adm, count);
                    model.settle(a.client, at, a.cost.max(1), count);
                }
            } else {
                prop_assert_eq!(d.retry_after_s, to_end);
                prop_assert_eq!(d.remaining, 0);
            }
            let wait = table.wait_ms(key, now, a.limit, a.cost);
            prop_assert_eq!(wait, model.wait(a.client, now, a.limit, a.cost));
            let snap = table.peek(key, now);
            prop_assert_eq!(snap.previous, 0);
            if snap.window_index == w.index(now) {
                prop_assert_eq!(snap.current, model.count(a.client, now));
            }
        }
    }
}

/// The horizon's first and last instants, in every zone and period: the
/// model's period, its end included (the table reaches past 2100).
#[test]
fn the_horizon_ends_match_the_model() {
    for (z, name) in ZONES.iter().enumerate() {
        for (p, &period) in PERIODS.iter().enumerate() {
            let cal = window(z, p).calendar_of().unwrap();
            for t in [0, 1, END_2100_MS - 1, END_2100_MS] {
                let s = cal.span(t);
                let m = period_at(period, &tz(name), t);
                assert_eq!(
                    (s.index, s.start_ms, s.end_ms),
                    (m.index, m.start_ms, m.end_ms),
                    "{name} {period} {t}"
                );
            }
        }
    }
}
