//! Fault injection between a gateway and Redis, for the cluster tests: a
//! real TCP proxy whose reply path can be delayed, stalled or cut, and
//! which can add a latency each way (a Redis far away); and a slow HTTP
//! upstream that keeps a request (and so an old worker) in flight.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// What the proxy does to Redis's replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything at once.
    Pass,
    /// Hold each chunk of replies this many ms before forwarding it (the
    /// connection and the commands go through on time).
    Delay(u64),
    /// Forward no reply at all until the fault changes.
    Stall,
    /// Forward this many bytes of replies on a connection, then close it
    /// (a cut in the middle of a pipeline's replies).
    CutAfter(usize),
    /// Accept connections and close them at once.
    Refuse,
    /// Forward the replies one byte every this many ms (the rest at once
    /// when the fault changes).
    Trickle(u64),
}

/// A TCP proxy on a free port to `127.0.0.1:upstream`.
pub struct FaultProxy {
    pub port: u16,
    fault: Arc<Mutex<Fault>>,
    /// Added to every chunk, each way (ms): each is forwarded that long
    /// after it arrived, in order.
    latency: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    /// Connections accepted so far.
    accepted: Arc<AtomicU64>,
}

impl FaultProxy {
    pub fn start(upstream: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let fault = Arc::new(Mutex::new(Fault::Pass));
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let latency = Arc::new(AtomicU64::new(0));
        let (f, st, acc, lat) = (
            fault.clone(),
            stop.clone(),
            accepted.clone(),
            latency.clone(),
        );
        thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = conn else { continue };
                acc.fetch_add(1, Ordering::SeqCst);
                if *f.lock().unwrap() == Fault::Refuse {
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let (f, st, lat) = (f.clone(), st.clone(), lat.clone());
                thread::spawn(move || pipe_conn(client, server, f, st, lat));
            }
        });
        FaultProxy {
            port,
            fault,
            latency,
            stop,
            accepted,
        }
    }

    pub fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    /// Adds `ms` of latency each way to every connection (0: none).
    pub fn set_latency(&self, ms: u64) {
        self.latency.store(ms, Ordering::SeqCst);
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Writes chunks to a stream `latency` ms after they were handed to it, in
/// order (a thread of its own; 0: at once).
struct Delayed {
    tx: mpsc::Sender<(Instant, Vec<u8>)>,
    latency: Arc<AtomicU64>,
}

impl Delayed {
    fn new(mut to: TcpStream, latency: Arc<AtomicU64>) -> Delayed {
        let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
        thread::spawn(move || {
            for (due, chunk) in rx {
                let now = Instant::now();
                if due > now {
                    thread::sleep(due - now);
                }
                if to.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Both);
        });
        Delayed { tx, latency }
    }

    fn write(&self, chunk: &[u8]) -> bool {
        let ms = self.latency.load(Ordering::SeqCst);
        let due = Instant::now() + Duration::from_millis(ms);
        self.tx.send((due, chunk.to_vec())).is_ok()
    }
}

fn pipe_conn(
    client: TcpStream,
    server: TcpStream,
    fault: Arc<Mutex<Fault>>,
    stop: Arc<AtomicBool>,
    latency: Arc<AtomicU64>,
) {
    let (mut c_in, s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    // Commands: forwarded as they come (after the latency).
    let lat = latency.clone();
    thread::spawn(move || {
        let out = Delayed::new(s_out, lat);
        let mut buf = [0u8; 16384];
        while let Ok(n) = c_in.read(&mut buf) {
            if n == 0 || !out.write(&buf[..n]) {
                break;
            }
        }
    });
    // Replies: subject to the fault (and the latency).
    let (mut s_in, mut c_out) = (server, client);
    let delayed = Delayed::new(c_out.try_clone().unwrap(), latency);
    let mut buf = vec![0u8; 65536];
    let mut sent = 0usize;
    while let Ok(n) = s_in.read(&mut buf) {
        if n == 0 {
            break;
        }
        let mut chunk = &buf[..n];
        loop {
            let f = *fault.lock().unwrap();
            match f {
                Fault::Stall if !stop.load(Ordering::SeqCst) => {
                    thread::sleep(Duration::from_millis(20));
                    continue;
                }
                Fault::Delay(ms) => thread::sleep(Duration::from_millis(ms)),
                Fault::CutAfter(limit) => {
                    let room = limit.saturating_sub(sent).min(chunk.len());
                    let _ = c_out.write_all(&chunk[..room]);
                    if room < chunk.len() {
                        let _ = c_out.shutdown(Shutdown::Both);
                        let _ = s_in.shutdown(Shutdown::Both);
                        return;
                    }
                    sent += room;
                    chunk = &[];
                }
                Fault::Refuse => {
                    let _ = c_out.shutdown(Shutdown::Both);
                    let _ = s_in.shutdown(Shutdown::Both);
                    return;
                }
                Fault::Trickle(ms) => {
                    while let Some((&b, rest)) = chunk.split_first() {
                        if *fault.lock().unwrap() != f || stop.load(Ordering::SeqCst) {
                            break;
                        }
                        thread::sleep(Duration::from_millis(ms));
                        if c_out.write_all(&[b]).is_err() {
                            return;
                        }
                        sent += 1;
                        chunk = rest;
                    }
                }
                _ => {}
            }
            break;
        }
        // Without latency, written here (in order with a cut's bytes).
        let ok = chunk.is_empty()
            || if delayed.latency.load(Ordering::SeqCst) == 0 {
                c_out.write_all(chunk).is_ok()
            } else {
                delayed.write(chunk)
            };
        if !ok {
            break;
        }
        sent += chunk.len();
    }
    // The writer closes the connection once it wrote what it holds.
    drop(delayed);
}

/// An HTTP upstream that answers each request after `delay`: a request to
/// it keeps the worker that proxies it alive through a reload.
pub struct SlowHttp {
    pub addr: String,
    stop: Arc<AtomicBool>,
}

impl SlowHttp {
    pub fn start(delay: Duration) -> SlowHttp {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf);
                    let until = Instant::now() + delay;
                    while Instant::now() < until {
                        thread::sleep(Duration::from_millis(20));
                    }
                    let _ = conn.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nslow\n",
                    );
                });
            }
        });
        SlowHttp { addr, stop }
    }
}

impl Drop for SlowHttp {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr);
    }
}

/// True once process `pid` has exited (gone, or a zombie).
pub fn pid_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .map(|x| x.1.trim_start().starts_with('Z'))
            .unwrap_or(true),
        Err(_) => true,
    }
}
