//! The Redis parameters of `rate_limit_window_zone`: `redis=`, `sync=`,
//! `secret=` and the `redis_*=` connection parameters.
//!
//! `redis=` takes `HOST:PORT`, `unix:/PATH`, or a URL
//! `redis://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/DB]`
//! (`rediss://` for TLS). Several hosts are sentinels
//! (`redis_mode=sentinel`) or cluster seed nodes (`redis_mode=cluster`).
//!
//! A password never appears in a message: a rejected `redis=` value is
//! quoted with everything between `://` and the last `@` replaced by
//! `***`, and [`Secret`] prints as `***` in `Debug`.

use core::fmt;

use crate::units::{escape, parse_time_ms, MAX_UNIX_PATH};

/// A rejected Redis parameter of `rate_limit_window_zone`, printed as the
/// text of its `[emerg]`. A password is never quoted (see [`redact`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RedisError {
    /// `redis=` that is no address; the value as [`redact`] shows it.
    #[error(
        "invalid redis address \"{}\": use HOST:PORT, unix:/path or \
         redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DB]",
        escape(.0)
    )]
    Address(Vec<u8>),
    /// An empty path, or one with a NUL byte.
    #[error(
        "invalid \"{name}\" path \"{}\": give a file's path, e.g. {name}=/etc/nginx/redis/file",
        escape(.value)
    )]
    Path {
        /// The parameter (`redis_ca`).
        name: &'static str,
        /// The value written.
        value: Vec<u8>,
    },
    /// `sync=` outside 10 ms to 60 s.
    #[error(
        "invalid sync interval \"{}\" in \"sync=\": it must be between 10ms and 60s, \
         e.g. sync=100ms",
        escape(.0)
    )]
    Sync(Vec<u8>),
    /// `redis_mode=` other than single, sentinel or cluster.
    #[error("invalid redis_mode \"{}\": use single, sentinel or cluster", escape(.0))]
    Mode(Vec<u8>),
    /// `redis_master=` that is no printable name.
    #[error(
        "invalid redis_master \"{}\": the master's name as the sentinels know it \
         (printable, no spaces), e.g. redis_master=mymaster",
        escape(.0)
    )]
    Master(Vec<u8>),
    /// `redis_*=` without `redis=`.
    #[error("\"redis_*=\" parameters need \"redis=\"")]
    NeedsRedis,
    /// `sync=` or `secret=` without `redis=`.
    #[error("\"sync=\" and \"secret=\" need \"redis=\"")]
    SyncNeedsRedis,
    /// TLS files without a `rediss://` address.
    #[error("\"redis_ca=\", \"redis_cert=\" and \"redis_key=\" need a \"rediss://\" address")]
    TlsNeedsRediss,
    /// One of `redis_cert=` and `redis_key=` without the other.
    #[error("\"redis_cert=\" and \"redis_key=\" go together")]
    CertWithoutKey,
    /// A password in the URL and in `redis_password_file=`.
    #[error("the password is given both in \"redis=\" and by \"redis_password_file=\"")]
    TwoPasswords,
    /// Several hosts in single mode.
    #[error("several hosts in \"redis=\" need \"redis_mode=sentinel\" or \"redis_mode=cluster\"")]
    SeveralHosts,
    /// Sentinel mode without `redis_master=`.
    #[error("\"redis_mode=sentinel\" needs \"redis_master=NAME\"")]
    SentinelNeedsMaster,
    /// A unix socket in sentinel or cluster mode.
    #[error("\"redis_mode=sentinel\" and \"redis_mode=cluster\" need TCP hosts")]
    NeedsTcp,
    /// A database other than 0 in cluster mode.
    #[error("a Redis Cluster has only database 0: leave the /DB out of \"redis=\" or write /0")]
    ClusterDatabase,
    /// `redis_master=` outside sentinel mode.
    #[error("\"redis_master=\" needs \"redis_mode=sentinel\"")]
    MasterNeedsSentinel,
    /// `redis_outage=` other than local, share or closed.
    #[error("invalid redis_outage \"{}\": use local, share or closed", escape(.0))]
    Outage(Vec<u8>),
}

impl PartialEq<&str> for RedisError {
    fn eq(&self, other: &&str) -> bool {
        format!("{self}") == **other
    }
}

