//! What counts when (docs/phases.md): both phases × realip at http, server
//! or location level × every way a request reaches a limited location,
//! with and without `limit_req` and `limit_conn` in that location. Real
//! nginx (2 workers), a real upstream, HTTP/1.1 and HTTP/2 (curl).
//!
//! One configuration per realip level holds every row as locations made in
//! loops; each row gets clients of its own (10.row.client.7, sent through
//! the realip header), so rows never share a count. Each client sends 4
//! requests against `limit=3`: a request counted for the right client
//! gives `200 200 200 429`; one counted for the proxy (127.0.0.1), or
//! twice, or not at all, gives something else. The access log must show the
//! client's `$binary_remote_addr` and limit_req's verdict for every request.
use crate::common;

#[path = "phases_in_flight.rs"]
mod in_flight;
#[path = "phases_shed.rs"]
mod shed;

use common::*;
use std::process::Command;
use std::time::Duration;

const HOUR_MS: u128 = 3_600_000;
const PHASES: [&str; 2] = ["preaccess", "postaccess"];
/// Without, and with `limit_req` + `limit_conn` in the limited locations.
const VARIANTS: [&str; 2] = ["plain", "lr"];

/// How a request reaches the limited location.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Route {
    Direct,
    ErrorPageNamed,
    ErrorPageUri,
    /// Decided, then an upstream 404 redirected by `error_page` (the in-flight
    /// and shed matrices).
    ErrorPageAfter,
    TryFiles,
    RewriteLast,
    AuthRequest,
    SatisfyAny,
    Mirror,
    /// An `auth_request` that says 401, then `error_page 401 = @named`.
    AccessDenied,
    Http2,
}

const ROUTES: [Route; 10] = [
    Route::Direct,
    Route::ErrorPageNamed,
    Route::ErrorPageUri,
    Route::TryFiles,
    Route::RewriteLast,
    Route::AuthRequest,
    Route::SatisfyAny,
    Route::Mirror,
    Route::AccessDenied,
    Route::Http2,
];

/// Where realip is configured, and the header its clients send.
#[derive(Clone, Copy, Debug)]
enum Level {
    Http,
    Server,
    Location,
}

impl Level {
    fn header(self) -> &'static str {
        match self {
            Level::Http => "X-Via-Http",
            Level::Server => "X-Via-Srv",
            Level::Location => "X-Via-Loc",
        }
    }
}

/// The statuses one client gets for its 4 requests.
fn expected(phase: &str, route: Route) -> [u16; 4] {
    if !counted(phase, route) {
        return [200; 4];
    }
    [200, 200, 200, 429]
}

/// The limit (and limit_req/limit_conn) of one limited location.
fn limit(phase: &str, variant: &str) -> String {
    let mut s = format!("rate_limit_window_phase {phase}; rate_limit_window zone=rw limit=3;");
    if variant == "lr" {
        // limit_conn counts a request until its pool is freed, and a mirror
        // keeps the pool until the mirrored subrequest is done: on a loaded
        // machine the next request can arrive first. The bound only has to
        // be seen (`$limit_conn_status` PASSED), never reached.
        s.push_str(" limit_req zone=lr burst=3 nodelay; limit_conn lc 8;");
    }
    s
}

