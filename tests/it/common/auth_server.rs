//! A real HTTP/1.1 authentication server for `auth_request` tests: it
//! answers `200` with `X-User` and `X-Plan` for a known bearer token
//! (`Authorization: Bearer TOKEN`) and `401` for anything else, and counts
//! what it answered.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// One account: the token that proves it, the user name and plan the
/// server answers with.
#[derive(Clone, Debug)]
pub struct Account {
    pub token: String,
    pub user: String,
    pub plan: String,
}

impl Account {
    pub fn new(token: &str, user: &str, plan: &str) -> Account {
        Account {
            token: token.into(),
            user: user.into(),
            plan: plan.into(),
        }
    }
}

/// Counts of the server's answers.
#[derive(Default)]
struct Tally {
    granted: AtomicU64,
    refused: AtomicU64,
}

pub struct AuthServer {
    addr: SocketAddr,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

impl AuthServer {
    /// Listens on a free port of 127.0.0.1 and serves `accounts`.
    pub fn start(accounts: &[Account]) -> AuthServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let tokens: Arc<HashMap<String, Account>> = Arc::new(
            accounts
                .iter()
                .map(|a| (a.token.clone(), a.clone()))
                .collect(),
        );
        let tally = Arc::new(Tally::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (t, st) = (tally.clone(), stop.clone());
        let handle = thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (tokens, t) = (tokens.clone(), t.clone());
                thread::spawn(move || {
                    let _ = serve(conn, &tokens, &t);
                });
            }
        });
        AuthServer {
            addr,
            tally,
            stop,
            handle: Some(handle),
        }
    }

    /// host:port, for `proxy_pass http://…`.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Requests answered 200 so far.
    pub fn granted(&self) -> u64 {
        self.tally.granted.load(Ordering::SeqCst)
    }

    /// Requests answered 401 so far.
    pub fn refused(&self) -> u64 {
        self.tally.refused.load(Ordering::SeqCst)
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The request head: whether the client asked to close, the bearer token
/// (if any) and the body length. None at end of stream.
fn read_head(reader: &mut BufReader<TcpStream>) -> io::Result<Option<(bool, String, usize)>> {
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        if !line.trim().is_empty() {
            break;
        }
    }
    let mut close = line.trim_end().ends_with("HTTP/1.0");
    let (mut token, mut length) = (String::new(), 0usize);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            return Ok(Some((close, token, length)));
        }
        let Some((k, v)) = h.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        match k.as_str() {
            "authorization" => {
                token = v.strip_prefix("Bearer ").unwrap_or("").trim().to_string();
            }
            "content-length" => length = v.parse().unwrap_or(0),
            "connection" => close = v.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
}

fn serve(conn: TcpStream, tokens: &HashMap<String, Account>, tally: &Tally) -> io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut w = conn;
    while let Some((close, token, length)) = read_head(&mut reader)? {
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body)?;
        let keep = if close { "close" } else { "keep-alive" };
        let resp = match tokens.get(&token) {
            Some(a) => {
                tally.granted.fetch_add(1, Ordering::SeqCst);
                format!(
                    "HTTP/1.1 200 OK\r\nX-User: {}\r\nX-Plan: {}\r\nContent-Length: 0\r\nConnection: {keep}\r\n\r\n",
                    a.user, a.plan
                )
            }
            None => {
                tally.refused.fetch_add(1, Ordering::SeqCst);
                format!(
                    "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: {keep}\r\n\r\n"
                )
            }
        };
        w.write_all(resp.as_bytes())?;
        w.flush()?;
        if close {
            let _ = w.shutdown(Shutdown::Both);
            return Ok(());
        }
    }
    Ok(())
}