/// Shortest accepted `sync=` interval, in ms.
pub const MIN_SYNC_MS: u64 = 10;
/// Longest accepted `sync=` interval, in ms.
pub const MAX_SYNC_MS: u64 = 60_000;
/// `sync=` interval used when the zone names none, in ms.
pub const DEFAULT_SYNC_MS: u64 = 100;
/// Port of a Redis server when a URL names none.
pub const DEFAULT_PORT: u16 = 6379;
/// Port of a sentinel when a URL names none (`redis_mode=sentinel`).
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;
/// Most hosts in one `redis=` URL.
pub const MAX_HOSTS: usize = 16;

/// A password or a private key: compared and cloned, never printed.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(pub Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl Secret {
    /// The secret as text (passwords are UTF-8: see [`parse_redis_addr`]).
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.0).unwrap_or("")
    }
}

/// How the sync reaches Redis (`redis_mode=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RedisMode {
    /// One server (the default): the URL has one host.
    #[default]
    Single,
    /// The URL's hosts are sentinels; `redis_master=` names the master.
    Sentinel,
    /// The URL's hosts are seed nodes of a Redis Cluster.
    Cluster,
}

/// What a gateway does while its Redis is out (`redis_outage=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OutagePolicy {
    /// Each gateway decides from its own counts (the default): a client
    /// spread over N gateways can get N times the limit.
    #[default]
    Local,
    /// Each gateway enforces its share: the limit divided by the gateways
    /// seen in the last minute (at least 1), so the fleet stays near the
    /// limit.
    Share,
    /// Requests that need the fleet's counts are refused.
    Closed,
}

impl OutagePolicy {
    /// The parameter's word (metrics, logs).
    pub fn name(self) -> &'static str {
        match self {
            OutagePolicy::Local => "local",
            OutagePolicy::Share => "share",
            OutagePolicy::Closed => "closed",
        }
    }

    /// Every policy, in the metrics' order.
    pub const ALL: [OutagePolicy; 3] = [
        OutagePolicy::Local,
        OutagePolicy::Share,
        OutagePolicy::Closed,
    ];
}

/// One address of `redis=`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisNode {
    /// A host name, IPv4 address or bracket-less IPv6 address, and a port.
    Tcp {
        /// Name or address (IPv6 without brackets).
        host: String,
        /// TCP port (0 only while the mode's default is not yet known).
        port: u16,
    },
    /// An absolute Unix socket path.
    Unix(String),
}

/// A parsed `redis=` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisAddr {
    /// `rediss://`: every connection uses TLS.
    pub tls: bool,
    /// The hosts, in order (one unless sentinel or cluster).
    pub nodes: Vec<RedisNode>,
    /// ACL user name from the URL (percent-decoded).
    pub username: Option<String>,
    /// Password from the URL (percent-decoded).
    pub password: Option<Secret>,
    /// Database number (`/DB`), 0 by default.
    pub db: i64,
    /// Whether some TCP node had no port: it gets the mode's default.
    port_defaulted: bool,
}

/// Redis synchronisation settings of a zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisParams {
    /// The first node, without credentials, as a URL for messages:
    /// `redis://HOST:PORT/`, `rediss://HOST:PORT/DB` or `redis+unix:///PATH`
    /// (the path percent-encoded outside `A-Za-z0-9-._~/`).
    pub url: String,
    /// Interval between synchronisations, in ms (`MIN_SYNC_MS..=MAX_SYNC_MS`).
    pub sync_ms: u64,
    /// Shared secret (`secret=`); empty when none was given.
    pub secret: Vec<u8>,
    /// The parsed `redis=` value. With `redis_password_file=`, the glue
    /// puts the file's password in `addr.password` (sentinel mode: in
    /// `master_password`).
    pub addr: RedisAddr,
    /// `redis_mode=`.
    pub mode: RedisMode,
    /// `redis_master=NAME` (sentinel mode only).
    pub master: Option<String>,
    /// Password of the master and replicas in sentinel mode (from
    /// `redis_password_file=`; the URL's password is the sentinels').
    pub master_password: Option<Secret>,
    /// `redis_ca=PATH`: file of PEM CA certificates to trust.
    pub ca: Option<Vec<u8>>,
    /// `redis_cert=PATH`: file of the PEM client certificate chain.
    pub cert: Option<Vec<u8>>,
    /// `redis_key=PATH`: file of the PEM private key of `redis_cert=`.
    pub key: Option<Vec<u8>>,
    /// `redis_password_file=PATH`: its first line is the password.
    pub password_file: Option<Vec<u8>>,
    /// The files' contents, read by the glue when the configuration is
    /// loaded (by the master, before it drops privileges).
    pub pem: TlsPem,
    /// `redis_outage=`.
    pub outage: OutagePolicy,
}

