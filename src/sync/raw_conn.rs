//! A Redis connection (TCP, TLS over TCP, or Unix socket) whose TCP
//! connect, and every read and write, is bounded by the *call's* deadline
//! and checks the thread's stop flag: a link that answers a byte every 0.25 s times out at
//! the call's deadline, and `nginx -s quit` (or a reload) interrupts any
//! call within [`POLL_MS`]. The crate's `Connection` bounds each socket
//! read only, so a trickling reply could keep a call (and a quitting
//! worker) waiting for minutes. TLS is rustls over the same socket: its
//! handshake and records go through the same bounded reads and writes (a
//! record cut by a timeout stays buffered in rustls for the next read).
//!
//! The replies are parsed by the crate's RESP parser, which keeps a
//! partial reply across reads; an error reply is a `Value::ServerError` in
//! its place. Used only from the sync thread: nothing here touches nginx.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::os::fd::AsRawFd;

use redis::{ErrorKind, Parser, RedisError, RedisResult, Value};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Longest one socket wait, between two checks of the stop flag (ms).
const POLL_MS: u64 = 100;

/// Pause before a Unix listener whose backlog is full is asked again (ms).
const NAP_MS: u64 = 10;

/// The socket.
enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Sock {
    fn set_timeouts(&self, d: Duration) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => {
                s.set_read_timeout(Some(d))?;
                s.set_write_timeout(Some(d))
            }
            Sock::Tls(t) => {
                t.sock.set_read_timeout(Some(d))?;
                t.sock.set_write_timeout(Some(d))
            }
            Sock::Unix(s) => {
                s.set_read_timeout(Some(d))?;
                s.set_write_timeout(Some(d))
            }
        }
    }
}

/// The socket with the call's deadline and the stop flag: every read and
/// write waits [`POLL_MS`] at most, then checks both.
struct Bounded {
    sock: Sock,
    deadline: Instant,
    stop: Option<Arc<AtomicBool>>,
}

impl Bounded {
    /// The wait the next socket call may take; an error when the deadline
    /// passed or the thread is stopping.
    fn wait(&self) -> io::Result<Duration> {
        wait(self.deadline, self.stop.as_deref())
    }

    /// Runs one socket call until it does something, the deadline passes
    /// or the thread stops.
    fn retry<T>(&mut self, mut f: impl FnMut(&mut Sock) -> io::Result<T>) -> io::Result<T> {
        loop {
            let d = self.wait()?;
            self.sock.set_timeouts(d)?;
            match f(&mut self.sock) {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                r => return r,
            }
        }
    }
}

impl Read for Bounded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.retry(|s| match s {
            Sock::Tcp(t) => t.read(buf),
            Sock::Unix(u) => u.read(buf),
            Sock::Tls(t) => t.read(buf),
        })
    }
}

impl Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.retry(|s| match s {
            Sock::Tcp(t) => t.write(buf),
            Sock::Unix(u) => u.write(buf),
            Sock::Tls(t) => t.write(buf),
        })
    }

    /// Sends what TLS still buffers (a plain socket buffers nothing).
    fn flush(&mut self) -> io::Result<()> {
        self.retry(|s| match s {
            Sock::Tls(t) => t.flush(),
            _ => Ok(()),
        })
    }
}

/// A failed TLS handshake: an I/O error whose text says `certificate`
/// (the link's errors are sorted by it into `kind="tls"`).
fn tls_error(what: &str) -> RedisError {
    io::Error::other(format!(
        "TLS handshake failed (certificate or alert): {what}"
    ))
    .into()
}

/// A TCP connect to `addr` that waits [`POLL_MS`] at a time, checking
/// `stop` and `deadline` in between: a server that never answers the SYN
/// (a full backlog, a black hole) cannot keep a quitting worker.
fn connect_watched(
    addr: SocketAddr,
    deadline: Instant,
    stop: &AtomicBool,
) -> io::Result<TcpStream> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    finish_connect(&sock, &addr.into(), deadline, stop)?;
    Ok(sock.into())
}

/// Connects `sock` to `addr` without blocking past [`POLL_MS`] at a time:
/// a TCP connect in progress is polled, a Unix listener whose backlog is
/// full (`EAGAIN`) is asked again after a nap; the socket is left blocking.
fn finish_connect(
    sock: &Socket,
    addr: &SockAddr,
    deadline: Instant,
    stop: &AtomicBool,
) -> io::Result<()> {
    sock.set_nonblocking(true)?;
    loop {
        match sock.connect(addr) {
            Ok(()) => break,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {
                while !writable(sock, wait(deadline, Some(stop))?)? {}
                if let Some(e) = sock.take_error()? {
                    return Err(e);
                }
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let nap = wait(deadline, Some(stop))?.min(Duration::from_millis(NAP_MS));
                std::thread::sleep(nap);
            }
            Err(e) => return Err(e),
        }
    }
    sock.set_nonblocking(false)
}

/// The wait the next socket call may take ([`POLL_MS`] at most); an error
/// when `deadline` passed or the thread is stopping.
fn wait(deadline: Instant, stop: Option<&AtomicBool>) -> io::Result<Duration> {
    if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "stopping"));
    }
    let left = deadline.saturating_duration_since(Instant::now());
    if left < Duration::from_millis(1) {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
    }
    Ok(left.min(Duration::from_millis(POLL_MS)))
}

/// Whether `sock` became writable (its connect ended) within `d`.
fn writable(sock: &Socket, d: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    let ms = d.as_millis().clamp(1, u128::from(POLL_MS)) as libc::c_int;
    // SAFETY: `p` is one valid pollfd that lives across the call (nfds 1),
    // its descriptor owned by `sock`; poll(2) writes only `p.revents`.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    match n {
        0 => Ok(false),
        n if n > 0 => Ok(true),
        _ => {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => Ok(false),
                _ => Err(e),
            }
        }
    }
}

