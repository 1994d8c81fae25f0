//! Load: many requests over parallel keep-alive connections, with their
//! statuses tallied, collected, or counted until told to stop.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::http::Conn;

/// Sends `total` requests over `connections` parallel keep-alive
/// connections (reconnecting when the server closes one). Returns statuses.
pub fn hammer(
    port: u16,
    path: &str,
    headers: &[(&str, &[u8])],
    total: usize,
    connections: usize,
) -> Vec<u16> {
    let owned: Vec<(String, Vec<u8>)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect();
    let path = path.to_string();
    hammer_with(port, total, connections, move |_| {
        (path.clone(), owned.clone())
    })
}

/// Runs `total` requests over `connections` threads, each with its own
/// keep-alive connection slot: `send(conn, i, path, headers)` sends request
/// i (whose path and headers come from `f(i)`) and returns what to collect.
pub(crate) fn fan_out<F, T, S>(total: usize, connections: usize, f: F, send: S) -> Vec<T>
where
    F: Fn(usize) -> (String, Vec<(String, Vec<u8>)>) + Send + Sync + 'static,
    S: Fn(&mut Option<Conn>, usize, &str, &[(&str, &[u8])]) -> T + Send + Sync + 'static,
    T: Send + Clone + 'static,
{
    let next = Arc::new(AtomicU64::new(0));
    let (f, send) = (Arc::new(f), Arc::new(send));
    let out = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let mut hs = vec![];
    for _ in 0..connections.max(1) {
        let (next, f, send, out) = (next.clone(), f.clone(), send.clone(), out.clone());
        hs.push(thread::spawn(move || {
            let mut conn: Option<Conn> = None;
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst) as usize;
                if i >= total {
                    break;
                }
                let (path, headers) = f(i);
                let hdrs: Vec<(&str, &[u8])> = headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_slice()))
                    .collect();
                let v = send(&mut conn, i, &path, &hdrs);
                out.lock().unwrap().push(v);
            }
        }));
    }
    for h in hs {
        h.join().expect("hammer thread panicked");
    }
    let v = out.lock().unwrap().clone();
    v
}

/// Like `hammer`, but request i's path and headers come from `f(i)`.
pub fn hammer_with<F>(port: u16, total: usize, connections: usize, f: F) -> Vec<u16>
where
    F: Fn(usize) -> (String, Vec<(String, Vec<u8>)>) + Send + Sync + 'static,
{
    fan_out(total, connections, f, move |conn, i, path, hdrs| {
        let mut attempts = 0;
        loop {
            attempts += 1;
            if conn.as_ref().is_none_or(|c| c.closed) {
                *conn = Some(Conn::connect(port).expect("connect"));
            }
            match conn.as_mut().unwrap().request("GET", path, hdrs) {
                Ok(r) => break r.status,
                Err(e) => {
                    *conn = None;
                    if attempts > 3 {
                        panic!("request {i} failed: {e}");
                    }
                }
            }
        }
    })
}

/// Counts of each status in a list.
pub fn tally(statuses: &[u16]) -> std::collections::BTreeMap<u16, usize> {
    let mut m = std::collections::BTreeMap::new();
    for s in statuses {
        *m.entry(*s).or_insert(0) += 1;
    }
    m
}

/// Sends `total` GETs over `connections` parallel keep-alive connections
/// and returns (status, value of `header`) per request. Unlike `hammer`, it
/// never retries: any failed request panics (none is expected here).
pub fn hammer_collect<F>(
    port: u16,
    total: usize,
    connections: usize,
    header: &str,
    f: F,
) -> Vec<(u16, Option<String>)>
where
    F: Fn(usize) -> (String, Vec<(String, Vec<u8>)>) + Send + Sync + 'static,
{
    let header = header.to_string();
    fan_out(total, connections, f, move |conn, i, path, hdrs| {
        if conn.as_ref().is_none_or(|c| c.closed) {
            *conn = Some(Conn::connect(port).expect("connect"));
        }
        let r = conn
            .as_mut()
            .unwrap()
            .request_checked("GET", path, hdrs)
            .unwrap_or_else(|e| panic!("request {i} failed: {e:?}"));
        (r.status, r.header(&header).map(String::from))
    })
}

