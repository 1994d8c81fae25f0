//! `mode=estimate|strict` of `rate_limit_window_zone`: which rule a zone
//! decides with (see [`crate::rule::window`] and [`crate::rule::strict`]).
//!
//! Parsed apart from [`crate::conf::parse::parse_zone_params`]: the glue takes
//! `mode=` out of the zone's words with [`take_mode`], passes the rest
//! on, then checks the combination with [`check_mode`].

use core::fmt;

use crate::conf::error::{ConfError, ZoneConfError};

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

/// Takes `mode=` out of a zone's parameters: the mode ([`Mode::Estimate`]
/// if none) and the other words in order. Given twice, it is refused as
/// every parameter is ([`ConfError::Duplicate`]).
///
/// Error (exact text): `invalid mode "X": use "estimate" or "strict"`.
pub fn take_mode<'a>(args: &[&'a [u8]]) -> Result<(Mode, Vec<&'a [u8]>), ConfError> {
    let mut mode = None;
    let mut rest = Vec::with_capacity(args.len());
    for &a in args {
        let Some(v) = a.strip_prefix(b"mode=") else {
            rest.push(a);
            continue;
        };
        let m = match v {
            b"estimate" => Mode::Estimate,
            b"strict" => Mode::Strict,
            _ => return Err(ZoneConfError::Mode(v.to_vec()).into()),
        };
        if mode.replace(m).is_some() {
            return Err(ConfError::Duplicate {
                directive: "rate_limit_window_zone",
                name: b"mode=".to_vec(),
            });
        }
    }
    Ok((mode.unwrap_or_default(), rest))
}

/// Refuses the combinations a mode cannot keep its promise with: a strict
/// zone with `redis=` (a cluster cannot bound every interval without
/// waiting for Redis on each request).
pub fn check_mode(mode: Mode, redis: bool) -> Result<(), ZoneConfError> {
    if mode == Mode::Strict && redis {
        return Err(ZoneConfError::StrictWithRedis);
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
        let twice: [&[u8]; 2] = [b"mode=strict", b"mode=estimate"];
        assert_eq!(
            take_mode(&twice).unwrap_err(),
            "duplicate parameter \"mode=\" in \"rate_limit_window_zone\": give it once"
        );
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
        let e = check_mode(Mode::Strict, true).unwrap_err().to_string();
        assert!(
            e.contains("\"mode=strict\" cannot be combined with \"redis=\""),
            "{e}"
        );
    }
}