/// A plain connection to one server.
pub struct RawConn {
    io: Bounded,
    parser: Parser,
}

/// Who the connection logs in as: user, password, database.
pub struct Login<'a> {
    pub username: Option<&'a str>,
    pub password: Option<&'a str>,
    pub db: i64,
}

impl RawConn {
    /// Connects to `addr` over TCP before `deadline`, checking `stop`
    /// every [`POLL_MS`] while the connect waits, and on every read and
    /// write from then on.
    pub fn tcp(
        addr: SocketAddr,
        deadline: Instant,
        stop: &Arc<AtomicBool>,
    ) -> RedisResult<RawConn> {
        let s = connect_watched(addr, deadline, stop)?;
        let _ = s.set_nodelay(true);
        let mut c = Self::of(Sock::Tcp(s), deadline);
        c.watch(stop.clone());
        Ok(c)
    }

    /// Connects to the Unix socket at `path` before `deadline`, checking
    /// `stop` while the connect waits (a listener whose backlog is full),
    /// and on every read and write from then on.
    pub fn unix(path: &str, deadline: Instant, stop: &Arc<AtomicBool>) -> RedisResult<RawConn> {
        let sock = Socket::new(Domain::UNIX, Type::STREAM, None)?;
        finish_connect(&sock, &SockAddr::unix(path)?, deadline, stop)?;
        let mut c = Self::of(Sock::Unix(UnixStream::from(sock)), deadline);
        c.watch(stop.clone());
        Ok(c)
    }

    fn of(sock: Sock, deadline: Instant) -> RawConn {
        RawConn {
            io: Bounded {
                sock,
                deadline,
                stop: None,
            },
            parser: Parser::new(),
        }
    }

    /// Checks `stop` on every read and write from now on.
    pub fn watch(&mut self, stop: Arc<AtomicBool>) {
        self.io.stop = Some(stop);
    }

    /// This TCP connection as TLS (`config`; the server's certificate
    /// checked against `host` as given), its handshake done before
    /// `deadline` (every read and write bounded as a call's).
    pub fn into_tls(
        self,
        config: Arc<ClientConfig>,
        host: &str,
        deadline: Instant,
    ) -> RedisResult<RawConn> {
        let name =
            ServerName::try_from(host.to_owned()).map_err(|_| tls_error("bad server name"))?;
        let conn = ClientConnection::new(config, name).map_err(|e| tls_error(&e.to_string()))?;
        let RawConn {
            io:
                Bounded {
                    sock: Sock::Tcp(tcp),
                    stop,
                    ..
                },
            parser,
        } = self
        else {
            return Err(tls_error("TLS over a socket that is not TCP"));
        };
        let mut c = RawConn {
            io: Bounded {
                sock: Sock::Tls(Box::new(StreamOwned::new(conn, tcp))),
                deadline,
                stop,
            },
            parser,
        };
        while matches!(&c.io.sock, Sock::Tls(t) if t.conn.is_handshaking()) {
            c.io.retry(|s| match s {
                Sock::Tls(t) => t.conn.complete_io(&mut t.sock).map(|_| ()),
                _ => Ok(()),
            })
            .map_err(|e| match e.kind() {
                io::ErrorKind::TimedOut => RedisError::from(e),
                // The handshake's own failure: counted as `tls`.
                _ => tls_error(&e.to_string()),
            })?;
        }
        Ok(c)
    }

    /// Logs in (`AUTH`, `SELECT`) before `deadline`: an error reply is an
    /// authentication error (`WRONGPASS`, `NOAUTH`, `NOPERM`) or a response
    /// error.
    pub fn login(&mut self, who: &Login<'_>, deadline: Instant) -> RedisResult<()> {
        let mut pipe = redis::pipe();
        if let Some(pw) = who.password {
            let c = pipe.cmd("AUTH");
            if let Some(u) = who.username {
                c.arg(u);
            }
            c.arg(pw);
        }
        if who.db != 0 {
            pipe.cmd("SELECT").arg(who.db);
        }
        if pipe.is_empty() {
            return Ok(());
        }
        for v in self.exec(&pipe, deadline)? {
            if let Value::ServerError(e) = v {
                let kind = match e.code() {
                    "WRONGPASS" | "NOAUTH" | "NOPERM" => ErrorKind::AuthenticationFailed,
                    _ => ErrorKind::ResponseError,
                };
                // The code only: the details could quote an argument.
                let code = e.code().to_string();
                return Err(RedisError::from((kind, "login refused", code)));
            }
        }
        Ok(())
    }

    /// Sends `pipe` and reads one reply per command, all before
    /// `deadline` (checked on every read), unless the thread stops.
    pub fn exec(&mut self, pipe: &redis::Pipeline, deadline: Instant) -> RedisResult<Vec<Value>> {
        self.send(pipe, deadline)?;
        self.recv(pipe.len(), deadline)
    }

    /// Sends `pipe` before `deadline`; its replies are [`RawConn::recv`]'s.
    pub fn send(&mut self, pipe: &redis::Pipeline, deadline: Instant) -> RedisResult<()> {
        self.io.deadline = deadline;
        self.io.write_all(&pipe.get_packed_pipeline())?;
        Ok(self.io.flush()?)
    }

    /// Reads `n` replies before `deadline` (checked on every read), unless
    /// the thread stops.
    pub fn recv(&mut self, n: usize, deadline: Instant) -> RedisResult<Vec<Value>> {
        self.io.deadline = deadline;
        let mut replies = Vec::with_capacity(n);
        for _ in 0..n {
            replies.push(self.parser.parse_value(&mut self.io)?);
        }
        Ok(replies)
    }
}
