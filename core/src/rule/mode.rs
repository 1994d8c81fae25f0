//! `mode=estimate|strict` of `rate_limit_window_zone`: which rule a zone
//! decides with (see [`crate::rule::window`] and [`crate::rule::strict`]).
//!
//! `mode=` is parsed with the zone's other words
//! ([`crate::conf::zone_opts`]).

use core::fmt;

/// The rule of a zone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The sliding-window estimate: two counts per key, up to about twice
    /// the limit in an interval of one window when requests are timed
    /// around a window boundary.
    #[default]
    Estimate,
    /// The strict sliding window: never more than the limit in any interval
    /// of one window, 0.857 x the limit per window under saturation.
    Strict,
}

impl Mode {
    /// The configuration word: `"estimate"` or `"strict"`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Estimate => "estimate",
            Mode::Strict => "strict",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
