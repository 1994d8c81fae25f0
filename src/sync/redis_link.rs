//! One connection to Redis with bounded waits, for the sync thread.
//!
//! Every call takes a deadline (an [`Instant`]) and never blocks past it:
//! connect and the connection handshake in [`Link::open_watched`], writing a
//! pipeline and reading each of its replies in [`Link::exec`]. Every wait is
//! bounded *inside the socket*, and every read and write checks the
//! call's deadline and the thread's stop flag (`raw_conn.rs`; sentinels
//! and cluster nodes included, `cluster_link.rs`): no call runs in a
//! helper thread, so no thread or descriptor is ever left behind by a
//! timeout, and a quitting worker's call ends at once.
//! Name resolution is the system resolver's, in the sync thread, bounded by
//! its own timeouts (`resolv.conf`); IP addresses need none.
//! A call that runs out of time, or fails on the socket, leaves the link
//! unusable (a later reply could belong to the abandoned pipeline): the
//! caller drops it and opens a new one.
//!
//! [`Link::exec`] returns one reply per command. An error reply to one
//! command (a `WRONGTYPE` on one key, say) is a [`redis::Value::ServerError`]
//! in its place and does not fail the other commands.
//!
//! Used only from the sync thread: nothing here touches nginx.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use crate::sync::cluster_link::ClusterLink;
use crate::sync::link_error::left;
pub use crate::sync::link_error::{LinkError, LinkErrorKind};
use crate::sync::node_conn::connect;
pub use crate::sync::node_conn::RedisTarget;
use crate::sync::raw_conn::{Login, RawConn};
use rate_limit_window_core::conf::redis_url::{RedisMode, RedisNode, Secret};
use redis::Value;

/// The connection of a [`Link`]: one server (single or sentinel mode) or
/// a Redis Cluster (one connection per node, slots followed).
enum Conn {
    /// A plain TCP, TLS or Unix connection: every read bounded by the
    /// call's deadline and the stop flag (`raw_conn.rs`).
    Raw(RawConn),
    /// A Redis Cluster over bounded connections (`cluster_link.rs`).
    Cluster(Box<ClusterLink>),
}

/// An open connection to Redis.
pub struct Link {
    conn: Conn,
    /// Set once a call failed mid-way: the stream may hold stale replies.
    broken: bool,
    /// The last command a reply said the ACL refused (`denied.rs`).
    denied: Option<u64>,
}

impl Link {
    /// Connects to `target` (resolving its name, connecting, and the
    /// handshake; in sentinel mode asking the sentinels for the master; in
    /// cluster mode reading the slot map) before `deadline`. Every
    /// connection (sentinels and cluster nodes included) checks `stop` on
    /// every read and write from its connect on.
    pub fn open_watched(
        target: &RedisTarget,
        deadline: Instant,
        stop: &Arc<AtomicBool>,
    ) -> Result<Link, LinkError> {
        let conn = match target.params.mode {
            RedisMode::Single => Self::open_single(target, deadline, stop)?,
            RedisMode::Sentinel => Self::open_sentinel(target, deadline, stop)?,
            RedisMode::Cluster => {
                Conn::Cluster(Box::new(ClusterLink::open(target, deadline, stop)?))
            }
        };
        Ok(Link {
            conn,
            broken: false,
            denied: None,
        })
    }

    /// One server: TCP (each resolved address in turn), TLS or Unix socket.
    fn open_single(
        target: &RedisTarget,
        deadline: Instant,
        stop: &Arc<AtomicBool>,
    ) -> Result<Conn, LinkError> {
        let a = &target.params.addr;
        let login = Login {
            username: a.username.as_deref(),
            password: a.password.as_ref().map(Secret::as_str),
            db: a.db,
        };
        match target.params.addr.nodes.first() {
            Some(RedisNode::Unix(path)) => {
                let mut c = RawConn::unix(path, deadline, stop)?;
                c.login(&login, deadline)?;
                Ok(Conn::Raw(c))
            }
            Some(RedisNode::Tcp { host, port }) => {
                connect(target, &login, (host, *port), deadline, stop).map(Conn::Raw)
            }
            None => Err(LinkError::new(LinkErrorKind::Connection, "no address")),
        }
    }

