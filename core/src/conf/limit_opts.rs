//! `rate_limit_window`'s words, parsed into one typed [`LimitDirective`]:
//! `zone=`, `limit=`, `in_flight=`, `cost=`, `count_status=`, `charge=`,
//! `delay=`, `delay_max_held=`, `ban=` and `name=`.
//!
//! One pass collects each parameter's value (a parameter given twice is
//! refused, every one the same way: [`ConfError::Duplicate`]), then the
//! values are parsed in a fixed order, each into its type; every error is a
//! [`ConfError`] whose text is the `[emerg]` the glue logs.

use crate::conf::error::{check_params, param_name, ConfError, LimitConfError, LIMIT_PARAMS};
use crate::conf::override_opts::MAX_BAN_MS;
use crate::conf::parse::{parse_limit_params, ValueSpec};
use crate::rule::delay::{MAX_DELAY_MS, MAX_MAX_HELD};
use crate::rule::window::MAX_LIMIT;
use crate::shm::places::MAX_IN_FLIGHT;
use crate::shm::tally::ROUTE_NAME_MAX;
use crate::units::parse_time_ms;

/// `cost=`: requests one request counts, fixed or from a variable.
pub type CostSpec = ValueSpec;

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
pub fn parse_status_list(s: &[u8]) -> Result<StatusSet, LimitConfError> {
    let mut set = StatusSet::default();
    for item in s.split(|&c| c == b',') {
        let err = || LimitConfError::Status(item.to_vec());
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

/// The `delay=` and `delay_max_held=` parameters of one `rate_limit_window`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DelayParams {
    /// Longest total wait of a held request (ms); 0 rejects at once.
    pub delay_ms: u64,
    /// `delay_max_held=`, if given (held requests per location and worker).
    pub max_held: Option<u32>,
}

/// `delay=TIME`: an nginx time (a bare number is seconds) of at most 1 h,
/// in ms.
pub fn parse_delay(v: &[u8]) -> Result<u64, LimitConfError> {
    let ms = parse_time_ms(v).ok_or_else(|| LimitConfError::Delay(v.to_vec()))?;
    if ms > MAX_DELAY_MS {
        return Err(LimitConfError::DelayTooLong(v.to_vec()));
    }
    Ok(ms)
}

/// `delay_max_held=N`: decimal digits in `0..=MAX_MAX_HELD` (held requests).
pub fn parse_max_held(v: &[u8]) -> Result<u32, LimitConfError> {
    let bad = || LimitConfError::MaxHeld(v.to_vec());
    if v.is_empty() || v.len() > 7 || !v.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let n = v.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    if n > MAX_MAX_HELD {
        return Err(bad());
    }
    Ok(n)
}

/// `ban=TIME`: an nginx time from 1 s to 30 days, in ms.
pub fn parse_ban(v: &[u8]) -> Result<u64, LimitConfError> {
    match parse_time_ms(v) {
        Some(ms) if (1000..=MAX_BAN_MS).contains(&ms) => Ok(ms),
        _ => Err(LimitConfError::Ban(v.to_vec())),
    }
}

/// `name=ROUTE`: 1 to [`ROUTE_NAME_MAX`] letters, digits and the zone
/// names' punctuation (it becomes a Prometheus label value as it is).
pub fn parse_route_name(v: &[u8]) -> Result<Vec<u8>, LimitConfError> {
    let ok = !v.is_empty()
        && v.len() <= ROUTE_NAME_MAX
        && v.iter().all(|&b| crate::conf::parse::is_token_char(b));
    if !ok {
        return Err(LimitConfError::RouteName(v.to_vec()));
    }
    Ok(v.to_vec())
}

/// `cost=N|$variable`: the default is a fixed 1.
fn parse_cost_spec(v: &[u8]) -> Result<CostSpec, LimitConfError> {
    if v.first() == Some(&b'$') {
        return Ok(ValueSpec::Variable(v.to_vec()));
    }
    let n = parse_cost(v).map_err(|_| LimitConfError::Cost(v.to_vec()))?;
    Ok(ValueSpec::Fixed(n))
}

/// Parses an in-flight limit: decimal digits only, `0..=`[`MAX_IN_FLIGHT`]
/// requests in flight (0 admits none). Used at configuration time and on
/// every request for `in_flight=$variable` values; it never allocates.
pub fn parse_in_flight(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > 5 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = s.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    (n <= MAX_IN_FLIGHT).then_some(n)
}

/// `in_flight=N|$variable`.
fn parse_in_flight_spec(v: &[u8]) -> Result<ValueSpec, LimitConfError> {
    if v.first() == Some(&b'$') {
        return Ok(ValueSpec::Variable(v.to_vec()));
    }
    parse_in_flight(v)
        .map(ValueSpec::Fixed)
        .ok_or_else(|| LimitConfError::InFlight(v.to_vec()))
}

/// `charge=$variable`: a fixed charge is refused (that is `cost=`).
fn parse_charge_spec(v: &[u8]) -> Result<Vec<u8>, LimitConfError> {
    if v.first() != Some(&b'$') {
        return Err(LimitConfError::ChargeNotVariable(v.to_vec()));
    }
    Ok(v.to_vec())
}

/// One `rate_limit_window` directive, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitDirective {
    /// `zone=`: the zone's name (non-empty).
    pub zone: Vec<u8>,
    /// `limit=`: requests per window, fixed or from a variable (None: a
    /// line with `in_flight=` alone, which counts no rate).
    pub limit: Option<ValueSpec>,
    /// `in_flight=`: requests of a client in flight at once, fixed or from
    /// a variable (None: no limit on them).
    pub in_flight: Option<ValueSpec>,
    /// `cost=`: requests one request counts (default `Fixed(1)`).
    pub cost: CostSpec,
    /// `count_status=`: statuses that keep a request counted (None: all).
    pub count_status: Option<StatusSet>,
    /// `charge=$var...`: the raw value text, compiled by the glue;
    /// evaluated when the response is done (see [`crate::rule::charge`]).
    pub charge: Option<Vec<u8>>,
    /// `delay=` and `delay_max_held=`.
    pub delay: DelayParams,
    /// `ban=`: how long a client this limit rejects stays rejected (ms;
    /// None: no ban).
    pub ban_ms: Option<u64>,
    /// `name=`: the route whose counters the request also goes to (None:
    /// none).
    pub name: Option<Vec<u8>>,
}

