//! The optional parameters of `rate_limit_window` that change what a
//! request counts: `cost=N|$variable` and `count_status=CODE,...`.
//!
//! They are taken out of the directive's words here, before the remaining
//! `zone=` and `limit=` go to [`crate::parse::parse_limit_params`].

use crate::parse::escape;
use crate::window::MAX_LIMIT;

/// A set of HTTP status codes (100 to 599).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatusSet {
    bits: [u64; 10],
}

impl StatusSet {
    /// Adds one status.
    fn insert(&mut self, code: u16) {
        self.bits[usize::from(code / 64)] |= 1 << (code % 64);
    }

    /// Whether `code` is in the set (codes outside 0..640 never are).
    pub fn contains(&self, code: usize) -> bool {
        self.bits
            .get(code / 64)
            .is_some_and(|w| w & (1 << (code % 64)) != 0)
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.bits.iter().all(|&w| w == 0)
    }
}

/// The cost of one request, in requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CostSpec {
    /// `cost=N` (the default is 1).
    Fixed(u32),
    /// `cost=$var...`: the raw value text, compiled by the caller.
    Variable(Vec<u8>),
}

/// `cost=` and `count_status=` of one `rate_limit_window` directive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitOpts {
    /// The request's cost (default `Fixed(1)`).
    pub cost: CostSpec,
    /// Statuses that count; None counts every request.
    pub count_status: Option<StatusSet>,
    /// `charge=$var...`: the raw value text, compiled by the caller;
    /// evaluated when the response is done (see [`crate::charge`]).
    pub charge: Option<Vec<u8>>,
}

impl Default for LimitOpts {
    fn default() -> Self {
        Self {
            cost: CostSpec::Fixed(1),
            count_status: None,
            charge: None,
        }
    }
}

/// Why a cost is not usable: the value, for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostError(pub Vec<u8>);

/// Parses a cost: a decimal integer from 1 to [`MAX_LIMIT`] (no sign, no
/// spaces). A cost above the request's limit is refused by the caller.
pub fn parse_cost(s: &[u8]) -> Result<u32, CostError> {
    let bad = || CostError(s.iter().copied().take(64).collect());
    if s.is_empty() || s.len() > 7 || !s.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let n = s.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    if n == 0 || n > MAX_LIMIT {
        return Err(bad());
    }
    Ok(n)
}

/// Parses `401,403,5xx`: codes 100 to 599 and classes `1xx` to `5xx`.
pub fn parse_status_list(s: &[u8]) -> Result<StatusSet, String> {
    let mut set = StatusSet::default();
    for item in s.split(|&c| c == b',') {
        let err = || format!("invalid status \"{}\" in \"count_status=\"", escape(item));
        match item {
            [c @ b'1'..=b'5', b'x' | b'X', b'x' | b'X'] => {
                let base = u16::from(c - b'0') * 100;
                (base..base + 100).for_each(|code| set.insert(code));
            }
            [a, b, c] if [a, b, c].iter().all(|d| d.is_ascii_digit()) => {
                let code = [a, b, c]
                    .iter()
                    .fold(0u16, |n, &&d| n * 10 + u16::from(d - b'0'));
                if !(100..=599).contains(&code) {
                    return Err(err());
                }
                set.insert(code);
            }
            _ => return Err(err()),
        }
    }
    Ok(set)
}

