//! `rate_limit_window_shed zone=NAME max=N priority=VALUE [reserve=P%]
//! [status=CODE]`'s words, parsed into one typed [`ShedDirective`] (see
//! [`crate::rule::shed`] for the rule). A parameter given twice, or an
//! unknown one, is refused as for every directive ([`check_params`]).

use crate::conf::error::{check_params, param_name, ConfError};
use crate::conf::value_error::ZONE_NAME_PUNCTUATION;
use crate::rule::shed::ShedLimits;
use crate::shm::places::MAX_IN_FLIGHT;
use crate::units::escape;

/// The parameters of `rate_limit_window_shed`.
pub const SHED_PARAMS: &[&str] = &[
    "zone=",
    "max=",
    "priority=",
    "reserve=",
    "reserve_low=",
    "reserve_high=",
    "status=",
];

/// The default `reserve=`: a fifth of `max=` kept for critical requests.
pub const DEFAULT_RESERVE_PCT: u32 = 20;
/// The default `status=`.
pub const DEFAULT_SHED_STATUS: u16 = 503;

/// What to write for a required parameter of `rate_limit_window_shed`.
fn missing_hint(name: &str) -> &'static str {
    match name {
        "zone" => "write zone=NAME, the group's name",
        "max" => "write max=N, the requests in flight the group allows",
        _ => "write priority=$variable or a word such as priority=critical",
    }
}

/// A rejected value of `rate_limit_window_shed`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShedConfError {
    /// A parameter's name (unknown, given twice).
    #[error(transparent)]
    Param(#[from] ConfError),
    /// A required parameter missing.
    #[error("\"rate_limit_window_shed\" must have \"{0}\" parameter: {hint}", hint = missing_hint(.0))]
    Missing(&'static str),
    /// `zone=` that is no name.
    #[error(
        "invalid zone name \"{}\": use only letters, digits and {ZONE_NAME_PUNCTUATION}",
        escape(.0)
    )]
    Zone(Vec<u8>),
    /// `max=` out of range.
    #[error("invalid max \"{}\": an integer from 1 to {MAX_IN_FLIGHT}", escape(.0))]
    Max(Vec<u8>),
    /// `reserve=`, `reserve_low=` or `reserve_high=` that is no percentage.
    #[error(
        "invalid {name} \"{value}\": a percentage of max= from 0% to 100%, e.g. {name}=20%",
        name = .0,
        value = escape(.1)
    )]
    Reserve(&'static str, Vec<u8>),
    /// Reserves out of order.
    #[error(
        "invalid reserves reserve_high={}% reserve={}% reserve_low={}%: a lower priority keeps \
         at least the reserve of a higher one (reserve_high <= reserve <= reserve_low)",
        .0.reserve_high_pct,
        .0.reserve_pct,
        .0.reserve_low_pct
    )]
    Order(ShedLimits),
    /// `status=` out of range.
    #[error("invalid status \"{}\": an HTTP status from 400 to 599", escape(.0))]
    Status(Vec<u8>),
    /// `priority=` with no value.
    #[error("invalid priority \"\": a variable (priority=$priority) or a word (critical)")]
    Priority,
    /// A group named again with other limits.
    #[error(
        "rate_limit_window_shed zone \"{}\" is already declared with max={} reserve={}% \
         reserve_low={}% reserve_high={}%: every location of a group gives the same max= and \
         reserves",
        escape(.zone),
        .before.max,
        .before.reserve_pct,
        .before.reserve_low_pct,
        .before.reserve_high_pct
    )]
    Conflict {
        /// The group.
        zone: Vec<u8>,
        /// Its limits as first declared.
        before: ShedLimits,
    },
}

/// One `rate_limit_window_shed`, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShedDirective {
    /// `zone=`: the group's name.
    pub zone: Vec<u8>,
    /// `max=` and `reserve=`.
    pub limits: ShedLimits,
    /// `priority=`: the value as written (a variable or a word), compiled
    /// by the glue.
    pub priority: Vec<u8>,
    /// `status=` of a shed request.
    pub status: u16,
}

/// Digits as a number up to `max` (None: not digits, or above).
fn number(v: &[u8], max: u32) -> Option<u32> {
    if v.is_empty() || v.len() > 6 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = v.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    (n <= max).then_some(n)
}

/// A percentage (`P%`, 0 to 100) of the parameter `name`, if given.
fn percent(name: &'static str, v: Option<&[u8]>) -> Result<Option<u32>, ShedConfError> {
    v.map(|v| {
        v.strip_suffix(b"%")
            .and_then(|p| number(p, 100))
            .ok_or_else(|| ShedConfError::Reserve(name, v.to_vec()))
    })
    .transpose()
}

/// `max=` with the reserves: `reserve=` (default 20%), `reserve_low=` and
/// `reserve_high=` (default: `reserve=`'s), ordered so that a higher
/// priority never has fewer places than a lower one.
fn reserves<'a>(
    max: u32,
    get: &dyn Fn(&[u8]) -> Option<&'a [u8]>,
) -> Result<ShedLimits, ShedConfError> {
    let reserve = percent("reserve", get(b"reserve="))?.unwrap_or(DEFAULT_RESERVE_PCT);
    let low = percent("reserve_low", get(b"reserve_low="))?.unwrap_or(reserve);
    let high = percent("reserve_high", get(b"reserve_high="))?.unwrap_or(reserve);
    let l = ShedLimits {
        max,
        reserve_pct: reserve,
        reserve_low_pct: low,
        reserve_high_pct: high,
    };
    if high > reserve || reserve > low {
        return Err(ShedConfError::Order(l));
    }
    Ok(l)
}