/// Each parameter's value, as written, each at most once.
#[derive(Default)]
struct Words<'a> {
    zone: Option<&'a [u8]>,
    limit: Option<&'a [u8]>,
    in_flight: Option<&'a [u8]>,
    cost: Option<&'a [u8]>,
    count_status: Option<&'a [u8]>,
    charge: Option<&'a [u8]>,
    delay: Option<&'a [u8]>,
    max_held: Option<&'a [u8]>,
    ban: Option<&'a [u8]>,
    name: Option<&'a [u8]>,
}

impl<'a> Words<'a> {
    /// Collects the words; a parameter given twice, or an unknown one, is
    /// refused before any value is parsed ([`check_params`]).
    fn collect(args: &[&'a [u8]]) -> Result<Words<'a>, ConfError> {
        check_params("rate_limit_window", args, LIMIT_PARAMS)?;
        let mut w = Words::default();
        for &a in args {
            let name = param_name(a);
            let slot = match name {
                b"zone=" => &mut w.zone,
                b"limit=" => &mut w.limit,
                b"in_flight=" => &mut w.in_flight,
                b"cost=" => &mut w.cost,
                b"count_status=" => &mut w.count_status,
                b"charge=" => &mut w.charge,
                b"delay=" => &mut w.delay,
                b"delay_max_held=" => &mut w.max_held,
                b"name=" => &mut w.name,
                _ => &mut w.ban,
            };
            if slot.replace(a).is_some() {
                return Err(ConfError::Duplicate {
                    directive: "rate_limit_window",
                    name: name.to_vec(),
                });
            }
        }
        Ok(w)
    }
}

/// The value of a word `name=value`.
fn value(word: &[u8]) -> &[u8] {
    &word[param_name(word).len()..]
}

/// Parses every word of `rate_limit_window` (there is no KEY).
///
/// Errors, in this order: the parameter names ([`check_params`]: unknown,
/// `limit_req` habits, duplicates), then `ban=`, `delay=`,
/// `delay_max_held=`, `cost=`, `count_status=`, `charge=`, `name=`, `in_flight=`,
/// then `zone=` and `limit=` ([`parse_limit_params`]; without `limit=`,
/// `in_flight=` alone, and no parameter that counts a rate), and last a
/// fixed cost above a fixed limit (`cost=4 is above limit=3`).
pub fn parse_limit_directive(args: &[&[u8]]) -> Result<LimitDirective, ConfError> {
    let w = Words::collect(args)?;
    let ban_ms = w.ban.map(|a| parse_ban(value(a))).transpose()?;
    let delay = DelayParams {
        delay_ms: w
            .delay
            .map(|a| parse_delay(value(a)))
            .transpose()?
            .unwrap_or(0),
        max_held: w.max_held.map(|a| parse_max_held(value(a))).transpose()?,
    };
    let cost = w.cost.map(|a| parse_cost_spec(value(a))).transpose()?;
    let count_status = w
        .count_status
        .map(|a| parse_status_list(value(a)))
        .transpose()?;
    let charge = w.charge.map(|a| parse_charge_spec(value(a))).transpose()?;
    let name = w.name.map(|a| parse_route_name(value(a))).transpose()?;
    let in_flight = w
        .in_flight
        .map(|a| parse_in_flight_spec(value(a)))
        .transpose()?;
    if w.limit.is_none() && in_flight.is_some() {
        return in_flight_alone(&w, in_flight, name);
    }
    let rest: Vec<&[u8]> = [w.zone, w.limit].into_iter().flatten().collect();
    let params = parse_limit_params(&rest)?;
    let cost = cost.unwrap_or(ValueSpec::Fixed(1));
    if let (ValueSpec::Fixed(limit), ValueSpec::Fixed(cost)) = (&params.limit, &cost) {
        if cost > limit && *cost > 1 {
            let (cost, limit) = (*cost, *limit);
            return Err(LimitConfError::CostAboveLimit { cost, limit }.into());
        }
    }
    Ok(LimitDirective {
        zone: params.zone,
        limit: Some(params.limit),
        in_flight,
        cost,
        count_status,
        charge,
        delay,
        ban_ms,
        name,
    })
}

/// A line with `in_flight=` and no `limit=`: only `zone=` besides it, no
/// parameter that counts a rate.
fn in_flight_alone(
    w: &Words<'_>,
    in_flight: Option<ValueSpec>,
    name: Option<Vec<u8>>,
) -> Result<LimitDirective, ConfError> {
    let rate_params = [
        (w.cost, "cost="),
        (w.count_status, "count_status="),
        (w.charge, "charge="),
        (w.delay, "delay="),
        (w.max_held, "delay_max_held="),
        (w.ban, "ban="),
    ];
    if let Some((_, name)) = rate_params.iter().find(|(v, _)| v.is_some()) {
        return Err(LimitConfError::NeedsLimit(name).into());
    }
    let zone = match w.zone.map(value) {
        None => return Err(LimitConfError::Missing("zone").into()),
        Some([]) => {
            return Err(LimitConfError::EmptyZone(w.zone.unwrap_or_default().to_vec()).into())
        }
        Some(z) => z.to_vec(),
    };
    Ok(LimitDirective {
        name,
        zone,
        limit: None,
        in_flight,
        cost: ValueSpec::Fixed(1),
        count_status: None,
        charge: None,
        delay: DelayParams::default(),
        ban_ms: None,
    })
}

#[cfg(test)]
#[path = "limit_opts_tests.rs"]
mod tests;
