//! Calendar windows (`calendar=day|week|month|year tz=Area/City`): fixed
//! windows that start at local midnight of a time zone, exact across
//! daylight saving (a fall-back day is 25 hours long, a spring-forward day
//! 23), a month of 28 to 31 days, an ISO week from Monday.
//!
//! A [`Calendar`] is built once, at configuration time, from the time
//! zone's rules (the system's TZif file, read by the glue): the UTC instant
//! (epoch ms) at which each period starts, over a horizon from 1970 to
//! [`HORIZON_END_YEAR`]. A request never converts a time zone: it finds
//! its period among these instants (this process's last period first, one
//! load and two compares; a binary search when the clock passed its end).
//!
//! A period's *index* counts periods of local calendar time, never a
//! formatted local time: days and ISO weeks since Monday 1969-12-29,
//! months since December 1969, years since 1969 (so that the first
//! instant, 1970-01-01 00:00 UTC, has an index of 0 or more in every time
//! zone). It depends only on the UTC instant and the zone's rules, so
//! gateways with clocks that differ by a few seconds agree on the period
//! of a request except within their skew of a boundary.
//!
//! In the table a calendar period `p` is window `2p` ([`Calendar::window_index`]):
//! the odd windows between periods are never counted, so the sliding
//! estimate's "previous window" is always empty and the estimate is the
//! period's exact count (see [`crate::rule::window::Window::calendar`]).

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::Span;

/// The last year whose periods are tabled at least: a configuration read
/// later tables [`HORIZON_AHEAD_YEARS`] past its own year
/// ([`horizon_end_year`]); instants past the last tabled year stay in the
/// last tabled period (a reload moves the horizon on).
pub const HORIZON_END_YEAR: i16 = 2100;

/// Years past the configuration's own that its calendars table.
pub const HORIZON_AHEAD_YEARS: i16 = 30;

/// The last year a configuration read at `now_ms` (epoch ms) tables:
/// [`HORIZON_END_YEAR`], or [`HORIZON_AHEAD_YEARS`] past `now_ms`'s year
/// (UTC) if later. Computed at configuration time, never per request.
pub fn horizon_end_year(now_ms: u64) -> i16 {
    let year: i16 = i64::try_from(now_ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or(1970, |t| t.to_zoned_datetime(TimeZone::UTC).year());
    HORIZON_END_YEAR.max(year.saturating_add(HORIZON_AHEAD_YEARS))
}

/// Bits of an instant (epoch ms) in the words of a calendar's last period
/// (up to 2109-05-15); the window index takes the 22 bits above.
const CUR_BITS: u32 = 42;
const CUR_MASK: u64 = (1 << CUR_BITS) - 1;

/// The length of a calendar period, the word of `calendar=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Period {
    /// From local midnight to the next (23 to 25 hours across DST).
    Day,
    /// An ISO week, from Monday's local midnight.
    Week,
    /// A calendar month, from the 1st's local midnight.
    Month,
    /// A calendar year, from January 1st's local midnight.
    Year,
}

impl Period {
    /// Parses the word of `calendar=`.
    pub fn parse(word: &[u8]) -> Option<Period> {
        match word {
            b"day" => Some(Period::Day),
            b"week" => Some(Period::Week),
            b"month" => Some(Period::Month),
            b"year" => Some(Period::Year),
            _ => None,
        }
    }

