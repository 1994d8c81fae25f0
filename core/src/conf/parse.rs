//! Parsers for every directive value, in pure Rust and nginx-compatible.
//!
//! [`parse_size`] and [`parse_time_ms`] mirror nginx's `ngx_parse_size` and
//! `ngx_parse_time(line, 0)` from `src/core/ngx_parse.c` (nginx 1.28) byte for
//! byte: they accept exactly the strings nginx accepts and return the same
//! values, so the glue can call them instead of the C functions. The
//! directive-level parsers ([`parse_zone_params`], [`parse_limit_params`])
//! return the same messages the module has always logged with
//! `ngx_conf_log_error` ("invalid zone size", "is too small", ...).
//!
//! Nothing here panics or allocates without bound on any input: the module
//! fuzzes every function (see `fuzz/`). Bytes from the configuration quoted
//! in a message go through [`escape`]: printable text is kept, control and
//! invalid UTF-8 bytes become `\xNN`, and anything past 64 bytes is cut.

pub use crate::conf::error::LimitError;
use crate::conf::error::{
    check_params, fractional_time, invalid_value, limit_req_rate, unknown_param, ConfError,
    LimitConfError, ZoneConfError, LIMIT_PARAMS, ZONE_NAME_PUNCTUATION, ZONE_PARAMS,
};
use crate::rule::window::{Window, DEFAULT_WINDOW_MS, MAX_LIMIT};
use crate::table::FailPolicy;

use crate::conf::redis_url::RedisArgs;
pub use crate::conf::redis_url::{RedisParams, DEFAULT_SYNC_MS, MAX_SYNC_MS, MIN_SYNC_MS};

pub use crate::units::{escape, parse_size, parse_time_ms, Escaped, MAX_UNIX_PATH, SHOWN_BYTES};

/// Parses a fixed limit, in requests per window: decimal digits only (no
/// sign, no spaces; leading zeros allowed), at most 10 of them, value
/// `0..=`[`MAX_LIMIT`]. `0` is a valid limit that rejects everything.
///
/// Used at configuration time and on every request for `limit=$variable`
/// values; it never allocates.
pub fn parse_limit(s: &[u8]) -> Result<u32, LimitError> {
    if s.is_empty() || s.len() > 10 || !s.iter().all(u8::is_ascii_digit) {
        return Err(LimitError::new(s));
    }
    let n = s.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    if n > u64::from(MAX_LIMIT) {
        return Err(LimitError::new(s));
    }
    Ok(n as u32)
}

/// Parses a window length (`window=TIME`) with [`parse_time_ms`] and
/// validates it with [`Window::from_ms`]: 1 s to 31 days. A bare number is in
/// seconds, as everywhere in nginx.
///
/// The window must be a whole number of seconds: the headers that tell it
/// to clients count in seconds (`w=` of RateLimit-Policy is an sf-integer,
/// and so are Retry-After and RateLimit-Reset), so `window=1500ms` could
/// only be sent wrong (`w=1`).
///
/// Errors: `invalid window "X": use a time …` when the time does not parse (with the
/// same time in whole units when it has a fraction: `1.5m` is `90s`),
/// `invalid window "X": window must be between 1s and 31d` when out of range,
/// `invalid window "X": it must be a whole number of seconds`.
pub fn parse_window(s: &[u8]) -> Result<Window, ConfError> {
    let Some(ms) = parse_time_ms(s) else {
        if let Some(e) = fractional_time("window", s) {
            return Err(e);
        }
        return Err(ZoneConfError::Window(s.to_vec()).into());
    };
    let w = Window::from_ms(ms).map_err(|e| ZoneConfError::WindowRange(s.to_vec(), e))?;
    if !ms.is_multiple_of(1000) {
        return Err(ZoneConfError::WindowFraction(s.to_vec()).into());
    }
    Ok(w)
}

/// Whether `b` may appear in a zone name: an HTTP token character (RFC 9110
/// `tchar`). The name goes unescaped into the RateLimit-Policy sf-string,
/// Prometheus labels and Redis key names, where `"`, `\`, `:`, spaces and
/// line breaks would break or forge the syntax.
pub(crate) fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || ZONE_NAME_PUNCTUATION.as_bytes().contains(&b)
}

