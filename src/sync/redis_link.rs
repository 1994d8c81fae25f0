//! One connection to Redis with bounded waits, for the sync thread.
//!
//! Every call takes a deadline (an [`Instant`]) and never blocks past it:
//! connect and the connection handshake in [`Link::open`], writing a
//! pipeline and reading each of its replies in [`Link::exec`]. Every wait is
//! bounded *inside the socket* (connect, read and write timeouts on every
//! socket, sentinels and cluster nodes included): no call runs in a helper
//! thread, so no thread or descriptor is ever left behind by a timeout.
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

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::sync::raw_conn::{Login, RawConn};
use rate_limit_window_core::conf::redis_url::{RedisMode, RedisNode, RedisParams, Secret};
use redis::cluster::{ClusterClientBuilder, ClusterConnection};
use redis::{
    ClientTlsConfig, ConnectionAddr, ConnectionInfo, ProtocolVersion, RedisConnectionInfo,
    TlsCertificates, TlsMode, Value,
};

/// Where the sync connects: a zone's `redis=` and `redis_*=` parameters,
/// files already read (passwords and keys print as `***`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisTarget {
    /// The first node without credentials, for messages.
    pub url: String,
    params: RedisParams,
}

impl RedisTarget {
    /// The target of a zone's `redis=`.
    pub fn from_params(p: &RedisParams) -> Self {
        Self {
            url: p.url.clone(),
            params: p.clone(),
        }
    }

    /// The address of one TCP node, TLS or not.
    fn addr(&self, host: &str, port: u16) -> ConnectionAddr {
        if self.params.addr.tls {
            ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host.to_owned(), port)
        }
    }

    /// `redis_ca=`, `redis_cert=` and `redis_key=` for the crate; `None`
    /// without TLS.
    fn certs(&self) -> Option<TlsCertificates> {
        let p = &self.params;
        p.addr.tls.then(|| TlsCertificates {
            client_tls: p
                .pem
                .cert
                .as_ref()
                .zip(p.pem.key.as_ref())
                .map(|(c, k)| ClientTlsConfig {
                    client_cert: c.clone(),
                    client_key: k.0.clone(),
                }),
            root_cert: p.pem.ca.clone(),
        })
    }
}

/// Shortest connect and reply timeout of one cluster node while the link
/// opens (ms).
const MIN_NODE_MS: u64 = 50;

/// The password as the crate takes it.
fn pw(s: &Secret) -> String {
    s.as_str().to_owned()
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
        let kind = kind_of(&e);
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

/// The timeout to give the crate's connect: it bounds the TCP connect and
/// then *each* reply of the handshake (`AUTH`, `SELECT`; `CLIENT SETINFO`
/// is disabled) separately, so a third of the time left keeps the whole
/// connect within `deadline`.
fn handshake(deadline: Instant) -> Result<Duration, LinkError> {
    Ok(left(deadline)? / 3)
}

/// Resolves `host:port` in this thread (the system resolver's own
/// timeouts bound it; an IP address needs no lookup), then checks that
/// `deadline` has not passed.
fn resolve(host: &str, port: u16, deadline: Instant) -> Result<Vec<SocketAddr>, LinkError> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| {
            LinkError::new(
                LinkErrorKind::Connection,
                format!("cannot resolve the host: {e}"),
            )
        })?
        .collect();
    left(deadline)?;
    if addrs.is_empty() {
        return Err(LinkError::new(LinkErrorKind::Connection, "no address"));
    }
    Ok(addrs)
}

