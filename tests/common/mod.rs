//! Shared integration-test harness: runs the real nginx binary with the
//! module loaded, a real HTTP/1.1 upstream, and a tiny HTTP/1.1 client.
//!
//! Every test gets its own prefix directory and free ports, so tests run in
//! parallel. Binaries come from `make build` (target/dist) unless
//! `RLW_NGINX` / `RLW_MODULE` point elsewhere.
#![allow(dead_code)]

pub mod auth_server;
pub mod fault_proxy;
pub mod redis_servers;

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const MODULE_FILE: &str = "ngx_http_rate_limit_window_module.so";
const START_TIMEOUT: Duration = Duration::from_secs(10);
const IO_TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Binaries
// ---------------------------------------------------------------------------

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn locate(var: &str, default: PathBuf) -> PathBuf {
    let p = std::env::var_os(var).map(PathBuf::from).unwrap_or(default);
    if !p.exists() {
        panic!(
            "{} not found (set {} to override): run `make build` first",
            p.display(),
            var
        );
    }
    p
}

/// The nginx binary the module was built against.
pub fn nginx_bin() -> PathBuf {
    locate("RLW_NGINX", manifest_dir().join("target/dist/nginx"))
}

/// The module shared object.
pub fn module_so() -> PathBuf {
    let p = locate(
        "RLW_MODULE",
        manifest_dir().join("target/dist").join(MODULE_FILE),
    );
    fs::canonicalize(&p).unwrap_or(p)
}

/// The directory of example configs.
pub fn example_conf_dir() -> PathBuf {
    manifest_dir().join("nginx-conf")
}

// ---------------------------------------------------------------------------
// Config helpers
// ---------------------------------------------------------------------------

/// Wraps an `http { ... }` body into a complete nginx.conf. `{{WORKERS}}` is
/// replaced by the builder's worker count (2 unless changed).
pub fn http_conf(http_body: &str) -> String {
    format!(
        "load_module modules/{MODULE_FILE};\n\
         worker_processes {{{{WORKERS}}}};\n\
         daemon off;\n\
         master_process on;\n\
         error_log logs/error.log info;\n\
         pid logs/nginx.pid;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n\
         access_log logs/access.log;\n\
         {http_body}\n\
         }}\n"
    )
}

/// http{} with `zones` and one server on {{PORT}}, with `listen` options
/// after the address (`reuseport`, or nothing), `server` holding
/// server-level directives and further locations, and `location /` holding
/// `loc` and proxying to the upstream.
pub fn proxy_conf(zones: &str, listen: &str, server: &str, loc: &str) -> String {
    http_conf(
        &r#"
        ZONES
        server {
            listen 127.0.0.1:{{PORT}} LISTEN;
            SERVER
            location / {
                LOC
                proxy_pass http://{{UPSTREAM}};
            }
        }"#
        .replace("ZONES", zones)
        .replace("LISTEN", listen)
        .replace("SERVER", server)
        .replace("LOC", loc),
    )
}

/// An HTTP/1.1 request without a body (`Host: localhost` unless given).
fn request_bytes(method: &str, path: &str, headers: &[(&str, &[u8])]) -> Vec<u8> {
    let mut req: Vec<u8> = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.extend_from_slice(b"Host: localhost\r\n");
    }
    for (k, v) in headers {
        req.extend_from_slice(k.as_bytes());
        req.extend_from_slice(b": ");
        req.extend_from_slice(v);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"\r\n");
    req
}

/// A free TCP port on 127.0.0.1 (bound and released: a tiny race is accepted).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[derive(Clone, Debug)]
struct Placeholders {
    port: u16,
    port2: u16,
    upstream: String,
    prefix: String,
    workers: usize,
}

fn substitute(conf: &str, ph: &Placeholders) -> String {
    conf.replace("{{PORT}}", &ph.port.to_string())
        .replace("{{PORT2}}", &ph.port2.to_string())
        .replace("{{UPSTREAM}}", &ph.upstream)
        .replace("{{PREFIX}}", &ph.prefix)
        .replace("{{WORKERS}}", &ph.workers.to_string())
}

