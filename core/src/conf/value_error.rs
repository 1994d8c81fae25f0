//! The typed errors of directive values: `rate_limit_window`'s
//! ([`LimitConfError`]), `rate_limit_window_zone`'s ([`ZoneConfError`]) and
//! the Redis files read at load ([`RedisFileError`]). Each prints the text
//! of its `[emerg]`; [`crate::conf::error::ConfError`] wraps them.

use core::fmt;

use crate::conf::addr::Ipv6PrefixError;
use crate::overrides::MAX_OVERRIDES;
use crate::rule::delay::MAX_MAX_HELD;
use crate::rule::window::{WindowError, MAX_LIMIT};
use crate::shm::tally::{MAX_ROUTES, ROUTE_NAME_MAX};
use crate::units::{escape, Units, SHOWN_BYTES};

/// The characters besides letters and digits that a zone name may hold.
pub const ZONE_NAME_PUNCTUATION: &str = "!#$%&'*+-.^_`|~";

/// A rejected value of `rate_limit_window`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitConfError {
    /// `limit=` that is neither a number in range nor a variable.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// `zone=` with no name.
    #[error(
        "invalid zone name \"{}\" in \"rate_limit_window\": give the name of a \
         rate_limit_window_zone, e.g. zone=per_ip",
        escape(.0)
    )]
    EmptyZone(Vec<u8>),
    /// `cost=` that is neither an integer from 1 to the largest limit nor a variable.
    #[error("invalid cost \"{}\": an integer from 1 to {MAX_LIMIT}, or a variable", escape(.0))]
    Cost(Vec<u8>),
    /// A fixed `cost=` above a fixed `limit=` (never admitted).
    #[error(
        "cost={cost} is above limit={limit} in \"rate_limit_window\": such a request is \
         never admitted; use a cost= from 1 to {limit}, or raise limit="
    )]
    CostAboveLimit {
        /// The cost (requests).
        cost: u32,
        /// The limit (requests per window).
        limit: u32,
    },
    /// An item of `count_status=` that is no status or class.
    #[error(
        "invalid status \"{}\" in \"count_status=\": use codes from 100 to 599 and classes \
         1xx to 5xx, separated by commas, e.g. count_status=401,403,5xx",
        escape(.0)
    )]
    Status(Vec<u8>),
    /// `charge=` that is not a variable.
    #[error(
        "invalid charge \"{}\": a variable read when the response is done \
         (\"charge=$upstream_http_x_tokens\"); a fixed count is \"cost=\"",
        escape(.0)
    )]
    ChargeNotVariable(Vec<u8>),
    /// `charge=` on a `mode=strict` zone (named).
    #[error(
        "\"charge=\" cannot be used with zone \"{}\" of mode=strict: mode=strict promises that \
         no window ever admits more than the limit, and a charge known only after the response \
         can go over it; use the default mode=estimate",
        escape(.0)
    )]
    ChargeOnStrict(Vec<u8>),
    /// `delay=` on a zone of `calendar=`.
    #[error(
        "\"delay=\" cannot be used with zone \"{}\" of calendar=: a request over a \
         calendar quota fits only at the next period's start; refuse it (Retry-After \
         tells when)",
        escape(.0)
    )]
    DelayOnCalendar(Vec<u8>),
    /// A fixed `limit=` above what a `mode=strict` zone can count.
    #[error(
        "limit={limit} is above what the mode=strict zone \"{zone}\" can count ({max}): use a \
         limit of at most {max}, or mode=estimate",
        zone = escape(.0),
        limit = .1,
        max = .2
    )]
    StrictLimit(Vec<u8>, u32, u32),
    /// `delay=` that is no nginx time.
    #[error(
        "invalid delay \"{}\": use delay=TIME, a time from 0 to 1h, e.g. delay=500ms or delay=10s",
        escape(.0)
    )]
    Delay(Vec<u8>),
    /// `delay=` above one hour.
    #[error("delay \"{}\" is longer than 1h: use a delay= from 0 to 1h", escape(.0))]
    DelayTooLong(Vec<u8>),
    /// `delay_max_held=` that is no count in range.
    #[error(
        "invalid delay_max_held \"{}\": an integer from 0 to {MAX_MAX_HELD} (held requests)",
        escape(.0)
    )]
    MaxHeld(Vec<u8>),
    /// Two directives of one level with different `delay_max_held=`.
    #[error(
        "conflicting delay_max_held={n}, already {already} at this level: give every \
         \"rate_limit_window\" of one level the same delay_max_held="
    )]
    ConflictingMaxHeld {
        /// The new value (held requests).
        n: u32,
        /// The value already set (held requests).
        already: u64,
    },
    /// `ban=` that is no time from 1 s to 30 days.
    #[error("invalid ban \"{}\": use a time from 1s to 30d, e.g. ban=10m", escape(.0))]
    Ban(Vec<u8>),
    /// `name=` that is no route name.
    #[error(
        "invalid name \"{}\": a route name of 1 to {ROUTE_NAME_MAX} letters, digits and \
         {ZONE_NAME_PUNCTUATION}",
        escape(.0)
    )]
    RouteName(Vec<u8>),
    /// One `name=` more than the configuration may hold.
    #[error(
        "too many route names: name=\"{}\" would be the {}th, and a configuration holds at \
         most {MAX_ROUTES} (each is a label value of the metrics)",
        escape(.0),
        MAX_ROUTES + 1
    )]
    TooManyRoutes(Vec<u8>),
    /// A directive without one of its required parameters.
    #[error("\"rate_limit_window\" must have \"{0}\" parameter: {hint}", hint = missing_hint(.0))]
    Missing(&'static str),
    /// `in_flight=` that is neither a count in range nor a variable.
    #[error(
        "invalid in_flight \"{}\": an integer from 0 to {}, or a variable",
        escape(.0),
        crate::shm::places::MAX_IN_FLIGHT
    )]
    InFlight(Vec<u8>),
    /// A parameter that counts a rate, on a line without `limit=`.
    #[error("\"{0}\" needs \"limit=\": a line with \"in_flight=\" alone counts no rate")]
    NeedsLimit(&'static str),
    /// A second `rate_limit_window` of one level on the same zone.
    #[error(
        "duplicate \"rate_limit_window\" for zone \"{}\" at this level: give one line per \
         zone (its limit= once)",
        escape(.0)
    )]
    DuplicateZone(Vec<u8>),
    /// `rate_limit_window_metrics` with another parameter than `write=`.
    #[error(
        "invalid parameter \"{}\" in \"rate_limit_window_metrics\": write=on or write=off \
         (reset=on is write=on)",
        escape(.0)
    )]
    MetricsParam(Vec<u8>),
}

