//! `rate_limit_window_phase`: limits decided after nginx's access checks,
//! keyed by who authentication says the user is. Real nginx with two
//! workers, a real upstream and a real auth server (`auth_request`), or
//! `auth_basic` with a password file.
use crate::common;

use common::auth_server::{Account, AuthServer};
use common::*;
use std::process::Command;
use std::time::Duration;

const HOUR_MS: u128 = 3_600_000;

/// The accounts of the auth server: two free users and a pro one.
fn accounts() -> Vec<Account> {
    vec![
        Account::new("tok-alice", "alice", "free"),
        Account::new("tok-bob", "bob", "free"),
        Account::new("tok-carol", "carol", "pro"),
    ]
}

/// http{} for the auth_request tests. `/api/` authenticates through the
/// auth server, takes the user and plan from its answer, and is limited per
/// user (3 per hour, 6 for the pro plan) in `phase`. The limit is set at
/// server level, so that `/_auth` (the auth subrequest's location) and the
/// 401 page inherit it too and must not count anything.
fn auth_conf(auth: &AuthServer, phase: &str, api_extra: &str, server_extra: &str) -> String {
    http_conf(
        &r#"
        map $auth_plan $plan_limit {
            pro      6;
            default  3;
        }
        rate_limit_window_zone $auth_user zone=per_user:1m window=1h;
        server {
            listen 127.0.0.1:{{PORT}};
            add_header X-RLW-Status $rate_limit_window_status always;
            rate_limit_window_phase PHASE;
            rate_limit_window zone=per_user limit=$plan_limit;
            error_page 401 /denied.html;
            location /api/ {
                auth_request /_auth;
                auth_request_set $auth_user $upstream_http_x_user;
                auth_request_set $auth_plan $upstream_http_x_plan;
                API_EXTRA
                proxy_pass http://{{UPSTREAM}};
            }
            location = /_auth {
                internal;
                proxy_pass http://AUTH/check;
                proxy_pass_request_body off;
                proxy_set_header Content-Length "";
            }
            location = /denied.html { root html; }
            SERVER_EXTRA
        }
        server {
            listen 127.0.0.1:{{PORT2}};
            location = /metrics { rate_limit_window_metrics; }
        }"#
        .replace("PHASE", phase)
        .replace("API_EXTRA", api_extra)
        .replace("SERVER_EXTRA", server_extra)
        .replace("AUTH", &auth.addr()),
    )
}

fn start_auth(up: &Upstream, conf: &str) -> Nginx {
    Nginx::builder()
        .upstream_of(up)
        .file("html/denied.html", "<h1>who are you</h1>\n")
        .start(conf)
}

/// GET `path` with a bearer token.
fn as_token(port: u16, path: &str, token: &str) -> Response {
    let auth = format!("Bearer {token}");
    request(port, "GET", path, &[("Authorization", auth.as_bytes())])
}

fn statuses(rs: &[Response]) -> Vec<u16> {
    rs.iter().map(|r| r.status).collect()
}

fn requests_total(port: u16, zone: &str, result: &str) -> f64 {
    let text = metrics_text(port);
    prom_value(
        &text,
        "rate_limit_window_requests_total",
        &[("zone", zone), ("result", result)],
    )
    .unwrap_or_else(|| panic!("no {zone}/{result} sample:\n{text}"))
}

