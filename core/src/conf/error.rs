//! Configuration errors that say what to do: the texts of the `[emerg]`
//! lines the glue logs (with `ngx_conf_log_error`, which appends nginx's
//! own ` in FILE:LINE`).
//!
//! Every message names the fix: the `limit_req` habits (`10r/s`, `rate=`,
//! `burst=`, `nodelay`) get their `window=`/`limit=`/`delay=` equivalent,
//! a fractional time gets the same time in whole units, an unknown
//! parameter gets the nearest valid name (edit distance) or the list of
//! valid ones, an enum value gets the allowed values, and a reload that
//! changes a zone names what changed in the units the operator wrote.

use core::fmt;

use crate::conf::addr::Ipv6PrefixError;
pub use crate::conf::redis_url::RedisError;
pub use crate::conf::value_error::{
    LimitConfError, LimitError, RedisFileError, ZoneConfError, ZONE_NAME_PUNCTUATION,
};
use crate::units::escape;
pub use crate::units::Units;

/// The parameters of `rate_limit_window_zone` (after KEY), with their `=`.
pub const ZONE_PARAMS: &[&str] = &[
    "zone=",
    "window=",
    "calendar=",
    "tz=",
    "mode=",
    "fail=",
    "ipv6_prefix=",
    "state=",
    "redis=",
    "sync=",
    "secret=",
    "redis_mode=",
    "redis_master=",
    "redis_ca=",
    "redis_cert=",
    "redis_key=",
    "redis_password_file=",
    "redis_outage=",
    "overrides=",
];

/// The parameters of `rate_limit_window`, with their `=`.
pub const LIMIT_PARAMS: &[&str] = &[
    "zone=",
    "limit=",
    "in_flight=",
    "delay=",
    "delay_max_held=",
    "cost=",
    "count_status=",
    "charge=",
    "ban=",
    "name=",
];

/// Largest edit distance at which a name is offered as "did you mean".
const NEAR: usize = 2;

/// A `limit_req` parameter and what to write instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Habit {
    /// `burst=N`.
    Burst,
    /// `nodelay`.
    Nodelay,
    /// `rate=` whose value is not `NNr/s` or `NNr/m`.
    Rate,
}

/// A `limit_req` rate: `count` requests per `per` (`"1s"` or `"1m"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Requests per period.
    pub count: u64,
    /// The period as a window: `"1s"` or `"1m"`.
    pub per: &'static str,
}

