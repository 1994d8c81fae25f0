//! Real Redis deployments for the `redis_mode=` tests: a server with a
//! password or an ACL user, a TLS-only server on certificates made with
//! openssl at test time, one master + one replica + three sentinels, and a
//! three-master Redis Cluster. Every process runs in a temporary directory
//! on free ports and is killed on drop.
//!
//! The engine: redis-server, redis-sentinel and redis-cli from `PATH`, or,
//! with `RLW_REDIS_ENGINE=valkey` (`make test ENGINE=valkey`), Valkey's
//! valkey-server, valkey-sentinel and valkey-cli from `RLW_VALKEY_BIN`
//! (scripts/valkey.sh), else from `PATH`. Every test that starts a server
//! or runs the client takes its program from [`server_bin`],
//! [`sentinel_bin`] and [`cli_bin`].
#![allow(dead_code)]

use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::free_port;

const START_TIMEOUT: Duration = Duration::from_secs(15);

/// The engine the tests run against: `"redis"` or `"valkey"`
/// (`RLW_REDIS_ENGINE`; any other value fails the test that asks).
pub fn engine() -> &'static str {
    match std::env::var("RLW_REDIS_ENGINE").as_deref() {
        Err(_) | Ok("") | Ok("redis") => "redis",
        Ok("valkey") => "valkey",
        Ok(other) => panic!("RLW_REDIS_ENGINE={other}: the engines are redis and valkey"),
    }
}

/// The engine's program `tool` (`server`, `sentinel` or `cli`): its path
/// in `RLW_VALKEY_BIN` for Valkey when that is set, else its name.
fn program(tool: &str) -> String {
    let name = format!("{}-{tool}", engine());
    match std::env::var("RLW_VALKEY_BIN") {
        Ok(dir) if engine() == "valkey" && !dir.is_empty() => format!("{dir}/{name}"),
        _ => name,
    }
}

/// redis-server, or valkey-server.
pub fn server_bin() -> String {
    program("server")
}

/// redis-sentinel, or valkey-sentinel.
pub fn sentinel_bin() -> String {
    program("sentinel")
}

/// redis-cli, or valkey-cli.
pub fn cli_bin() -> String {
    program("cli")
}

/// One redis-server or redis-sentinel process, killed on drop.
pub struct RedisProc {
    child: Option<Child>,
    pub port: u16,
}

impl RedisProc {
    /// Runs `bin` with the config file `conf` (written to `dir`) and waits
    /// until `port` accepts connections.
    pub fn spawn(bin: &str, dir: &Path, name: &str, conf: &str, port: u16) -> RedisProc {
        let path = dir.join(format!("{name}.conf"));
        fs::write(&path, conf).unwrap();
        let log = fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let child = Command::new(bin)
            .arg(&path)
            .current_dir(dir)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{bin} not found ({e}): `make test` installs redis-server and redis-sentinel, \
                     `make test ENGINE=valkey` Valkey's"
                )
            });
        let mut child = child;
        let deadline = Instant::now() + START_TIMEOUT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                let log = fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
                panic!("{bin} exited ({status}) before listening on {port}:\n{log}");
            }
            assert!(Instant::now() < deadline, "{bin} did not start on {port}");
            sleep(Duration::from_millis(20));
        }
        RedisProc {
            child: Some(child),
            port,
        }
    }

    /// Sends `signal` to the process (SIGSTOP: a hung server that still
    /// completes TCP connects in the kernel; SIGCONT: back).
    pub fn signal(&self, signal: i32) {
        if let Some(c) = &self.child {
            // SAFETY: kill(2) only sends a signal to a pid; it touches no memory.
            unsafe { libc::kill(c.id() as i32, signal) };
        }
    }

    /// Kills the process now (SIGKILL: a crash, not a shutdown).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The settings every test server shares: no persistence, loopback only.