/// The connection of a [`Link`]: one server (single or sentinel mode) or
/// a Redis Cluster (one connection per node, slots followed).
enum Conn {
    /// A plain TCP, TLS or Unix connection: every read bounded by the
    /// call's deadline and the stop flag (`raw_conn.rs`).
    Raw(RawConn),
    Cluster(Box<ClusterConnection>),
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
    /// cluster mode reading the slot map) before `deadline`. A plain or
    /// TLS connection checks `stop` on every read and write from its
    /// handshake on (a cluster's nodes between calls only).
    pub fn open_watched(
        target: &RedisTarget,
        deadline: Instant,
        stop: &Arc<AtomicBool>,
    ) -> Result<Link, LinkError> {
        let conn = match target.params.mode {
            RedisMode::Single => Self::open_single(target, deadline, stop)?,
            RedisMode::Sentinel => Self::open_sentinel(target, deadline, stop)?,
            RedisMode::Cluster => Conn::Cluster(Box::new(Self::open_cluster(target, deadline)?)),
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
                let mut c = RawConn::unix(path, deadline)?;
                c.watch(stop.clone());
                c.login(&login, deadline)?;
                Ok(Conn::Raw(c))
            }
            Some(RedisNode::Tcp { host, port }) => {
                Self::open_tcp(target, &login, (host, *port), deadline, stop).map(Conn::Raw)
            }
            None => Err(LinkError::new(LinkErrorKind::Connection, "no address")),
        }
    }

    /// Sentinel mode: each sentinel in turn, over a connection with
    /// connect, read and write timeouts, names the master of
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
            let found = ask_sentinel(target, host, port, step).and_then(|named| match named {
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

    /// Cluster mode: the seed nodes give the slot map; MOVED and ASK
    /// redirections and node failover are followed by the crate.
    fn open_cluster(
        target: &RedisTarget,
        deadline: Instant,
    ) -> Result<ClusterConnection, LinkError> {
        let p = &target.params;
        let seeds: Vec<ConnectionInfo> = p
            .addr
            .nodes
            .iter()
            .filter_map(|n| match n {
                RedisNode::Tcp { host, port } => Some(ConnectionInfo {
                    addr: target.addr(host, *port),
                    redis: RedisConnectionInfo::default(),
                }),
                RedisNode::Unix(_) => None,
            })
            .collect();
        // Every node connection the crate opens (seeds, slot refreshes,
        // redirections) has these connect and read timeouts; a hung node
        // costs at most one share per seed, never a thread.
        let step = (handshake(deadline)? / (seeds.len().max(1) as u32))
            .max(Duration::from_millis(MIN_NODE_MS));
        let mut b = ClusterClientBuilder::new(seeds)
            .connection_timeout(step)
            .response_timeout(step)
            .retries(2)
            .min_retry_wait(10)
            .max_retry_wait(100);
        if let Some(u) = &p.addr.username {
            b = b.username(u.clone());
        }
        if let Some(s) = &p.addr.password {
            b = b.password(pw(s));
        }
        if let Some(certs) = target.certs() {
            b = b.tls(TlsMode::Secure).certs(certs);
        }
        let conn = b.build()?.get_connection()?;
        left(deadline)?;
        Ok(conn)
    }

    /// Tries each resolved address of `host` in turn until one connects
    /// (and, with TLS, completes the handshake: the certificate is checked
    /// against the name as given) and logs in; `stop` is checked on every
    /// read and write from the connect on.
    fn open_tcp(
        target: &RedisTarget,
        login: &Login<'_>,
        (host, port): (&str, u16),
        deadline: Instant,
        stop: &Arc<AtomicBool>,
    ) -> Result<RawConn, LinkError> {
        let tls = match target.certs() {
            Some(certs) => Some(crate::sync::tls::client_config(&certs)?),
            None => None,
        };
        let mut last = LinkError::new(LinkErrorKind::Connection, "no address");
        for addr in resolve(host, port, deadline)? {
            let conn = RawConn::tcp(addr, deadline).and_then(|mut c| {
                c.watch(stop.clone());
                if let Some(config) = &tls {
                    c = c.into_tls(config.clone(), host, deadline)?;
                }
                c.login(login, deadline)?;
                Ok(c)
            });
            match conn {
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
            Conn::Cluster(conn) => exec_cluster(conn, pipe, deadline),
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

/// Opens a connection to `info` (TLS with `target`'s certificates when
/// configured), handshake included, before `deadline`; its read and write
/// timeouts are set to the time left.
fn connect_timed(
    target: &RedisTarget,
    info: ConnectionInfo,
    deadline: Instant,
) -> Result<redis::Connection, LinkError> {
    let client = match target.certs() {
        Some(certs) => redis::Client::build_with_tls(info, certs)?,
        None => redis::Client::open(info)?,
    };
    let conn = client.get_connection_with_timeout(handshake(deadline)?)?;
    timed(&conn, deadline)?;
    Ok(conn)
}

/// Sets `conn`'s read and write timeouts to the time left before `deadline`.
fn timed(conn: &redis::Connection, deadline: Instant) -> Result<(), LinkError> {
    conn.set_write_timeout(Some(left(deadline)?))?;
    conn.set_read_timeout(Some(left(deadline)?))?;
    Ok(())
}

/// Asks the sentinel at `host:port` for the master of `redis_master=`:
/// its address, or `None` when the sentinel knows no such master.
fn ask_sentinel(
    target: &RedisTarget,
    host: &str,
    port: u16,
    deadline: Instant,
) -> Result<Option<(String, u16)>, LinkError> {
    let p = &target.params;
    let info = ConnectionInfo {
        addr: target.addr(host, port),
        redis: RedisConnectionInfo {
            db: 0,
            username: p.addr.username.clone(),
            password: p.addr.password.as_ref().map(pw),
            protocol: ProtocolVersion::RESP2,
        },
    };
    let mut conn = connect_timed(target, info, deadline)?;
    let master = p.master.clone().unwrap_or_default();
    let reply: Value = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(master)
        .query(&mut conn)?;
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
    let mut conn = Link::open_tcp(target, &login, (host, port), deadline, stop)?;
    let role = conn.exec(&pipe, deadline)?.pop().unwrap_or(Value::Nil);
    match role {
        Value::Array(a) if a.first().and_then(bytes_text) == Some("master") => Ok(Conn::Raw(conn)),
        _ => Err(LinkError::new(
            LinkErrorKind::Connection,
            "the server the sentinel named is not a master",
        )),
    }
}

/// Runs `pipe` on a cluster: each command goes to the node of its key's
/// slot. The crate fails the whole pipeline when one command gets an error
/// reply; then the commands are run one by one (they are idempotent), and
/// a command that fails alone gets `Value::Nil` in its place.
fn exec_cluster(
    conn: &mut ClusterConnection,
    pipe: &redis::Pipeline,
    deadline: Instant,
) -> Result<Vec<Value>, LinkError> {
    conn.set_write_timeout(Some(left(deadline)?))?;
    conn.set_read_timeout(Some(left(deadline)?))?;
    let mut cp = redis::cluster::cluster_pipe();
    for cmd in pipe.cmd_iter() {
        cp.add_command(cmd.clone());
    }
    // Only error replies of single commands (WRONGTYPE, say) are run
    // again one by one; a socket error, a timeout, refused credentials or
    // a cluster that is down fail the round.
    let per_key = |e: &redis::RedisError| kind_of(e) == LinkErrorKind::Reply;
    match cp.query::<Vec<Value>>(conn) {
        Ok(replies) => return Ok(replies),
        Err(e) if !per_key(&e) => return Err(cluster_error(conn, e)),
        Err(_) => {}
    }
    let mut replies = Vec::with_capacity(pipe.len());
    for cmd in pipe.cmd_iter() {
        left(deadline)?;
        match cmd.query::<Value>(conn) {
            Ok(v) => replies.push(v),
            Err(e) if !per_key(&e) => return Err(cluster_error(conn, e)),
            Err(_) => replies.push(Value::Nil),
        }
    }
    Ok(replies)
}

/// Longest wait of one `CLUSTER INFO` that tells why a cluster call
/// failed (ms).
const PROBE_MS: u64 = 100;

/// The error of a failed cluster call: a node that cannot be reached
/// (its slots' keys fail with `connection` or `timeout`) is the cluster
/// being down when the nodes still up say so (`cluster_state:fail`), the
/// documented `kind="cluster_down"`. Asks up to three nodes (the crate
/// picks one at random for a keyless command).
fn cluster_error(conn: &mut ClusterConnection, e: redis::RedisError) -> LinkError {
    let err = LinkError::from(e);
    if !matches!(err.kind, LinkErrorKind::Connection | LinkErrorKind::Timeout) {
        return err;
    }
    let wait = Some(Duration::from_millis(PROBE_MS));
    if conn.set_read_timeout(wait).is_err() || conn.set_write_timeout(wait).is_err() {
        return err;
    }
    for _ in 0..3 {
        let info: Result<Value, _> = redis::cmd("CLUSTER").arg("INFO").query(conn);
        let text = match &info {
            Ok(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Ok(Value::VerbatimString { text, .. }) => text.clone(),
            _ => continue,
        };
        if text.contains("cluster_state:fail") {
            return LinkError::new(
                LinkErrorKind::ClusterDown,
                format!(
                    "a node is unreachable and the cluster is down ({})",
                    err.detail
                ),
            );
        }
        return err;
    }
    err
}