#[test]
fn postaccess_counts_authenticated_users_only() {
    let up = Upstream::start();
    let auth = AuthServer::start(&accounts());
    let ng = start_auth(&up, &auth_conf(&auth, "postaccess", "", ""));
    clear_of_boundary(HOUR_MS, 30_000);

    // Failed authentication (a wrong token, no token) is never counted:
    // not against anyone, not as exempt, and the 401 page that inherits
    // the limit does not count either.
    for i in 0..6 {
        let r = if i % 2 == 0 {
            as_token(ng.port, "/api/x", "stolen")
        } else {
            get(ng.port, "/api/x")
        };
        assert_eq!(r.status, 401, "{}", r.describe());
        assert!(r.text().contains("who are you"), "{}", r.describe());
        assert!(r.header("RateLimit-Limit").is_none(), "{}", r.describe());
    }
    assert_eq!(auth.refused(), 6);

    // A user is held to the limit; the count is the user's, whatever the
    // connection; the response says so.
    let rs: Vec<Response> = (0..5)
        .map(|_| as_token(ng.port, "/api/a", "tok-alice"))
        .collect();
    assert_eq!(statuses(&rs), [200, 200, 200, 429, 429]);
    let rem: Vec<i64> = rs[..3]
        .iter()
        .map(|r| r.header_num("RateLimit-Remaining"))
        .collect();
    assert_eq!(rem, [2, 1, 0]);
    assert_eq!(rs[0].header_num("RateLimit-Limit"), 3);
    assert_eq!(rs[0].header("X-RLW-Status"), Some("PASSED"));
    let ra = rs[3].header_num("Retry-After");
    assert!((1..=3600).contains(&ra), "Retry-After {ra}");
    assert_eq!(rs[3].header("X-RLW-Status"), Some("REJECTED"));

    // Two users do not share a count.
    let rs: Vec<Response> = (0..4)
        .map(|_| as_token(ng.port, "/api/b", "tok-bob"))
        .collect();
    assert_eq!(statuses(&rs), [200, 200, 200, 429]);

    assert_eq!(up.received(), 6, "rejected requests reached the upstream");
    assert_eq!(requests_total(ng.port2, "per_user", "passed"), 6.0);
    assert_eq!(requests_total(ng.port2, "per_user", "rejected"), 3.0);
    assert_eq!(
        requests_total(ng.port2, "per_user", "exempt"),
        0.0,
        "failed authentications and auth subrequests were counted as exempt"
    );
}

#[test]
fn postaccess_plan_from_the_auth_answer_sets_the_limit() {
    let up = Upstream::start();
    let auth = AuthServer::start(&accounts());
    let ng = start_auth(&up, &auth_conf(&auth, "postaccess", "", ""));
    clear_of_boundary(HOUR_MS, 30_000);
    // carol's plan (pro) comes only from the auth server's X-Plan header.
    let st: Vec<u16> = (0..8)
        .map(|_| as_token(ng.port, "/api/c", "tok-carol").status)
        .collect();
    assert_eq!(st, [200, 200, 200, 200, 200, 200, 429, 429]);
    let r = as_token(ng.port, "/api/c", "tok-carol");
    assert_eq!(r.header_num("RateLimit-Limit"), 6, "{}", r.describe());
    // A client cannot choose its plan: X-Plan from the client is ignored.
    let st: Vec<u16> = (0..4)
        .map(|_| {
            request(
                ng.port,
                "GET",
                "/api/a",
                &[("Authorization", b"Bearer tok-alice"), ("X-Plan", b"pro")],
            )
            .status
        })
        .collect();
    assert_eq!(st, [200, 200, 200, 429]);
}

/// The behaviour the issue reported, unchanged in preaccess: the key is
/// empty before authentication, so every request is exempt. It is not
/// silent: the metrics count the exemptions, and one warning names the
/// zone and the phase to use.
#[test]
fn preaccess_with_an_auth_key_is_exempt_and_warns_once() {
    let up = Upstream::start();
    let auth = AuthServer::start(&accounts());
    let ng = start_auth(&up, &auth_conf(&auth, "preaccess", "", ""));
    clear_of_boundary(HOUR_MS, 30_000);
    for _ in 0..5 {
        let r = as_token(ng.port, "/api/x", "tok-alice");
        assert_eq!(r.status, 200, "{}", r.describe());
        assert_eq!(r.header("X-RLW-Status"), Some("EXEMPT"));
        assert!(r.header("RateLimit-Limit").is_none(), "{}", r.describe());
    }
    // Failed authentications are exempt too (decided before the check).
    assert_eq!(as_token(ng.port, "/api/x", "stolen").status, 401);
    assert_eq!(requests_total(ng.port2, "per_user", "exempt"), 6.0);
    assert_eq!(requests_total(ng.port2, "per_user", "passed"), 0.0);
    let log = ng.error_log();
    let warned = count_lines(&log, "rate_limit_window_phase postaccess;");
    assert_eq!(warned, 1, "one warning per episode, across workers:\n{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("[warn]") && l.contains("rate_limit_window_zone \"per_user\"")),
        "{log}"
    );
    assert!(
        !log.contains("alice"),
        "the key must never be logged:\n{log}"
    );
}

