//! `rate_limit_window_zone`'s words after KEY, parsed into one typed
//! [`ZoneDirective`]: the mode, the override table's size and the other
//! parameters ([`ZoneParams`]), checked together. Every error is a
//! [`ConfError`] whose text is the `[emerg]` the glue logs.

use crate::cluster::MIN_SECRET_LEN;
use crate::conf::error::{check_params, ConfError, ZoneConfError, ZONE_PARAMS};
use crate::conf::override_opts::take_overrides;
use crate::conf::parse::{parse_zone_params, ZoneParams};
use crate::rule::mode::{check_mode, take_mode, Mode};
use crate::state::{check_state, take_state};

/// One `rate_limit_window_zone` directive, parsed (the Redis files named
/// are read by the glue, which loads them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneDirective {
    /// `mode=` (default [`Mode::Estimate`]).
    pub mode: Mode,
    /// `overrides=`: entries of the zone's override table.
    pub overrides: usize,
    /// `state=FILE`: the state file's path as written (None without it).
    pub state: Option<Vec<u8>>,
    /// The other parameters.
    pub params: ZoneParams,
}

/// Parses the words of `rate_limit_window_zone` after KEY. `min_size` is
/// the smallest zone in bytes (the glue passes 8 pages).
///
/// Errors, in this order: the parameter names ([`check_params`]: unknown,
/// `limit_req` habits, duplicates), `mode=`, `state=`, `overrides=`, the
/// others ([`parse_zone_params`]), `mode=strict` with `redis=`, `state=`
/// with `redis=`, and a Redis zone's too short `secret=`.
pub fn parse_zone_directive(args: &[&[u8]], min_size: usize) -> Result<ZoneDirective, ConfError> {
    check_params("rate_limit_window_zone", args, ZONE_PARAMS)?;
    let (mode, rest) = take_mode(args)?;
    let (state, rest) = take_state(&rest)?;
    let (overrides, rest) = take_overrides(&rest)?;
    let params = parse_zone_params(&rest, min_size)?;
    let redis = params.redis.as_ref();
    check_mode(mode, redis.is_some())?;
    check_state(&params.name, state, redis.is_some())?;
    if redis.is_some_and(|r| r.secret.len() < MIN_SECRET_LEN) {
        let min = MIN_SECRET_LEN;
        return Err(ZoneConfError::ShortSecret { min }.into());
    }
    Ok(ZoneDirective {
        mode,
        overrides,
        state: state.map(<[u8]>::to_vec),
        params,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::addr::Ipv6PrefixError;

    const MIN: usize = 32_768;

    fn parse(words: &str) -> Result<ZoneDirective, ConfError> {
        let w: Vec<&[u8]> = words.split(' ').map(str::as_bytes).collect();
        parse_zone_directive(&w, MIN)
    }

    #[test]
    fn every_part_is_typed() {
        let d = parse("zone=a:1m mode=strict overrides=10 window=10s state=/tmp/a").unwrap();
        assert_eq!((d.mode, d.overrides), (Mode::Strict, 10));
        assert_eq!(d.state.as_deref(), Some(&b"/tmp/a"[..]));
        assert_eq!(d.params.name, b"a");
        assert_eq!(d.params.window.ms(), 10_000);
        let d = parse("zone=a:1m").unwrap();
        assert_eq!((d.mode, d.overrides), (Mode::Estimate, 1024));
        assert_eq!(d.state, None);
    }

    #[test]
    fn every_duplicate_is_refused_one_way() {
        for twice in [
            "zone=b:1m",
            "mode=strict",
            "mode=bogus",
            "overrides=5",
            "window=1m",
            "fail=open",
            "state=/x",
            "ipv6_prefix=64",
            "redis=127.0.0.1:6379",
        ] {
            let words = format!("zone=a:1m {twice} {twice}");
            let name = &twice[..=twice.find('=').unwrap()];
            let name = if name == "zone=" { "zone=" } else { name };
            assert_eq!(
                parse(&words).unwrap_err(),
                ConfError::Duplicate {
                    directive: "rate_limit_window_zone",
                    name: name.as_bytes().to_vec()
                },
                "{words}"
            );
        }
    }

    #[test]
    fn state_and_prefix_errors_are_typed() {
        assert_eq!(
            parse("zone=a:1m state=").unwrap_err(),
            ConfError::Zone(ZoneConfError::EmptyState)
        );
        assert_eq!(
            parse("zone=a:1m ipv6_prefix=129").unwrap_err(),
            ConfError::Zone(ZoneConfError::Ipv6Prefix(Ipv6PrefixError(b"129".to_vec())))
        );
        assert_eq!(
            parse("zone=a:1m ipv6_prefix=48")
                .unwrap()
                .params
                .ipv6_prefix,
            Some(48)
        );
        let e = parse("zone=per_ip:1m state=/x redis=127.0.0.1:6379 secret=0123456789abcdef");
        assert_eq!(
            e.unwrap_err(),
            ConfError::Zone(ZoneConfError::StateWithRedis(b"per_ip".to_vec()))
        );
        // Checked before the secret, as the glue did.
        let e = parse("zone=per_ip:1m state=/x redis=127.0.0.1:6379 secret=short");
        assert_eq!(
            e.unwrap_err(),
            "\"state=\" cannot be combined with \"redis=\" in zone \"per_ip\": the counts \
             of a redis= zone are kept in Redis across restarts"
        );
    }

    #[test]
    fn combinations_are_checked() {
        let e = parse("zone=a:1m mode=strict redis=127.0.0.1:6379 secret=0123456789abcdef");
        assert_eq!(
            e.unwrap_err(),
            ConfError::Zone(ZoneConfError::StrictWithRedis)
        );
        for short in ["secret=short", "secret=fifteen-chars-x", "sync=1s"] {
            let e = parse(&format!("zone=a:1m redis=127.0.0.1:6379 {short}")).unwrap_err();
            assert_eq!(
                e,
                ConfError::Zone(ZoneConfError::ShortSecret { min: 16 }),
                "{short}"
            );
            assert_eq!(
                e,
                "\"redis=\" needs \"secret=\" of at least 16 characters, the same on every \
                 gateway: it seeds the hash that names clients in Redis"
            );
        }
        assert!(parse("zone=a:1m redis=127.0.0.1:6379 secret=sixteen-chars-xy").is_ok());
        assert!(parse("zone=a:1m redis=127.0.0.1:6379 secret=0123456789abcdef").is_ok());
        assert_eq!(
            parse("zone=a:1m mode=exact").unwrap_err(),
            "invalid mode \"exact\": use \"estimate\" or \"strict\""
        );
        assert!(parse("zone=a:1m overrides=0")
            .unwrap_err()
            .to_string()
            .starts_with("invalid overrides \"0\""));
        assert_eq!(
            parse("window=1m").unwrap_err(),
            "\"rate_limit_window_zone\" must have \"zone\" parameter"
        );
    }
}