/// Takes `cost=`, `count_status=` and `charge=` out of a `rate_limit_window`'s words;
/// returns the other words, in order, and the options.
pub fn split_limit_opts<'a>(args: &[&'a [u8]]) -> Result<(Vec<&'a [u8]>, LimitOpts), String> {
    let mut rest = Vec::with_capacity(args.len());
    let mut opts = LimitOpts::default();
    let (mut cost_seen, mut status_seen) = (false, false);
    for &a in args {
        if let Some(v) = a.strip_prefix(b"cost=") {
            if std::mem::replace(&mut cost_seen, true) {
                return Err("duplicate \"cost=\"".into());
            }
            opts.cost = if v.first() == Some(&b'$') {
                CostSpec::Variable(v.to_vec())
            } else {
                CostSpec::Fixed(parse_cost(v).map_err(|_| {
                    format!(
                        "invalid cost \"{}\": an integer from 1 to {MAX_LIMIT}, or a variable",
                        escape(v)
                    )
                })?)
            };
        } else if let Some(v) = a.strip_prefix(b"count_status=") {
            if std::mem::replace(&mut status_seen, true) {
                return Err("duplicate \"count_status=\"".into());
            }
            opts.count_status = Some(parse_status_list(v)?);
        } else if let Some(v) = a.strip_prefix(b"charge=") {
            if opts.charge.is_some() {
                return Err("duplicate \"charge=\"".into());
            }
            if v.first() != Some(&b'$') {
                return Err(format!(
                    "invalid charge \"{}\": a variable read when the response is done \
                     (\"charge=$upstream_http_x_tokens\"); a fixed count is \"cost=\"",
                    escape(v)
                ));
            }
            opts.charge = Some(v.to_vec());
        } else {
            rest.push(a);
        }
    }
    Ok((rest, opts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs() {
        assert_eq!(parse_cost(b"1"), Ok(1));
        assert_eq!(parse_cost(b"10"), Ok(10));
        assert_eq!(parse_cost(b"1000000"), Ok(MAX_LIMIT));
        for bad in [
            &b""[..],
            b"0",
            b"-1",
            b" 5",
            b"5 ",
            b"1e3",
            b"0x10",
            b"abc",
            b"1000001",
            b"99999999999",
        ] {
            assert!(parse_cost(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn status_lists() {
        let s = parse_status_list(b"401,403,5xx").unwrap();
        for yes in [401, 403, 500, 504, 599] {
            assert!(s.contains(yes), "{yes}");
        }
        for no in [200, 400, 404, 499, 600, 9999] {
            assert!(!s.contains(no), "{no}");
        }
        assert!(parse_status_list(b"4XX").unwrap().contains(499));
        for bad in [
            &b""[..],
            b"401,",
            b"99",
            b"600",
            b"6xx",
            b"40x",
            b"4011",
            b"abc",
        ] {
            assert!(parse_status_list(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn splits_the_options_out() {
        let args: [&[u8]; 4] = [b"zone=z", b"cost=$c", b"limit=5", b"count_status=401"];
        let (rest, opts) = split_limit_opts(&args).unwrap();
        assert_eq!(rest, [&b"zone=z"[..], b"limit=5"]);
        assert_eq!(opts.cost, CostSpec::Variable(b"$c".to_vec()));
        assert!(opts.count_status.unwrap().contains(401));
        let (rest, opts) = split_limit_opts(&[b"zone=z", b"limit=5"]).unwrap();
        assert_eq!(rest.len(), 2);
        assert_eq!(opts, LimitOpts::default());
        assert!(split_limit_opts(&[b"cost=0"]).is_err());
        assert!(split_limit_opts(&[b"cost=2", b"cost=3"]).is_err());
        assert!(split_limit_opts(&[b"count_status=401", b"count_status=403"]).is_err());
        assert!(split_limit_opts(&[b"count_status=2"]).is_err());
    }

    #[test]
    fn charge_is_a_variable_given_once() {
        let args: [&[u8]; 3] = [b"zone=z", b"charge=$upstream_http_x_tokens", b"limit=5"];
        let (rest, opts) = split_limit_opts(&args).unwrap();
        assert_eq!(rest, [&b"zone=z"[..], b"limit=5"]);
        assert_eq!(opts.charge, Some(b"$upstream_http_x_tokens".to_vec()));
        let e = split_limit_opts(&[b"charge=5"]).unwrap_err();
        assert!(e.contains("a fixed count is \"cost=\""), "{e}");
        assert!(split_limit_opts(&[b"charge="]).is_err());
        let e = split_limit_opts(&[b"charge=$a", b"charge=$b"]).unwrap_err();
        assert_eq!(e, "duplicate \"charge=\"");
    }
}
