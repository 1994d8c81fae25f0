//! The errors of a Redis call ([`LinkError`]): their kinds, counted in
//! metrics (`kind=` of `rate_limit_window_sync_failures_total`) and named in
//! the outage log line, and the time left before a call's deadline.

use std::time::{Duration, Instant};

/// Why a call failed, for metrics and the outage log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkErrorKind {
    /// The deadline passed (name resolution, connect, write or a reply).
    Timeout,
    /// The name did not resolve, the connect was refused, the socket broke.
    Connection,
    /// Redis answered something unusable: a protocol error, or an error
    /// reply where the connection itself needed a success (handshake).
    Reply,
    /// Wrong user or password, or an ACL that forbids a command or key.
    Auth,
    /// The TLS handshake failed: certificate not trusted, wrong name,
    /// client certificate refused.
    Tls,
    /// The sentinels know no usable master of `redis_master=`.
    Master,
    /// The Redis Cluster is down or a slot has no reachable node.
    ClusterDown,
}

impl LinkErrorKind {
    /// Metric label / log word.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkErrorKind::Timeout => "timeout",
            LinkErrorKind::Connection => "connection",
            LinkErrorKind::Reply => "reply",
            LinkErrorKind::Auth => "auth",
            LinkErrorKind::Tls => "tls",
            LinkErrorKind::Master => "master",
            LinkErrorKind::ClusterDown => "cluster_down",
        }
    }

    /// What an `[error]` line says of the kinds that need an operator
    /// (configuration or deployment); `None` for transient kinds.
    pub fn needs_operator(self) -> Option<&'static str> {
        match self {
            LinkErrorKind::Auth => Some("redis refused the credentials"),
            LinkErrorKind::Tls => Some("the TLS handshake with redis failed"),
            LinkErrorKind::Master => Some("the sentinels know no master of \"redis_master=\""),
            LinkErrorKind::ClusterDown => Some("the redis cluster is down"),
            _ => None,
        }
    }

    /// Every kind, in the order of the zone header's code (code = index + 1).
    pub const ALL: [LinkErrorKind; 7] = [
        LinkErrorKind::Timeout,
        LinkErrorKind::Connection,
        LinkErrorKind::Reply,
        LinkErrorKind::Auth,
        LinkErrorKind::Tls,
        LinkErrorKind::Master,
        LinkErrorKind::ClusterDown,
    ];

    /// Code kept in the zone header (`ZoneHeader::down_kind`), never 0.
    pub fn code(self) -> u64 {
        Self::ALL
            .iter()
            .position(|&k| k == self)
            .map_or(0, |i| i as u64 + 1)
    }

    /// The kind of a header code.
    pub fn from_code(code: u64) -> Option<Self> {
        Self::ALL
            .get(usize::try_from(code).ok()?.checked_sub(1)?)
            .copied()
    }
}

/// The kind of a crate error.
fn kind_of(e: &redis::RedisError) -> LinkErrorKind {
    use redis::ErrorKind as K;
    let text = e.to_string().to_ascii_lowercase();
    if e.kind() == K::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
    {
        LinkErrorKind::Auth
    } else if matches!(
        e.kind(),
        K::MasterNameNotFoundBySentinel | K::NoValidReplicasFoundBySentinel
    ) {
        LinkErrorKind::Master
    } else if matches!(e.kind(), K::ClusterDown | K::ClusterConnectionNotFound) {
        LinkErrorKind::ClusterDown
    } else if e.is_io_error() && (text.contains("certificate") || text.contains("alert")) {
        LinkErrorKind::Tls
    } else if e.is_timeout() {
        LinkErrorKind::Timeout
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        LinkErrorKind::Connection
    } else {
        LinkErrorKind::Reply
    }
}

/// A failed call (`redis_link.rs`). `detail` never holds a key or a password.
#[derive(Debug)]
pub struct LinkError {
    pub kind: LinkErrorKind,
    pub detail: String,
    /// The command the ACL refused when that failed the call (packed,
    /// `denied.rs`): logged once with its fix.
    pub denied: Option<u64>,
}

impl LinkError {
    pub fn new(kind: LinkErrorKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
            denied: None,
        }
    }
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.detail)
    }
}

impl From<redis::RedisError> for LinkError {
    fn from(e: redis::RedisError) -> Self {
        let kind = kind_of(&e);
        // The crate's messages name the command and the error kind, never
        // the arguments (keys) or the password.
        LinkError::new(kind, e.to_string())
    }
}

/// Time left before `deadline`, or a timeout error when none is.
pub fn left(deadline: Instant) -> Result<Duration, LinkError> {
    match deadline.checked_duration_since(Instant::now()) {
        Some(d) if d >= Duration::from_millis(1) => Ok(d),
        _ => Err(LinkError::new(LinkErrorKind::Timeout, "deadline passed")),
    }
}