/// auth_basic with a `$remote_user` key: in preaccess, a stranger who
/// knows the user name locks the user out with wrong passwords (counted
/// before the password check); in postaccess, wrong passwords cost the user
/// nothing.
#[test]
fn remote_user_wrong_passwords_cost_nothing_in_postaccess() {
    for (phase, admitted_after_attack) in [("postaccess", 3), ("preaccess", 0)] {
        let up = Upstream::start();
        let ng = Nginx::builder()
            .upstream_of(&up)
            .file(
                "conf/htpasswd",
                "user47:{PLAIN}right\nuser48:{PLAIN}other\n",
            )
            .start(&proxy_conf(
                "rate_limit_window_zone $remote_user zone=per_user:1m window=1h;",
                "",
                "",
                &format!(
                    "auth_basic \"members\";
                     auth_basic_user_file htpasswd;
                     rate_limit_window_phase {phase};
                     rate_limit_window zone=per_user limit=3;"
                ),
            ));
        clear_of_boundary(HOUR_MS, 30_000);
        let basic = |cred: &str| {
            let v = format!("Basic {}", base64(cred.as_bytes()));
            request(ng.port, "GET", "/", &[("Authorization", v.as_bytes())]).status
        };
        let attack: Vec<u16> = (0..3).map(|_| basic("user47:guess")).collect();
        assert_eq!(attack, [401, 401, 401], "{phase}");
        let real: Vec<u16> = (0..4).map(|_| basic("user47:right")).collect();
        let admitted = real.iter().filter(|&&s| s == 200).count();
        assert_eq!(admitted, admitted_after_attack, "{phase}: {real:?}");
        assert!(
            real.iter().all(|&s| s == 200 || s == 429),
            "{phase}: {real:?}"
        );
        // Another user keeps a count of their own.
        assert_eq!(basic("user48:other"), 200, "{phase}");
    }
}

/// satisfy any with allow/deny: a request denied by every access check is
/// never counted; one admitted by the address check alone, or by the
/// password alone, is.
#[test]
fn postaccess_with_satisfy_any_and_allow_deny() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .upstream_of(&up)
        .file("conf/htpasswd", "user47:{PLAIN}right\n")
        .start(&http_conf(
            r#"rate_limit_window_zone $binary_remote_addr zone=per_ip:1m window=1h;
            rate_limit_window_zone $remote_user zone=per_user:1m window=1h;
            server {
                listen 127.0.0.1:{{PORT}};
                rate_limit_window_phase postaccess;
                rate_limit_window zone=per_ip limit=2;
                location /denied/ { deny all; proxy_pass http://{{UPSTREAM}}; }
                location /any/ {
                    satisfy any;
                    allow 127.0.0.1;
                    deny all;
                    auth_basic "members";
                    auth_basic_user_file htpasswd;
                    proxy_pass http://{{UPSTREAM}};
                }
                location /anyauth/ {
                    satisfy any;
                    allow 10.9.9.9;
                    deny all;
                    auth_basic "members";
                    auth_basic_user_file htpasswd;
                    rate_limit_window zone=per_user limit=2;
                    proxy_pass http://{{UPSTREAM}};
                }
            }
            server {
                listen 127.0.0.1:{{PORT2}};
                location = /metrics { rate_limit_window_metrics; }
            }"#,
        ));
    clear_of_boundary(HOUR_MS, 30_000);
    for _ in 0..5 {
        assert_eq!(get(ng.port, "/denied/x").status, 403);
    }
    // The same per-IP count: the five 403s took none of it.
    let st: Vec<u16> = (0..3).map(|_| get(ng.port, "/any/x").status).collect();
    assert_eq!(st, [200, 200, 429]);
    let basic = |cred: &str| {
        let v = format!("Basic {}", base64(cred.as_bytes()));
        request(
            ng.port,
            "GET",
            "/anyauth/x",
            &[("Authorization", v.as_bytes())],
        )
        .status
    };
    let st: Vec<u16> = (0..3).map(|_| basic("user47:wrong")).collect();
    assert_eq!(st, [401, 401, 401]);
    let st: Vec<u16> = (0..3).map(|_| basic("user47:right")).collect();
    assert_eq!(st, [200, 200, 429]);
    assert_eq!(up.received(), 4);
    assert_eq!(requests_total(ng.port2, "per_ip", "passed"), 2.0);
    assert_eq!(requests_total(ng.port2, "per_user", "passed"), 2.0);
    assert_eq!(requests_total(ng.port2, "per_user", "exempt"), 0.0);
}