    /// The configuration word.
    pub fn name(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Year => "year",
        }
    }

    /// The nominal length in seconds (RateLimit-Policy's `w`, metrics):
    /// 1, 7, 30 or 365 days. A period's real length is its calendar's.
    pub fn nominal_secs(self) -> u64 {
        86_400
            * match self {
                Period::Day => 1,
                Period::Week => 7,
                Period::Month => 30,
                Period::Year => 365,
            }
    }

    /// The longest a period can last, in ms, with an hour of DST to spare
    /// (how long the Redis fleet keeps a period's counts: twice this).
    pub fn longest_ms(self) -> u64 {
        3_600_000
            + 86_400_000
                * match self {
                    Period::Day => 1,
                    Period::Week => 7,
                    Period::Month => 31,
                    Period::Year => 366,
                }
    }

    /// The window length the table decides with, in ms: longer than any
    /// period of its kind (a day of 48 hours, a week of 8 days, a month of
    /// 32, a year of 367: a day is at most 27 hours, on Antarctica/Casey's
    /// 2010-03-05), plus 1 to 4 ms, so that it is never a whole number of
    /// seconds like every `window=`: a table, state file or fleet of one
    /// rule never passes for the other's. As the previous window of a
    /// period is always empty, the estimate is the exact count whatever
    /// the length; the time into a window is counted back from the
    /// period's end ([`Calendar::locate`]), so that the table's reset is
    /// the time to the next period's start.
    pub fn table_ms(self) -> u64 {
        let (days, tag) = match self {
            Period::Day => (2, 1),
            Period::Week => (8, 2),
            Period::Month => (32, 3),
            Period::Year => (367, 4),
        };
        days * 86_400_000 + tag
    }

    /// The first day of the period holding `d`.
    fn first_day(self, d: Date) -> Date {
        match self {
            Period::Day => d,
            Period::Week => {
                let back = i64::from(d.weekday().to_monday_zero_offset());
                d.checked_sub(Span::new().days(back)).unwrap_or(d)
            }
            Period::Month => d.first_of_month(),
            Period::Year => d.first_of_year(),
        }
    }

    /// The first day of the period after the one that starts on `d`.
    fn next_day(self, d: Date) -> Option<Date> {
        let span = match self {
            Period::Day => Span::new().days(1),
            Period::Week => Span::new().days(7),
            Period::Month => Span::new().months(1),
            Period::Year => Span::new().years(1),
        };
        d.checked_add(span).ok()
    }

    /// The index of the period that starts on `first` (see the module's
    /// doc), from Monday 1969-12-29.
    fn index_of(self, first: Date) -> i64 {
        let epoch = jiff::civil::date(1969, 12, 29);
        let days = first.duration_since(epoch).as_secs() / 86_400;
        let months = (i64::from(first.year()) - 1969) * 12 + i64::from(first.month()) - 12;
        match self {
            Period::Day => days,
            Period::Week => days.div_euclid(7),
            Period::Month => months,
            Period::Year => i64::from(first.year()) - 1969,
        }
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The period holding an instant: its index and its UTC bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeriodSpan {
    /// The period's index (see the module's doc).
    pub index: u64,
    /// When it starts (epoch ms; 0 for a period begun before 1970).
    pub start_ms: u64,
    /// When the next one starts (epoch ms; `u64::MAX` past the horizon).
    pub end_ms: u64,
}

/// A time zone's calendar periods of one length: when each starts, in UTC.
pub struct Calendar {
    period: Period,
    /// The time zone's name as written (`tz=`).
    tz: String,
    /// The index of the period that starts at `starts[0]`.
    first: u64,
    /// Epoch ms at which periods `first`, `first + 1`, ... start,
    /// non-decreasing (a period skipped whole by a transition, as
    /// Pacific/Apia's 2011-12-30, is empty: it starts where the next does).
    starts: Box<[u64]>,
    /// The request path's last period ([`Calendar::locate`]), as two
    /// words that each carry its window index above [`CUR_BITS`] bits: its
    /// end (epoch ms), stored last (Release) and loaded first (Acquire),
    /// and its start. Only the worker's request path writes them; any
    /// value that does not hold `now` sends a reader to the search.
    cur_end: AtomicU64,
    cur_start: AtomicU64,
}

impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Calendar")
            .field("period", &self.period)
            .field("tz", &self.tz)
            .field("periods", &self.starts.len())
            .finish()
    }
}

/// Why a calendar could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CalendarError(pub String);

impl Calendar {
    /// The periods of `period` in `tz` (named `tz_name`) whose instants
    /// lie between 1970-01-01 and the end of [`HORIZON_END_YEAR`], each
    /// starting at the first instant of its first day (local midnight, or
    /// the first instant after it when a transition skips midnight).
    pub fn build(period: Period, tz_name: &str, tz: &TimeZone) -> Result<Calendar, CalendarError> {
        Calendar::build_until(period, tz_name, tz, HORIZON_END_YEAR)
    }