/// Creates a prefix: logs/, html/index.html, modules/<so> symlink, conf/.
fn make_prefix() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("rlw-test-")
        .tempdir()
        .unwrap();
    let root = dir.path();
    for sub in ["logs", "html", "modules", "conf"] {
        fs::create_dir_all(root.join(sub)).unwrap();
    }
    fs::write(
        root.join("html/index.html"),
        "<html><body>static index</body></html>\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(module_so(), root.join("modules").join(MODULE_FILE)).unwrap();
    // When the tests run as root, workers run as `nobody` and must be able
    // to read html/ and create the temp directories.
    for sub in ["", "html", "logs", "conf", "modules"] {
        let _ = fs::set_permissions(
            root.join(sub),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        );
    }
    let _ = fs::set_permissions(
        root.join("html/index.html"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    );
    dir
}

/// Runs `nginx -t` on `conf` (placeholders substituted) in a fresh prefix.
/// Returns (success, stderr).
pub fn test_config(conf: &str) -> (bool, String) {
    let prefix = make_prefix();
    let ph = Placeholders {
        port: free_port(),
        port2: free_port(),
        upstream: "127.0.0.1:9".into(),
        prefix: format!("{}/", prefix.path().display()),
        workers: 2,
    };
    let text = substitute(conf, &ph);
    fs::write(prefix.path().join("conf/nginx.conf"), &text).unwrap();
    let out = Command::new(nginx_bin())
        .arg("-t")
        .arg("-p")
        .arg(prefix.path())
        .arg("-c")
        .arg("conf/nginx.conf")
        .stdin(Stdio::null())
        .output()
        .expect("run nginx -t");
    let mut stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    stderr.push_str(&String::from_utf8_lossy(&out.stdout));
    (out.status.success(), stderr)
}

// ---------------------------------------------------------------------------
// Nginx process
// ---------------------------------------------------------------------------

/// Options for starting nginx.
#[derive(Clone, Default)]
pub struct NginxBuilder {
    workers: Option<usize>,
    env: Vec<(String, String)>,
    wrapper: Vec<String>,
    upstream: Option<String>,
    files: Vec<(String, Vec<u8>)>,
}

impl NginxBuilder {
    pub fn new() -> Self {
        Self::default()
    }
    /// Replaces `{{WORKERS}}` (default 2).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }
    /// Sets an environment variable for the nginx process. An `env NAME;`
    /// directive is added to the config so that workers keep it too.
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
    /// Runs nginx under a wrapper command, e.g. `["faketime", "-f", "+1d"]`.
    pub fn wrapper(mut self, argv: &[&str]) -> Self {
        self.wrapper = argv.iter().map(|s| s.to_string()).collect();
        self
    }
    /// Value for `{{UPSTREAM}}` (host:port).
    pub fn upstream(mut self, hostport: &str) -> Self {
        self.upstream = Some(hostport.into());
        self
    }
    pub fn upstream_of(self, u: &Upstream) -> Self {
        let a = u.addr();
        self.upstream(&a)
    }
    /// Writes an extra file (path relative to the prefix) before start.
    pub fn file(mut self, rel: &str, contents: impl AsRef<[u8]>) -> Self {
        self.files.push((rel.into(), contents.as_ref().to_vec()));
        self
    }
    pub fn start(self, conf: &str) -> Nginx {
        match Nginx::try_start(&self, conf) {
            Ok(n) => n,
            Err(e) if e.contains("Address already in use") => {
                Nginx::try_start(&self, conf).unwrap_or_else(|e| panic!("{e}"))
            }
            Err(e) => panic!("{e}"),
        }
    }
}

pub struct Nginx {
    prefix: tempfile::TempDir,
    child: Option<Child>,
    template: String,
    ph: Placeholders,
    env: Vec<(String, String)>,
    pub port: u16,
    pub port2: u16,
}

fn read_lossy(p: &Path) -> String {
    fs::read(p)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

impl Nginx {
    /// Starts nginx with `conf` and default options.
    pub fn start(conf: &str) -> Nginx {
        NginxBuilder::new().start(conf)
    }

    pub fn builder() -> NginxBuilder {
        NginxBuilder::new()
    }

    fn render(template: &str, ph: &Placeholders, env: &[(String, String)]) -> String {
        let mut text = String::new();
        for (k, _) in env {
            text.push_str(&format!("env {k};\n"));
        }
        text.push_str(&substitute(template, ph));
        text
    }

    fn try_start(b: &NginxBuilder, conf: &str) -> Result<Nginx, String> {
        let prefix = make_prefix();
        let ph = Placeholders {
            port: free_port(),
            port2: free_port(),
            upstream: b.upstream.clone().unwrap_or_else(|| "127.0.0.1:9".into()),
            prefix: format!("{}/", prefix.path().display()),
            workers: b.workers.unwrap_or(2),
        };
        for (rel, data) in &b.files {
            let p = prefix.path().join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(&p, data).unwrap();
            let _ = fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o644));
        }
        fs::write(
            prefix.path().join("conf/nginx.conf"),
            Self::render(conf, &ph, &b.env),
        )
        .unwrap();
        let stderr = fs::File::create(prefix.path().join("logs/stderr.log")).unwrap();
        let mut cmd = if b.wrapper.is_empty() {
            Command::new(nginx_bin())
        } else {
            let mut c = Command::new(&b.wrapper[0]);
            c.args(&b.wrapper[1..]).arg(nginx_bin());
            c
        };
        cmd.arg("-p")
            .arg(prefix.path())
            .arg("-c")
            .arg("conf/nginx.conf")
            .stdin(Stdio::null())
            .stdout(stderr.try_clone().unwrap())
            .stderr(stderr);
        for (k, v) in &b.env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().map_err(|e| format!("spawn nginx: {e}"))?;
        let mut n = Nginx {
            port: ph.port,
            port2: ph.port2,
            prefix,
            child: Some(child),
            template: conf.to_string(),
            ph,
            env: b.env.clone(),
        };
        match n.wait_ready() {
            Ok(()) => Ok(n),
            Err(e) => {
                let msg = format!(
                    "nginx did not come up: {e}\n--- stderr ---\n{}\n--- error.log ---\n{}",
                    read_lossy(&n.prefix.path().join("logs/stderr.log")),
                    n.error_log()
                );
                n.stop();
                Err(msg)
            }
        }
    }

    /// Readiness: a TCP connect to {{PORT}} succeeds and an HTTP request gets
    /// an HTTP status. The probe is an HTTP/1.1 request without Host, which
    /// nginx answers with 400 while reading the header, so it never reaches
    /// the PREACCESS phase and never consumes a test's quota.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(st)) = child.try_wait() {
                    return Err(format!("nginx exited early with {st}"));
                }
            }
            if probe(self.port) {
                // Wait for the master's pid file so master_pid() is reliable.
                // and for every worker: the first one may answer before the
                // master has forked the others.
                if self.pid_file().exists() && self.worker_pids().len() >= self.expected_workers() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err("timed out after 10 s".into());
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn prefix(&self) -> &Path {
        self.prefix.path()
    }

    fn pid_file(&self) -> PathBuf {
        self.prefix.path().join("logs/nginx.pid")
    }

    pub fn conf_path(&self) -> PathBuf {
        self.prefix.path().join("conf/nginx.conf")
    }

    /// `{{UPSTREAM}}` as substituted.
    pub fn upstream_addr(&self) -> &str {
        &self.ph.upstream
    }

    /// The master's pid (from logs/nginx.pid, so it also works under a
    /// wrapper such as `faketime` that forks).
    pub fn master_pid(&self) -> i32 {
        if let Ok(s) = fs::read_to_string(self.pid_file()) {
            if let Ok(p) = s.trim().parse() {
                return p;
            }
        }
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    /// `worker_processes` of the configuration file (nginx's default, 1, if
    /// the directive is absent or not a number).
    pub fn expected_workers(&self) -> usize {
        let conf = fs::read_to_string(self.conf_path()).unwrap_or_default();
        conf.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix("worker_processes"))
            .and_then(|v| v.trim().trim_end_matches(';').trim().parse().ok())
            .unwrap_or(1)
    }

    /// Current children of the master (workers, old and new).
    pub fn worker_pids(&self) -> Vec<i32> {
        let master = self.master_pid();
        if master <= 0 {
            return vec![];
        }
        children_of(master)
    }

    pub fn error_log(&self) -> String {
        read_lossy(&self.prefix.path().join("logs/error.log"))
    }

    pub fn access_log(&self) -> String {
        read_lossy(&self.prefix.path().join("logs/access.log"))
    }

    /// Size of error.log now: pass to `error_log_since` to see new lines.
    pub fn error_log_len(&self) -> usize {
        self.error_log().len()
    }

    pub fn error_log_since(&self, offset: usize) -> String {
        let s = self.error_log();
        s.get(offset..).unwrap_or("").to_string()
    }

    /// Writes a file relative to the prefix.
    pub fn write_file(&self, rel: &str, contents: impl AsRef<[u8]>) {
        let p = self.prefix.path().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, contents).unwrap();
        let _ = fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o644));
    }

    /// Reloads with the current config; panics if the reload fails.
    pub fn reload(&mut self) {
        if let Err(e) = self.try_reload() {
            panic!("reload failed: {e}");
        }
    }

    /// Writes a new config (same placeholders) and reloads; panics on failure.
    pub fn reload_with(&mut self, conf: &str) {
        if let Err(e) = self.try_reload_with(conf) {
            panic!("reload failed: {e}");
        }
    }

    pub fn try_reload_with(&mut self, conf: &str) -> Result<(), String> {
        self.template = conf.to_string();
        fs::write(self.conf_path(), Self::render(conf, &self.ph, &self.env)).unwrap();
        self.try_reload()
    }

    /// SIGHUP to the master, then wait until every old worker is gone and new
    /// ones answer. Err(new error.log text) when the master logs an [emerg]
    /// (the old configuration keeps serving then).
    pub fn try_reload(&mut self) -> Result<(), String> {
        let old: BTreeSet<i32> = self.worker_pids().into_iter().collect();
        let off = self.error_log_len();
        let master = self.master_pid();
        assert!(master > 0, "no master pid");
        unsafe {
            libc::kill(master, libc::SIGHUP);
        }
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let log = self.error_log_since(off);
            if log.contains("[emerg]") {
                // Give the master a moment to finish logging.
                thread::sleep(Duration::from_millis(100));
                return Err(self.error_log_since(off));
            }
            let now: BTreeSet<i32> = self.worker_pids().into_iter().collect();
            if now.len() >= self.expected_workers() && now.is_disjoint(&old) && probe(self.port) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "reload did not complete in 10 s (old workers {old:?}, now {now:?})\n{}",
                    self.error_log_since(off)
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self) {
        let master = self.master_pid();
        let workers = self.worker_pids();
        if master > 0 {
            unsafe {
                libc::kill(master, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut exited = false;
        if let Some(child) = self.child.as_mut() {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    exited = true;
                    break;
                }
                thread::sleep(Duration::from_millis(10));
            }
            if !exited {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // Under a wrapper the master is not our child; make sure it is gone.
        if master > 0 && pid_alive(master) {
            let d = Instant::now() + Duration::from_secs(2);
            while pid_alive(master) && Instant::now() < d {
                thread::sleep(Duration::from_millis(10));
            }
            if pid_alive(master) {
                unsafe {
                    libc::kill(master, libc::SIGKILL);
                }
            }
        }
        for w in workers {
            if pid_alive(w) && parent_of(w).is_some_and(|p| p == master || p == 1) {
                let d = Instant::now() + Duration::from_secs(1);
                while pid_alive(w) && Instant::now() < d {
                    thread::sleep(Duration::from_millis(10));
                }
                if pid_alive(w) {
                    unsafe {
                        libc::kill(w, libc::SIGKILL);
                    }
                }
            }
        }
        self.child = None;
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // A crashed worker fails the test even when every assertion held
        // (nginx restarts workers, so it could otherwise go unnoticed).
        let crashed = self
            .error_log()
            .lines()
            .filter(|l| l.contains("exited on signal"))
            .map(String::from)
            .collect::<Vec<_>>();
        if !crashed.is_empty() && !thread::panicking() {
            let log = self.error_log();
            self.stop();
            panic!(
                "nginx worker crashed:\n{}\n===== error.log =====\n{log}",
                crashed.join("\n")
            );
        }
        if thread::panicking() {
            eprintln!(
                "===== nginx error.log ({}) =====\n{}\n===== stderr =====\n{}\n===== end =====",
                self.prefix.path().display(),
                self.error_log(),
                read_lossy(&self.prefix.path().join("logs/stderr.log"))
            );
        }
        self.stop();
    }
}

fn pid_alive(pid: i32) -> bool {
    // A zombie still answers kill(0); look at /proc state instead.
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let after = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
            !after.trim_start().starts_with('Z')
        }
        Err(_) => false,
    }
}