/// In postaccess, a request is still counted once however nginx routes it:
/// try_files to a named location, try_files =404 (the handler runs before
/// try_files, so it is counted like a preaccess decision), error_page 404
/// and error_page 429, which keeps Retry-After.
#[test]
fn postaccess_try_files_and_error_page_count_once() {
    let up = Upstream::start();
    let auth = AuthServer::start(&accounts());
    let server_extra = r#"
        error_page 404 /notfound.html;
        location = /notfound.html { root html; }
        location = /too_many.html { root html; }
        location /tf/ {
            auth_request /_auth;
            auth_request_set $auth_user $upstream_http_x_user;
            root html;
            try_files $uri @app;
        }
        location /missing/ {
            auth_request /_auth;
            auth_request_set $auth_user $upstream_http_x_user;
            root html;
            try_files $uri =404;
        }
        location @app { proxy_pass http://{{UPSTREAM}}; }"#;
    let ng = Nginx::builder()
        .upstream_of(&up)
        .file("html/denied.html", "<h1>who are you</h1>\n")
        .file("html/notfound.html", "<h1>custom 404</h1>\n")
        .file("html/too_many.html", "<h1>slow down</h1>\n")
        .start(&auth_conf(
            &auth,
            "postaccess",
            "error_page 429 /too_many.html;",
            server_extra,
        ));
    clear_of_boundary(HOUR_MS, 30_000);
    // alice: try_files to a named location, twice.
    let rs: Vec<Response> = (0..2)
        .map(|_| as_token(ng.port, "/tf/none", "tok-alice"))
        .collect();
    assert_eq!(statuses(&rs), [200, 200]);
    assert_eq!(rs[0].header("X-Upstream"), Some("1"));
    assert_eq!(rs[1].header_num("RateLimit-Remaining"), 1);
    // try_files =404, then error_page 404: counted once.
    let r = as_token(ng.port, "/missing/x", "tok-alice");
    assert_eq!(r.status, 404, "{}", r.describe());
    assert!(r.text().contains("custom 404"), "{}", r.describe());
    assert_eq!(r.header_num("RateLimit-Remaining"), 0, "{}", r.describe());
    // The fourth: rejected, answered by error_page 429 with Retry-After.
    let r = as_token(ng.port, "/api/x", "tok-alice");
    assert_eq!(r.status, 429, "{}", r.describe());
    assert!(r.text().contains("slow down"), "{}", r.describe());
    assert!(r.header_num("Retry-After") >= 1, "{}", r.describe());
    assert_eq!(r.header_num("RateLimit-Remaining"), 0);
    assert_eq!(up.received(), 2);
    assert_eq!(requests_total(ng.port2, "per_user", "passed"), 3.0);
    assert_eq!(requests_total(ng.port2, "per_user", "rejected"), 1.0);
}

/// A rejection answered by a page that `return` sends, from a named
/// location or a URI, in either phase. After the redirect nothing runs the
/// phase handler again, so the first look for the decision comes from the
/// variables and the header filter: it must still find the decision
/// (Retry-After, the RateLimit headers, `$rate_limit_window_status`).
#[test]
fn error_pages_sent_by_return_keep_the_decision_in_both_phases() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $http_x_key zone=z:1m window=1h;
        server {
            listen 127.0.0.1:{{PORT}};
            rate_limit_window zone=z limit=1;
            location /pre/named/ { error_page 429 @limited; proxy_pass http://{{UPSTREAM}}; }
            location /pre/uri/ { error_page 429 /limited; proxy_pass http://{{UPSTREAM}}; }
            location /post/named/ {
                rate_limit_window_phase postaccess;
                error_page 429 @limited;
                proxy_pass http://{{UPSTREAM}};
            }
            location /post/uri/ {
                rate_limit_window_phase postaccess;
                error_page 429 /limited;
                proxy_pass http://{{UPSTREAM}};
            }
            location @limited { return 429 "named [$rate_limit_window_status]\n"; }
            location = /limited { return 429 "uri [$rate_limit_window_status]\n"; }
        }"#,
    ));
    clear_of_boundary(HOUR_MS, 20_000);
    for (path, page) in [
        ("/pre/named/x", "named"),
        ("/pre/uri/x", "uri"),
        ("/post/named/x", "named"),
        ("/post/uri/x", "uri"),
    ] {
        let first = get_key(ng.port, path, path);
        assert_eq!(first.status, 200, "{path}: {}", first.describe());
        let r = get_key(ng.port, path, path);
        assert_eq!(r.status, 429, "{path}: {}", r.describe());
        assert_eq!(r.text(), format!("{page} [REJECTED]\n"), "{path}");
        assert!(r.header_num("Retry-After") >= 1, "{path}: {}", r.describe());
        assert_eq!(r.header_num("RateLimit-Limit"), 1, "{path}");
        assert_eq!(r.header_num("RateLimit-Remaining"), 0, "{path}");
    }
    assert_eq!(up.received(), 4);
}

