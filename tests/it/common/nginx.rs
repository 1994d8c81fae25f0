//! The nginx process: start it (`NginxBuilder`), reload, stop, read its
//! logs and workers, signal and measure them, and check on drop that no
//! worker crashed.

use std::collections::BTreeSet;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::conf::{free_port, make_prefix, nginx_bin, substitute, Placeholders};
use super::upstream::Upstream;

pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Options for starting nginx.
#[derive(Clone, Default)]
pub struct NginxBuilder {
    workers: Option<usize>,
    env: Vec<(String, String)>,
    wrapper: Vec<String>,
    upstream: Option<String>,
    files: Vec<(String, Vec<u8>)>,
    binary: Option<PathBuf>,
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
    /// Runs this nginx binary instead of [`nginx_bin`]'s (built against
    /// the same version: an nginx without stream).
    pub fn binary(mut self, path: &Path) -> Self {
        self.binary = Some(path.to_path_buf());
        self
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

pub(crate) fn read_lossy(p: &Path) -> String {
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
        let bin = b.binary.clone().unwrap_or_else(nginx_bin);
        let mut cmd = if b.wrapper.is_empty() {
            Command::new(bin)
        } else {
            let mut c = Command::new(&b.wrapper[0]);
            c.args(&b.wrapper[1..]).arg(bin);
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
        if !b.wrapper.is_empty() {
            sweep_faketime_leftovers();
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
        self.set_conf(conf);
        self.try_reload()
    }

    /// Writes a new config (same placeholders) without reloading.
    pub fn set_conf(&mut self, conf: &str) {
        self.template = conf.to_string();
        fs::write(self.conf_path(), Self::render(conf, &self.ph, &self.env)).unwrap();
    }

    /// SIGHUP to the master, then wait until every old worker is gone and new
    /// ones answer. Err(new error.log text) when the master logs an [emerg]
    /// (the old configuration keeps serving then).
    pub fn try_reload(&mut self) -> Result<(), String> {
        let old: BTreeSet<i32> = self.worker_pids().into_iter().collect();
        let off = self.error_log_len();
        let master = self.master_pid();
        assert!(master > 0, "no master pid");
        // SAFETY: kill(2) only sends a signal to a pid; it touches no memory.
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
            // SAFETY: kill(2) only sends a signal to a pid; it touches no memory.
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
                // SAFETY: kill(2) only sends a signal to a pid; it touches no memory.
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
                    // SAFETY: kill(2) only sends a signal to a pid; it touches no memory.
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

/// Removes the shared memory and semaphore names that libfaketime left
/// behind for processes that are gone (a master or worker SIGKILLed runs no
/// destructor). The `faketime` wrapper creates `/faketime_sem_<its pid>`
/// exclusively and fails ("sem_open: File exists") when a dead process of
/// the same pid left one: pids wrap at 32,768 here. Unlinking a name never
/// affects a mapping a live process holds.
fn sweep_faketime_leftovers() {
    let Ok(dir) = fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name
            .strip_prefix("faketime_shm_")
            .or_else(|| name.strip_prefix("sem.faketime_sem_"))
            .and_then(|p| p.parse::<i32>().ok());
        if pid.is_some_and(|p| !pid_alive(p)) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

pub(crate) fn pid_alive(pid: i32) -> bool {
    // A zombie still answers kill(0); look at /proc state instead.
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let after = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
            !after.trim_start().starts_with('Z')
        }
        Err(_) => false,
    }
}

pub(crate) fn parent_of(pid: i32) -> Option<i32> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = s.rsplit_once(')')?.1;
    let mut it = after.split_whitespace();
    let state = it.next()?;
    if state == "Z" {
        return None;
    }
    it.next()?.parse().ok()
}

pub(crate) fn children_of(pid: i32) -> Vec<i32> {
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
pub(crate) fn probe(port: u16) -> bool {
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
    // SAFETY: kill(2) only sends a signal to a pid; it touches no memory.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Sends SIGHUP to the master (what `nginx -s reload` does) without waiting.
pub fn sighup(ng: &Nginx) {
    let m = ng.master_pid();
    assert!(m > 0, "no master pid");
    // SAFETY: kill(2) only sends a signal to a pid; it touches no memory.
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

/// Lines of `log` containing `needle`.
pub fn count_lines(log: &str, needle: &str) -> usize {
    log.lines().filter(|l| l.contains(needle)).count()
}
