//! Calendar zones in the engine's runs: a zone case's window length is a
//! calendar period's [`Period::table_ms`] (never a whole number of
//! seconds, so never a `window=`), each period in a time zone of its own
//! (a 25/23-hour day, 30-minute DST, a skipped midnight, a skipped day);
//! its model is `testing::calendar`'s, on jiff's arithmetic.

use std::collections::HashMap;
use std::sync::OnceLock;

use proptest::prelude::*;

use crate::conf::zone_opts::{calendar_window, CalendarSpec};
use crate::rule::calendar::Period;
use crate::rule::window::Window;
use crate::testing::calendar::CalendarModel;

/// Each period's time zone in the runs.
const CASES: [(Period, &str); 4] = [
    (Period::Day, "America/New_York"),
    (Period::Week, "Australia/Lord_Howe"),
    (Period::Month, "America/Havana"),
    (Period::Year, "Pacific/Apia"),
];

/// The window lengths that stand for the calendar zones.
pub(super) fn lengths() -> impl Strategy<Value = u64> {
    (0..CASES.len()).prop_map(|i| CASES[i].0.table_ms())
}

/// The period and time zone a window length stands for.
fn case(window_ms: u64) -> Option<(Period, &'static str)> {
    CASES.iter().copied().find(|c| c.0.table_ms() == window_ms)
}

/// The calendar window a length stands for (built once per process).
pub(super) fn window(window_ms: u64) -> Option<Window> {
    static ALL: OnceLock<HashMap<u64, Window>> = OnceLock::new();
    let all = ALL.get_or_init(|| {
        let dir = std::path::Path::new("/usr/share/zoneinfo");
        CASES
            .iter()
            .map(|&(period, tz)| {
                let spec = CalendarSpec {
                    period,
                    tz: tz.as_bytes().to_vec(),
                };
                (period.table_ms(), calendar_window(&spec, dir).unwrap())
            })
            .collect()
    });
    all.get(&window_ms).copied()
}

/// The model of the calendar zone a length stands for.
pub(super) fn model(window_ms: u64) -> Option<CalendarModel> {
    let (period, tz) = case(window_ms)?;
    let data = std::fs::read(format!("/usr/share/zoneinfo/{tz}")).unwrap();
    Some(CalendarModel::new(
        period,
        jiff::tz::TimeZone::tzif(tz, &data).unwrap(),
    ))
}