/// The handler runs before mirror in PRECONTENT: a rejected request is not
/// mirrored. Dry run in postaccess: marked, passed, not counted.
#[test]
fn postaccess_runs_before_mirror_and_dry_run_holds() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $http_x_key zone=z:1m window=1h;
        server {
            listen 127.0.0.1:{{PORT}};
            add_header X-RLW-Status $rate_limit_window_status always;
            rate_limit_window_phase postaccess;
            location /m/ {
                rate_limit_window zone=z limit=2;
                mirror /_mirror;
                proxy_pass http://{{UPSTREAM}};
            }
            location = /_mirror {
                internal;
                proxy_pass http://{{UPSTREAM}}/mirrored$request_uri;
            }
            location /dry/ {
                rate_limit_window zone=z limit=2;
                rate_limit_window_dry_run on;
                proxy_pass http://{{UPSTREAM}};
            }
        }"#,
    ));
    clear_of_boundary(HOUR_MS, 30_000);
    let st: Vec<u16> = (0..4)
        .map(|_| get_key(ng.port, "/m/x", "m").status)
        .collect();
    assert_eq!(st, [200, 200, 429, 429]);
    let mirrored = || {
        up.paths()
            .iter()
            .filter(|p| p.starts_with("/mirrored"))
            .count()
    };
    assert!(
        wait_for(Duration::from_secs(3), || mirrored() >= 2),
        "{:?}",
        up.paths()
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        mirrored(),
        2,
        "a rejected request was mirrored: {:?}",
        up.paths()
    );

    let rs: Vec<Response> = (0..4).map(|_| get_key(ng.port, "/dry/x", "d")).collect();
    assert_eq!(statuses(&rs), [200, 200, 200, 200]);
    let marks: Vec<&str> = rs.iter().filter_map(|r| r.header("X-RLW-Status")).collect();
    assert_eq!(
        marks,
        ["PASSED", "PASSED", "REJECTED_DRY_RUN", "REJECTED_DRY_RUN"]
    );
}

/// HTTP/2: each stream is a request of its own, counted once, in
/// postaccess behind auth_request (curl over TLS with ALPN h2, the streams
/// multiplexed on one connection; curl 7.88's h2c prior knowledge cannot
/// reuse a connection).
#[test]
fn postaccess_counts_each_http2_stream() {
    let up = Upstream::start();
    let auth = AuthServer::start(&accounts());
    let certs = tempfile::tempdir().unwrap();
    let tls = tls_h2_listen(certs.path());
    let conf =
        auth_conf(&auth, "postaccess", "", "").replacen("listen 127.0.0.1:{{PORT}};", &tls, 1);
    // The master reads the certificate, as root, at start.
    let ng = start_auth(&up, &conf);
    clear_of_boundary(HOUR_MS, 30_000);
    let url = format!("https://127.0.0.1:{}/api/h2", ng.port);
    let bad = curl_h2(&url, "stolen", 3);
    assert!(
        bad.iter().all(|t| t.version == "2" && t.status == 401),
        "{bad:?}"
    );
    let good = curl_h2(&url, "tok-alice", 5);
    assert!(
        good.iter().all(|t| t.version == "2"),
        "not HTTP/2: {good:?}"
    );
    let connects: u32 = good.iter().map(|t| t.connects).sum();
    assert!(connects < 5, "no two streams shared a connection: {good:?}");
    let mut st: Vec<u16> = good.iter().map(|t| t.status).collect();
    st.sort();
    assert_eq!(st, [200, 200, 200, 429, 429], "{good:?}");
    assert_eq!(up.received(), 3);
    assert_eq!(requests_total(ng.port2, "per_user", "passed"), 3.0);
    assert_eq!(requests_total(ng.port2, "per_user", "rejected"), 2.0);
}

