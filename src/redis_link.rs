//! One connection to Redis with bounded waits, for the sync thread.
//!
//! Every call takes a deadline (an [`Instant`]) and never blocks past it:
//! name resolution, connect and the connection handshake in [`Link::open`],
//! writing a pipeline and reading each of its replies in [`Link::exec`].
//! A call that runs out of time, or fails on the socket, leaves the link
//! unusable (a later reply could belong to the abandoned pipeline): the
//! caller drops it and opens a new one.
//!
//! [`Link::exec`] returns one reply per command. An error reply to one
//! command (a `WRONGTYPE` on one key, say) is a [`redis::Value::ServerError`]
//! in its place and does not fail the other commands.
//!
//! Used only from the sync thread: nothing here touches nginx.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Value};

/// Where the sync connects: built from a zone's `redis=` parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisTarget {
    /// `redis://HOST:PORT/` or `redis+unix:///PATH`.
    pub url: String,
}

impl RedisTarget {
    /// The target of a zone's `redis=`.
    pub fn from_params(p: &rate_limit_window_core::parse::RedisParams) -> Self {
        Self { url: p.url.clone() }
    }
}

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
}

impl LinkErrorKind {
    /// Metric label / log word.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkErrorKind::Timeout => "timeout",
            LinkErrorKind::Connection => "connection",
            LinkErrorKind::Reply => "reply",
        }
    }
}

/// A failed [`Link`] call. `detail` never holds a key or a password.
#[derive(Debug)]
pub struct LinkError {
    pub kind: LinkErrorKind,
    pub detail: String,
}

impl LinkError {
    fn new(kind: LinkErrorKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
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
        let kind = if e.is_timeout() {
            LinkErrorKind::Timeout
        } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
            LinkErrorKind::Connection
        } else {
            LinkErrorKind::Reply
        };
        // The crate's messages name the command and the error kind, never
        // the arguments (keys) or the password.
        LinkError::new(kind, e.to_string())
    }
}

/// Time left before `deadline`, or a timeout error when none is.
fn left(deadline: Instant) -> Result<Duration, LinkError> {
    match deadline.checked_duration_since(Instant::now()) {
        Some(d) if d >= Duration::from_millis(1) => Ok(d),
        _ => Err(LinkError::new(LinkErrorKind::Timeout, "deadline passed")),
    }
}

/// Resolves `host:port` before `deadline`. `getaddrinfo` has no timeout,
/// so it runs in a helper thread that is abandoned (it owns only copies)
/// if the deadline passes first.
fn resolve(host: &str, port: u16, deadline: Instant) -> Result<Vec<SocketAddr>, LinkError> {
    let (tx, rx) = mpsc::channel();
    let name = host.to_owned();
    std::thread::Builder::new()
        .name("rlw-resolve".into())
        .spawn(move || {
            let _ = tx.send((name.as_str(), port).to_socket_addrs().map(Vec::from_iter));
        })
        .map_err(|e| LinkError::new(LinkErrorKind::Connection, format!("resolver: {e}")))?;
    match rx.recv_timeout(left(deadline)?) {
        Ok(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
        Ok(Ok(_)) => Err(LinkError::new(LinkErrorKind::Connection, "no address")),
        Ok(Err(e)) => Err(LinkError::new(
            LinkErrorKind::Connection,
            format!("cannot resolve the host: {e}"),
        )),
        Err(_) => Err(LinkError::new(
            LinkErrorKind::Timeout,
            "name resolution timed out",
        )),
    }
}

/// An open connection to Redis.
pub struct Link {
    conn: redis::Connection,
    /// Set once a call failed mid-way: the stream may hold stale replies.
    broken: bool,
}

impl Link {
    /// Connects to `target` (resolving its name, connecting, and the
    /// handshake) before `deadline`.
    pub fn open(target: &RedisTarget, deadline: Instant) -> Result<Link, LinkError> {
        let info: ConnectionInfo = target.url.as_str().into_connection_info()?;
        let conn = match &info.addr {
            ConnectionAddr::Tcp(host, port) => Self::open_tcp(&info, host, *port, deadline)?,
            _ => redis::Client::open(info.clone())?.get_connection_with_timeout(left(deadline)?)?,
        };
        Ok(Link {
            conn,
            broken: false,
        })
    }

    /// Tries each resolved address of `host` in turn until one connects.
    fn open_tcp(
        info: &ConnectionInfo,
        host: &str,
        port: u16,
        deadline: Instant,
    ) -> Result<redis::Connection, LinkError> {
        let mut last = LinkError::new(LinkErrorKind::Connection, "no address");
        for addr in resolve(host, port, deadline)? {
            let mut at = info.clone();
            at.addr = ConnectionAddr::Tcp(addr.ip().to_string(), addr.port());
            let client = redis::Client::open(at)?;
            match client.get_connection_with_timeout(left(deadline)?) {
                Ok(c) => return Ok(c),
                Err(e) => last = e.into(),
            }
        }
        Err(last)
    }

    /// Sends `pipe` and reads one reply per command before `deadline`.
    /// Replies come back in command order, ignored commands included; an
    /// error reply is a `Value::ServerError` in its place. Plain pipelines
    /// only: not `pipe.atomic()` (its `MULTI`/`EXEC` replies are not counted).
    pub fn exec(
        &mut self,
        pipe: &redis::Pipeline,
        deadline: Instant,
    ) -> Result<Vec<Value>, LinkError> {
        if self.broken {
            return Err(LinkError::new(LinkErrorKind::Connection, "link broken"));
        }
        self.broken = true;
        let replies = self.exec_inner(pipe, deadline)?;
        self.broken = false;
        Ok(replies)
    }

    fn exec_inner(
        &mut self,
        pipe: &redis::Pipeline,
        deadline: Instant,
    ) -> Result<Vec<Value>, LinkError> {
        self.conn.set_write_timeout(Some(left(deadline)?))?;
        self.conn.send_packed_command(&pipe.get_packed_pipeline())?;
        let mut replies = Vec::with_capacity(pipe.len());
        for _ in 0..pipe.len() {
            self.conn.set_read_timeout(Some(left(deadline)?))?;
            replies.push(self.conn.recv_response()?);
        }
        Ok(replies)
    }

    /// True once a call failed mid-way: drop the link and open a new one.
    pub fn is_broken(&self) -> bool {
        self.broken
    }
}