/// What to write for a required parameter of `rate_limit_window`.
fn missing_hint(name: &str) -> &'static str {
    match name {
        "zone" => "write zone=NAME, a rate_limit_window_zone's name",
        _ => "write limit=N (requests per window) or limit=$variable",
    }
}

/// A rejected value of `rate_limit_window_zone`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZoneConfError {
    /// `zone=` without a name, a `:` or a valid size (the whole word).
    #[error(
        "invalid zone size \"{}\": use zone=NAME:SIZE, the size in bytes, k or m, \
         e.g. zone=per_ip:10m",
        escape(.0)
    )]
    Size(Vec<u8>),
    /// A zone name with a byte outside the HTTP token characters.
    #[error("invalid zone name \"{}\": use only letters, digits and {ZONE_NAME_PUNCTUATION}", escape(.0))]
    Name(Vec<u8>),
    /// A zone below the smallest size.
    #[error(
        "zone \"{}\" is too small: it must be at least {min} bytes; write \
         zone={}:{}k or larger",
        escape(.name), escape(.name), .min.div_ceil(1024)
    )]
    TooSmall {
        /// The zone's name.
        name: Vec<u8>,
        /// The smallest size (bytes).
        min: usize,
    },
    /// `window=` that is no time.
    #[error(
        "invalid window \"{}\": use a time from 1s to 31d in whole seconds, \
         e.g. window=1m or window=90s",
        escape(.0)
    )]
    Window(Vec<u8>),
    /// `window=` outside 1 s to 31 days.
    #[error("invalid window \"{}\": {}", escape(.0), .1)]
    WindowRange(Vec<u8>, WindowError),
    /// `window=` with a fraction of a second.
    #[error(
        "invalid window \"{}\": it must be a whole number of seconds from 1s to 31d, \
         e.g. window=90s",
        escape(.0)
    )]
    WindowFraction(Vec<u8>),
    /// `mode=` other than `estimate` or `strict`.
    #[error("invalid mode \"{}\": use \"estimate\" or \"strict\"", escape(.0))]
    Mode(Vec<u8>),
    /// `mode=strict` with `redis=`.
    #[error(
        "\"mode=strict\" cannot be combined with \"redis=\": gateways that share counts \
         through Redis see each other's requests only after a sync, so no bound on every \
         interval holds; use mode=estimate for a cluster"
    )]
    StrictWithRedis,
    /// `overrides=` that is no count in range.
    #[error("invalid overrides \"{}\": an integer from 1 to {MAX_OVERRIDES}", escape(.0))]
    Overrides(Vec<u8>),
    /// A directive without `zone=`.
    #[error(
        "\"rate_limit_window_zone\" must have \"zone\" parameter: write zone=NAME:SIZE, \
         e.g. zone=per_ip:10m"
    )]
    MissingZone,
    /// A zone declared twice, the same way.
    #[error(
        "duplicate zone \"{}\" in \"rate_limit_window_zone\": declare each zone once",
        escape(.0)
    )]
    Duplicate(Vec<u8>),
    /// A zone declared twice with another key or window.
    #[error(
        "zone \"{}\" is already bound to key \"{}\" with window={}: declare it once, or give \
         the other one a new name",
        escape(.name), escape(.key), Units(*.window_ms)
    )]
    AlreadyBound {
        /// The zone's name.
        name: Vec<u8>,
        /// The key it was declared with.
        key: Vec<u8>,
        /// The window it was declared with (ms).
        window_ms: u64,
    },
    /// `ipv6_prefix=` with another key than `$binary_remote_addr`.
    #[error(
        "\"ipv6_prefix={bits}\" of zone \"{}\" needs the key \"$binary_remote_addr\", not \"{}\"",
        escape(.zone), escape(.key)
    )]
    Ipv6PrefixKey {
        /// The prefix (bits).
        bits: u8,
        /// The zone's name.
        zone: Vec<u8>,
        /// The key written.
        key: Vec<u8>,
    },
    /// `ipv6_prefix=` that is no number of bits in range.
    #[error(transparent)]
    Ipv6Prefix(#[from] Ipv6PrefixError),
    /// `state=` with no path.
    #[error(
        "invalid \"state=\": give the path of the zone's state file, \
         e.g. state=/var/lib/nginx/per_ip.state"
    )]
    EmptyState,
    /// `state=` with `redis=`, in the zone named.
    #[error(
        "\"state=\" cannot be combined with \"redis=\" in zone \"{}\": the counts of a \
         redis= zone are kept in Redis across restarts",
        String::from_utf8_lossy(.0)
    )]
    StateWithRedis(Vec<u8>),
    /// `calendar=` that is no period.
    #[error(
        "invalid calendar \"{}\": use \"day\", \"week\", \"month\" or \"year\"",
        escape(.0)
    )]
    Calendar(Vec<u8>),
    /// `tz=` without `calendar=`.
    #[error(
        "\"tz=\" needs \"calendar=\": a window= is the same in every time zone, \
         a calendar=day|week|month|year starts at the time zone's midnight"
    )]
    TzWithoutCalendar,
    /// `calendar=` with `window=`, or with `mode=` (its count is exact).
    #[error(
        "\"calendar=\" cannot be combined with \"{0}\": a calendar period is its own \
         window, counted exactly"
    )]
    CalendarWith(&'static str),
    /// `tz=` names no time zone of the system's database.
    #[error("unknown time zone \"{}\" in \"tz=\": {}", escape(.name), .why)]
    UnknownTz {
        /// The name as written.
        name: Vec<u8>,
        /// What went wrong (the file looked for, or its content).
        why: String,
    },
    /// `redis=` with a `secret=` shorter than `min` characters (or none).
    #[error(
        "\"redis=\" needs \"secret=\" of at least {min} characters, the same on \
         every gateway: it seeds the hash that names clients in Redis"
    )]
    ShortSecret {
        /// The shortest secret (characters): `cluster::MIN_SECRET_LEN`.
        min: usize,
    },
}