    /// [`Calendar::build`] up to the end of `end_year` ([`horizon_end_year`]
    /// of the configuration's time).
    pub fn build_until(
        period: Period,
        tz_name: &str,
        tz: &TimeZone,
        end_year: i16,
    ) -> Result<Calendar, CalendarError> {
        let err = |e: jiff::Error| CalendarError(format!("time zone \"{tz_name}\": {e}"));
        let zero = jiff::Timestamp::UNIX_EPOCH.to_zoned_datetime(tz.clone());
        let mut day = period.first_day(zero.date());
        let first = u64::try_from(period.index_of(day)).unwrap_or(0);
        let last = jiff::civil::date(end_year.clamp(1970, 9998) + 1, 1, 1);
        let mut starts = Vec::new();
        // Up to the first period that starts after the horizon's last day,
        // so that every instant up to it has its period's end.
        loop {
            let at = day.to_zoned_datetime(tz.clone()).map_err(err)?;
            let ms = u64::try_from(at.timestamp().as_millisecond()).unwrap_or(0);
            // Non-decreasing, whatever the rules say.
            let prev = starts.last().copied().unwrap_or(0);
            if !starts.is_empty() && ms.saturating_sub(prev) >= period.table_ms() {
                let hours = (ms - prev) / 3_600_000;
                return Err(CalendarError(format!(
                    "time zone \"{tz_name}\" has a {} of {hours} hours before {day}: \
                     longer than this module can count",
                    period.name()
                )));
            }
            starts.push(ms.max(prev));
            match period.next_day(day) {
                Some(next) if day <= last => day = next,
                _ => break,
            }
        }
        Ok(Calendar {
            period,
            tz: tz_name.to_owned(),
            first,
            starts: starts.into_boxed_slice(),
            cur_end: AtomicU64::new(0),
            cur_start: AtomicU64::new(0),
        })
    }

    /// The period length.
    pub fn period(&self) -> Period {
        self.period
    }

    /// The time zone's name as written.
    pub fn tz(&self) -> &str {
        &self.tz
    }

    /// The period holding `now_ms` (epoch ms): this process's last period
    /// when it holds `now_ms`, else a search (not remembered: only the
    /// request path, one thread, writes the last period).
    pub fn span(&self, now_ms: u64) -> PeriodSpan {
        let end = self.cur_end.load(Ordering::Acquire);
        let start = self.cur_start.load(Ordering::Relaxed);
        let (end_ms, start_ms) = (end & CUR_MASK, start & CUR_MASK);
        if (end ^ start) >> CUR_BITS == 0 && start_ms <= now_ms && now_ms < end_ms {
            let index = (end >> CUR_BITS) / 2;
            return PeriodSpan {
                index,
                start_ms,
                end_ms,
            };
        }
        self.search(now_ms)
    }

    /// The table's window index and time into the window (ms) of
    /// `now_ms` in a table of windows of `window_ms`
    /// ([`Period::table_ms`]): twice the period's index, and the time
    /// counted back from the period's end (`window_ms` less the time left,
    /// so that the table's time to the window's end is the time to the
    /// next period's start).
    ///
    /// The request path's, in the worker's one thread, the only writer of
    /// the last period: two loads and two compares when it holds `now_ms`.
    /// `now_ms` takes the end word's window index in its high bits, so
    /// that the start word (written first, read second) compares below it
    /// only when it is the same period's or an earlier one's (a write in
    /// flight, seen only by another thread: at most a period off, once).
    #[inline(always)]
    pub fn locate(&self, now_ms: u64, window_ms: u64) -> (u64, u64) {
        let end = self.cur_end.load(Ordering::Acquire);
        let start = self.cur_start.load(Ordering::Relaxed);
        let now = now_ms | (end & !CUR_MASK);
        if start <= now && now < end {
            // No period is as long as its table window (`Calendar::build`).
            return (end >> CUR_BITS, window_ms - (end - now));
        }
        self.locate_search(now_ms, window_ms)
    }

