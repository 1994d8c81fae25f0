//! Binaries and configuration: where nginx and the module are, complete
//! nginx.conf files from fragments, free ports, a test prefix, `nginx -t`.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

pub const MODULE_FILE: &str = "ngx_http_rate_limit_window_module.so";

/// The repository root (the tests are the package in tests/, whose
/// manifest directory is one level down). Test files find `bench/`,
/// `nginx-conf/` and `tests/it/` from here, not from `CARGO_MANIFEST_DIR`.
pub(crate) fn manifest_dir() -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests.parent().unwrap_or(tests).to_path_buf()
}

pub(crate) fn locate(var: &str, default: PathBuf) -> PathBuf {
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

/// The ports [`free_port`] hands out: below Linux's ephemeral range
/// (32768-60999), so that neither a socket bound to port 0 nor an outgoing
/// connection can take one between the check and the server's own bind.
const PORTS: std::ops::Range<u16> = 12_000..22_000;

/// How many ports this test process has handed out.
static HANDED_OUT: AtomicU32 = AtomicU32::new(0);

/// A free TCP port on 127.0.0.1 for a server a test starts (nginx, Redis),
/// never the same one twice in a test process, so tests running in
/// parallel cannot race for it. Two test processes start far apart in the
/// range, and a port something else holds is skipped.
pub fn free_port() -> u16 {
    let span = u32::from(PORTS.end - PORTS.start);
    let start = (std::process::id() % 50) * 200;
    for _ in 0..span {
        let n = HANDED_OUT.fetch_add(1, Ordering::Relaxed);
        let port = PORTS.start + ((start + n) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port left in {PORTS:?}");
}

#[derive(Clone, Debug)]
pub(crate) struct Placeholders {
    pub(crate) port: u16,
    pub(crate) port2: u16,
    pub(crate) upstream: String,
    pub(crate) prefix: String,
    pub(crate) workers: usize,
}

pub(crate) fn substitute(conf: &str, ph: &Placeholders) -> String {
    with_stream_module(conf)
        .replace("{{PORT}}", &ph.port.to_string())
        .replace("{{PORT2}}", &ph.port2.to_string())
        .replace("{{UPSTREAM}}", &ph.upstream)
        .replace("{{PREFIX}}", &ph.prefix)
        .replace("{{WORKERS}}", &ph.workers.to_string())
}

/// nginx's stream module as a module of its own, when the nginx under test
/// has one beside the module (Debian's, `make test NGINX=1.30`:
/// scripts/nginx-debian.sh copies sid's `ngx_stream_module.so` there);
/// None for an nginx built with stream (the vendored one).
pub fn stream_module_so() -> Option<PathBuf> {
    let so = module_so().parent()?.join("ngx_stream_module.so");
    so.exists().then_some(so)
}

/// `conf` with a `load_module` line of nginx's stream module before
/// everything, when it has a `stream {}` block and the nginx under test
/// builds stream as a module of its own ([`stream_module_so`]): loaded
/// before this module, as Debian's modules-enabled does (docs/stream.md),
/// unless `conf` loads it itself (tests/it/stream_loading.rs: after).
pub fn with_stream_module(conf: &str) -> String {
    let has_stream = conf.lines().any(|l| l.trim_start().starts_with("stream {"))
        && !conf.contains("ngx_stream_module.so;");
    match stream_module_so() {
        Some(so) if has_stream => format!("load_module {};\n{conf}", so.display()),
        _ => conf.to_string(),
    }
}

/// Creates a prefix: logs/, html/index.html, modules/<so> symlink, conf/.
pub(crate) fn make_prefix() -> tempfile::TempDir {
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
    test_config_with(&nginx_bin(), conf)
}

/// [`test_config`] with the nginx binary `bin`.
pub fn test_config_with(bin: &Path, conf: &str) -> (bool, String) {
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
    let out = Command::new(bin)
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

/// Makes a self-signed certificate for `localhost` in `dir` (with openssl)
/// and returns the `listen … ssl; http2 on;` and certificate lines of a
/// server on {{PORT}} that uses it. `dir` must outlive nginx.
pub fn tls_h2_listen(dir: &Path) -> String {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("run openssl (make test installs it)");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    format!(
        "listen 127.0.0.1:{{{{PORT}}}} ssl; http2 on;\n\
         ssl_certificate {};\nssl_certificate_key {};",
        cert.display(),
        key.display()
    )
}
