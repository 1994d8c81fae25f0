//! An upstream that knows what nginx holds open to it: a request of a
//! client (`X-Client`) counts from its arrival until it is answered or
//! nginx closes its connection (a client gone, a worker killed), so that
//! "the upstream never sees more than a client's `in_flight=`" is measured
//! against what nginx really keeps in flight. Each arrival first looks at
//! the client's other connections for a close nginx made meanwhile.
use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Per client: its open requests (id, connection, path), and the most at
/// once.
type Open = Mutex<HashMap<String, (Vec<(u64, TcpStream, String)>, usize)>>;

pub struct WatchingUpstream {
    addr: std::net::SocketAddr,
    open: Arc<Open>,
    received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

/// Whether nginx closed `c` (its end read as EOF or reset).
fn closed(c: &TcpStream) -> bool {
    let _ = c.set_nonblocking(true);
    let gone = match c.peek(&mut [0u8; 1]) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    };
    let _ = c.set_nonblocking(false);
    gone
}

impl WatchingUpstream {
    pub fn start() -> WatchingUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let up = WatchingUpstream {
            addr: listener.local_addr().unwrap(),
            open: Arc::default(),
            received: Arc::default(),
            stop: Arc::default(),
        };
        let (open, received, stop) = (up.open.clone(), up.received.clone(), up.stop.clone());
        thread::spawn(move || {
            for (id, conn) in (0u64..).zip(listener.incoming()) {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (open, received) = (open.clone(), received.clone());
                thread::spawn(move || serve(id, conn, &open, &received));
            }
        });
        up
    }

    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Requests received.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::SeqCst)
    }

    /// The most requests of any one client open at once, and that client.
    pub fn most(&self) -> (usize, String) {
        let m = self.open.lock().unwrap();
        m.iter()
            .map(|(c, (_, most))| (*most, c.clone()))
            .max()
            .unwrap_or_default()
    }
}

impl Drop for WatchingUpstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

/// One request (nginx speaks HTTP/1.0 to it: one a connection): counted
/// open, held for its `sleep=` ms unless nginx closes first, answered.
fn serve(id: u64, conn: TcpStream, open: &Open, received: &AtomicU64) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let (mut path, mut client) = (String::new(), String::new());
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line.trim() != "" {
        if path.is_empty() {
            path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        } else if let Some(v) = line.to_ascii_lowercase().strip_prefix("x-client:") {
            client = v.trim().to_string();
        }
        line.clear();
    }
    received.fetch_add(1, Ordering::SeqCst);
    // Closed before it was read (a client gone meanwhile): nginx no longer
    // holds it, and has given its place back, or is about to.
    if closed(&conn) {
        return;
    }
    {
        let mut m = open.lock().unwrap();
        let (conns, most) = m.entry(client.clone()).or_default();
        conns.retain(|(_, c, _)| !closed(c));
        conns.push((id, conn.try_clone().unwrap(), path.clone()));
        if conns.len() > *most {
            *most = conns.len();
            let paths: Vec<&String> = conns.iter().map(|c| &c.2).collect();
            eprintln!("upstream: {client} has {most} open: {paths:?}");
        }
    }
    let ms = path
        .split_once("sleep=")
        .and_then(|(_, v)| v.split('&').next()?.parse().ok())
        .unwrap_or(0);
    let end = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < end && !closed(&conn) {
        thread::sleep(Duration::from_millis(5));
    }
    // Not open any more before the answer leaves (nginx gives the place
    // back only once it has the answer).
    if let Some((conns, _)) = open.lock().unwrap().get_mut(&client) {
        conns.retain(|(i, _, _)| *i != id);
    }
    let mut w = conn;
    let _ = w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n");
}