/// A configuration error, printed as the text of an nginx `[emerg]`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfError {
    /// A `limit_req` rate (`limit=10r/s`, `rate=10r/m`), quoted as written.
    #[error(
        "\"{}\" is limit_req's syntax: rate_limit_window counts requests per window; \
         for {}r/{} write \"window={}\" on \"rate_limit_window_zone\" and \
         \"limit={}\" on \"rate_limit_window\"",
        escape(.word), .rate.count, &.rate.per[1..], .rate.per, .rate.count
    )]
    LimitReqRate {
        /// The whole word, e.g. `limit=10r/s`.
        word: Vec<u8>,
        /// The rate it asks for.
        rate: Rate,
    },
    /// Another `limit_req` parameter.
    #[error("\"{}\" is limit_req's syntax: {}", escape(.word), habit_hint(*.habit))]
    LimitReqParam {
        /// The whole word, e.g. `burst=20`.
        word: Vec<u8>,
        /// Which one.
        habit: Habit,
    },
    /// A parameter of the other directive (`limit=` on the zone).
    #[error("invalid parameter \"{}\": it belongs on \"{belongs_to}\"", escape(.word))]
    Misplaced {
        /// The whole word.
        word: Vec<u8>,
        /// The directive it belongs to.
        belongs_to: &'static str,
    },
    /// A parameter no directive knows.
    #[error("invalid parameter \"{}\" in \"{directive}\": {}", escape(.word), Suggest(*.nearest, .valid))]
    UnknownParam {
        /// The directive.
        directive: &'static str,
        /// The whole word.
        word: Vec<u8>,
        /// The nearest valid name, when one is close.
        nearest: Option<&'static str>,
        /// Every valid name.
        valid: &'static [&'static str],
    },
    /// The same parameter twice in one directive: every parameter of both
    /// directives is refused this one way.
    #[error("duplicate parameter \"{}\" in \"{directive}\": give it once", escape(.name))]
    Duplicate {
        /// The directive.
        directive: &'static str,
        /// The parameter's name (with `=` when it has a value).
        name: Vec<u8>,
    },
    /// A value outside an enum.
    #[error("invalid value \"{}\" in \"{what}\": use {}", escape(.value), OneOf(.allowed))]
    InvalidValue {
        /// The directive or parameter (`rate_limit_window_phase`, `fail=`).
        what: String,
        /// The value given.
        value: Vec<u8>,
        /// The allowed values.
        allowed: Vec<String>,
    },
    /// A time with a fraction (`window=1.5m`): nginx times are integers.
    #[error("{}", fraction(.what, .value, *.ms))]
    FractionalTime {
        /// The parameter (`window`).
        what: &'static str,
        /// The value as written.
        value: Vec<u8>,
        /// The same time in ms.
        ms: u64,
    },
    /// A zone used by `rate_limit_window` and never declared.
    #[error(
        "zone \"{}\" used by \"rate_limit_window\" is not defined by any \
         \"rate_limit_window_zone\": {}",
        escape(.name), Declare(.name, .nearest.as_deref())
    )]
    UndefinedZone {
        /// Its name.
        name: Vec<u8>,
        /// The nearest declared zone, when one is close.
        nearest: Option<Vec<u8>>,
    },
    /// A reload that changes a zone's key or window.
    #[error(transparent)]
    ZoneChanged(ZoneChange),
    /// A value of `rate_limit_window` (`limit=`, `cost=`, `delay=`, ...).
    #[error(transparent)]
    Limit(#[from] LimitConfError),
    /// A value of `rate_limit_window_zone` (`zone=`, `window=`, `mode=`, ...).
    #[error(transparent)]
    Zone(#[from] ZoneConfError),
    /// A Redis parameter of `rate_limit_window_zone`.
    #[error(transparent)]
    Redis(#[from] RedisError),
    /// A file of a Redis connection, read at load.
    #[error(transparent)]
    RedisFile(#[from] RedisFileError),
}

/// What a reload changes in a zone, as written in each configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneChange {
    /// The zone's name.
    pub zone: Vec<u8>,
    /// The running and the new key, when they differ.
    pub key: Option<(Vec<u8>, Vec<u8>)>,
    /// The running and the new `window=` text, when the windows differ.
    pub window: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::error::Error for ZoneChange {}

impl From<Ipv6PrefixError> for ConfError {
    fn from(e: Ipv6PrefixError) -> Self {
        ConfError::Zone(e.into())
    }
}

impl PartialEq<str> for ConfError {
    fn eq(&self, other: &str) -> bool {
        format!("{self}") == other
    }
}

impl PartialEq<&str> for ConfError {
    fn eq(&self, other: &&str) -> bool {
        format!("{self}") == **other
    }
}

impl PartialEq<String> for ConfError {
    fn eq(&self, other: &String) -> bool {
        format!("{self}") == *other
    }
}

/// `"a", "b" or "c"`.
struct OneOf<'a, S: AsRef<str>>(&'a [S]);

impl<S: AsRef<str>> fmt::Display for OneOf<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        for (i, s) in self.0.iter().enumerate() {
            let sep = match i {
                0 => "",
                i if i + 1 == n => " or ",
                _ => ", ",
            };
            write!(f, "{sep}\"{}\"", s.as_ref())?;
        }
        Ok(())
    }
}

