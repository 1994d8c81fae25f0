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

use rate_limit_window_core::redis_url::{RedisMode, RedisNode, RedisParams, Secret};
use redis::cluster::{ClusterClientBuilder, ClusterConnection};
use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
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

    /// Database, user and password of a data node (single mode).
    fn redis_info(&self) -> RedisConnectionInfo {
        let a = &self.params.addr;
        RedisConnectionInfo {
            db: a.db,
            username: a.username.clone(),
            password: a.password.as_ref().map(|s| s.as_str().to_owned()),
            protocol: ProtocolVersion::RESP2,
        }
    }
}

/// Runs `f` in a helper thread and waits for it until `deadline`: for the
/// crate's calls that take no timeout (sentinel discovery, cluster slot
/// discovery). On timeout the thread is abandoned; it owns only copies.
fn within<T: Send + 'static>(
    deadline: Instant,
    what: &str,
    f: impl FnOnce() -> Result<T, LinkError> + Send + 'static,
) -> Result<T, LinkError> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("rlw-connect".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| LinkError::new(LinkErrorKind::Connection, format!("{what}: {e}")))?;
    match rx.recv_timeout(left(deadline)?) {
        Ok(r) => r,
        Err(_) => Err(LinkError::new(
            LinkErrorKind::Timeout,
            format!("{what} timed out"),
        )),
    }
}

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

/// The connection of a [`Link`]: one server (single or sentinel mode) or
/// a Redis Cluster (one connection per node, slots followed).
enum Conn {
    One(redis::Connection),
    Cluster(Box<ClusterConnection>),
}

/// An open connection to Redis.
pub struct Link {
    conn: Conn,
    /// Set once a call failed mid-way: the stream may hold stale replies.
    broken: bool,
}

impl Link {
    /// Connects to `target` (resolving its name, connecting, and the
    /// handshake; in sentinel mode asking the sentinels for the master; in
    /// cluster mode reading the slot map) before `deadline`.
    pub fn open(target: &RedisTarget, deadline: Instant) -> Result<Link, LinkError> {
        let conn = match target.params.mode {
            RedisMode::Single => Conn::One(Self::open_single(target, deadline)?),
            RedisMode::Sentinel => Conn::One(Self::open_sentinel(target, deadline)?),
            RedisMode::Cluster => Conn::Cluster(Box::new(Self::open_cluster(target, deadline)?)),
        };
        Ok(Link {
            conn,
            broken: false,
        })
    }

    /// One server: TCP (each resolved address in turn), TLS or Unix socket.
    fn open_single(
        target: &RedisTarget,
        deadline: Instant,
    ) -> Result<redis::Connection, LinkError> {
        let redis = target.redis_info();
        match target.params.addr.nodes.first() {
            Some(RedisNode::Unix(path)) => {
                let info = ConnectionInfo {
                    addr: ConnectionAddr::Unix(path.into()),
                    redis,
                };
                Ok(redis::Client::open(info)?.get_connection_with_timeout(left(deadline)?)?)
            }
            Some(RedisNode::Tcp { host, port }) if target.params.addr.tls => {
                // The name stays as given: the certificate is checked against it.
                let info = ConnectionInfo {
                    addr: target.addr(host, *port),
                    redis,
                };
                let certs = target.certs().unwrap_or(TlsCertificates {
                    client_tls: None,
                    root_cert: None,
                });
                let client = redis::Client::build_with_tls(info, certs)?;
                Ok(client.get_connection_with_timeout(left(deadline)?)?)
            }
            Some(RedisNode::Tcp { host, port }) => {
                let info = ConnectionInfo {
                    addr: ConnectionAddr::Tcp(host.clone(), *port),
                    redis,
                };
                Self::open_tcp(&info, host, *port, deadline)
            }
            None => Err(LinkError::new(LinkErrorKind::Connection, "no address")),
        }
    }

    /// Sentinel mode: the sentinels name the master of `redis_master=`,
    /// whose role is checked, and the link connects to it.
    fn open_sentinel(
        target: &RedisTarget,
        deadline: Instant,
    ) -> Result<redis::Connection, LinkError> {
        let p = &target.params;
        let sentinels: Vec<ConnectionAddr> = p
            .addr
            .nodes
            .iter()
            .filter_map(|n| match n {
                RedisNode::Tcp { host, port } => Some(target.addr(host, *port)),
                RedisNode::Unix(_) => None,
            })
            .collect();
        let master = p.master.clone().unwrap_or_default();
        let mut b = SentinelClientBuilder::new(sentinels, master, SentinelServerType::Master)?
            .set_client_to_redis_db(p.addr.db);
        if let Some(u) = &p.addr.username {
            b = b.set_client_to_sentinel_username(u.clone());
        }
        if let Some(s) = &p.addr.password {
            b = b.set_client_to_sentinel_password(pw(s));
        }
        if let Some(s) = &p.master_password {
            b = b.set_client_to_redis_password(pw(s));
        }
        if let Some(certs) = target.certs() {
            b = b
                .set_client_to_sentinel_tls_mode(TlsMode::Secure)
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_certificates(certs.clone())
                .set_client_to_redis_certificates(certs);
        }
        let mut client = b.build()?;
        within(deadline, "sentinel discovery", move || {
            Ok(client.get_connection()?)
        })
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
        let step = left(deadline)?;
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
        let client = b.build()?;
        within(deadline, "cluster discovery", move || {
            Ok(client.get_connection()?)
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
        match &mut self.conn {
            Conn::One(conn) => {
                conn.set_write_timeout(Some(left(deadline)?))?;
                conn.send_packed_command(&pipe.get_packed_pipeline())?;
                let mut replies = Vec::with_capacity(pipe.len());
                for _ in 0..pipe.len() {
                    conn.set_read_timeout(Some(left(deadline)?))?;
                    replies.push(conn.recv_response()?);
                }
                Ok(replies)
            }
            Conn::Cluster(conn) => exec_cluster(conn, pipe, deadline),
        }
    }

    /// True once a call failed mid-way: drop the link and open a new one.
    pub fn is_broken(&self) -> bool {
        self.broken
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
        Err(e) if !per_key(&e) => return Err(e.into()),
        Err(_) => {}
    }
    let mut replies = Vec::with_capacity(pipe.len());
    for cmd in pipe.cmd_iter() {
        left(deadline)?;
        match cmd.query::<Value>(conn) {
            Ok(v) => replies.push(v),
            Err(e) if !per_key(&e) => return Err(e.into()),
            Err(_) => replies.push(Value::Nil),
        }
    }
    Ok(replies)
}