/// PEM contents of `redis_ca=`, `redis_cert=` and `redis_key=`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TlsPem {
    /// CA certificates; `None`: the system's trust store.
    pub ca: Option<Vec<u8>>,
    /// Client certificate chain.
    pub cert: Option<Vec<u8>>,
    /// Client private key.
    pub key: Option<Secret>,
}

/// The words of `rate_limit_window_zone` that concern Redis, collected in
/// any order and checked together by [`RedisArgs::finish`].
#[derive(Default)]
pub struct RedisArgs {
    addr: Option<RedisAddr>,
    sync_ms: Option<u64>,
    secret: Option<Vec<u8>>,
    mode: Option<RedisMode>,
    master: Option<String>,
    ca: Option<Vec<u8>>,
    cert: Option<Vec<u8>>,
    key: Option<Vec<u8>>,
    password_file: Option<Vec<u8>>,
    outage: Option<OutagePolicy>,
}

/// `redis_outage=`'s value.
fn parse_outage(v: &[u8]) -> Result<OutagePolicy, RedisError> {
    OutagePolicy::ALL
        .into_iter()
        .find(|p| p.name().as_bytes() == v)
        .ok_or_else(|| RedisError::Outage(v.to_vec()))
}

/// A non-empty path parameter value.
fn path_value(name: &'static str, v: &[u8]) -> Result<Vec<u8>, RedisError> {
    if v.is_empty() || v.contains(&0) {
        return Err(RedisError::Path {
            name,
            value: v.to_vec(),
        });
    }
    Ok(v.to_vec())
}