/// One transfer of `curl_h2`.
#[derive(Debug)]
struct Transfer {
    /// `2` for HTTP/2.
    version: String,
    status: u16,
    /// New connections this transfer opened (0: it reused one).
    connects: u32,
}

/// `n` parallel GETs of `url` with a bearer token, over HTTP/2.
fn curl_h2(url: &str, token: &str, n: usize) -> Vec<Transfer> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sSk", "--http2", "--parallel", "--parallel-max", "8", "-H"])
        .arg(format!("Authorization: Bearer {token}"))
        .args(["-w", "%{http_version} %{http_code} %{num_connects}\\n"]);
    for _ in 0..n {
        cmd.args(["-o", "/dev/null", url]);
    }
    let out = cmd.output().expect("run curl (make test installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let got: Vec<Transfer> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "{text}");
            Transfer {
                version: f[0].to_string(),
                status: f[1].parse().unwrap_or(0),
                connects: f[2].parse().unwrap_or(99),
            }
        })
        .collect();
    assert_eq!(got.len(), n, "{text}");
    got
}

/// Standard base64 with padding (for Basic credentials).
fn base64(input: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in input.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Several limits in postaccess: all must pass, and a request rejected by
/// one is counted by none (a per-user limit and a shared one).
#[test]
fn postaccess_several_limits_all_apply() {
    let up = Upstream::start();
    let auth = AuthServer::start(&accounts());
    let conf = auth_conf(&auth, "postaccess", "", "").replace(
        "rate_limit_window zone=per_user limit=$plan_limit;",
        "rate_limit_window zone=per_user limit=$plan_limit;
         rate_limit_window zone=all limit=4;",
    );
    let conf = conf.replace(
        "rate_limit_window_zone $auth_user",
        "rate_limit_window_zone $server_port zone=all:1m window=1h;
         rate_limit_window_zone $auth_user",
    );
    let ng = start_auth(&up, &conf);
    clear_of_boundary(HOUR_MS, 30_000);
    let st: Vec<u16> = (0..4)
        .map(|_| as_token(ng.port, "/api/a", "tok-alice").status)
        .collect();
    assert_eq!(st, [200, 200, 200, 429], "alice is held to her own 3");
    let rs: Vec<Response> = (0..2)
        .map(|_| as_token(ng.port, "/api/b", "tok-bob"))
        .collect();
    assert_eq!(statuses(&rs), [200, 429], "the shared 4 is spent");
    assert_eq!(rs[0].header_num("RateLimit-Remaining"), 0);
    // bob's rejection by the shared limit did not spend his own quota.
    assert_eq!(requests_total(ng.port2, "per_user", "passed"), 4.0);
    assert_eq!(requests_total(ng.port2, "all", "passed"), 4.0);
}

#[test]
fn phase_directive_values_are_checked() {
    let conf = |v: &str| {
        http_conf(&format!(
            "rate_limit_window_phase {v};
             server {{ listen 127.0.0.1:{{{{PORT}}}}; rate_limit_window_phase preaccess;
                       location / {{ rate_limit_window_phase postaccess; }} }}"
        ))
    };
    let (ok, out) = test_config(&conf("postaccess"));
    assert!(ok, "{out}");
    let (ok, out) = test_config(&conf("access"));
    assert!(!ok, "{out}");
    assert!(
        out.contains("[emerg] invalid value \"access\" in "),
        "{out}"
    );
}

/// The nginx `make build` produces has the module these tests use.
#[test]
fn built_nginx_has_auth_request() {
    let out = Command::new(nginx_bin()).arg("-V").output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("--with-http_auth_request_module"), "{text}");
    assert!(text.contains("--with-http_v2_module"), "{text}");
}