fn parent_of(pid: i32) -> Option<i32> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = s.rsplit_once(')')?.1;
    let mut it = after.split_whitespace();
    let state = it.next()?;
    if state == "Z" {
        return None;
    }
    it.next()?.parse().ok()
}

fn children_of(pid: i32) -> Vec<i32> {
    let mut out = vec![];
    if let Ok(rd) = fs::read_dir("/proc") {
        for e in rd.flatten() {
            if let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) {
                if parent_of(p) == Some(pid) {
                    out.push(p);
                }
            }
        }
    }
    out.sort();
    out
}

/// True when `port` answers an HTTP request with a status line.
fn probe(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /__rlw_probe HTTP/1.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buf = [0u8; 12];
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    got >= 12 && buf.starts_with(b"HTTP/1.")
}

// ---------------------------------------------------------------------------
// Upstream
// ---------------------------------------------------------------------------

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

fn serve_upstream_conn(
    conn: TcpStream,
    count: &AtomicU64,
    paths: &Mutex<Vec<String>>,
) -> io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
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
        w.write_all(resp.as_bytes())?;
        w.write_all(payload)?;
        w.flush()?;
        if close {
            let _ = w.shutdown(Shutdown::Both);
            return Ok(());
        }
    }
}

// ---------------------------------------------------------------------------
// HTTP client
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// First header with that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// All headers with that name.
    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Header parsed as an integer; panics with context when absent/invalid.
    pub fn header_num(&self, name: &str) -> i64 {
        let v = self
            .header(name)
            .unwrap_or_else(|| panic!("header {name} missing in {}", self.describe()));
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("header {name}={v:?} is not an integer"))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn describe(&self) -> String {
        let mut s = format!("HTTP {}\n", self.status);
        for (k, v) in &self.headers {
            s.push_str(&format!("{k}: {v}\n"));
        }
        let body = self.text();
        s.push_str(&body.chars().take(300).collect::<String>());
        s
    }

    fn keep_alive(&self) -> bool {
        !self
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// A keep-alive client connection.
pub struct Conn {
    port: u16,
    reader: BufReader<TcpStream>,
    stream: TcpStream,
    pub closed: bool,
}

impl Conn {
    pub fn connect(port: u16) -> io::Result<Conn> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        let reader = BufReader::new(stream.try_clone()?);
        Ok(Conn {
            port,
            reader,
            stream,
            closed: false,
        })
    }

    /// Sends a request and reads its response. Host and Content-Length are
    /// added unless given.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &[u8])],
    ) -> io::Result<Response> {
        let req = request_bytes(method, path, headers);
        self.stream.write_all(&req)?;
        let resp = read_response(&mut self.reader, method == "HEAD")?;
        if !resp.keep_alive() {
            self.closed = true;
        }
        Ok(resp)
    }

    pub fn get(&mut self, path: &str) -> io::Result<Response> {
        self.request("GET", path, &[])
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

fn read_response(r: &mut BufReader<TcpStream>, head: bool) -> io::Result<Response> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad status line {line:?}"),
            )
        })?;
    let mut headers = vec![];
    loop {
        let mut raw = Vec::new();
        r.read_until(b'\n', &mut raw)?;
        if raw.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "eof in headers",
            ));
        }
        let h = String::from_utf8_lossy(&raw);
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut resp = Response {
        status,
        headers,
        body: vec![],
    };
    if head || status == 204 || status == 304 || (100..200).contains(&status) {
        return Ok(resp);
    }
    let chunked = resp
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        loop {
            let mut sz = String::new();
            r.read_line(&mut sz)?;
            let n = usize::from_str_radix(sz.trim().split(';').next().unwrap_or("0"), 16)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if n == 0 {
                // trailers until empty line
                loop {
                    let mut t = String::new();
                    if r.read_line(&mut t)? == 0 || t.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let mut chunk = vec![0u8; n];
            r.read_exact(&mut chunk)?;
            resp.body.extend_from_slice(&chunk);
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf)?;
        }
    } else if let Some(cl) = resp.header("content-length") {
        let n: usize = cl.parse().unwrap_or(0);
        let mut body = vec![0u8; n];
        r.read_exact(&mut body)?;
        resp.body = body;
    } else {
        r.read_to_end(&mut resp.body)?;
    }
    Ok(resp)
}