    /// Sentinel mode: each sentinel in turn, over a bounded connection
    /// (the call's deadline and `stop` on every read), names the master of
    /// `redis_master=` (`SENTINEL get-master-addr-by-name`); the link
    /// connects to it and checks its `ROLE`. Each sentinel gets an equal
    /// share of the time left, so one that fails, hangs or names a stale
    /// master leaves time to ask the next.
    fn open_sentinel(
        target: &RedisTarget,
        deadline: Instant,
        stop: &Arc<AtomicBool>,
    ) -> Result<Conn, LinkError> {
        let sentinels: Vec<(&str, u16)> = target
            .params
            .addr
            .nodes
            .iter()
            .filter_map(|n| match n {
                RedisNode::Tcp { host, port } => Some((host.as_str(), *port)),
                RedisNode::Unix(_) => None,
            })
            .collect();
        let mut last = LinkError::new(LinkErrorKind::Connection, "no sentinel");
        let mut unknown = false;
        for (i, &(host, port)) in sentinels.iter().enumerate() {
            let share = left(deadline)? / (sentinels.len() - i) as u32;
            let step = Instant::now() + share;
            let found =
                ask_sentinel(target, (host, port), step, stop).and_then(|named| match named {
                    Some((h, p)) => connect_master(target, (&h, p), step, stop).map(Some),
                    None => Ok(None),
                });
            match found {
                Ok(Some(conn)) => return Ok(conn),
                Ok(None) => unknown = true,
                Err(e) => last = e,
            }
        }
        if unknown {
            last = LinkError::new(LinkErrorKind::Master, "no sentinel knows the master");
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
        if let Some(d) = crate::sync::denied::refused(&replies) {
            self.denied = Some(d);
        }
        Ok(replies)
    }

    fn exec_inner(
        &mut self,
        pipe: &redis::Pipeline,
        deadline: Instant,
    ) -> Result<Vec<Value>, LinkError> {
        match &mut self.conn {
            Conn::Raw(conn) => Ok(conn.exec(pipe, deadline)?),
            Conn::Cluster(conn) => conn.exec(pipe, deadline),
        }
    }

    /// The last command the ACL refused since the last call (packed).
    pub fn take_denied(&mut self) -> Option<u64> {
        self.denied.take()
    }

    /// True once a call failed mid-way: drop the link and open a new one.
    pub fn is_broken(&self) -> bool {
        self.broken
    }
}

/// Asks the sentinel at `host:port` (the zone's user, password and TLS)
/// for the master of `redis_master=` before `deadline`: its address, or
/// `None` when the sentinel knows no such master.
fn ask_sentinel(
    target: &RedisTarget,
    (host, port): (&str, u16),
    deadline: Instant,
    stop: &Arc<AtomicBool>,
) -> Result<Option<(String, u16)>, LinkError> {
    let p = &target.params;
    let login = Login {
        username: p.addr.username.as_deref(),
        password: p.addr.password.as_ref().map(Secret::as_str),
        db: 0,
    };
    let mut conn = connect(target, &login, (host, port), deadline, stop)?;
    let mut pipe = redis::pipe();
    pipe.cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(p.master.as_deref().unwrap_or_default());
    let reply = conn.exec(&pipe, deadline)?.pop().unwrap_or(Value::Nil);
    match reply {
        Value::Nil => Ok(None),
        Value::Array(a) if a.len() == 2 => {
            let text = |v: &Value| bytes_text(v).map(str::to_owned);
            let host = text(&a[0]);
            let port = text(&a[1]).and_then(|t| t.parse::<u16>().ok());
            host.zip(port)
                .map(Some)
                .ok_or_else(|| LinkError::new(LinkErrorKind::Reply, "unusable sentinel reply"))
        }
        _ => Err(LinkError::new(
            LinkErrorKind::Reply,
            "unusable sentinel reply",
        )),
    }
}

/// The text of a bulk or simple string reply.
fn bytes_text(v: &Value) -> Option<&str> {
    match v {
        Value::BulkString(b) => core::str::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s.as_str()),
        _ => None,
    }
}

/// Connects to the master a sentinel named and checks that its `ROLE` is
/// `master` (a sentinel may name a stale one during a failover).
fn connect_master(
    target: &RedisTarget,
    (host, port): (&str, u16),
    deadline: Instant,
    stop: &Arc<AtomicBool>,
) -> Result<Conn, LinkError> {
    let p = &target.params;
    let mut pipe = redis::pipe();
    pipe.cmd("ROLE");
    let login = Login {
        username: None,
        password: p.master_password.as_ref().map(Secret::as_str),
        db: p.addr.db,
    };
    let mut conn = connect(target, &login, (host, port), deadline, stop)?;
    let role = conn.exec(&pipe, deadline)?.pop().unwrap_or(Value::Nil);
    match role {
        Value::Array(a) if a.first().and_then(bytes_text) == Some("master") => Ok(Conn::Raw(conn)),
        _ => Err(LinkError::new(
            LinkErrorKind::Connection,
            "the server the sentinel named is not a master",
        )),
    }
}
