//! A real HTTP/1.1 upstream that counts the requests nginx proxies to it.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// A real HTTP/1.1 upstream: 200 `upstream ok\n`, `X-Upstream: 1`,
/// `X-Path: <request path>`. Counts requests.
pub struct Upstream {
    addr: std::net::SocketAddr,
    count: Arc<AtomicU64>,
    paths: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Upstream {
    pub fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let count = Arc::new(AtomicU64::new(0));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, p, st) = (count.clone(), paths.clone(), stop.clone());
        let handle = thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (c, p) = (c.clone(), p.clone());
                thread::spawn(move || {
                    let _ = serve_upstream_conn(conn, &c, &p);
                });
            }
        });
        Upstream {
            addr,
            count,
            paths,
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
        let payload: &[u8] = if method == "HEAD" {
            b""
        } else {
            b"upstream ok\n"
        };
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 12\r\nX-Upstream: 1\r\nX-Path: {}\r\nConnection: {}\r\n\r\n",
            path,
            if close { "close" } else { "keep-alive" }
        );
        let mut out = resp.into_bytes();
        out.extend_from_slice(payload);
        w.write_all(&out)?;
        w.flush()?;
        if close {
            let _ = w.shutdown(Shutdown::Both);
            return Ok(());
        }
    }
}