impl RedisArgs {
    /// Takes `a` if it is a Redis parameter. Returns `Ok(false)` for any
    /// other word, an error for a Redis parameter with a bad value.
    pub fn accept(&mut self, a: &[u8]) -> Result<bool, RedisError> {
        let Some(eq) = a.iter().position(|&c| c == b'=') else {
            return Ok(false);
        };
        let v = &a[eq + 1..];
        match &a[..eq] {
            b"redis" => self.addr = Some(parse_redis_addr(v)?),
            b"sync" => self.sync_ms = Some(parse_sync(v)?),
            b"secret" => self.secret = Some(v.to_vec()),
            b"redis_mode" => self.mode = Some(parse_mode(v)?),
            b"redis_master" => self.master = Some(parse_master(v)?),
            b"redis_outage" => self.outage = Some(parse_outage(v)?),
            b"redis_ca" => self.ca = Some(path_value("redis_ca", v)?),
            b"redis_cert" => self.cert = Some(path_value("redis_cert", v)?),
            b"redis_key" => self.key = Some(path_value("redis_key", v)?),
            b"redis_password_file" => {
                self.password_file = Some(path_value("redis_password_file", v)?)
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Checks the collected parameters together.
    pub fn finish(self) -> Result<Option<RedisParams>, RedisError> {
        let Some(mut addr) = self.addr else {
            let any_redis = self.mode.is_some()
                || self.master.is_some()
                || self.ca.is_some()
                || self.cert.is_some()
                || self.key.is_some()
                || self.password_file.is_some()
                || self.outage.is_some();
            if any_redis {
                return Err(RedisError::NeedsRedis);
            }
            if self.sync_ms.is_some() || self.secret.is_some() {
                return Err(RedisError::SyncNeedsRedis);
            }
            return Ok(None);
        };
        let mode = self.mode.unwrap_or_default();
        check_mode(&addr, mode, self.master.is_some())?;
        if !addr.tls && (self.ca.is_some() || self.cert.is_some() || self.key.is_some()) {
            return Err(RedisError::TlsNeedsRediss);
        }
        if self.cert.is_some() != self.key.is_some() {
            return Err(RedisError::CertWithoutKey);
        }
        if self.password_file.is_some() && mode != RedisMode::Sentinel && addr.password.is_some() {
            return Err(RedisError::TwoPasswords);
        }
        if addr.port_defaulted {
            let port = if mode == RedisMode::Sentinel {
                DEFAULT_SENTINEL_PORT
            } else {
                DEFAULT_PORT
            };
            for n in &mut addr.nodes {
                if let RedisNode::Tcp { port: p @ 0, .. } = n {
                    *p = port;
                }
            }
            addr.port_defaulted = false;
        }
        Ok(Some(RedisParams {
            url: display_url(&addr),
            sync_ms: self.sync_ms.unwrap_or(DEFAULT_SYNC_MS),
            secret: self.secret.unwrap_or_default(),
            addr,
            mode,
            master: self.master,
            master_password: None,
            ca: self.ca,
            cert: self.cert,
            key: self.key,
            password_file: self.password_file,
            pem: TlsPem::default(),
            outage: self.outage.unwrap_or_default(),
        }))
    }
}

/// The mode's rules on hosts, unix sockets, databases and `redis_master=`.
fn check_mode(addr: &RedisAddr, mode: RedisMode, has_master: bool) -> Result<(), RedisError> {
    let unix = addr.nodes.iter().any(|n| matches!(n, RedisNode::Unix(_)));
    match mode {
        RedisMode::Single if addr.nodes.len() > 1 => Err(RedisError::SeveralHosts),
        RedisMode::Sentinel if !has_master => Err(RedisError::SentinelNeedsMaster),
        RedisMode::Sentinel | RedisMode::Cluster if unix => Err(RedisError::NeedsTcp),
        RedisMode::Cluster if addr.db != 0 => Err(RedisError::ClusterDatabase),
        RedisMode::Single | RedisMode::Cluster if has_master => {
            Err(RedisError::MasterNeedsSentinel)
        }
        _ => Ok(()),
    }
}

/// `sync=TIME`: 10 ms to 60 s.
fn parse_sync(v: &[u8]) -> Result<u64, RedisError> {
    match parse_time_ms(v) {
        Some(ms) if (MIN_SYNC_MS..=MAX_SYNC_MS).contains(&ms) => Ok(ms),
        _ => Err(RedisError::Sync(v.to_vec())),
    }
}

/// `redis_mode=single|sentinel|cluster`.
fn parse_mode(v: &[u8]) -> Result<RedisMode, RedisError> {
    match v {
        b"single" => Ok(RedisMode::Single),
        b"sentinel" => Ok(RedisMode::Sentinel),
        b"cluster" => Ok(RedisMode::Cluster),
        _ => Err(RedisError::Mode(v.to_vec())),
    }
}

/// `redis_master=NAME`: printable ASCII without spaces.
fn parse_master(v: &[u8]) -> Result<String, RedisError> {
    if v.is_empty() || v.len() > 128 || !v.iter().all(u8::is_ascii_graphic) {
        return Err(RedisError::Master(v.to_vec()));
    }
    Ok(String::from_utf8_lossy(v).into_owned())
}

/// `v` with any credentials replaced by `***`: what messages may quote.
pub fn redact(v: &[u8]) -> Vec<u8> {
    let Some(at) = v.iter().rposition(|&c| c == b'@') else {
        return v.to_vec();
    };
    let start = v
        .windows(3)
        .position(|w| w == b"://")
        .map_or(0, |i| i + 3)
        .min(at);
    let mut out = v[..start].to_vec();
    out.extend_from_slice(b"***");
    out.extend_from_slice(&v[at..]);
    out
}

/// Parses a `redis=` value; the error quotes it with [`redact`].
///
/// Errors: `invalid redis address "X": use HOST:PORT, unix:/path or
/// redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DB]`.
pub fn parse_redis_addr(v: &[u8]) -> Result<RedisAddr, RedisError> {
    let parsed = if let Some(rest) = v.strip_prefix(b"redis://") {
        parse_url(rest, false)
    } else if let Some(rest) = v.strip_prefix(b"rediss://") {
        parse_url(rest, true)
    } else if let Some(path) = v.strip_prefix(b"unix:") {
        unix_path(path).map(|p| plain(vec![RedisNode::Unix(p)]))
    } else {
        match host_port(v) {
            Some((host, port)) if port != 0 => Some(plain(vec![RedisNode::Tcp { host, port }])),
            _ => None,
        }
    };
    parsed.ok_or_else(|| RedisError::Address(redact(v)))
}

/// An address without credentials, TLS or database.
fn plain(nodes: Vec<RedisNode>) -> RedisAddr {
    RedisAddr {
        tls: false,
        nodes,
        username: None,
        password: None,
        db: 0,
        port_defaulted: false,
    }
}

/// `[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/DB]`.
fn parse_url(rest: &[u8], tls: bool) -> Option<RedisAddr> {
    let (userinfo, rest) = match rest.iter().rposition(|&c| c == b'@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let (hosts, db) = match rest.iter().position(|&c| c == b'/') {
        Some(slash) => (&rest[..slash], &rest[slash + 1..]),
        None => (rest, &b""[..]),
    };
    let db = if db.is_empty() {
        0
    } else if db.len() <= 5 && db.iter().all(u8::is_ascii_digit) {
        db.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0'))
    } else {
        return None;
    };
    let mut nodes = Vec::new();
    let mut port_defaulted = false;
    for h in hosts.split(|&c| c == b',') {
        let (host, port) = host_port(h).or_else(|| host(h).map(|host| (host, 0)))?;
        port_defaulted |= port == 0;
        nodes.push(RedisNode::Tcp { host, port });
    }
    if nodes.len() > MAX_HOSTS {
        return None;
    }
    let (username, password) = match userinfo {
        None => (None, None),
        Some(u) => {
            let colon = u.iter().position(|&c| c == b':')?;
            let user = decode(&u[..colon])?;
            let pass = decode(&u[colon + 1..])?;
            (
                (!user.is_empty()).then_some(user),
                (!pass.is_empty()).then(|| Secret(pass.into_bytes())),
            )
        }
    };
    Some(RedisAddr {
        tls,
        nodes,
        username,
        password,
        db,
        port_defaulted,
    })
}

/// Percent-decodes URL user info; the result must be UTF-8 without NUL.
fn decode(s: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            let txt = core::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(txt, 16).ok()?);
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    if out.contains(&0) {
        return None;
    }
    String::from_utf8(out).ok()
}

/// An absolute path of at most [`MAX_UNIX_PATH`] bytes, without NUL.
fn unix_path(path: &[u8]) -> Option<String> {
    if path.first() != Some(&b'/') || path.len() > MAX_UNIX_PATH || path.contains(&0) {
        return None;
    }
    String::from_utf8(path.to_vec()).ok()
}

/// `HOST:PORT` with PORT 1..=65535 (at most 5 digits).
fn host_port(v: &[u8]) -> Option<(String, u16)> {
    let colon = v.iter().rposition(|&c| c == b':')?;
    let (h, port) = (&v[..colon], &v[colon + 1..]);
    if port.is_empty() || port.len() > 5 || !port.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let port = port.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
    let port = u16::try_from(port).ok().filter(|&p| p != 0)?;
    Some((host(h)?, port))
}

/// A name or IPv4 address (`A-Za-z0-9-._`) or an IPv6 address in
/// brackets; returned without the brackets.
fn host(h: &[u8]) -> Option<String> {
    let ok = match h {
        [b'[', inner @ .., b']'] => {
            !inner.is_empty()
                && inner.contains(&b':')
                && inner
                    .iter()
                    .all(|&c| c.is_ascii_hexdigit() || c == b':' || c == b'.')
        }
        _ => {
            !h.is_empty()
                && h.iter()
                    .all(|&c| c.is_ascii_alphanumeric() || b"-._".contains(&c))
        }
    };
    // Every byte is ASCII here.
    let s = String::from_utf8_lossy(h);
    ok.then(|| s.trim_start_matches('[').trim_end_matches(']').to_owned())
}

/// The first node as a URL without credentials (for messages and metrics).
fn display_url(addr: &RedisAddr) -> String {
    let scheme = if addr.tls { "rediss" } else { "redis" };
    let db = if addr.db == 0 {
        String::new()
    } else {
        addr.db.to_string()
    };
    match addr.nodes.first() {
        Some(RedisNode::Unix(path)) => {
            let mut url = String::from("redis+unix://");
            for &b in path.as_bytes() {
                if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
                    url.push(char::from(b));
                } else {
                    url.push_str(&format!("%{b:02X}"));
                }
            }
            url
        }
        Some(RedisNode::Tcp { host, port }) if host.contains(':') => {
            format!("{scheme}://[{host}]:{port}/{db}")
        }
        Some(RedisNode::Tcp { host, port }) => format!("{scheme}://{host}:{port}/{db}"),
        None => String::new(),
    }
}

#[cfg(test)]
#[path = "redis_url_tests.rs"]
mod tests;
