//! The directive parameters of overrides and bans: `overrides=N` on
//! `rate_limit_window_zone` and `ban=TIME` on `rate_limit_window`, taken
//! out of the words before the other parameters are parsed.

use crate::overrides::{DEFAULT_OVERRIDES, MAX_OVERRIDES};
use crate::parse::{escape, parse_time_ms};

/// Longest `ban=`, in ms (30 days).
pub const MAX_BAN_MS: u64 = 30 * 86_400_000;

/// Takes `overrides=N` out of a zone's words: the entries of its override
/// table ([`DEFAULT_OVERRIDES`] when absent), and the other words in order.
pub fn take_overrides<'a>(args: &[&'a [u8]]) -> Result<(usize, Vec<&'a [u8]>), String> {
    let mut n = None;
    let mut rest = Vec::with_capacity(args.len());
    for &a in args {
        let Some(v) = a.strip_prefix(b"overrides=") else {
            rest.push(a);
            continue;
        };
        if n.is_some() {
            return Err("duplicate \"overrides=\"".into());
        }
        n = Some(parse_count(v).ok_or_else(|| {
            format!(
                "invalid overrides \"{}\": an integer from 1 to {MAX_OVERRIDES}",
                escape(v)
            )
        })?);
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

/// Takes `ban=TIME` out of a limit's words: the ban's length in ms (None:
/// no ban), and the other words in order. TIME is an nginx time (`30s`,
/// `10m`, `1h`; a bare number is seconds), from 1 s to 30 days.
pub fn take_ban<'a>(args: &[&'a [u8]]) -> Result<(Option<u64>, Vec<&'a [u8]>), String> {
    let mut ban = None;
    let mut rest = Vec::with_capacity(args.len());
    for &a in args {
        let Some(v) = a.strip_prefix(b"ban=") else {
            rest.push(a);
            continue;
        };
        if ban.is_some() {
            return Err("duplicate \"ban=\"".into());
        }
        match parse_time_ms(v) {
            Some(ms) if (1000..=MAX_BAN_MS).contains(&ms) => ban = Some(ms),
            _ => {
                return Err(format!(
                    "invalid ban \"{}\": use a time from 1s to 30d, e.g. ban=10m",
                    escape(v)
                ))
            }
        }
    }
    Ok((ban, rest))
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
            let e = take_overrides(&[bad]).unwrap_err();
            assert!(e.starts_with("invalid overrides"), "{e}");
        }
        assert!(take_overrides(&[b"overrides=1", b"overrides=2"]).is_err());
    }

    #[test]
    fn ban_param() {
        let (b, rest) = take_ban(&[b"zone=a", b"ban=10m", b"limit=5"]).unwrap();
        assert_eq!(b, Some(600_000));
        assert_eq!(rest, [&b"zone=a"[..], b"limit=5"]);
        assert_eq!(take_ban(&[b"ban=30"]).unwrap().0, Some(30_000));
        assert_eq!(take_ban(&[b"limit=5"]).unwrap().0, None);
        for bad in [&b"ban="[..], b"ban=500ms", b"ban=31d", b"ban=x"] {
            assert!(take_ban(&[bad]).unwrap_err().starts_with("invalid ban"));
        }
        assert!(take_ban(&[b"ban=1m", b"ban=2m"]).is_err());
    }
}
