//! `rate_limit_window_zone`'s words after KEY, parsed into one typed
//! [`ZoneDirective`]: the mode, the override table's size and the other
//! parameters ([`ZoneParams`]), checked together. Every error is a
//! [`ConfError`] whose text is the `[emerg]` the glue logs.

use crate::cluster::MIN_SECRET_LEN;
use crate::conf::error::{check_params, ConfError, ZoneConfError, ZONE_PARAMS};
use crate::conf::override_opts::take_overrides;
use crate::conf::parse::{parse_zone_params, ZoneParams};
use crate::rule::calendar::{horizon_end_year, Calendar, Period};
use crate::rule::mode::Mode;
use crate::rule::window::Window;
use jiff::tz::TimeZone;

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
    /// `calendar=` and `tz=` (None without `calendar=`): the glue builds
    /// the zone's window from the system's time zone data.
    pub calendar: Option<CalendarSpec>,
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
    let (calendar, rest) = take_calendar(args)?;
    let (mode, rest) = take_mode(&rest)?;
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
        calendar,
        params,
    })
}

/// `calendar=PERIOD [tz=NAME]` of a zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CalendarSpec {
    /// The period.
    pub period: Period,
    /// The time zone's name (`tz=`, default `UTC`).
    pub tz: Vec<u8>,
}

/// The system's time zone database: `TZDIR` when set (as the C library
/// reads it; the master's environment, at configuration time), else
/// `/usr/share/zoneinfo` (Debian's `tzdata`).
pub fn zoneinfo_dir() -> std::path::PathBuf {
    std::env::var_os("TZDIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| "/usr/share/zoneinfo".into(), Into::into)
}

/// The window of `calendar=` `spec`: its periods in the time zone read
/// now from the TZif file `dir/NAME` (a reload reads it again, so that it
/// picks up a tzdata update). `UTC` needs no file. Err:
/// [`ZoneConfError::UnknownTz`] naming the zone and the file looked for.
pub fn calendar_window(
    spec: &CalendarSpec,
    dir: &std::path::Path,
) -> Result<Window, ZoneConfError> {
    calendar_window_at(spec, dir, 0)
}

/// [`calendar_window`] for a configuration read at `now_ms` (epoch ms):
/// its periods tabled up to [`horizon_end_year`] of that time.
pub fn calendar_window_at(
    spec: &CalendarSpec,
    dir: &std::path::Path,
    now_ms: u64,
) -> Result<Window, ZoneConfError> {
    let unknown = |why: String| ZoneConfError::UnknownTz {
        name: spec.tz.clone(),
        why,
    };
    let name = core::str::from_utf8(&spec.tz)
        .ok()
        .filter(|n| is_tz_name(n))
        .ok_or_else(|| {
            unknown("use a name of the time zone database, e.g. America/New_York".into())
        })?;
    let path = dir.join(name);
    let tz = match std::fs::read(&path) {
        Ok(data) => TimeZone::tzif(name, &data)
            .map_err(|e| unknown(format!("{} is no time zone file: {e}", path.display())))?,
        Err(_) if name == "UTC" => TimeZone::UTC,
        Err(e) => {
            return Err(unknown(format!(
                "no time zone file {} ({e})",
                path.display()
            )))
        }
    };
    let end = horizon_end_year(now_ms);
    let cal = Calendar::build_until(spec.period, name, &tz, end).map_err(|e| unknown(e.0))?;
    Ok(Window::calendar(cal.intern()))
}

/// Whether `name` can name a file of the time zone database: letters,
/// digits, `_+-` and `/` between non-empty parts that are not `.` or `..`.
fn is_tz_name(name: &str) -> bool {
    let ok = |b: u8| b.is_ascii_alphanumeric() || b"_+-".contains(&b);
    !name.is_empty()
        && name
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != ".." && p.bytes().all(ok))
}

/// Takes `calendar=` and `tz=` out of a zone's parameters (the other words
/// in order), refusing them where they cannot keep their promise: `tz=`
/// without `calendar=`, `calendar=` with `window=` or `mode=` (a period is
/// its own window, counted exactly). Each given twice was refused before
/// ([`check_params`]).
pub fn take_calendar<'a>(
    args: &[&'a [u8]],
) -> Result<(Option<CalendarSpec>, Vec<&'a [u8]>), ZoneConfError> {
    let (mut period, mut tz) = (None, None);
    let mut rest = Vec::with_capacity(args.len());
    for &a in args {
        if let Some(v) = a.strip_prefix(b"calendar=") {
            period = Some(Period::parse(v).ok_or_else(|| ZoneConfError::Calendar(v.to_vec()))?);
        } else if let Some(v) = a.strip_prefix(b"tz=") {
            tz = Some(v);
        } else {
            rest.push(a);
        }
    }
    let Some(period) = period else {
        return match tz {
            Some(_) => Err(ZoneConfError::TzWithoutCalendar),
            None => Ok((None, rest)),
        };
    };
    for other in ["window=", "mode="] {
        if rest.iter().any(|a| a.starts_with(other.as_bytes())) {
            return Err(ZoneConfError::CalendarWith(other));
        }
    }
    let tz = tz.unwrap_or(b"UTC").to_vec();
    Ok((Some(CalendarSpec { period, tz }), rest))
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

/// `state=FILE` as written (None without it), and the zone's other
/// parameters.
pub type StateParam<'a> = (Option<&'a [u8]>, Vec<&'a [u8]>);

/// Takes `state=FILE` out of a `rate_limit_window_zone`'s parameters.
/// Err: [`ZoneConfError::EmptyState`] (an empty path).
pub fn take_state<'a>(args: &[&'a [u8]]) -> Result<StateParam<'a>, ZoneConfError> {
    let mut path = None;
    let mut rest = Vec::with_capacity(args.len());
    for &a in args {
        match a.strip_prefix(b"state=") {
            Some(b"") => return Err(ZoneConfError::EmptyState),
            Some(p) => path = Some(p),
            None => rest.push(a),
        }
    }
    Ok((path, rest))
}