    /// [`Calendar::locate`] by a search, remembered as the last period.
    #[cold]
    #[inline(never)]
    fn locate_search(&self, now_ms: u64, window_ms: u64) -> (u64, u64) {
        let s = self.search(now_ms);
        let w = Self::window_index(s.index);
        if s.end_ms <= CUR_MASK && now_ms <= CUR_MASK && w >> (64 - CUR_BITS) == 0 {
            let tag = w << CUR_BITS;
            self.cur_start.store(s.start_ms | tag, Ordering::Relaxed);
            self.cur_end.store(s.end_ms | tag, Ordering::Release);
        }
        // Past the horizon, the last period never ends.
        (w, window_ms - (s.end_ms - now_ms).min(window_ms))
    }

    /// The period holding `now_ms`, by a binary search: the last period
    /// that starts at or before it (of equal starts, the last: an empty
    /// period is skipped).
    fn search(&self, now_ms: u64) -> PeriodSpan {
        let i = self
            .starts
            .partition_point(|&s| s <= now_ms)
            .saturating_sub(1);
        PeriodSpan {
            index: self.first + i as u64,
            start_ms: self.starts.get(i).copied().unwrap_or(0),
            end_ms: self.starts.get(i + 1).copied().unwrap_or(u64::MAX),
        }
    }

    /// The table's window index of period `index`: `2 * index` (the odd
    /// windows between periods are never counted).
    #[inline(always)]
    pub fn window_index(index: u64) -> u64 {
        index * 2
    }

    /// When the period of table window `window_index` starts (epoch ms):
    /// an odd window (between periods) is taken as the next period's
    /// start; before the horizon 0, past it `u64::MAX`.
    pub fn window_start_ms(&self, window_index: u64) -> u64 {
        let p = window_index.div_ceil(2);
        match p.checked_sub(self.first) {
            None => 0,
            Some(i) => usize::try_from(i)
                .ok()
                .and_then(|i| self.starts.get(i))
                .copied()
                .unwrap_or(u64::MAX),
        }
    }

    /// Whether two calendars are the same periods of the same zone (a
    /// reload that only updated the zone's rules keeps its counts).
    pub fn same_as(&self, other: &Calendar) -> bool {
        self.period == other.period && self.tz == other.tz
    }

    /// The calendar interned for the life of the process: one built the
    /// same way (same period, zone name and instants) before is returned
    /// instead, so that reloads do not grow the process's memory; a
    /// tzdata update makes a new one.
    pub fn intern(self) -> &'static Calendar {
        static ALL: OnceLock<Mutex<Vec<&'static Calendar>>> = OnceLock::new();
        let all = ALL.get_or_init(|| Mutex::new(Vec::new()));
        let mut all = all.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = all
            .iter()
            .find(|c| c.same_as(&self) && c.first == self.first && c.starts == self.starts)
        {
            return c;
        }
        let c: &'static Calendar = Box::leak(Box::new(self));
        all.push(c);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ny() -> TimeZone {
        let data = std::fs::read("/usr/share/zoneinfo/America/New_York").unwrap();
        TimeZone::tzif("America/New_York", &data).unwrap()
    }

    fn ms(s: &str) -> u64 {
        let t: jiff::Timestamp = s.parse().unwrap();
        t.as_millisecond() as u64
    }

    /// A configuration read near the end of 2100 tables 30 years on: the
    /// days after 2100 still end at midnight (read at 2100 itself, they
    /// would stay in one period from 2101-01-02 on).
    #[test]
    fn a_configuration_read_late_tables_thirty_years_on() {
        assert_eq!(horizon_end_year(0), HORIZON_END_YEAR);
        assert_eq!(horizon_end_year(ms("2026-12-05T00:00:00Z")), 2100);
        let late = ms("2100-12-31T23:59:59Z");
        assert_eq!(horizon_end_year(late), 2130);
        let c = Calendar::build_until(Period::Day, "UTC", &TimeZone::UTC, 2130).unwrap();
        for day in ["2101-01-02", "2101-01-03", "2130-12-31"] {
            let s = c.span(ms(&format!("{day}T12:00:00Z")));
            assert_eq!(s.start_ms, ms(&format!("{day}T00:00:00Z")), "{day}");
            assert_eq!(s.end_ms - s.start_ms, 86_400_000, "{day}");
        }
        let old = Calendar::build(Period::Day, "UTC", &TimeZone::UTC).unwrap();
        assert_eq!(old.span(ms("2101-01-03T12:00:00Z")).end_ms, u64::MAX);
    }