/// The parameters of `rate_limit_window_zone KEY zone=NAME:SIZE
/// [window=TIME] [fail=open|closed] [redis=ADDR [sync=TIME] [secret=S]
/// [redis_mode=M] [redis_master=NAME] [redis_ca=PATH] [redis_cert=PATH]
/// [redis_key=PATH] [redis_password_file=PATH] [redis_outage=P]]];`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneParams {
    /// Zone name: `zone=` up to its last `:`, non-empty, HTTP token
    /// characters only.
    pub name: Vec<u8>,
    /// Shared memory size, in bytes.
    pub size: usize,
    /// Window length (default [`DEFAULT_WINDOW_MS`]).
    pub window: Window,
    /// The `window=` value as written (empty when not given), for messages
    /// in the operator's units.
    pub window_src: Vec<u8>,
    /// What to do when the zone is full (default [`FailPolicy::Open`]).
    pub fail: FailPolicy,
    /// Redis synchronisation, when `redis=` is given.
    pub redis: Option<RedisParams>,
    /// `ipv6_prefix=N` (bits, 32..=128), when given.
    pub ipv6_prefix: Option<u8>,
}

/// Parses the words of `rate_limit_window_zone` after KEY.
///
/// `min_size` is the smallest accepted zone size in bytes (it depends on
/// the page size: the glue passes `8 * ngx_pagesize`). A parameter given
/// twice is refused ([`check_params`]).
///
/// Errors (exact texts): `invalid zone size "zone=...": use zone=NAME:SIZE …` (no `:`, empty name
/// or a size [`parse_size`] rejects), `invalid zone name "NAME": use only
/// letters, digits and ` followed by the other HTTP token characters (a
/// name with any other byte), `zone "NAME" is too small: it must be
/// at least N bytes`, any [`parse_window`] error,
/// the parameter-name errors of [`check_params`] (unknown, duplicate,
/// `limit_req` habits), `invalid value "X" in "fail="`,
/// `"rate_limit_window_zone" must have "zone" parameter`, and the Redis
/// parameters' errors ([`crate::conf::redis_url::RedisArgs`]).
pub fn parse_zone_params(args: &[&[u8]], min_size: usize) -> Result<ZoneParams, ConfError> {
    check_params("rate_limit_window_zone", args, ZONE_PARAMS)?;
    let mut zone: Option<(Vec<u8>, usize)> = None;
    let mut window = None;
    let mut window_src = Vec::new();
    let mut fail = FailPolicy::Open;
    let mut redis = RedisArgs::default();
    let mut ipv6_prefix = None;

    for &a in args {
        if let Some(v) = a.strip_prefix(b"zone=") {
            let bad = || ZoneConfError::Size(a.to_vec());
            let colon = v.iter().rposition(|&c| c == b':').ok_or_else(bad)?;
            let size = parse_size(&v[colon + 1..]).ok_or_else(bad)?;
            if colon == 0 {
                return Err(bad().into());
            }
            let name = &v[..colon];
            if !name.iter().all(|&b| is_token_char(b)) {
                return Err(ZoneConfError::Name(name.to_vec()).into());
            }
            if size < min_size {
                let (name, min) = (name.to_vec(), min_size);
                return Err(ZoneConfError::TooSmall { name, min }.into());
            }
            zone = Some((name.to_vec(), size));
        } else if let Some(v) = a.strip_prefix(b"window=") {
            window = Some(parse_window(v)?);
            window_src = v.to_vec();
        } else if let Some(v) = a.strip_prefix(b"ipv6_prefix=") {
            ipv6_prefix = Some(crate::conf::addr::parse_ipv6_prefix(v)?);
        } else if let Some(v) = a.strip_prefix(b"fail=") {
            fail = match v {
                b"open" => FailPolicy::Open,
                b"closed" => FailPolicy::Closed,
                _ => return Err(invalid_value("fail=", v, &["open", "closed"])),
            };
        } else if !redis.accept(a)? {
            return Err(unknown_param("rate_limit_window_zone", a, ZONE_PARAMS));
        }
    }

    let Some((name, size)) = zone else {
        return Err(ZoneConfError::MissingZone.into());
    };
    let redis = redis.finish()?;
    let default_window = || Window::from_ms(DEFAULT_WINDOW_MS).expect("default window is valid");
    Ok(ZoneParams {
        name,
        size,
        window: window.unwrap_or_else(default_window),
        window_src,
        fail,
        redis,
        ipv6_prefix,
    })
}

/// A number of requests, fixed or from a variable: `limit=` and `cost=`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueSpec {
    /// `limit=N`, `cost=N`: a fixed number of requests.
    Fixed(u32),
    /// `limit=$var...`: the raw value text (starting with `$`), to be
    /// compiled as a complex value and parsed per request ([`parse_limit`],
    /// [`crate::conf::limit_opts::parse_cost`]).
    Variable(Vec<u8>),
}

