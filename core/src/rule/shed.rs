//! `rate_limit_window_shed`'s arithmetic: a request's priority, and the
//! count of a group's requests in flight at which it is shed (`max=`, and
//! the share of it each priority may not take: `reserve=` for default,
//! `reserve_low=` and `reserve_high=`). The decision is the engine's
//! ([`crate::engine::shed`]).

/// A request's priority, from the `priority=` value: `critical`, `high`,
/// `low` (in any case), or anything else (`default`). Ordered: the lowest
/// is shed first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// May take the group's last places, the reserve.
    Critical,
    /// Shed once `max − reserve_high` are in flight.
    High,
    /// Every other value (empty included): shed once `max − reserve` are.
    Default,
    /// Shed once `max − reserve_low` are in flight.
    Low,
}

impl Priority {
    /// The priority of the value `v` (`critical`, `high`, `low`, in any
    /// case, or default).
    pub fn of(v: &[u8]) -> Priority {
        if v.eq_ignore_ascii_case(b"critical") {
            Priority::Critical
        } else if v.eq_ignore_ascii_case(b"high") {
            Priority::High
        } else if v.eq_ignore_ascii_case(b"low") {
            Priority::Low
        } else {
            Priority::Default
        }
    }

    /// The metrics' `priority` label.
    pub fn name(self) -> &'static str {
        match self {
            Priority::Critical => "critical",
            Priority::High => "high",
            Priority::Default => "default",
            Priority::Low => "low",
        }
    }

    /// Its index among the group's counters (critical and default keep
    /// the indexes they had before high and low).
    pub fn index(self) -> usize {
        match self {
            Priority::Critical => 0,
            Priority::Default => 1,
            Priority::High => 2,
            Priority::Low => 3,
        }
    }

    /// All four, highest first (the metrics' order).
    pub const ALL: [Priority; 4] = [
        Priority::Critical,
        Priority::High,
        Priority::Default,
        Priority::Low,
    ];
}

/// A group's limits (`max=`, `reserve=`, `reserve_low=`, `reserve_high=`).
/// Each reserve is a percent of `max` (0 to 100) that requests of its
/// priority may not take; `reserve_high_pct <= reserve_pct <=
/// reserve_low_pct` (the configuration checks it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShedLimits {
    /// Requests of the group in flight at most (1 or more).
    pub max: u32,
    /// `reserve=`: percent of `max` default requests may not take.
    pub reserve_pct: u32,
    /// `reserve_low=`: percent of `max` low requests may not take
    /// (`reserve=` when not given).
    pub reserve_low_pct: u32,
    /// `reserve_high=`: percent of `max` high requests may not take
    /// (`reserve=` when not given).
    pub reserve_high_pct: u32,
}

/// Places kept from a priority: `pct` of `max`, rounded up (a share above
/// 0 keeps at least one), `max` at most.
fn kept(max: u32, pct: u32) -> u32 {
    let r = u64::from(max) * u64::from(pct.min(100));
    (r.div_ceil(100) as u32).min(max)
}

impl ShedLimits {
    /// `max=` with `reserve=` only: high and low requests are shed as
    /// default ones.
    pub fn new(max: u32, reserve_pct: u32) -> ShedLimits {
        ShedLimits {
            max,
            reserve_pct,
            reserve_low_pct: reserve_pct,
            reserve_high_pct: reserve_pct,
        }
    }

    /// Places kept from default requests: `reserve_pct` of `max`, rounded
    /// up (a reserve above 0 keeps at least one).
    pub fn reserve(&self) -> u32 {
        kept(self.max, self.reserve_pct)
    }

    /// Requests in flight at which a request of priority `p` is shed.
    pub fn limit(&self, p: Priority) -> u32 {
        let pct = match p {
            Priority::Critical => return self.max,
            Priority::High => self.reserve_high_pct,
            Priority::Default => self.reserve_pct,
            Priority::Low => self.reserve_low_pct,
        };
        self.max - kept(self.max, pct)
    }
}
