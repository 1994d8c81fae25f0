//! The reference model of a calendar zone (`calendar=`, `tz=`), built on
//! the time zone library's own arithmetic for every instant asked: the
//! period is found from the instant's zoned date and time (jiff's
//! `start_of_day`, `first_of_month`, `first_of_year` and calendar
//! addition), never from the table of boundaries that
//! [`Calendar`](crate::rule::calendar::Calendar) keeps. Counts per key and
//! period: a request fits when the period's count plus its whole cost is
//! at most the limit.

use std::collections::HashMap;

use jiff::tz::TimeZone;
use jiff::{Span, Timestamp, ZonedDateTime};

use crate::rule::calendar::Period;

/// A period by the model: its index (as the calendar numbers them) and
/// its UTC bounds (epoch ms; the start clamped at 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelPeriod {
    /// Days or ISO weeks since Monday 1969-12-29, months since December
    /// 1969, years since 1969.
    pub index: u64,
    /// When it starts (epoch ms).
    pub start_ms: u64,
    /// When the next one starts (epoch ms).
    pub end_ms: u64,
}

/// The period of `period` holding `now_ms` in `tz`, by jiff's arithmetic
/// on the instant's zoned date and time.
pub fn period_at(period: Period, tz: &TimeZone, now_ms: u64) -> ModelPeriod {
    let t = Timestamp::from_millisecond(now_ms as i64).expect("an instant jiff holds");
    let zdt = t.to_zoned_datetime(tz.clone());
    let start = first_instant(period, &zdt);
    let step = match period {
        Period::Day => Span::new().days(1),
        Period::Week => Span::new().weeks(1),
        Period::Month => Span::new().months(1),
        Period::Year => Span::new().years(1),
    };
    // Calendar addition keeps the civil time; a local midnight that does
    // not exist comes out after the gap, and start_of_day finds the day's
    // first instant.
    let end = start
        .checked_add(step)
        .and_then(|z| z.start_of_day())
        .expect("in range");
    let d = start.date();
    let days = jiff::civil::date(1969, 12, 29)
        .until((jiff::Unit::Day, d))
        .expect("in range")
        .get_days();
    let index = match period {
        Period::Day => i64::from(days),
        Period::Week => i64::from(days).div_euclid(7),
        Period::Month => (i64::from(d.year()) - 1969) * 12 + i64::from(d.month()) - 12,
        Period::Year => i64::from(d.year()) - 1969,
    };
    let ms = |z: &ZonedDateTime| z.timestamp().as_millisecond().max(0) as u64;
    ModelPeriod {
        index: index as u64,
        start_ms: ms(&start),
        end_ms: ms(&end),
    }
}

/// The first instant of the period holding `zdt`.
fn first_instant(period: Period, zdt: &ZonedDateTime) -> ZonedDateTime {
    let first = match period {
        Period::Day => Ok(zdt.clone()),
        Period::Week => {
            let back = i64::from(zdt.weekday().to_monday_zero_offset());
            zdt.start_of_day()
                .and_then(|z| z.checked_sub(Span::new().days(back)))
        }
        Period::Month => zdt.first_of_month(),
        Period::Year => zdt.first_of_year(),
    };
    first.and_then(|z| z.start_of_day()).expect("in range")
}

/// The exact model of a calendar zone: counts per key and period.
#[derive(Clone, Debug)]
pub struct CalendarModel {
    period: Period,
    tz: TimeZone,
    /// Per key: the period's index and its count (requests).
    counts: HashMap<u64, (u64, u32)>,
}

impl CalendarModel {
    /// An empty model of `period` in `tz`.
    pub fn new(period: Period, tz: TimeZone) -> CalendarModel {
        CalendarModel {
            period,
            tz,
            counts: HashMap::new(),
        }
    }

    /// The period holding `now_ms`.
    pub fn period_at(&self, now_ms: u64) -> ModelPeriod {
        period_at(self.period, &self.tz, now_ms)
    }

    /// `key`'s count in the period holding `now_ms`.
    pub fn count(&self, key: u64, now_ms: u64) -> u32 {
        let p = self.period_at(now_ms).index;
        match self.counts.get(&key) {
            Some(&(i, c)) if i == p => c,
            _ => 0,
        }
    }

    /// Whether a request of `cost` (0 counts as 1) fits now.
    pub fn fits(&self, key: u64, now_ms: u64, limit: u32, cost: u32) -> bool {
        u64::from(self.count(key, now_ms)) + u64::from(cost.max(1)) <= u64::from(limit)
    }

    /// Counts an admission of `cost`; returns the table's window index it
    /// was counted in (twice the period's).
    pub fn add(&mut self, key: u64, now_ms: u64, cost: u32) -> u64 {
        let p = self.period_at(now_ms).index;
        let c = self.count(key, now_ms) + cost.max(1);
        self.counts.insert(key, (p, c));
        2 * p
    }

    /// Makes an admission of `cost` counted in window `counted_in` count
    /// `count` instead (0: given back), if its period is still the key's.
    pub fn settle(&mut self, key: u64, counted_in: u64, cost: u32, count: u32) {
        if let Some((i, c)) = self.counts.get_mut(&key) {
            if 2 * *i == counted_in {
                *c = (*c + count).saturating_sub(cost);
            }
        }
    }

    /// The first ms from `now_ms` at which a request of `cost` fits with no
    /// other traffic: now, or the next period's start; None: never.
    pub fn wait(&self, key: u64, now_ms: u64, limit: u32, cost: u32) -> Option<u64> {
        if cost.max(1) > limit {
            return None;
        }
        if self.fits(key, now_ms, limit, cost) {
            return Some(0);
        }
        Some(self.period_at(now_ms).end_ms - now_ms)
    }
}
