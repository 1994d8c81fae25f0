//! A real HTTP/1.1 upstream that counts the requests nginx proxies to it,
//! and its own concurrency: how many requests of each client (its
//! `X-Client` header) it serves at once, and the most it ever did. A path
//! with `sleep=MS` in it is answered after MS ms, one with `status=404`
//! with a 404, one with `body_after=MS` sends its header at once and its
//! body MS ms later.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// Requests of each client (`X-Client`) being served now, and the most
/// at once so far.
pub(crate) type Concurrency = Mutex<HashMap<String, (u32, u32)>>;

/// A real HTTP/1.1 upstream: 200 `upstream ok\n`, `X-Upstream: 1`,
/// `X-Path: <request path>`. Counts requests, and its concurrency per client.
pub struct Upstream {
    addr: std::net::SocketAddr,
    count: Arc<AtomicU64>,
    paths: Arc<Mutex<Vec<String>>>,
    conc: Arc<Concurrency>,
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Upstream {
    pub fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let count = Arc::new(AtomicU64::new(0));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let conc = Arc::new(Mutex::new(HashMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, p, k, st) = (count.clone(), paths.clone(), conc.clone(), stop.clone());
        let handle = thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (c, p, k) = (c.clone(), p.clone(), k.clone());
                thread::spawn(move || {
                    let _ = serve_upstream_conn(conn, &c, &p, Some(&k));
                });
            }
        });
        Upstream {
            addr,
            count,
            paths,
            conc,
            stop,
            handle: Some(handle),
        }
    }

    /// host:port for `{{UPSTREAM}}`.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Requests received so far.
    pub fn received(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Paths received so far, in order.
    pub fn paths(&self) -> Vec<String> {
        self.paths.lock().unwrap().clone()
    }

    /// The most requests of `client` (its `X-Client` header) this
    /// upstream ever served at once.
    pub fn max_concurrent(&self, client: &str) -> u32 {
        self.conc.lock().unwrap().get(client).map_or(0, |c| c.1)
    }

    /// Requests of `client` being served now.
    pub fn concurrent(&self, client: &str) -> u32 {
        self.conc.lock().unwrap().get(client).map_or(0, |c| c.0)
    }
}

/// One more (or, `up` false, one fewer) request of `client` served now.
fn note(conc: Option<&Concurrency>, client: &Option<String>, up: bool) {
    let (Some(conc), Some(client)) = (conc, client) else {
        return;
    };
    let mut m = conc.lock().unwrap();
    let e = m.entry(client.clone()).or_insert((0, 0));
    if up {
        e.0 += 1;
        e.1 = e.1.max(e.0);
    } else {
        e.0 = e.0.saturating_sub(1);
    }
}

/// The `N` of `name=N` in a request path.
fn path_param(path: &str, name: &str) -> Option<u64> {
    let at = path.find(&format!("{name}="))? + name.len() + 1;
    let digits: String = path[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

pub(crate) fn serve_upstream_conn(
    conn: TcpStream,
    count: &AtomicU64,
    paths: &Mutex<Vec<String>>,
    conc: Option<&Concurrency>,
) -> io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    // Each response goes out in one write, without Nagle: on a keep-alive
    // connection (`keepalive` upstreams) a second small write waited for
    // nginx's delayed ACK, 40 ms a request.
    conn.set_nodelay(true)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut w = conn;
    loop {
        let mut raw = Vec::new();
        if reader.read_until(b'\n', &mut raw)? == 0 {
            return Ok(());
        }
        let line = String::from_utf8_lossy(&raw).trim_end().to_string();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let path = parts.next().unwrap_or("").to_string();
        let version = parts.next().unwrap_or("HTTP/1.0").to_string();
        let mut content_length = 0usize;
        let mut close = version == "HTTP/1.0";
        let mut client = None;
        loop {
            let mut raw = Vec::new();
            if reader.read_until(b'\n', &mut raw)? == 0 {
                return Ok(());
            }
            let h = String::from_utf8_lossy(&raw);
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_ascii_lowercase());
                if k == "x-client" {
                    client = Some(v.clone());
                }
                if k == "content-length" {
                    content_length = v.parse().unwrap_or(0);
                } else if k == "connection" {
                    close = v.contains("close");
                    if v.contains("keep-alive") {
                        close = false;
                    }
                }
            }
        }
        let mut body = vec![0u8; content_length];
        reader.read_exact(&mut body)?;
        count.fetch_add(1, Ordering::SeqCst);
        paths.lock().unwrap().push(path.clone());
        note(conc, &client, true);
        if let Some(ms) = path_param(&path, "sleep") {
            thread::sleep(Duration::from_millis(ms));
        }
        let status = match path_param(&path, "status") {
            Some(404) => "404 Not Found",
            _ => "200 OK",
        };
        let payload: &[u8] = if method == "HEAD" {
            b""
        } else {
            b"upstream ok\n"
        };
        let resp = format!(
            "HTTP/1.1 {}\r\nContent-Type: text/plain\r\nContent-Length: 12\r\nX-Upstream: 1\r\nX-Path: {}\r\nConnection: {}\r\n\r\n",
            status,
            path,
            if close { "close" } else { "keep-alive" }
        );
        let mut out = resp.into_bytes();
        if let Some(ms) = path_param(&path, "body_after") {
            w.write_all(&out)?;
            w.flush()?;
            thread::sleep(Duration::from_millis(ms));
            out.clear();
        }
        out.extend_from_slice(payload);
        // Done before the answer leaves: nginx cannot have it (and give
        // the request's place back) while this request is still counted.
        note(conc, &client, false);
        w.write_all(&out)?;
        w.flush()?;
        if close {
            let _ = w.shutdown(Shutdown::Both);
            return Ok(());
        }
    }
}