/// One request on a fresh connection (`Connection: close`).
pub fn request(port: u16, method: &str, path: &str, headers: &[(&str, &[u8])]) -> Response {
    let mut hs: Vec<(&str, &[u8])> = headers.to_vec();
    if !hs.iter().any(|(k, _)| k.eq_ignore_ascii_case("connection")) {
        hs.push(("Connection", b"close"));
    }
    let mut c = Conn::connect(port).unwrap_or_else(|e| panic!("connect 127.0.0.1:{port}: {e}"));
    c.request(method, path, &hs)
        .unwrap_or_else(|e| panic!("{method} {path} on port {port}: {e}"))
}

pub fn get(port: u16, path: &str) -> Response {
    request(port, "GET", path, &[])
}

/// GET with one `X-Key` header (the tests' usual client identity).
pub fn get_key(port: u16, path: &str, key: &str) -> Response {
    request(port, "GET", path, &[("X-Key", key.as_bytes())])
}

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
fn fan_out<F, T, S>(total: usize, connections: usize, f: F, send: S) -> Vec<T>
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
            if conn.as_ref().map_or(true, |c| c.closed) {
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

// ---------------------------------------------------------------------------
// Time helpers
// ---------------------------------------------------------------------------

pub fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// Sleeps until `now mod window` equals `offset_ms` (in the next occurrence).
/// Windows are aligned to the Unix epoch, so this positions a test at a known
/// point inside a window.
pub fn sleep_until_window_offset(window_ms: u128, offset_ms: u128) {
    let now = now_ms();
    let pos = now % window_ms;
    let wait = if pos <= offset_ms {
        offset_ms - pos
    } else {
        window_ms - pos + offset_ms
    };
    thread::sleep(Duration::from_millis(wait as u64));
}

/// Ensures at least `need_ms` remain before the next window boundary, so a
/// test that counts within one window is not split by a rollover.
pub fn clear_of_boundary(window_ms: u128, need_ms: u128) {
    let pos = now_ms() % window_ms;
    if window_ms - pos < need_ms {
        thread::sleep(Duration::from_millis((window_ms - pos + 50) as u64));
    }
}

/// Polls `f` until it returns true or `timeout` passes.
pub fn wait_for(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let d = Instant::now() + timeout;
    while Instant::now() < d {
        if f() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// Counts of each status in a list.
pub fn tally(statuses: &[u16]) -> std::collections::BTreeMap<u16, usize> {
    let mut m = std::collections::BTreeMap::new();
    for s in statuses {
        *m.entry(*s).or_insert(0) += 1;
    }
    m
}

/// Percent-encodes every byte outside unreserved characters.
pub fn url_encode(bytes: &[u8]) -> String {
    let mut s = String::new();
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// A dedicated path to a faketime timestamp file; see tests/clock.rs.
pub fn libfaketime() -> Option<PathBuf> {
    for p in [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
        "/usr/local/lib/faketime/libfaketime.so.1",
    ] {
        if Path::new(p).exists() {
            return Some(PathBuf::from(p));
        }
    }
    None
}

// ---------------------------------------------------------------------------
// Calendar helpers (no chrono dependency)
// ---------------------------------------------------------------------------

pub fn strip_zero_fraction(s: &str) -> String {
    // "…:05.000Z" -> "…:05Z"
    if let Some(dot) = s.find('.') {
        let end = s[dot + 1..]
            .find(|c: char| !c.is_ascii_digit())
            .map(|i| dot + 1 + i)
            .unwrap_or(s.len());
        if s[dot + 1..end].chars().all(|c| c == '0') {
            return format!("{}{}", &s[..dot], &s[end..]);
        }
    }
    s.to_string()
}

pub fn civil(secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    // Howard Hinnant's days-to-civil
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = if m <= 2 { y + 1 } else { y };
    (
        y,
        m,
        d,
        (rem / 3600) as u32,
        (rem % 3600 / 60) as u32,
        (rem % 60) as u32,
    )
}

pub fn rfc3339_utc(secs: i64) -> String {
    let (y, mo, d, h, mi, s) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

pub fn rfc3339_offset(secs: i64, offset: i64) -> String {
    let (y, mo, d, h, mi, s) = civil(secs + offset);
    let sign = if offset < 0 { '-' } else { '+' };
    let o = offset.abs();
    format!(
        "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{sign}{:02}:{:02}",
        o / 3600,
        o % 3600 / 60
    )
}

/// A frozen clock for nginx under libfaketime, set by rewriting a
/// timestamp file that holds Unix seconds (`FAKETIME_FMT=%s`), so the time
/// is the same instant whatever TZ says (a formatted date would be read as
/// local time, which is ambiguous in a repeated DST hour).
pub struct FakeClock {
    _dir: tempfile::TempDir,
    file: PathBuf,
}

impl FakeClock {
    pub fn new(start: i64) -> FakeClock {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("faketime.rc");
        let c = FakeClock { _dir: dir, file };
        c.set(start);
        c
    }

    /// Freezes the clock nginx sees at `secs` (Unix time, UTC).
    pub fn set(&self, secs: i64) {
        let tmp = self.file.with_extension("tmp");
        fs::write(&tmp, format!("{secs}\n")).unwrap();
        fs::rename(&tmp, &self.file).unwrap();
    }
}

/// Starts nginx with libfaketime preloaded, reading `clock` on every clock
/// read (FAKETIME_NO_CACHE), with real monotonic time so nginx's timers
/// work, and TZ set to `tz`. Panics if libfaketime is missing (`make test`
/// installs the faketime package).
pub fn start_faked(clock: &FakeClock, up: &Upstream, tz: &str, conf: &str) -> Nginx {
    let lib = libfaketime()
        .expect("libfaketime not installed: `make test` installs the faketime package");
    Nginx::builder()
        .upstream_of(up)
        .env("LD_PRELOAD", lib.to_str().unwrap())
        .env("FAKETIME_TIMESTAMP_FILE", clock.file.to_str().unwrap())
        .env("FAKETIME_FMT", "%s")
        .env("FAKETIME_NO_CACHE", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("TZ", tz)
        .start(conf)
}

// ---------------------------------------------------------------------------
// Reliability helpers (tests/reliability.rs, tests/soak.rs)
// ---------------------------------------------------------------------------

/// A request that got no complete response.
#[derive(Debug)]
pub struct RequestFailure {
    /// The connection failed before any byte of the response arrived.
    pub before_any_byte: bool,
    pub error: io::Error,
}

impl RequestFailure {
    /// The read or write timed out (IO_TIMEOUT, 10 s): a hang, not a close.
    pub fn timed_out(&self) -> bool {
        matches!(
            self.error.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        )
    }
}

impl Conn {
    /// Like `request`, but on failure says whether any response byte had
    /// arrived: a keep-alive connection closed by a gracefully exiting
    /// worker fails before any byte, and only then is a retry safe.
    pub fn request_checked(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &[u8])],
    ) -> Result<Response, RequestFailure> {
        let req = request_bytes(method, path, headers);
        let early = |error| RequestFailure {
            before_any_byte: true,
            error,
        };
        if let Err(e) = self.stream.write_all(&req) {
            self.closed = true;
            return Err(early(e));
        }
        match self.reader.fill_buf() {
            Ok([]) => {
                self.closed = true;
                return Err(early(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before any response byte",
                )));
            }
            Ok(_) => {}
            Err(e) => {
                self.closed = true;
                return Err(early(e));
            }
        }
        match read_response(&mut self.reader, method == "HEAD") {
            Ok(resp) => {
                if !resp.keep_alive() {
                    self.closed = true;
                }
                Ok(resp)
            }
            Err(error) => {
                self.closed = true;
                Err(RequestFailure {
                    before_any_byte: false,
                    error,
                })
            }
        }
    }
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
        if conn.as_ref().map_or(true, |c| c.closed) {
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
                if conn.as_ref().map_or(true, |(c, _)| c.closed) {
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

/// VmRSS of a process in KiB (None when it is gone).
pub fn vm_rss_kb(pid: i32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// VmRSS (KiB) of each current worker, by pid.
pub fn worker_rss_kb(ng: &Nginx) -> std::collections::BTreeMap<i32, u64> {
    ng.worker_pids()
        .into_iter()
        .filter_map(|p| vm_rss_kb(p).map(|r| (p, r)))
        .collect()
}

/// Sends SIGKILL to a process.
pub fn sigkill(pid: i32) {
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Sends SIGHUP to the master (what `nginx -s reload` does) without waiting.
pub fn sighup(ng: &Nginx) {
    let m = ng.master_pid();
    assert!(m > 0, "no master pid");
    unsafe {
        libc::kill(m, libc::SIGHUP);
    }
}

/// Removes from error.log the master's "worker process PID exited on signal
/// 9" lines for workers the test killed itself, so that `Nginx`'s drop check
/// still fails on any other crash. Returns the lines that say a worker
/// exited on a signal and were NOT explained by `killed` (real crashes).
pub fn forget_killed_workers(ng: &Nginx, killed: &[i32]) -> Vec<String> {
    let path = ng.prefix().join("logs/error.log");
    let text = read_lossy(&path);
    let ours = |l: &str| {
        killed
            .iter()
            .any(|p| l.contains(&format!("worker process {p} exited on signal 9")))
    };
    let unexplained: Vec<String> = text
        .lines()
        .filter(|l| l.contains("exited on signal") && !ours(l))
        .map(String::from)
        .collect();
    let kept: String = text
        .lines()
        .filter(|l| !ours(l))
        .map(|l| format!("{l}\n"))
        .collect();
    fs::write(&path, kept).unwrap();
    unexplained
}

/// The value of one Prometheus sample, matched by name and exact label set
/// (in any order). None when absent.
pub fn prom_value(text: &str, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((head, val)) = line.rsplit_once(' ') else {
            continue;
        };
        let (name, lbl) = match head.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (head, ""),
        };
        if name != metric {
            continue;
        }
        let got: BTreeSet<(String, String)> = lbl
            .split(',')
            .filter(|s| !s.is_empty())
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
            .collect();
        let want: BTreeSet<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if got == want {
            return val.parse().ok();
        }
    }
    None
}

/// GET /metrics and return the exposition text.
pub fn metrics_text(port: u16) -> String {
    let r = get(port, "/metrics");
    assert_eq!(r.status, 200, "{}", r.describe());
    r.text()
}

/// The JSON view of one key: GET /metrics?zone=ZONE&key=<percent-encoded>.
pub fn key_json(port: u16, zone: &str, key: &[u8]) -> serde_json::Value {
    let r = get(
        port,
        &format!(
            "/metrics?zone={}&key={}",
            url_encode(zone.as_bytes()),
            url_encode(key)
        ),
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("bad JSON {e}: {}", r.text()))
}

/// Lines of `log` containing `needle`.
pub fn count_lines(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle)).count()
}