/// Checks `state=` against the zone's other parameters: a `redis=` zone
/// (`redis`) keeps its counts in Redis, so it takes no state file.
/// Err: [`ZoneConfError::StateWithRedis`], naming zone `name`.
pub fn check_state(name: &[u8], state: Option<&[u8]>, redis: bool) -> Result<(), ZoneConfError> {
    if state.is_some() && redis {
        return Err(ZoneConfError::StateWithRedis(name.to_vec()));
    }
    Ok(())
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
            "\"rate_limit_window_zone\" must have \"zone\" parameter: write zone=NAME:SIZE, e.g. zone=per_ip:10m"
        );
    }

    #[test]
    fn calendar_and_tz_are_taken_out_and_checked() {
        let d = parse("zone=a:1m calendar=day tz=America/New_York").unwrap();
        let spec = d.calendar.unwrap();
        assert_eq!(spec.period, Period::Day);
        assert_eq!(spec.tz, b"America/New_York");
        let d = parse("zone=a:1m calendar=month").unwrap();
        assert_eq!(d.calendar.unwrap().tz, b"UTC");
        assert_eq!(parse("zone=a:1m").unwrap().calendar, None);
        assert_eq!(
            parse("zone=a:1m calendar=fortnight").unwrap_err(),
            "invalid calendar \"fortnight\": use \"day\", \"week\", \"month\" or \"year\""
        );
        assert_eq!(
            parse("zone=a:1m tz=UTC").unwrap_err(),
            ConfError::Zone(ZoneConfError::TzWithoutCalendar)
        );
        for other in ["window=1d", "mode=strict", "mode=estimate"] {
            let e = parse(&format!("zone=a:1m calendar=day {other}")).unwrap_err();
            let name = &other[..=other.find('=').unwrap()];
            assert_eq!(
                e.to_string(),
                format!(
                    "\"calendar=\" cannot be combined with \"{name}\": a calendar period is \
                     its own window, counted exactly"
                )
            );
        }
        for twice in ["calendar=day", "tz=UTC"] {
            let e = parse(&format!("zone=a:1m calendar=week {twice} {twice}")).unwrap_err();
            assert!(matches!(e, ConfError::Duplicate { .. }), "{e}");
        }
    }

    #[test]
    fn time_zones_come_from_the_database_or_are_refused() {
        let dir = std::path::Path::new("/usr/share/zoneinfo");
        let spec = |tz: &str| CalendarSpec {
            period: Period::Day,
            tz: tz.as_bytes().to_vec(),
        };
        let w = calendar_window(&spec("America/New_York"), dir).unwrap();
        assert_eq!(w.calendar_of().unwrap().tz(), "America/New_York");
        // UTC needs no file.
        let none = std::path::Path::new("/nonexistent");
        assert!(calendar_window(&spec("UTC"), none).is_ok());
        let e = calendar_window(&spec("Mars/Olympus"), dir).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "unknown time zone \"Mars/Olympus\" in \"tz=\": no time zone file \
                              /usr/share/zoneinfo/Mars/Olympus"
            ),
            "{e}"
        );
        for bad in [
            "../etc/passwd",
            "/etc/passwd",
            "America//New_York",
            "",
            "a b",
        ] {
            let e = calendar_window(&spec(bad), dir).unwrap_err().to_string();
            assert!(
                e.contains("use a name of the time zone database"),
                "{bad}: {e}"
            );
        }
        // A file that is no TZif, and a directory.
        let tmp = std::env::temp_dir().join(format!("rlw-tz-{}", std::process::id()));
        std::fs::create_dir_all(tmp.join("Bogus")).unwrap();
        std::fs::write(tmp.join("Bogus/Zone"), "not TZif").unwrap();
        let e = calendar_window(&spec("Bogus/Zone"), &tmp)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is no time zone file"), "{e}");
        let e = calendar_window(&spec("Bogus"), &tmp)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no time zone file"), "{e}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

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

    #[test]
    fn state_parameter_is_taken_out() {
        let args: [&[u8]; 3] = [b"zone=a:1m", b"state=/var/lib/a.state", b"window=1d"];
        let (p, rest) = take_state(&args).unwrap();
        assert_eq!(p, Some(&b"/var/lib/a.state"[..]));
        assert_eq!(rest, [&b"zone=a:1m"[..], b"window=1d"]);
        assert_eq!(take_state(&args[..1]).unwrap().0, None);
        let e = take_state(&[b"zone=a:1m", b"state="]).unwrap_err();
        assert_eq!(e, ZoneConfError::EmptyState);
        assert_eq!(
            e.to_string(),
            "invalid \"state=\": give the path of the zone's state file, \
             e.g. state=/var/lib/nginx/per_ip.state"
        );
    }

    #[test]
    fn state_is_refused_with_redis() {
        let path = Some(&b"/var/lib/a.state"[..]);
        assert_eq!(check_state(b"a", path, false), Ok(()));
        assert_eq!(check_state(b"a", None, true), Ok(()));
        assert_eq!(check_state(b"a", None, false), Ok(()));
        let e = check_state(b"per_ip", path, true).unwrap_err();
        assert_eq!(e, ZoneConfError::StateWithRedis(b"per_ip".to_vec()));
        assert_eq!(
            e.to_string(),
            "\"state=\" cannot be combined with \"redis=\" in zone \"per_ip\": the counts of a \
             redis= zone are kept in Redis across restarts"
        );
    }
}
