//! `mode=estimate|strict` of `rate_limit_window_zone`: which rule a zone
//! decides with (see [`crate::window`] and [`crate::strict`]).
//!
//! Parsed apart from [`crate::parse::parse_zone_params`]: the glue takes
//! `mode=` out of the zone's words with [`take_mode`], passes the rest
//! on, then checks the combination with [`check_mode`].

use core::fmt;

use crate::units::escape;

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

/// Takes the `mode=` words out of a zone's parameters: the mode (the last
/// one given; [`Mode::Estimate`] if none) and the other words in order.
///
/// Error (exact text): `invalid mode "X": use "estimate" or "strict"`.
pub fn take_mode<'a>(args: &[&'a [u8]]) -> Result<(Mode, Vec<&'a [u8]>), String> {
    let mut mode = Mode::Estimate;
    let mut rest = Vec::with_capacity(args.len());
    for &a in args {
        match a.strip_prefix(b"mode=") {
            Some(b"estimate") => mode = Mode::Estimate,
            Some(b"strict") => mode = Mode::Strict,
            Some(v) => {
                return Err(format!(
                    "invalid mode \"{}\": use \"estimate\" or \"strict\"",
                    escape(v)
                ))
            }
            None => rest.push(a),
        }
    }
    Ok((mode, rest))
}

/// Refuses the combinations a mode cannot keep its promise with: a strict
/// zone with `redis=` (a cluster cannot bound every interval without
/// waiting for Redis on each request).
pub fn check_mode(mode: Mode, redis: bool) -> Result<(), String> {
    if mode == Mode::Strict && redis {
        return Err(
            "\"mode=strict\" cannot be combined with \"redis=\": gateways that share \
                    counts through Redis see each other's requests only after a sync, so no \
                    bound on every interval holds; use mode=estimate for a cluster"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_mode_out() {
        let args: [&[u8]; 4] = [b"zone=a:1m", b"mode=strict", b"window=10s", b"fail=closed"];
        let (m, rest) = take_mode(&args).unwrap();
        assert_eq!(m, Mode::Strict);
        assert_eq!(rest, [&b"zone=a:1m"[..], b"window=10s", b"fail=closed"]);
        let (m, rest) = take_mode(&args[..1]).unwrap();
        assert_eq!((m, rest.len()), (Mode::Estimate, 1));
        let last: [&[u8]; 2] = [b"mode=strict", b"mode=estimate"];
        assert_eq!(take_mode(&last).unwrap().0, Mode::Estimate);
        assert_eq!(
            take_mode(&[b"mode=exact"]).unwrap_err(),
            "invalid mode \"exact\": use \"estimate\" or \"strict\""
        );
        assert!(take_mode(&[b"mode="]).is_err());
    }

    #[test]
    fn strict_with_redis_is_refused() {
        assert!(check_mode(Mode::Strict, false).is_ok());
        assert!(check_mode(Mode::Estimate, true).is_ok());
        let e = check_mode(Mode::Strict, true).unwrap_err();
        assert!(
            e.contains("\"mode=strict\" cannot be combined with \"redis=\""),
            "{e}"
        );
    }
}