/// The locations of one phase and variant (suffix `-{phase}-{variant}`).
fn locations(level: Level, phase: &str, variant: &str) -> String {
    let realip = match level {
        Level::Location => "real_ip_header X-Via-Loc;",
        _ => "",
    };
    let lim = limit(phase, variant);
    let s = format!("{phase}-{variant}");
    format!(
        r#"
        location /t-{s}/ {{ {realip} {lim} proxy_pass http://{{{{UPSTREAM}}}}; }}
        location @n-{s} {{ {realip} {lim} proxy_pass http://{{{{UPSTREAM}}}}; }}
        location /epn-{s}/ {{ {realip} root html; error_page 404 = @n-{s}; }}
        location /epu-{s}/ {{ {realip} root html; error_page 404 = /t-{s}/from-error-page; }}
        location /tf-{s}/ {{ {realip} root html; try_files $uri @n-{s}; }}
        location /rw-{s}/ {{ {realip} rewrite ^ /t-{s}/rewritten last; }}
        location /ar-{s}/ {{ {realip} auth_request /_yes; {lim} proxy_pass http://{{{{UPSTREAM}}}}; }}
        location /sa-{s}/ {{
            {realip} satisfy any; allow 10.0.0.0/8; deny all;
            auth_basic "matrix"; auth_basic_user_file htpasswd;
            {lim} proxy_pass http://{{{{UPSTREAM}}}};
        }}
        location /mi-{s}/ {{ {realip} mirror /_m-{s}; {lim} proxy_pass http://{{{{UPSTREAM}}}}; }}
        location = /_m-{s} {{ internal; {realip} {lim} proxy_pass http://{{{{UPSTREAM}}}}/mirrored; }}
        location /den-{s}/ {{ {realip} auth_request /_no; error_page 401 = @n-{s}; }}
        "#
    )
}

/// One nginx configuration with every row of `level`. HTTP/1.1 on
/// {{PORT}}, HTTP/2 over TLS on {{PORT2}}.
fn matrix_conf(level: Level, tls: &str) -> String {
    let http_realip = "set_real_ip_from 127.0.0.1; real_ip_header X-Via-Http;";
    let server_realip = match level {
        Level::Http => "",
        Level::Server => "real_ip_header X-Via-Srv;",
        // Server level names a header no client sends: realip acts in the
        // location only.
        Level::Location => "real_ip_header X-Via-None;",
    };
    let mut locs = String::new();
    for phase in PHASES {
        for variant in VARIANTS {
            locs.push_str(&locations(level, phase, variant));
        }
    }
    http_conf(&format!(
        r#"
        {http_realip}
        rate_limit_window_zone $binary_remote_addr zone=rw:4m window=1h;
        limit_req_zone $binary_remote_addr zone=lr:1m rate=1r/m;
        limit_conn_zone $binary_remote_addr zone=lc:1m;
        log_format rows '$uri|$binary_remote_addr|$status|$limit_req_status|$limit_conn_status';
        server {{
            listen 127.0.0.1:{{{{PORT}}}};
            {tls}
            access_log logs/access.log rows;
            {server_realip}
            location = /_yes {{ internal; return 204; }}
            location = /_no {{ internal; return 401; }}
            location = /metrics {{ rate_limit_window_metrics; }}
            {locs}
        }}"#
    ))
}

/// The path a route's requests take for a phase and variant.
fn path(route: Route, s: &str) -> String {
    format!("/{}-{s}/missing", prefix(route))
}

/// The first part of a route's location names (`/{prefix}-{suffix}/`).
fn prefix(route: Route) -> &'static str {
    match route {
        Route::Direct | Route::Http2 => "t",
        Route::ErrorPageNamed => "epn",
        Route::ErrorPageUri => "epu",
        Route::ErrorPageAfter => "epa",
        Route::TryFiles => "tf",
        Route::RewriteLast => "rw",
        Route::AuthRequest => "ar",
        Route::SatisfyAny => "sa",
        Route::Mirror => "mi",
        Route::AccessDenied => "den",
    }
}

/// Whether a route's requests are counted in `phase`: a request that failed
/// an access check never is in postaccess, whatever page answers it.
fn counted(phase: &str, route: Route) -> bool {
    !(phase == "postaccess" && route == Route::AccessDenied)
}

/// The upstream's wait for the requests of the in-flight and shed matrices
/// that get there (ms).
const SLOW: &str = "sleep=1200";

/// The path of a route's requests in `phase`, in the in-flight and shed
/// matrices (slow, but for the upstream 404 of `ErrorPageAfter`).
fn slow_path(route: Route, phase: &str) -> String {
    let query = if route == Route::ErrorPageAfter {
        "status=404"
    } else {
        SLOW
    };
    format!("/{}-{phase}/missing?{query}", prefix(route))
}

/// The locations the in-flight and shed matrices share for `phase`, each
/// deciding with `lim`; they add their own for `auth_request`.
fn slow_locations(phase: &str, lim: &str) -> String {
    let s = phase;
    format!(
        r#"
        location /t-{s}/ {{ {lim} proxy_pass http://{{{{UPSTREAM}}}}; }}
        location @n-{s} {{ {lim} proxy_pass http://{{{{UPSTREAM}}}}; }}
        location /epn-{s}/ {{ root html; error_page 404 = @n-{s}; }}
        location /epu-{s}/ {{ root html; error_page 404 = /t-{s}/from-error-page?{SLOW}; }}
        location /epa-{s}/ {{
            {lim} proxy_intercept_errors on;
            error_page 404 = /t-{s}/after-404?{SLOW};
            proxy_pass http://{{{{UPSTREAM}}}};
        }}
        location /tf-{s}/ {{ root html; try_files $uri @n-{s}; }}
        location /rw-{s}/ {{ rewrite ^ /t-{s}/rewritten last; }}
        location /mi-{s}/ {{ mirror /_m-{s}; {lim} proxy_pass http://{{{{UPSTREAM}}}}; }}
        location = /_m-{s} {{ internal; {lim} proxy_pass http://{{{{UPSTREAM}}}}/mirrored; }}
        location /den-{s}/ {{ auth_request /_no; error_page 401 = @n-{s}; }}
        "#
    )
}

/// The access log's form of `$binary_remote_addr` (nginx escapes bytes
/// below 0x20, `"`, `\` and from 0x7f as \xHH).
fn logged_addr(ip: [u8; 4]) -> String {
    let mut s = String::new();
    for b in ip {
        if !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\' {
            s.push_str(&format!("\\x{b:02X}"));
        } else {
            s.push(b as char);
        }
    }
    s
}

/// `n` sequential GETs of `url` over HTTP/2 (one connection) as client `ip`.
fn curl_h2(url: &str, header: &str, ip: &str, n: usize) -> Vec<u16> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sSk", "--http2", "-H"])
        .arg(format!("{header}: {ip}"))
        .args(["-w", "%{http_version} %{http_code}\\n"]);
    for _ in 0..n {
        cmd.args(["-o", "/dev/null", url]);
    }
    let out = cmd.output().expect("run curl (make test installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .map(|l| {
            let (v, code) = l.split_once(' ').unwrap_or(("", "0"));
            assert_eq!(v, "2", "not HTTP/2: {text}");
            code.parse().unwrap_or(0)
        })
        .collect()
}

/// One row's result: what each of its two clients got.
struct Row {
    name: String,
    clients: Vec<([u8; 4], Vec<u16>)>,
    want: [u16; 4],
    variant: &'static str,
}

fn run_level(level: Level) {
    let up = Upstream::start();
    let certs = tempfile::tempdir().unwrap();
    let tls = tls_h2_listen(certs.path()).replace(
        "listen 127.0.0.1:{{PORT}} ssl;",
        "listen 127.0.0.1:{{PORT2}} ssl;",
    );
    let ng = Nginx::builder()
        .upstream_of(&up)
        .file("conf/htpasswd", "nobody:{PLAIN}secret\n")
        .start(&matrix_conf(level, &tls));
    clear_of_boundary(HOUR_MS, 60_000);
    let header = level.header();
    let mut rows = Vec::new();
    let mut n: u8 = 0;
    for phase in PHASES {
        for variant in VARIANTS {
            for route in ROUTES {
                n += 1;
                let s = format!("{phase}-{variant}");
                let mut row = Row {
                    name: format!("{level:?} {phase} {variant} {route:?}"),
                    clients: Vec::new(),
                    want: expected(phase, route),
                    variant,
                };
                for c in 1..=2u8 {
                    let ip = [10, n, c, 7];
                    let text = format!("10.{n}.{c}.7");
                    let got = if route == Route::Http2 {
                        let url = format!("https://127.0.0.1:{}{}", ng.port2, path(route, &s));
                        curl_h2(&url, header, &text, 4)
                    } else {
                        (0..4)
                            .map(|_| {
                                let p = path(route, &s);
                                request(ng.port, "GET", &p, &[(header, text.as_bytes())]).status
                            })
                            .collect()
                    };
                    row.clients.push((ip, got));
                }
                rows.push(row);
            }
        }
    }
    check(&ng, &rows);
}

/// Every client's statuses, then the access log: each request logged with
/// the client's address (never the proxy's, cached too early) and, with
/// limit_req, its PASSED verdict.
fn check(ng: &Nginx, rows: &[Row]) {
    let mut wrong = Vec::new();
    for row in rows {
        for (ip, got) in &row.clients {
            if got[..] != row.want[..] {
                wrong.push(format!(
                    "{} client {ip:?}: {got:?}, want {:?}",
                    row.name, row.want
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} rows wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    // A request is logged when it is finalized, after the client has its
    // answer (a mirror's main request waits for the mirrored subrequest):
    // wait for every client's four lines before reading them.
    let want_lines: usize = rows.iter().map(|r| r.clients.len() * 4).sum();
    let logged = |log: String| log.lines().filter(|l| !l.starts_with("/__")).count();
    wait_for(Duration::from_secs(5), || {
        logged(ng.access_log()) >= want_lines
    });
    let log = ng.access_log();
    let proxy = logged_addr([127, 0, 0, 1]);
    // The harness's readiness probe (`/__rlw_probe`, no realip header).
    for line in log.lines().filter(|l| !l.starts_with("/__")) {
        let f: Vec<&str> = line.split('|').collect();
        assert_eq!(f.len(), 5, "{line}");
        assert_ne!(f[1], proxy, "the proxy's address was logged: {line}");
    }
    for row in rows {
        for (ip, _) in &row.clients {
            let addr = logged_addr(*ip);
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| l.split('|').nth(1) == Some(&addr))
                .collect();
            assert_eq!(lines.len(), 4, "{}: {addr} logged {lines:?}", row.name);
            if row.variant == "lr" {
                // limit_req and limit_conn saw the client and let it pass.
                assert!(
                    lines.iter().all(|l| {
                        let f: Vec<&str> = l.split('|').collect();
                        f[3] == "PASSED" && f[4] == "PASSED"
                    }),
                    "{}: limit_req, limit_conn: {lines:?}",
                    row.name
                );
            }
        }
    }
    let passed: usize = rows
        .iter()
        .map(|r| r.clients.len() * r.want.iter().filter(|&&s| s == 200).count())
        .sum::<usize>()
        - rows.iter().filter(|r| r.want == [200; 4]).count() * 2 * 4;
    let rejected: usize = rows.iter().filter(|r| r.want != [200; 4]).count() * 2;
    let text = metrics_text(ng.port);
    let total = |result: &str| {
        prom_value(
            &text,
            "rate_limit_window_requests_total",
            &[("zone", "rw"), ("result", result)],
        )
        .unwrap_or(-1.0)
    };
    assert_eq!(total("passed"), passed as f64, "{text}");
    assert_eq!(total("rejected"), rejected as f64, "{text}");
}

#[test]
fn matrix_realip_at_http_level() {
    run_level(Level::Http);
}

#[test]
fn matrix_realip_at_server_level() {
    run_level(Level::Server);
}

#[test]
fn matrix_realip_at_location_level() {
    run_level(Level::Location);
}

/// Zones keyed by `$binary_remote_addr` behind realip (X-Forwarded-For):
/// `v6` groups IPv6 clients by /64, `whole` (the default) does not.
fn ipv6_conf() -> String {
    http_conf(
        r#"
        set_real_ip_from 127.0.0.1;
        real_ip_header X-Forwarded-For;
        rate_limit_window_zone $binary_remote_addr zone=v6:1m window=1h ipv6_prefix=64;
        rate_limit_window_zone $binary_remote_addr zone=whole:1m window=1h;
        server {
            listen 127.0.0.1:{{PORT}};
            location /v6/ { rate_limit_window zone=v6 limit=3; proxy_pass http://{{UPSTREAM}}; }
            location /whole/ { rate_limit_window zone=whole limit=3; proxy_pass http://{{UPSTREAM}}; }
            location = /metrics { rate_limit_window_metrics reset=on; }
        }"#,
    )
}

/// One GET of `path` from client `ip` (through X-Forwarded-For).
fn from(ng: &Nginx, path: &str, ip: &str) -> u16 {
    request(ng.port, "GET", path, &[("X-Forwarded-For", ip.as_bytes())]).status
}

#[test]
fn ipv6_prefix_groups_a_slash_64_through_realip() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&ipv6_conf());
    clear_of_boundary(HOUR_MS, 30_000);
    // One /64, four addresses: one count.
    let host: Vec<u16> = [
        "2001:db8::1",
        "2001:db8::2",
        "2001:db8::ffff:3",
        "2001:db8::1",
    ]
    .iter()
    .map(|ip| from(&ng, "/v6/", ip))
    .collect();
    assert_eq!(host, [200, 200, 200, 429]);
    // The next /64 has its own count.
    assert_eq!(from(&ng, "/v6/", "2001:db8:0:1::1"), 200);
    // IPv4 and IPv4-mapped IPv6 are whole addresses: each its own count
    // (masked to 64 bits, the two mapped ones would share ::/64).
    for ip in ["10.0.0.1", "10.0.0.2", "::ffff:10.0.0.3", "::ffff:10.0.0.4"] {
        let got: Vec<u16> = (0..4).map(|_| from(&ng, "/v6/", ip)).collect();
        assert_eq!(got, [200, 200, 200, 429], "{ip}");
    }
    // A mapped client is its IPv4 address: one count with it.
    assert_eq!(from(&ng, "/v6/", "::ffff:10.0.0.1"), 429);
    // Without ipv6_prefix (128), each IPv6 address is a client.
    for ip in ["2001:db8::1", "2001:db8::2"] {
        let got: Vec<u16> = (0..4).map(|_| from(&ng, "/whole/", ip)).collect();
        assert_eq!(got, [200, 200, 200, 429], "{ip}");
    }
    let log = ng.error_log();
    assert!(!log.contains("[alert]") && !log.contains("[crit]"), "{log}");
}

#[test]
fn ipv6_prefix_needs_binary_remote_addr_and_a_range() {
    let conf = |zone: &str| {
        http_conf(&format!(
            "{zone}\nserver {{ listen 127.0.0.1:{{{{PORT}}}}; location / {{ rate_limit_window zone=z limit=1; }} }}"
        ))
    };
    let (ok, err) = test_config(&conf(
        "rate_limit_window_zone $http_x_key zone=z:1m ipv6_prefix=64;",
    ));
    assert!(!ok);
    assert!(
        err.contains(
            "[emerg] \"ipv6_prefix=64\" of zone \"z\" needs the key \"$binary_remote_addr\", not \"$http_x_key\""
        ),
        "{err}"
    );
    for bad in ["16", "129", "64x"] {
        let (ok, err) = test_config(&conf(&format!(
            "rate_limit_window_zone $binary_remote_addr zone=z:1m ipv6_prefix={bad};"
        )));
        assert!(
            !ok && err.contains(&format!("invalid ipv6_prefix \"{bad}\"")),
            "{err}"
        );
    }
    for good in ["32", "64", "128"] {
        let (ok, err) = test_config(&conf(&format!(
            "rate_limit_window_zone $binary_remote_addr zone=z:1m ipv6_prefix={good};"
        )));
        assert!(ok, "{good}: {err}");
    }
}