/// A file of a Redis connection that cannot be used. Messages name the
/// parameter and the path, never the file's contents.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RedisFileError {
    /// The file cannot be read (the OS error, never the contents).
    #[error("cannot read \"{param}\" file \"{}\": {error}", escape(.path))]
    Unreadable {
        /// The parameter (`redis_ca`).
        param: &'static str,
        /// The path as read.
        path: Vec<u8>,
        /// The OS error.
        error: String,
    },
    /// `redis_password_file=` without a password on its first line.
    #[error(
        "\"redis_password_file\" file \"{}\" must hold the password as text on its first line",
        escape(.0)
    )]
    Password(Vec<u8>),
    /// `redis_ca=` or `redis_cert=` without a valid PEM certificate.
    #[error("\"{param}\" file \"{}\" holds no valid PEM certificate", escape(.path))]
    NoCertificate {
        /// The parameter.
        param: &'static str,
        /// The path as written.
        path: Vec<u8>,
    },
    /// `redis_key=` without a PEM private key.
    #[error("\"redis_key\" file \"{}\" holds no PEM private key", escape(.0))]
    NoKey(Vec<u8>),
}

/// A rejected fixed limit. Holds a copy of at most [`SHOWN_BYTES`] bytes of
/// the input, inline: building one never allocates, so the request path
/// can parse `limit=$variable` values with it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LimitError {
    head: [u8; SHOWN_BYTES],
    len: u8,
    cut: bool,
}

impl LimitError {
    /// The error for `input`.
    pub(crate) fn new(input: &[u8]) -> LimitError {
        let n = input.len().min(SHOWN_BYTES);
        let mut head = [0; SHOWN_BYTES];
        head[..n].copy_from_slice(&input[..n]);
        LimitError {
            head,
            len: n as u8,
            cut: input.len() > SHOWN_BYTES,
        }
    }

    /// The first [`SHOWN_BYTES`] bytes of the rejected input.
    pub fn input(&self) -> &[u8] {
        &self.head[..usize::from(self.len)]
    }

    /// Whether the input was longer than [`SHOWN_BYTES`].
    pub fn truncated(&self) -> bool {
        self.cut
    }
}

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid limit \"{}", escape(self.input()))?;
        if self.cut {
            f.write_str("...")?;
        }
        write!(
            f,
            "\": it must be an integer from 0 to {MAX_LIMIT}, or a variable"
        )
    }
}

impl fmt::Debug for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LimitError({self})")
    }
}

impl std::error::Error for LimitError {}
