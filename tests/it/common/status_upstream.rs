//! A real HTTP/1.1 upstream that answers the status its path asks for:
//! `/status/401` gets 401, any other path 200; `?sleep=MS` waits that long
//! before answering (an upstream timeout, a client that gives up first);
//! `?tokens=T` reports `X-Tokens: T` (what an LLM call used; any text, for
//! invalid values; no `tokens=`, no header). Counts the requests it
//! received, by status.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

pub struct StatusUpstream {
    addr: std::net::SocketAddr,
    answered: Arc<Mutex<BTreeMap<u16, u64>>>,
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

impl StatusUpstream {
    pub fn start() -> StatusUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let answered = Arc::new(Mutex::new(BTreeMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, st) = (answered.clone(), stop.clone());
        let handle = thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let a = a.clone();
                thread::spawn(move || {
                    let _ = serve(conn, &a);
                });
            }
        });
        StatusUpstream {
            addr,
            answered,
            stop,
            handle: Some(handle),
        }
    }

    /// host:port for `{{UPSTREAM}}`.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Requests received whose path asked for `status`.
    pub fn received(&self, status: u16) -> u64 {
        *self.answered.lock().unwrap().get(&status).unwrap_or(&0)
    }

    /// Requests received, all statuses.
    pub fn received_total(&self) -> u64 {
        self.answered.lock().unwrap().values().sum()
    }
}

impl Drop for StatusUpstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The `X-Tokens` header line a request path asks for (empty: none).
fn tokens_header(path: &str) -> String {
    let query = path.split_once('?').map_or("", |(_, q)| q);
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix("tokens="))
        .map_or_else(String::new, |t| format!("X-Tokens: {t}\r\n"))
}

/// The status and delay (ms) a request path asks for.
fn wanted(path: &str) -> (u16, u64) {
    let (p, query) = path.split_once('?').unwrap_or((path, ""));
    let status = p
        .strip_prefix("/status/")
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let sleep = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("sleep="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (status, sleep)
}

fn serve(conn: TcpStream, answered: &Mutex<BTreeMap<u16, u64>>) -> io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut w = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if line.trim().is_empty() {
            continue;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h)? == 0 {
                return Ok(());
            }
            if h.trim().is_empty() {
                break;
            }
        }
        let (status, sleep) = wanted(&path);
        *answered.lock().unwrap().entry(status).or_insert(0) += 1;
        thread::sleep(Duration::from_millis(sleep));
        let body = format!("status {status}\n");
        let resp = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\n{}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            tokens_header(&path),
            body.len()
        );
        w.write_all(resp.as_bytes())?;
        w.flush()?;
        let _ = w.shutdown(Shutdown::Both);
        return Ok(());
    }
}