/// `limit=`: requests per window, fixed or from a variable.
pub type LimitSpec = ValueSpec;

/// The parameters of `rate_limit_window zone=NAME limit=N|$var;`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitParams {
    /// Name of the zone (non-empty).
    pub zone: Vec<u8>,
    /// The limit, fixed or from a variable.
    pub limit: LimitSpec,
}

/// Parses the words of `rate_limit_window` (all of them: there is no KEY).
/// A parameter given twice is refused ([`check_params`]).
///
/// Errors (exact texts): `invalid zone name "zone="`, any [`LimitError`]
/// text (a `limit_req` rate such as `10r/s` gets its `window=`/`limit=`
/// equivalent instead), the parameter-name errors of [`check_params`],
/// `"rate_limit_window" must have "zone" parameter`,
/// `"rate_limit_window" must have "limit" parameter`.
pub fn parse_limit_params(args: &[&[u8]]) -> Result<LimitParams, ConfError> {
    check_params("rate_limit_window", args, LIMIT_PARAMS)?;
    let mut zone = None;
    let mut limit = None;
    for &a in args {
        if let Some(v) = a.strip_prefix(b"zone=") {
            if v.is_empty() {
                return Err(LimitConfError::EmptyZone(a.to_vec()).into());
            }
            zone = Some(v.to_vec());
        } else if let Some(v) = a.strip_prefix(b"limit=") {
            limit = Some(if v.first() == Some(&b'$') {
                LimitSpec::Variable(v.to_vec())
            } else {
                LimitSpec::Fixed(parse_limit(v).map_err(|e| match limit_req_rate(v) {
                    Some(rate) => ConfError::LimitReqRate {
                        word: a.to_vec(),
                        rate,
                    },
                    None => LimitConfError::Limit(e).into(),
                })?)
            });
        } else {
            return Err(unknown_param("rate_limit_window", a, LIMIT_PARAMS));
        }
    }
    let Some(zone) = zone else {
        return Err(LimitConfError::Missing("zone").into());
    };
    let Some(limit) = limit else {
        return Err(LimitConfError::Missing("limit").into());
    };
    Ok(LimitParams { zone, limit })
}

