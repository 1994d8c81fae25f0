//! Where the sync connects ([`RedisTarget`]) and one bounded connection to
//! one node ([`connect`]): name resolution, TCP, TLS with the zone's
//! certificates and the login, all before the call's deadline, the
//! connection checking the thread's stop flag on every read and write from
//! the connect on (`raw_conn.rs`). Used by every mode: a single server, a
//! sentinel and the master it names, each node of a Redis Cluster.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use crate::sync::link_error::{left, LinkError, LinkErrorKind};
use crate::sync::raw_conn::{Login, RawConn};
use rate_limit_window_core::conf::redis_url::RedisParams;
use redis::{ClientTlsConfig, TlsCertificates};

/// Where the sync connects: a zone's `redis=` and `redis_*=` parameters,
/// files already read (passwords and keys print as `***`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisTarget {
    /// The first node without credentials, for messages.
    pub url: String,
    pub params: RedisParams,
}

impl RedisTarget {
    /// The target of a zone's `redis=`.
    pub fn from_params(p: &RedisParams) -> Self {
        Self {
            url: p.url.clone(),
            params: p.clone(),
        }
    }

    /// `redis_ca=`, `redis_cert=` and `redis_key=`; `None` without TLS.
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
/// Connects to `host:port`, trying each resolved address in turn until one
/// connects (and, with TLS, completes the handshake: the certificate is
/// checked against the name as given) and logs in as `login`, before
/// `deadline`; `stop` is checked on every read and write from the connect
/// on.
pub fn connect(
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
        let conn = RawConn::tcp(addr, deadline, stop).and_then(|mut c| {
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