fn base_conf(port: u16) -> String {
    format!("bind 127.0.0.1\nport {port}\nsave \"\"\nappendonly no\n")
}

/// Runs `redis-cli` with `args` (connection options first) and returns
/// its stdout; panics if it cannot run.
pub fn cli(args: &[&str]) -> String {
    let bin = cli_bin();
    let out = Command::new(&bin)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{bin} not found ({e}): `make test` installs redis-tools"));
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// Polls `f` every 50 ms until it is true or `timeout` passes.
pub fn poll(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(Duration::from_millis(50));
    }
}

/// A redis-server with `requirepass` (user `default`) and, optionally, an
/// ACL user limited to the module's keys (`~rlw:*`).
pub struct AuthRedis {
    pub server: RedisProc,
    pub dir: tempfile::TempDir,
}

/// The admin password of [`AuthRedis`] (user `default`).
pub const ADMIN_PASSWORD: &str = "adm1n-S3cret";
/// The ACL user of [`AuthRedis`] and its password.
pub const ACL_USER: &str = "gateway";
pub const ACL_PASSWORD: &str = "gw-p@ss:w/rd";

impl AuthRedis {
    pub fn start() -> AuthRedis {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let conf = format!(
            "{}user default on >{ADMIN_PASSWORD} ~* &* +@all\n\
             user {ACL_USER} on >{ACL_PASSWORD} resetkeys ~rlw:* resetchannels -@all \
             +@connection +hset +hgetall +pexpire +del +rpush +lrange +hdel \
             +time +evalsha +eval +hget +get +set +incr +hscan +zadd +zcard \
             +zremrangebyrank +zrange +zrangebyscore\n",
            base_conf(port)
        );
        let server = RedisProc::spawn(&server_bin(), dir.path(), "auth", &conf, port);
        AuthRedis { server, dir }
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// redis-cli as the admin.
    pub fn admin(&self, args: &[&str]) -> String {
        let port = self.port().to_string();
        let mut all = vec!["-p", &port, "--no-auth-warning", "-a", ADMIN_PASSWORD];
        all.extend_from_slice(args);
        cli(&all)
    }
}

/// A CA, a server certificate for 127.0.0.1/localhost and a client
/// certificate signed by it, all made with openssl (EC P-256).
pub struct Pki {
    pub dir: tempfile::TempDir,
}

impl Pki {
    /// Makes a CA named `cn` and its certificates in a new directory.
    pub fn new(cn: &str) -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ossl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("openssl not found: `make test` installs it");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let subj = format!("/CN={cn}");
        let mut ca = vec!["req", "-x509", "-days", "2", "-subj", &subj];
        ca.extend_from_slice(&ec);
        ca.extend_from_slice(&["-keyout", "ca.key", "-out", "ca.crt"]);
        ca.extend_from_slice(&["-addext", "basicConstraints=critical,CA:TRUE"]);
        ca.extend_from_slice(&["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
        ossl(&ca);
        fs::write(
            dir.path().join("server.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             extendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        fs::write(
            dir.path().join("client.ext"),
            "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
        )
        .unwrap();
        for who in ["server", "client"] {
            let (key, csr, crt, ext) = (
                format!("{who}.key"),
                format!("{who}.csr"),
                format!("{who}.crt"),
                format!("{who}.ext"),
            );
            let subj = format!("/CN={who}");
            let mut req = vec!["req", "-subj", &subj, "-keyout", &key, "-out", &csr];
            req.extend_from_slice(&ec);
            ossl(&req);
            ossl(&[
                "x509",
                "-req",
                "-days",
                "2",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-extfile",
                &ext,
            ]);
        }
        Pki { dir }
    }

    /// A file of this PKI (`ca.crt`, `server.crt`, `client.key`, ...).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// redis-cli over TLS with this PKI's CA and client certificate, as
    /// user `default` with `password`.
    pub fn cli(&self, password: &str, args: &[&str]) -> String {
        let (ca, cert, key) = (
            self.file("ca.crt"),
            self.file("client.crt"),
            self.file("client.key"),
        );
        let mut all = vec![
            "--tls",
            "--cacert",
            &ca,
            "--cert",
            &cert,
            "--key",
            &key,
            "--no-auth-warning",
            "-a",
            password,
        ];
        all.extend_from_slice(args);
        cli(&all)
    }

    /// [`Pki::path`] as a string for configs.
    pub fn file(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

/// A TLS-only redis-server (plain port off) that requires client
/// certificates signed by its CA, with a password for user `default`.
pub struct TlsRedis {
    pub server: RedisProc,
    pub pki: Pki,
}

/// The password of [`TlsRedis`].
pub const TLS_PASSWORD: &str = "tls-S3cret";

impl TlsRedis {
    pub fn start() -> TlsRedis {
        let pki = Pki::new("rlw test CA");
        let port = free_port();
        let conf = format!(
            "bind 127.0.0.1\nport 0\ntls-port {port}\nsave \"\"\nappendonly no\n\
             tls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
             tls-auth-clients yes\nrequirepass {TLS_PASSWORD}\n",
            pki.file("server.crt"),
            pki.file("server.key"),
            pki.file("ca.crt"),
        );
        let server = RedisProc::spawn(&server_bin(), pki.dir.path(), "tls", &conf, port);
        TlsRedis { server, pki }
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// redis-cli over TLS with the client certificate and the password.
    pub fn cli(&self, args: &[&str]) -> String {
        let port = self.port().to_string();
        let mut all = vec!["-p", &port];
        all.extend_from_slice(args);
        self.pki.cli(TLS_PASSWORD, &all)
    }
}

/// One master, one replica and three sentinels monitoring them as
/// [`SENTINEL_MASTER`] (quorum 2, master down after 1 s).
pub struct SentinelSet {
    pub master: RedisProc,
    pub replica: RedisProc,
    pub sentinels: Vec<RedisProc>,
    pub dir: tempfile::TempDir,
}

/// The name the sentinels give the master.
pub const SENTINEL_MASTER: &str = "rlwmaster";

impl SentinelSet {
    pub fn start() -> SentinelSet {
        Self::start_with(None)
    }

    /// As `start`, with `password` required by the master and the replica
    /// (the sentinels themselves need none).
    pub fn start_with(password: Option<&str>) -> SentinelSet {
        let dir = tempfile::tempdir().unwrap();
        let (mp, rp) = (free_port(), free_port());
        let auth = password
            .map(|p| format!("requirepass {p}\nmasterauth {p}\n"))
            .unwrap_or_default();
        let sentinel_auth = password
            .map(|p| format!("sentinel auth-pass {SENTINEL_MASTER} {p}\n"))
            .unwrap_or_default();
        // The replica's first sync starts at once (Redis 7's diskless sync
        // otherwise waits 5 s for more replicas to join).
        let master_conf = format!("{}{auth}repl-diskless-sync-delay 0\n", base_conf(mp));
        let master = RedisProc::spawn(&server_bin(), dir.path(), "master", &master_conf, mp);
        let replica_conf = format!("{}{auth}replicaof 127.0.0.1 {mp}\n", base_conf(rp));
        let replica = RedisProc::spawn(&server_bin(), dir.path(), "replica", &replica_conf, rp);
        // Sentinels find the replica through the master's INFO: start them
        // once the replica is in sync.
        assert!(
            poll(Duration::from_secs(15), || {
                let mut args = vec!["-p".to_owned(), rp.to_string(), "--no-auth-warning".into()];
                if let Some(p) = password {
                    args.extend(["-a".to_owned(), p.to_owned()]);
                }
                args.extend(["INFO".to_owned(), "replication".to_owned()]);
                cli(&args.iter().map(String::as_str).collect::<Vec<_>>())
                    .contains("master_link_status:up")
            }),
            "replica did not sync"
        );
        let sentinels = (0..3)
            .map(|i| {
                let sp = free_port();
                let conf = format!(
                    "bind 127.0.0.1\nport {sp}\n\
                     sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {mp} 2\n\
                     sentinel down-after-milliseconds {SENTINEL_MASTER} 1000\n\
                     sentinel failover-timeout {SENTINEL_MASTER} 10000\n\
                     sentinel parallel-syncs {SENTINEL_MASTER} 1\n{sentinel_auth}"
                );
                RedisProc::spawn(&sentinel_bin(), dir.path(), &format!("s{i}"), &conf, sp)
            })
            .collect::<Vec<_>>();
        let set = SentinelSet {
            master,
            replica,
            sentinels,
            dir,
        };
        assert!(
            poll(Duration::from_secs(30), || set.sentinels_agree()),
            "sentinels did not discover the replica and each other"
        );
        set
    }

    /// Every sentinel knows the replica and the two other sentinels.
    fn sentinels_agree(&self) -> bool {
        self.sentinels.iter().all(|s| {
            let out = cli(&[
                "-p",
                &s.port.to_string(),
                "SENTINEL",
                "MASTER",
                SENTINEL_MASTER,
            ]);
            let field = |name: &str| {
                let mut lines = out.lines();
                lines.find(|l| l.trim() == name);
                lines.next().map(|v| v.trim().to_owned())
            };
            field("num-slaves").as_deref() == Some("1")
                && field("num-other-sentinels").as_deref() == Some("2")
        })
    }

    /// The master's port according to the first live sentinel.
    pub fn master_port(&self) -> Option<u16> {
        let out = cli(&[
            "-p",
            &self.sentinels[0].port.to_string(),
            "SENTINEL",
            "GET-MASTER-ADDR-BY-NAME",
            SENTINEL_MASTER,
        ]);
        out.lines().nth(1)?.trim().parse().ok()
    }

    /// `redis://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis://{}", hosts.join(","))
    }
}

/// Three redis-server nodes in cluster mode, every slot assigned with
/// `redis-cli --cluster create` (no replicas).
pub struct RedisCluster {
    pub nodes: Vec<RedisProc>,
    pub dir: tempfile::TempDir,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let dir = tempfile::tempdir().unwrap();
        let nodes: Vec<RedisProc> = (0..3)
            .map(|i| {
                let (port, bus) = (free_port(), free_port());
                // The bus port given too: port + 10000 could be taken.
                let conf = format!(
                    "{}cluster-enabled yes\ncluster-config-file nodes-{port}.conf\n\
                     cluster-port {bus}\ncluster-node-timeout 2000\n",
                    base_conf(port)
                );
                RedisProc::spawn(&server_bin(), dir.path(), &format!("n{i}"), &conf, port)
            })
            .collect();
        let mut args = vec!["--cluster".to_owned(), "create".to_owned()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"].map(String::from));
        let out = cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(
            out.contains("All 16384 slots covered"),
            "cluster create: {out}"
        );
        let cluster = RedisCluster { nodes, dir };
        assert!(
            poll(Duration::from_secs(20), || cluster.nodes.iter().all(|n| {
                cli(&["-p", &n.port.to_string(), "CLUSTER", "INFO"]).contains("cluster_state:ok")
            })),
            "cluster did not reach state ok"
        );
        cluster
    }

    /// `redis://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis://{}", hosts.join(","))
    }

    /// The module's keys stored on each node (`rlw:*`), per node.
    pub fn keys_per_node(&self) -> Vec<Vec<String>> {
        self.nodes
            .iter()
            .map(|n| {
                cli(&["-p", &n.port.to_string(), "--scan", "--pattern", "rlw:*"])
                    .lines()
                    .filter(|l| !l.is_empty())
                    .map(String::from)
                    .collect()
            })
            .collect()
    }

    /// Sum of the values of the module's keys, over every node.
    pub fn total(&self) -> i64 {
        let mut sum = 0;
        for (node, keys) in self.nodes.iter().zip(self.keys_per_node()) {
            for k in keys {
                let v = cli(&["-p", &node.port.to_string(), "GET", &k]);
                sum += v
                    .trim()
                    .parse::<i64>()
                    .unwrap_or_else(|_| panic!("value {v}"));
            }
        }
        sum
    }
}

/// A gateway (2 workers) whose zone `c` (window 1m, limit `limit` per
/// client `X-Key`) syncs every 100 ms with the Redis parameters `redis`.
pub fn redis_gateway(redis: &str, upstream: &super::Upstream, limit: u32) -> super::Nginx {
    super::Nginx::builder()
        .workers(2)
        .upstream_of(upstream)
        .start(&redis_gateway_conf(redis, limit))
}

/// As `redis_gateway`, with nginx's wall clock on `clock` (libfaketime), so
/// that the test jumps past a window boundary instead of sleeping until it.
pub fn redis_gateway_on(
    clock: &super::ShiftedClock,
    redis: &str,
    upstream: &super::Upstream,
    limit: u32,
) -> super::Nginx {
    clock
        .builder()
        .workers(2)
        .upstream_of(upstream)
        .start(&redis_gateway_conf(redis, limit))
}

/// The configuration of `redis_gateway`.
fn redis_gateway_conf(redis: &str, limit: u32) -> String {
    super::http_conf(&format!(
        r#"
        rate_limit_window_zone $http_x_key zone=c:1m window=1m {redis} sync=100ms secret=redis-modes-secret-0123;
        server {{
            listen 127.0.0.1:{{{{PORT}}}} reuseport;
            location / {{
                rate_limit_window zone=c limit={limit};
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location = /tiny {{
                rate_limit_window zone=c limit=1;
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location = /metrics {{ rate_limit_window_metrics; }}
        }}"#
    ))
}

/// Makes every client of the gateway on `port` one that can matter: one
/// request admitted against `limit=1` (location `/tiny`) makes the flag
/// threshold 1, so the gateway writes and reads back every active client
/// (a cold client is otherwise never written). For the fault tests, which
/// check that counts reach Redis. The setup client is written too.
pub fn every_client_hot(port: u16) {
    let r = super::get_key(port, "/tiny", &format!("hot-setup-{port}"));
    assert_eq!(r.status, 200, "{}", r.describe());
}

/// Sends `n` requests of `client`, alternating between the gateways on
/// `ports`, 50 ms apart (20 requests/s); returns the admitted per gateway.
/// Any status but 200 and 429 fails the test.
pub fn alternate(ports: [u16; 2], client: &str, n: usize) -> [u32; 2] {
    let mut admitted = [0u32; 2];
    for i in 0..n {
        let r = super::get_key(ports[i % 2], "/", client);
        match r.status {
            200 => admitted[i % 2] += 1,
            429 => {}
            s => panic!("unexpected status {s}: {}", r.describe()),
        }
        sleep(Duration::from_millis(50));
    }
    admitted
}

/// Sync failures of `kind` counted by zone `c` of the gateway on `port`.
pub fn sync_failures(port: u16, kind: &str) -> f64 {
    super::prom_value(
        &super::get(port, "/metrics").text(),
        "rate_limit_window_sync_failures_total",
        &[("zone", "c"), ("kind", kind)],
    )
    .unwrap_or(0.0)
}

/// Sum of the samples of metric `name` for zone `c` (over every label).
pub fn zone_metric(port: u16, name: &str) -> f64 {
    let text = super::get(port, "/metrics").text();
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains("zone=\"c\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

impl RedisCluster {
    /// Moves every slot of node `from` (and its keys) to node `to` with
    /// `redis-cli --cluster reshard`: clients with a stale slot map get
    /// MOVED replies.
    pub fn move_all_slots(&self, from: usize, to: usize) {
        let id = |i: usize| {
            cli(&["-p", &self.nodes[i].port.to_string(), "CLUSTER", "MYID"])
                .trim()
                .to_owned()
        };
        let (from_id, to_id) = (id(from), id(to));
        let seed = format!("127.0.0.1:{}", self.nodes[to].port);
        let out = cli(&[
            "--cluster",
            "reshard",
            &seed,
            "--cluster-from",
            &from_id,
            "--cluster-to",
            &to_id,
            "--cluster-slots",
            "16384",
            "--cluster-yes",
        ]);
        assert!(
            poll(Duration::from_secs(30), || {
                let info = cli(&["-p", &self.nodes[to].port.to_string(), "CLUSTER", "NODES"]);
                info.lines()
                    .find(|l| l.starts_with(&from_id))
                    .is_some_and(|l| l.split(' ').count() <= 8)
            }),
            "slots still on node {from}: {out}"
        );
    }
}

/// Waits (10 s at most, sending requests of key `k` to gateway `g`) until
/// the error log holds exactly one "redis sync failing" line; returns the
/// log and that line.
pub fn outage_line(g: &super::Nginx) -> (String, String) {
    assert!(
        super::wait_for(Duration::from_secs(10), || {
            super::get_key(g.port, "/", "k");
            super::count_lines(&g.error_log(), "redis sync failing") == 1
        }),
        "outage not logged once:\n{}",
        g.error_log()
    );
    let log = g.error_log();
    let line = log
        .lines()
        .find(|l| l.contains("redis sync failing"))
        .unwrap()
        .to_string();
    (log, line)
}

/// A TCP server that accepts connections and never answers (a hung
/// sentinel or node): the accepted sockets are held until it is dropped.
pub struct HungServer {
    pub port: u16,
    accepted: std::sync::Arc<std::sync::atomic::AtomicU64>,
    _listener: std::thread::JoinHandle<()>,
}

impl HungServer {
    pub fn start() -> HungServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let count = accepted.clone();
        let handle = std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in listener.incoming().flatten() {
                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                held.push(s);
            }
        });
        HungServer {
            port,
            accepted,
            _listener: handle,
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The worker of `g` that runs the sync thread of zone `c`, with its
/// thread and descriptor counts (`/proc/PID/task`, `/proc/PID/fd`).
pub fn sync_worker_usage(g: &super::Nginx) -> Option<(i32, usize, usize)> {
    let count = |p: String| std::fs::read_dir(p).map(|d| d.count()).unwrap_or(0);
    g.worker_pids().into_iter().find_map(|pid| {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        let syncs = tasks.flatten().any(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("rlw-sync"))
        });
        syncs.then(|| {
            (
                pid,
                count(format!("/proc/{pid}/task")),
                count(format!("/proc/{pid}/fd")),
            )
        })
    })
}

/// Samples `sync_worker_usage` every 500 ms for `secs` seconds and
/// asserts that the sync worker's threads and descriptors never grow past
/// their first sample (a leak per retry would add one every round), but
/// for the sockets the two sync threads (counts, overrides) may each have
/// in flight at a sample and not at the first.
pub fn assert_usage_constant(g: &super::Nginx, secs: u64, mut during: impl FnMut()) {
    let (pid, threads, fds) = sync_worker_usage(g).expect("no worker runs the sync thread");
    let mut seen = vec![];
    for _ in 0..secs * 2 {
        during();
        sleep(Duration::from_millis(500));
        let (p, t, f) = sync_worker_usage(g).expect("the sync thread is gone");
        assert_eq!(p, pid, "the sync moved to another worker");
        seen.push((t, f));
    }
    eprintln!("sync worker {pid}: {threads} threads, {fds} descriptors at first; then {seen:?}");
    assert!(
        seen.iter().all(|&(t, f)| t <= threads && f <= fds + 2),
        "threads or descriptors grew: {threads}/{fds} then {seen:?}"
    );
}