/// Parses the words of `rate_limit_window_shed` (after its name).
pub fn parse_shed_directive(args: &[&[u8]]) -> Result<ShedDirective, ShedConfError> {
    check_params("rate_limit_window_shed", args, SHED_PARAMS)?;
    let get = |name: &[u8]| {
        args.iter()
            .find(|a| param_name(a) == name)
            .map(|a| &a[name.len()..])
    };
    let zone = get(b"zone=").ok_or(ShedConfError::Missing("zone"))?;
    let token = |b: &u8| b.is_ascii_alphanumeric() || ZONE_NAME_PUNCTUATION.as_bytes().contains(b);
    if zone.is_empty() || !zone.iter().all(token) {
        return Err(ShedConfError::Zone(zone.to_vec()));
    }
    let max = get(b"max=").ok_or(ShedConfError::Missing("max"))?;
    let max = number(max, MAX_IN_FLIGHT)
        .filter(|&n| n > 0)
        .ok_or_else(|| ShedConfError::Max(max.to_vec()))?;
    let priority = get(b"priority=").ok_or(ShedConfError::Missing("priority"))?;
    if priority.is_empty() {
        return Err(ShedConfError::Priority);
    }
    let limits = reserves(max, &get)?;
    let status = match get(b"status=") {
        None => DEFAULT_SHED_STATUS,
        Some(v) => number(v, 599)
            .filter(|&s| s >= 400)
            .ok_or_else(|| ShedConfError::Status(v.to_vec()))? as u16,
    };
    Ok(ShedDirective {
        zone: zone.to_vec(),
        limits,
        priority: priority.to_vec(),
        status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &str) -> Result<ShedDirective, String> {
        let w: Vec<&[u8]> = words.split(' ').map(str::as_bytes).collect();
        parse_shed_directive(&w).map_err(|e| e.to_string())
    }

    #[test]
    fn every_parameter() {
        let d = parse("zone=cap max=4 priority=$prio reserve=50% status=429").unwrap();
        assert_eq!(d.zone, b"cap");
        assert_eq!(d.limits, ShedLimits::new(4, 50));
        assert_eq!(d.priority, b"$prio");
        assert_eq!(d.status, 429);
        let d = parse("zone=c max=8 priority=$p reserve=25% reserve_low=50% reserve_high=10%");
        let l = d.unwrap().limits;
        let want = (l.reserve_pct, l.reserve_low_pct, l.reserve_high_pct);
        assert_eq!(want, (25, 50, 10));
        let d = parse("priority=critical max=100 zone=api").unwrap();
        let l = d.limits;
        assert_eq!((l.reserve_low_pct, l.reserve_high_pct), (20, 20));
        assert_eq!((d.limits.reserve_pct, d.status), (DEFAULT_RESERVE_PCT, 503));
    }

    #[test]
    fn refusals() {
        let e = |w: &str| parse(w).unwrap_err();
        assert_eq!(
            e("max=4 priority=$p"),
            "\"rate_limit_window_shed\" must have \"zone\" parameter: write zone=NAME, the group's name"
        );
        assert_eq!(
            e("zone=c priority=$p"),
            "\"rate_limit_window_shed\" must have \"max\" parameter: write max=N, the requests in flight the group allows"
        );
        assert_eq!(
            e("zone=c max=4"),
            "\"rate_limit_window_shed\" must have \"priority\" parameter: write priority=$variable or a word such as priority=critical"
        );
        assert_eq!(
            e("zone=c max=0 priority=$p"),
            "invalid max \"0\": an integer from 1 to 65535"
        );
        assert!(e("zone=c max=70000 priority=$p").starts_with("invalid max"));
        assert_eq!(
            e("zone=c max=4 priority=$p reserve=50"),
            "invalid reserve \"50\": a percentage of max= from 0% to 100%, e.g. reserve=20%"
        );
        assert!(e("zone=c max=4 priority=$p reserve=101%").starts_with("invalid reserve"));
        assert_eq!(
            e("zone=c max=4 priority=$p reserve_low=x"),
            "invalid reserve_low \"x\": a percentage of max= from 0% to 100%, e.g. reserve_low=20%"
        );
        assert!(e("zone=c max=4 priority=$p reserve_high=5").starts_with("invalid reserve_high"));
        assert_eq!(
            e("zone=c max=4 priority=$p reserve=30% reserve_high=40%"),
            "invalid reserves reserve_high=40% reserve=30% reserve_low=30%: a lower priority \
             keeps at least the reserve of a higher one (reserve_high <= reserve <= reserve_low)"
        );
        assert!(e("zone=c max=4 priority=$p reserve=30% reserve_low=20%")
            .starts_with("invalid reserves"));
        assert!(e("zone=c max=4 priority=$p status=200").starts_with("invalid status"));
        assert!(e("zone=c max=4 priority=").starts_with("invalid priority"));
        assert!(e("zone=a/b max=4 priority=$p").starts_with("invalid zone name"));
        assert!(e("zone=c max=4 priority=$p max=5").starts_with("duplicate parameter"));
        assert!(e("zone=c max=4 priority=$p frob=5").starts_with("invalid parameter"));
    }
}