/// What a `load_until` run saw.
#[derive(Debug, Default, Clone)]
pub struct LoadStats {
    /// Responses by status.
    pub statuses: std::collections::BTreeMap<u16, usize>,
    /// Keep-alive connections closed before any response byte, each retried
    /// once on a fresh connection (only with `retry_benign`).
    pub benign_retries: usize,
    /// Requests that got no response (not retried), with the reason.
    pub lost: Vec<String>,
    /// Of those, lost before any response byte arrived.
    pub lost_before_any_byte: usize,
    /// Of those, lost on a connection that had not served a request yet.
    pub lost_on_fresh_connection: usize,
    /// Requests that timed out (a hang).
    pub timeouts: usize,
    /// Connections that could not be opened.
    pub connect_errors: usize,
}

impl LoadStats {
    pub fn count(&self, status: u16) -> usize {
        self.statuses.get(&status).copied().unwrap_or(0)
    }
    pub fn responses(&self) -> usize {
        self.statuses.values().sum()
    }
    fn merge(&mut self, o: LoadStats) {
        for (k, v) in o.statuses {
            *self.statuses.entry(k).or_insert(0) += v;
        }
        self.benign_retries += o.benign_retries;
        self.lost.extend(o.lost);
        self.lost_before_any_byte += o.lost_before_any_byte;
        self.lost_on_fresh_connection += o.lost_on_fresh_connection;
        self.timeouts += o.timeouts;
        self.connect_errors += o.connect_errors;
    }
}

/// `connections` threads send GET `path` with `headers` on keep-alive
/// connections until `stop` is set. A failed request is reconnected and
/// recorded as lost; with `retry_benign`, a reused keep-alive connection
/// that closes before any response byte (a gracefully exiting worker) is
/// retried once on a fresh connection instead.
pub fn load_until(
    port: u16,
    connections: usize,
    path: &str,
    headers: &[(&str, &[u8])],
    stop: Arc<AtomicBool>,
    retry_benign: bool,
) -> LoadStats {
    let owned: Vec<(String, Vec<u8>)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect();
    let mut hs = vec![];
    for _ in 0..connections.max(1) {
        let (stop, owned, path) = (stop.clone(), owned.clone(), path.to_string());
        hs.push(thread::spawn(move || {
            let hdrs: Vec<(&str, &[u8])> = owned
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_slice()))
                .collect();
            let mut st = LoadStats::default();
            let mut conn: Option<(Conn, usize)> = None;
            while !stop.load(Ordering::SeqCst) {
                if conn.as_ref().is_none_or(|(c, _)| c.closed) {
                    match Conn::connect(port) {
                        Ok(c) => conn = Some((c, 0)),
                        Err(_) => {
                            st.connect_errors += 1;
                            conn = None;
                            thread::sleep(Duration::from_millis(5));
                            continue;
                        }
                    }
                }
                let (c, served) = conn.as_mut().unwrap();
                let mut res = c.request_checked("GET", &path, &hdrs);
                if let Err(e) = &res {
                    if retry_benign && e.before_any_byte && *served > 0 && !e.timed_out() {
                        st.benign_retries += 1;
                        match Conn::connect(port) {
                            Ok(fresh) => {
                                conn = Some((fresh, 0));
                                let (c, _) = conn.as_mut().unwrap();
                                res = c.request_checked("GET", &path, &hdrs);
                            }
                            Err(_) => {
                                st.connect_errors += 1;
                                conn = None;
                                continue;
                            }
                        }
                    }
                }
                let (c, served) = conn.as_mut().unwrap();
                match res {
                    Ok(r) => {
                        *st.statuses.entry(r.status).or_insert(0) += 1;
                        *served += 1;
                    }
                    Err(e) => {
                        if e.timed_out() {
                            st.timeouts += 1;
                        }
                        if e.before_any_byte {
                            st.lost_before_any_byte += 1;
                        }
                        if *served == 0 {
                            st.lost_on_fresh_connection += 1;
                        }
                        st.lost.push(format!(
                            "{} (before any byte: {}, after {} requests on the connection)",
                            e.error, e.before_any_byte, served
                        ));
                        c.closed = true;
                    }
                }
            }
            st
        }));
    }
    let mut all = LoadStats::default();
    for h in hs {
        all.merge(h.join().expect("load thread panicked"));
    }
    all
}