/// What to write instead of a `limit_req` parameter.
fn habit_hint(habit: Habit) -> &'static str {
    match habit {
        Habit::Burst => {
            "a window admits up to \"limit=\" requests at any pace, so there is no \
             burst: raise \"limit=\" (or shorten \"window=\"), and add \"delay=TIME\" \
             to hold requests over the limit instead of rejecting them"
        }
        Habit::Nodelay => {
            "rate_limit_window never delays a request unless \"delay=TIME\" is \
             given, so leave \"nodelay\" out"
        }
        Habit::Rate => {
            "write the period as \"window=\" on \"rate_limit_window_zone\" and the \
             number of requests as \"limit=\" on \"rate_limit_window\" (10r/s is \
             window=1s limit=10)"
        }
    }
}

/// `did you mean "x="?` or the list of valid names.
struct Suggest<'a>(Option<&'static str>, &'a [&'static str]);

impl fmt::Display for Suggest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(n) => write!(f, "did you mean \"{n}\"?"),
            None => write!(f, "use {}", OneOf(self.1)),
        }
    }
}

/// The nearest declared zone, or how to declare this one.
struct Declare<'a>(&'a [u8], Option<&'a [u8]>);

impl fmt::Display for Declare<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(n) => write!(f, "did you mean \"{}\"?", escape(n)),
            None => write!(
                f,
                "declare it in http{{}} with \"rate_limit_window_zone KEY zone={}:SIZE;\"",
                escape(self.0)
            ),
        }
    }
}

/// The text of [`ConfError::FractionalTime`].
fn fraction<'a>(what: &'a str, value: &'a [u8], ms: u64) -> Fraction<'a> {
    Fraction { what, value, ms }
}

/// [`ConfError::FractionalTime`]'s text.
struct Fraction<'a> {
    what: &'a str,
    value: &'a [u8],
    ms: u64,
}

impl fmt::Display for Fraction<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, ms) = (self.what, self.ms);
        write!(
            f,
            "invalid {what} \"{}\": nginx times are whole numbers",
            escape(self.value)
        )?;
        if let Some(t) = whole_seconds(ms) {
            return write!(f, "; write {what}={t}");
        }
        let (lo, hi) = (ms / 1000, ms.div_ceil(1000));
        write!(f, ", and a {what} is a whole number of seconds")?;
        if lo == 0 {
            write!(f, "; write {what}={}", Units(hi * 1000))
        } else {
            write!(
                f,
                "; write {what}={} or {what}={}",
                Units(lo * 1000),
                Units(hi * 1000)
            )
        }
    }
}

impl fmt::Display for ZoneChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate_limit_window_zone \"{}\": ", escape(&self.zone))?;
        if let Some((old, new)) = &self.window {
            // A calendar's text is its own parameter (`calendar=day`).
            let named = |w: &[u8]| match w.starts_with(b"calendar=") {
                true => escape(w).to_string(),
                false => format!("window={}", escape(w)),
            };
            write!(
                f,
                "{} cannot replace the running {} on reload (the counts are per window)",
                named(new),
                named(old)
            )?;
        }
        if let Some((old, new)) = &self.key {
            if self.window.is_some() {
                f.write_str(", and ")?;
            }
            write!(
                f,
                "key \"{}\" cannot replace the running key \"{}\" on reload",
                escape(new),
                escape(old)
            )?;
        }
        f.write_str(": keep the running value, give the new one a new zone name, or restart nginx")
    }
}

/// `ms` in whole units, when it is a whole, non-zero number of seconds.
fn whole_seconds(ms: u64) -> Option<Units> {
    (ms > 0 && ms.is_multiple_of(1000)).then_some(Units(ms))
}