    #[test]
    fn fall_back_day_is_25_hours_and_spring_forward_23() {
        let c = Calendar::build(Period::Day, "America/New_York", &ny()).unwrap();
        let s = c.span(ms("2026-11-01T05:30:00Z"));
        assert_eq!(s.start_ms, ms("2026-11-01T04:00:00Z"));
        assert_eq!(s.end_ms, ms("2026-11-02T05:00:00Z"));
        // The repeated 01:xx EST hour is the same period.
        assert_eq!(c.span(ms("2026-11-01T06:30:00Z")), s);
        let s = c.span(ms("2026-03-08T12:00:00Z"));
        assert_eq!(s.start_ms, ms("2026-03-08T05:00:00Z"));
        assert_eq!(s.end_ms, ms("2026-03-09T04:00:00Z"));
        // 1970-01-01 is day 3 since Monday 1969-12-29; 2026-03-08 is
        // 20,520 days after it.
        assert_eq!(s.index, 3 + 20_520);
    }

    #[test]
    fn weeks_months_years_and_their_indices() {
        let utc = TimeZone::UTC;
        let w = Calendar::build(Period::Week, "UTC", &utc).unwrap();
        // Thursday 1970-01-01 is in the week of Monday 1969-12-29: index 0.
        let s = w.span(0);
        assert_eq!(
            (s.index, s.start_ms, s.end_ms),
            (0, 0, ms("1970-01-05T00:00:00Z"))
        );
        let m = Calendar::build(Period::Month, "UTC", &utc).unwrap();
        let s = m.span(ms("2027-01-31T23:59:59Z"));
        assert_eq!(s.end_ms, ms("2027-02-01T00:00:00Z"));
        assert_eq!(s.index, (2027 - 1970) * 12 + 1);
        let y = Calendar::build(Period::Year, "UTC", &utc).unwrap();
        assert_eq!(y.span(ms("2026-06-01T00:00:00Z")).index, 2026 - 1969);
        assert_eq!(
            y.window_start_ms(2 * (2026 - 1969)),
            ms("2026-01-01T00:00:00Z")
        );
        assert_eq!(Calendar::window_index(3), 6);
    }

    #[test]
    fn interned_once_per_zone_and_rules() {
        let a = Calendar::build(Period::Day, "UTC", &TimeZone::UTC)
            .unwrap()
            .intern();
        let b = Calendar::build(Period::Day, "UTC", &TimeZone::UTC)
            .unwrap()
            .intern();
        assert!(core::ptr::eq(a, b));
        let c = Calendar::build(Period::Day, "America/New_York", &ny())
            .unwrap()
            .intern();
        assert!(!core::ptr::eq(a, c));
    }

    /// Every zone of the system's database (Debian's tzdata) has days
    /// shorter than a day calendar's table window (48 hours), so that
    /// `nginx -t` accepts any of them.
    #[test]
    fn every_zone_of_the_system_builds_its_days() {
        let mut dirs = vec![std::path::PathBuf::from("/usr/share/zoneinfo")];
        let mut zones = 0;
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    if !p.ends_with("right") && !p.ends_with("posix") {
                        dirs.push(p);
                    }
                    continue;
                }
                let data = std::fs::read(&p).unwrap();
                let Ok(tz) = TimeZone::tzif("zone", &data) else {
                    continue; // zone1970.tab, leapseconds, ...
                };
                let name = p.display().to_string();
                if let Err(e) = Calendar::build(Period::Day, &name, &tz) {
                    panic!("{e:?}");
                }
                zones += 1;
            }
        }
        assert!(zones > 300, "{zones} zones: is tzdata installed?");
    }
}
