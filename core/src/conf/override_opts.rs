//! The directive parameters of overrides and bans: `overrides=N` on
//! `rate_limit_window_zone` and `ban=TIME` on `rate_limit_window`, taken
//! out of the words before the other parameters are parsed (`ban=` by
//! [`crate::conf::limit_opts::parse_ban`]).

use crate::conf::error::{ConfError, ZoneConfError};
use crate::overrides::{DEFAULT_OVERRIDES, MAX_OVERRIDES};

/// Longest `ban=`, in ms (30 days).
pub const MAX_BAN_MS: u64 = 30 * 86_400_000;

/// Takes `overrides=N` out of a zone's words: the entries of its override
/// table ([`DEFAULT_OVERRIDES`] when absent), and the other words in order.
/// Given twice, it is refused as every parameter is
/// ([`ConfError::Duplicate`]).
pub fn take_overrides<'a>(args: &[&'a [u8]]) -> Result<(usize, Vec<&'a [u8]>), ConfError> {
    let mut n = None;
    let mut rest = Vec::with_capacity(args.len());
    for &a in args {
        let Some(v) = a.strip_prefix(b"overrides=") else {
            rest.push(a);
            continue;
        };
        let count = parse_count(v).ok_or_else(|| ZoneConfError::Overrides(v.to_vec()))?;
        if n.replace(count).is_some() {
            return Err(ConfError::Duplicate {
                directive: "rate_limit_window_zone",
                name: b"overrides=".to_vec(),
            });
        }
    }
    Ok((n.unwrap_or(DEFAULT_OVERRIDES), rest))
}

fn parse_count(v: &[u8]) -> Option<usize> {
    if v.is_empty() || v.len() > 8 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = v.iter().fold(0usize, |n, d| n * 10 + usize::from(d - b'0'));
    (1..=MAX_OVERRIDES).contains(&n).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_param() {
        let (n, rest) = take_overrides(&[b"zone=a:1m", b"overrides=10"]).unwrap();
        assert_eq!((n, rest), (10, vec![&b"zone=a:1m"[..]]));
        assert_eq!(take_overrides(&[b"zone=a:1m"]).unwrap().0, 1024);
        assert_eq!(take_overrides(&[b"overrides=1048576"]).unwrap().0, 1 << 20);
        for bad in [
            &b"overrides=0"[..],
            b"overrides=",
            b"overrides=-1",
            b"overrides=1048577",
        ] {
            let e = take_overrides(&[bad]).unwrap_err().to_string();
            assert!(e.starts_with("invalid overrides"), "{e}");
        }
        assert_eq!(
            take_overrides(&[b"overrides=1", b"overrides=2"]).unwrap_err(),
            "duplicate parameter \"overrides=\" in \"rate_limit_window_zone\": give it once"
        );
    }
}
