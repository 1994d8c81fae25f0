//! `rate_limit_window_shed`'s arithmetic: a request's priority, and the
//! count of a group's requests in flight at which it is shed (`max=`, and
//! `reserve=` kept for critical requests). The decision is the engine's
//! ([`crate::engine::shed`]).

/// A request's priority, from the `priority=` value: `critical`, or
/// anything else (`default`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// May take the group's last places, the reserve.
    Critical,
    /// Every other value (empty included).
    Default,
}

impl Priority {
    /// The priority of the value `v` (`critical`, in any case, or default).
    pub fn of(v: &[u8]) -> Priority {
        if v.eq_ignore_ascii_case(b"critical") {
            Priority::Critical
        } else {
            Priority::Default
        }
    }

    /// The metrics' `priority` label.
    pub fn name(self) -> &'static str {
        match self {
            Priority::Critical => "critical",
            Priority::Default => "default",
        }
    }

    /// Its index among the group's counters.
    pub fn index(self) -> usize {
        match self {
            Priority::Critical => 0,
            Priority::Default => 1,
        }
    }

    /// Both, in the metrics' order.
    pub const ALL: [Priority; 2] = [Priority::Critical, Priority::Default];
}

/// A group's limits (`max=`, `reserve=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShedLimits {
    /// Requests of the group in flight at most (1 or more).
    pub max: u32,
    /// `reserve=`, percent of `max` (0 to 100) kept for critical requests.
    pub reserve_pct: u32,
}

impl ShedLimits {
    /// Places kept for critical requests: `reserve_pct` of `max`, rounded
    /// up (a reserve above 0 keeps at least one).
    pub fn reserve(&self) -> u32 {
        let r = u64::from(self.max) * u64::from(self.reserve_pct.min(100));
        r.div_ceil(100) as u32
    }

    /// Requests in flight at which a request of priority `p` is shed.
    pub fn limit(&self, p: Priority) -> u32 {
        match p {
            Priority::Critical => self.max,
            Priority::Default => self.max - self.reserve().min(self.max),
        }
    }
}