/// Levenshtein distance of two byte strings (short: parameter names).
pub fn edit_distance(a: &[u8], b: &[u8]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The candidate nearest to `name` (at most [`NEAR`] edits away, and fewer
/// than the name's length), or None.
pub fn nearest<'c, S: AsRef<[u8]> + ?Sized>(name: &[u8], candidates: &'c [&'c S]) -> Option<&'c S> {
    candidates
        .iter()
        .map(|c| (edit_distance(name, c.as_ref()), *c))
        .filter(|&(d, _)| d <= NEAR && d < name.len())
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// The name of a parameter word: up to and including its first `=`, or
/// the whole word (`nodelay`).
pub fn param_name(word: &[u8]) -> &[u8] {
    match word.iter().position(|&c| c == b'=') {
        Some(eq) => &word[..=eq],
        None => word,
    }
}

/// `NNr/s` or `NNr/m`, limit_req's rate syntax.
pub fn limit_req_rate(v: &[u8]) -> Option<Rate> {
    let (digits, per) = if let Some(d) = v.strip_suffix(b"r/s") {
        (d, "1s")
    } else {
        (v.strip_suffix(b"r/m")?, "1m")
    };
    if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let count = digits
        .iter()
        .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    Some(Rate { count, per })
}

/// The hint for a `limit_req` parameter, if `word` is one (`rate=`,
/// `burst=`, `nodelay`).
pub fn limit_req_habit(word: &[u8]) -> Option<ConfError> {
    let name = param_name(word);
    let habit = match name {
        b"rate=" => {
            if let Some(rate) = limit_req_rate(&word[5..]) {
                return Some(ConfError::LimitReqRate {
                    word: word.to_vec(),
                    rate,
                });
            }
            Habit::Rate
        }
        b"burst=" => Habit::Burst,
        b"nodelay" => Habit::Nodelay,
        _ => return None,
    };
    Some(ConfError::LimitReqParam {
        word: word.to_vec(),
        habit,
    })
}

/// Checks the parameter names of one directive before any value is
/// parsed: every name in `valid`, none twice. `limit_req` habits, the
/// other directive's parameters and near-misses get their hints.
pub fn check_params(
    directive: &'static str,
    args: &[&[u8]],
    valid: &'static [&'static str],
) -> Result<(), ConfError> {
    for (i, &a) in args.iter().enumerate() {
        let name = param_name(a);
        if !valid.iter().any(|v| v.as_bytes() == name) {
            return Err(unknown_param(directive, a, valid));
        }
        if args[..i].iter().any(|b| param_name(b) == name) {
            return Err(ConfError::Duplicate {
                directive,
                name: name.to_vec(),
            });
        }
    }
    Ok(())
}

/// The error for a word that is no parameter of `directive`.
pub fn unknown_param(
    directive: &'static str,
    word: &[u8],
    valid: &'static [&'static str],
) -> ConfError {
    if let Some(e) = limit_req_habit(word) {
        return e;
    }
    let name = param_name(word);
    // By content: a `const` slice has no one address (each use may get its
    // own copy; only LTO happened to merge them).
    let other = if valid == ZONE_PARAMS {
        ("rate_limit_window", LIMIT_PARAMS)
    } else {
        ("rate_limit_window_zone", ZONE_PARAMS)
    };
    if other.1.iter().any(|v| v.as_bytes() == name) {
        return ConfError::Misplaced {
            word: word.to_vec(),
            belongs_to: other.0,
        };
    }
    let bare = |s: &'static str| s.trim_end_matches('=');
    let stem = name.strip_suffix(b"=").unwrap_or(name);
    let names: Vec<&str> = valid.iter().map(|v| bare(v)).collect();
    let near = nearest(stem, &names).and_then(|n| valid.iter().find(|v| bare(v) == n).copied());
    ConfError::UnknownParam {
        directive,
        word: word.to_vec(),
        nearest: near,
        valid,
    }
}

/// The error for `value` outside `allowed` in `what` (a directive, or a
/// parameter such as `fail=`).
pub fn invalid_value<S: AsRef<str>>(what: &str, value: &[u8], allowed: &[S]) -> ConfError {
    ConfError::InvalidValue {
        what: what.to_owned(),
        value: value.to_vec(),
        allowed: allowed.iter().map(|s| s.as_ref().to_owned()).collect(),
    }
}

/// A time with one decimal fraction, `DIGITS.DIGITS[UNIT]` (`1.5m`,
/// `0.5h`, `2.5`), in ms rounded to the nearest ms; None for anything
/// else (the caller then reports the time as unparsable).
pub fn fractional_time_ms(s: &[u8]) -> Option<u64> {
    let split = s.iter().position(|c| !c.is_ascii_digit() && *c != b'.')?;
    let (number, unit) = s.split_at(split);
    let unit_ms: u128 = match unit {
        b"ms" => 1,
        b"s" => 1000,
        b"m" => 60_000,
        b"h" => 3_600_000,
        b"d" => 86_400_000,
        b"w" => 604_800_000,
        _ => return None,
    };
    fraction_ms(number, unit_ms)
}

/// `DIGITS.DIGITS` times `unit_ms`, rounded to the ms.
fn fraction_ms(number: &[u8], unit_ms: u128) -> Option<u64> {
    let dot = number.iter().position(|&c| c == b'.')?;
    let (int, frac) = (&number[..dot], &number[dot + 1..]);
    let digits_ok = |d: &[u8]| d.len() <= 12 && d.iter().all(u8::is_ascii_digit);
    if frac.is_empty() || !digits_ok(int) || !digits_ok(frac) {
        return None;
    }
    let num = |d: &[u8]| d.iter().fold(0u128, |n, &c| n * 10 + u128::from(c - b'0'));
    let scale = 10u128.pow(frac.len() as u32);
    let ms = (num(int) * scale + num(frac)) * unit_ms;
    u64::try_from((ms + scale / 2) / scale).ok()
}

/// The error for an unparsable time `value` of parameter `what`, when it
/// is a fractional time; None otherwise.
pub fn fractional_time(what: &'static str, value: &[u8]) -> Option<ConfError> {
    let ms = fractional_time_ms(value).or_else(|| {
        // A bare fractional number is in seconds, as in nginx.
        value
            .iter()
            .all(|c| c.is_ascii_digit() || *c == b'.')
            .then(|| fraction_ms(value, 1000))
            .flatten()
    })?;
    Some(ConfError::FractionalTime {
        what,
        value: value.to_vec(),
        ms,
    })
}

/// The error for a zone that `rate_limit_window` uses and no
/// `rate_limit_window_zone` declares; `declared` are the declared names.
pub fn undefined_zone(name: &[u8], declared: &[&[u8]]) -> ConfError {
    ConfError::UndefinedZone {
        name: name.to_vec(),
        nearest: nearest(name, declared).map(<[u8]>::to_vec),
    }
}

/// A zone as one configuration declares it, for comparing on reload.
#[derive(Clone, Copy, Debug)]
pub struct ZoneIdentity<'a> {
    /// The key's source text.
    pub key: &'a [u8],
    /// The window (ms).
    pub window_ms: u64,
    /// The `window=` text as written (empty: not written, the default).
    pub window_src: &'a [u8],
}

/// What a reload changes in zone `name` that a running zone cannot adopt
/// (its key or window); None when both are the same.
pub fn zone_change(name: &[u8], old: ZoneIdentity, new: ZoneIdentity) -> Option<ConfError> {
    let text = |z: &ZoneIdentity| -> Vec<u8> {
        if z.window_src.is_empty() {
            Units(z.window_ms).to_string().into_bytes()
        } else {
            z.window_src.to_vec()
        }
    };
    let window = (old.window_ms != new.window_ms).then(|| (text(&old), text(&new)));
    let key = (old.key != new.key).then(|| (old.key.to_vec(), new.key.to_vec()));
    if window.is_none() && key.is_none() {
        return None;
    }
    Some(ConfError::ZoneChanged(ZoneChange {
        zone: name.to_vec(),
        key,
        window,
    }))
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