/// The variable name when `src` is exactly one nginx variable, `$name` or
/// `${name}` (letters, digits and `_`, as nginx's script compiler reads
/// them), with no literal text around it; None for anything else. Such a key
/// can be read with one variable lookup instead of the script engine.
pub fn single_variable(src: &[u8]) -> Option<&[u8]> {
    let rest = src.strip_prefix(b"$")?;
    let name = match rest.strip_prefix(b"{") {
        Some(braced) => braced.strip_suffix(b"}")?,
        None => rest,
    };
    let ok = !name.is_empty() && name.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_');
    ok.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_variable_keys() {
        assert_eq!(
            single_variable(b"$binary_remote_addr"),
            Some(&b"binary_remote_addr"[..])
        );
        assert_eq!(single_variable(b"${http_x_key}"), Some(&b"http_x_key"[..]));
        assert_eq!(single_variable(b"$arg_1"), Some(&b"arg_1"[..]));
        for not_one in [
            &b""[..],
            b"$",
            b"${}",
            b"${x",
            b"x$y",
            b"$a$b",
            b"$a:$b",
            b"$http_x-key",
            b"${a}b",
            b"literal",
        ] {
            assert_eq!(single_variable(not_one), None, "{}", escape(not_one));
        }
    }

    #[test]
    fn size_matches_ngx_parse_size() {
        assert_eq!(parse_size(b"0"), Some(0));
        assert_eq!(parse_size(b"1"), Some(1));
        assert_eq!(parse_size(b"1k"), Some(1024));
        assert_eq!(parse_size(b"1K"), Some(1024));
        assert_eq!(parse_size(b"1m"), Some(1 << 20));
        assert_eq!(parse_size(b"10M"), Some(10 << 20));
        assert_eq!(parse_size(b"007k"), Some(7 * 1024));
        for bad in [
            &b""[..],
            b"k",
            b"M",
            b"1g",
            b"1G",
            b"-1",
            b"+1",
            b" 1",
            b"1 ",
            b"1kk",
            b"1.5m",
            b"1km",
            b"0x10",
        ] {
            assert_eq!(parse_size(bad), None, "{}", escape(bad));
        }
        let max = isize::MAX as usize;
        assert_eq!(parse_size(max.to_string().as_bytes()), Some(max));
        assert_eq!(parse_size((max as u128 + 1).to_string().as_bytes()), None);
        let kmax = max / 1024;
        assert_eq!(parse_size(format!("{kmax}k").as_bytes()), Some(kmax * 1024));
        assert_eq!(parse_size(format!("{}k", kmax + 1).as_bytes()), None);
        let mmax = max / (1 << 20);
        assert_eq!(parse_size(format!("{mmax}m").as_bytes()), Some(mmax << 20));
        assert_eq!(parse_size(format!("{}m", mmax + 1).as_bytes()), None);
    }

    #[test]
    fn time_matches_ngx_parse_time() {
        let ok: &[(&[u8], u64)] = &[
            (b"10m", 600_000),
            (b"1h30m", 5_400_000),
            (b"30", 30_000),
            (b"30s", 30_000),
            (b"500ms", 500),
            (b"1s500ms", 1_500),
            (b"1m30", 90_000),
            (b"1w", 604_800_000),
            (b"1d", 86_400_000),
            (
                b"2w3d4h5m6s7ms",
                ((((2 * 7 + 3) * 24 + 4) * 60 + 5) * 60 + 6) * 1000 + 7,
            ),
            (b"1h 30m", 5_400_000),
            (b"1h  30m  ", 5_400_000),
            (b"1 2", 3_000),
            (b" 5", 5_000),
            (b"5 ", 5_000),
            (b"1hm", 3_600_000),
            (b"h1", 1_000),
            (b"0", 0),
            (b"0ms", 0),
            // A trailing bare number is seconds whatever came before it.
            (b"1s 2", 3_000),
            (b"1s2", 3_000),
            (b"500ms2", 2_500),
        ];
        for &(s, ms) in ok {
            assert_eq!(parse_time_ms(s), Some(ms), "{}", escape(s));
        }
        let bad: &[&[u8]] = &[
            b"", b"h", b"ms", b" ", b"1y", b"1M", b"1m1h", b"1s1s", b"1ms1s", b"1ms1ms", b"1x",
            b"-1s", b"1.5s", b"5 s", b"1 2 3", b"1 2s", b"1msms",
        ];
        for &s in bad {
            assert_eq!(parse_time_ms(s), None, "{}", escape(s));
        }
        // Overflow: digits, unit scaling, the sum, the final bare seconds.
        let max = i64::MAX as u64;
        assert_eq!(parse_time_ms(format!("{max}ms").as_bytes()), Some(max));
        assert_eq!(
            parse_time_ms(format!("{}ms", max as u128 + 1).as_bytes()),
            None
        );
        assert_eq!(
            parse_time_ms(format!("{}", max / 1000).as_bytes()),
            Some(max / 1000 * 1000)
        );
        assert_eq!(
            parse_time_ms(format!("{}", max / 1000 + 1).as_bytes()),
            None
        );
        let hmax = max / 1000 / 3600;
        assert_eq!(
            parse_time_ms(format!("{hmax}h").as_bytes()),
            Some(hmax * 3_600_000)
        );
        assert_eq!(parse_time_ms(format!("{}h", hmax + 1).as_bytes()), None);
        assert_eq!(parse_time_ms(format!("{hmax}h{max}ms").as_bytes()), None);
    }

    #[test]
    fn limit_values() {
        assert_eq!(parse_limit(b"0"), Ok(0));
        assert_eq!(parse_limit(b"1000000"), Ok(1_000_000));
        assert_eq!(parse_limit(b"0000000010"), Ok(10));
        for bad in [
            &b""[..],
            b"1000001",
            b"-1",
            b"+1",
            b"1 ",
            b"00000000001",
            b"4294967296",
            b"$x",
        ] {
            assert!(parse_limit(bad).is_err(), "{}", escape(bad));
        }
        assert_eq!(
            parse_limit(b"12a").unwrap_err().to_string(),
            "invalid limit \"12a\": it must be an integer from 0 to 1000000, or a variable"
        );
        let long = [b'9'; 100];
        let e = parse_limit(&long).unwrap_err();
        assert_eq!(e.input().len(), 64);
        assert!(e.truncated());
        assert!(e
            .to_string()
            .contains(&format!("\"{}...\"", "9".repeat(64))));
    }

    #[test]
    fn escaping() {
        assert_eq!(escape(b"a\"b\\c").to_string(), "a\\\"b\\\\c");
        assert_eq!(escape(b"\n\x00\xff").to_string(), "\\x0a\\x00\\xff");
        assert_eq!(escape("é".as_bytes()).to_string(), "é");
        assert_eq!(
            escape(&[b'x'; 65]).to_string(),
            format!("{}...", "x".repeat(64))
        );
    }
}
