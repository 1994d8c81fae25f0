//! rate_limit_window with other nginx directives, against a real nginx with
//! two workers and a real upstream: error_page, try_files and rewrite (one
//! count per main request), inheritance between http, server and location
//! levels, and reload (counts kept, changed key or window refused).
use crate::common;

use common::limits::{conf, key, start, HOUR_MS};
use common::*;

// ---------------------------------------------------------------------------
// Counting once per main request
// ---------------------------------------------------------------------------

#[test]
fn error_page_keeps_retry_after_and_counts_once() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .upstream_of(&up)
        .file("html/too_many.html", "<h1>slow down</h1>\n")
        .file("html/notfound.html", "<h1>custom 404</h1>\n")
        .start(&http_conf(
            r#"rate_limit_window_zone $http_x_key zone=z:1m window=1h;
            server {
                listen 127.0.0.1:{{PORT}};
                rate_limit_window zone=z limit=4;
                error_page 429 /too_many.html;
                error_page 404 /notfound.html;
                location / { proxy_pass http://{{UPSTREAM}}; }
                location /files/ { root html; }
                location = /too_many.html { root html; }
                location = /notfound.html { root html; }
                location /named/ { error_page 429 @limited; proxy_pass http://{{UPSTREAM}}; }
                location @limited { return 429 "named page\n"; }
            }"#,
        ));
    clear_of_boundary(HOUR_MS, 20_000);
    // Two admitted requests end in 404 -> error_page: each counts once.
    for rem in [3, 2] {
        let r = get_key(ng.port, "/files/nope", "e");
        assert_eq!(r.status, 404);
        assert!(r.text().contains("custom 404"), "{}", r.describe());
        assert_eq!(r.header_num("RateLimit-Remaining"), rem, "{}", r.describe());
    }
    assert_eq!(get_key(ng.port, "/", "e").status, 200);
    assert_eq!(get_key(ng.port, "/", "e").status, 200);
    let r = get_key(ng.port, "/", "e");
    assert_eq!(r.status, 429, "{}", r.describe());
    assert!(
        r.text().contains("slow down"),
        "custom error page: {}",
        r.describe()
    );
    assert!(
        r.header_num("Retry-After") >= 1,
        "Retry-After on custom error page"
    );
    assert_eq!(r.header_num("RateLimit-Remaining"), 0);
    // error_page to a named location.
    let r = get_key(ng.port, "/named/x", "e");
    assert_eq!(r.status, 429, "{}", r.describe());
    assert_eq!(r.text(), "named page\n");
    assert!(
        r.header_num("Retry-After") >= 1,
        "Retry-After after named error_page: {}",
        r.describe()
    );
    assert_eq!(up.received(), 2);
}

/// The module keeps per-request state in hidden variables (the record's
/// address, the access mark): no directive can set one (`set`, `map`
/// refuse a variable that is not changeable), and one read by name is
/// empty and leaves the decision as it was, through an error_page redirect.
#[test]
fn hidden_variables_cannot_be_set_and_read_empty() {
    for name in [
        "rate_limit_window_internal_record",
        "rate_limit_window_internal_access",
    ] {
        let server = "server { listen 127.0.0.1:{{PORT}}; location / { empty_gif; } }";
        for directive in [
            format!("server {{ listen 127.0.0.1:{{{{PORT}}}}; location / {{ set ${name} 1; }} }}"),
            format!("map $uri ${name} {{ default 1; }} {server}"),
        ] {
            let (ok, out) = test_config(&http_conf(&directive));
            assert!(!ok, "{directive}: {out}");
            assert!(
                out.contains(&format!("the duplicate \"{name}\" variable")),
                "{out}"
            );
        }
    }
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $http_x_key zone=z:1m window=1h;
        server {
            listen 127.0.0.1:{{PORT}};
            add_header X-Record "[$rate_limit_window_internal_record]" always;
            add_header X-Status $rate_limit_window_status always;
            location / {
                rate_limit_window zone=z limit=1;
                error_page 429 = @limited;
                proxy_pass http://{{UPSTREAM}};
            }
            location @limited {
                add_header X-Record "[$rate_limit_window_internal_record]" always;
                add_header X-Status $rate_limit_window_status always;
                return 429 "limited\n";
            }
        }"#,
    ));
    clear_of_boundary(HOUR_MS, 20_000);
    let r = get_key(ng.port, "/a", "h");
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(r.header("X-Record"), Some("[]"), "{}", r.describe());
    assert_eq!(r.header("X-Status"), Some("PASSED"), "{}", r.describe());
    let r = get_key(ng.port, "/a", "h");
    assert_eq!(r.status, 429, "{}", r.describe());
    assert_eq!(r.text(), "limited\n");
    assert_eq!(r.header("X-Record"), Some("[]"), "{}", r.describe());
    assert_eq!(r.header("X-Status"), Some("REJECTED"), "{}", r.describe());
    assert!(r.header_num("Retry-After") >= 1, "{}", r.describe());
    assert_eq!(up.received(), 1);
}

#[test]
fn try_files_and_rewrite_count_once() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $http_x_key zone=z:1m window=1h;
        server {
            listen 127.0.0.1:{{PORT}};
            rate_limit_window zone=z limit=3;
            location /tf/ { root html; try_files $uri @app; }
            location @app { proxy_pass http://{{UPSTREAM}}; }
            location /old/ { rewrite ^/old/(.*)$ /new/$1 last; }
            location /new/ { proxy_pass http://{{UPSTREAM}}; }
        }"#,
    ));
    clear_of_boundary(HOUR_MS, 20_000);
    for (path, k) in [("/tf/nothing", "t"), ("/old/thing", "r")] {
        let rs: Vec<Response> = (0..5).map(|_| get_key(ng.port, path, k)).collect();
        let st: Vec<u16> = rs.iter().map(|r| r.status).collect();
        assert_eq!(st, [200, 200, 200, 429, 429], "{path}");
        let rem: Vec<i64> = rs[..3]
            .iter()
            .map(|r| r.header_num("RateLimit-Remaining"))
            .collect();
        assert_eq!(rem, [2, 1, 0], "{path}");
        assert_eq!(rs[0].header("X-Upstream"), Some("1"));
    }
    assert_eq!(up.received(), 6);
    assert!(up.paths().iter().any(|p| p == "/new/thing"));
}

// ---------------------------------------------------------------------------
// Inheritance
// ---------------------------------------------------------------------------

/// Like limit_req: a level with no rate_limit_window inherits all from
/// above; a level with any replaces the inherited list.
#[test]
fn limits_inherit_like_limit_req() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $http_x_key zone=a:1m window=1h;
        rate_limit_window_zone $http_x_key zone=b:1m window=1h;
        rate_limit_window zone=a limit=1;
        server {
            listen 127.0.0.1:{{PORT}};
            location /inherit/ { proxy_pass http://{{UPSTREAM}}; }
            location /own/ { rate_limit_window zone=b limit=3; proxy_pass http://{{UPSTREAM}}; }
        }
        server {
            listen 127.0.0.1:{{PORT2}};
            rate_limit_window zone=b limit=2;
            location / { proxy_pass http://{{UPSTREAM}}; }
            location /none/ { rate_limit_window zone=a limit=0; proxy_pass http://{{UPSTREAM}}; }
        }"#,
    ));
    clear_of_boundary(HOUR_MS, 20_000);
    let st = |port, path: &str, k: &str| -> Vec<u16> {
        (0..4).map(|_| get_key(port, path, k).status).collect()
    };
    assert_eq!(st(ng.port, "/inherit/", "i"), [200, 429, 429, 429]);
    assert_eq!(st(ng.port, "/own/", "o"), [200, 200, 200, 429]);
    assert_eq!(st(ng.port2, "/", "s"), [200, 200, 429, 429]);
    assert_eq!(st(ng.port2, "/none/", "n"), [429, 429, 429, 429]);
}

// ---------------------------------------------------------------------------
// Reload
// ---------------------------------------------------------------------------

fn reload_conf(key: &str, window: &str, limit: u32, gen: u32) -> String {
    conf(
        &format!("rate_limit_window_zone {key} zone=z:1m window={window};"),
        &format!("rate_limit_window zone=z limit={limit}; add_header X-Gen {gen} always;"),
    )
}

#[test]
fn reload_keeps_counts_and_new_limit_applies() {
    let up = Upstream::start();
    let mut ng = start(&up, &reload_conf("$http_x_key", "1h", 5, 1));
    clear_of_boundary(HOUR_MS, 30_000);
    for _ in 0..3 {
        assert_eq!(key(&ng, "r").status, 200);
    }
    // Same zone, limit 4: one more passes.
    ng.reload_with(&reload_conf("$http_x_key", "1h", 4, 2));
    let r = key(&ng, "r");
    assert_eq!(r.header("X-Gen"), Some("2"), "{}", r.describe());
    assert_eq!(r.status, 200);
    assert_eq!(r.header_num("RateLimit-Remaining"), 0);
    assert_eq!(key(&ng, "r").status, 429);
    // Plain reload: counts kept.
    ng.reload();
    assert_eq!(key(&ng, "r").status, 429);
    // Raise the limit: the kept count (4) leaves 6 of 10.
    ng.reload_with(&reload_conf("$http_x_key", "1h", 10, 3));
    let r = key(&ng, "r");
    assert_eq!((r.status, r.header("X-Gen")), (200, Some("3")));
    assert_eq!(r.header_num("RateLimit-Remaining"), 5);
    // Lower it below the count: rejected at once.
    ng.reload_with(&reload_conf("$http_x_key", "1h", 2, 4));
    let r = key(&ng, "r");
    assert_eq!((r.status, r.header("X-Gen")), (429, Some("4")));
    assert_eq!(up.received(), 5);
}

#[test]
fn reload_with_changed_key_or_window_fails_and_old_config_serves() {
    let up = Upstream::start();
    let mut ng = start(&up, &reload_conf("$http_x_key", "1h", 2, 1));
    clear_of_boundary(HOUR_MS, 30_000);
    assert_eq!(key(&ng, "k").status, 200);
    assert_eq!(key(&ng, "k").status, 200);
    // The [emerg] names what changed, as written, and only that.
    for (what, bad, says, not) in [
        (
            "key",
            reload_conf("$http_x_other", "1h", 2, 2),
            "key \"$http_x_other\" cannot replace the running key \"$http_x_key\" on reload",
            "window=",
        ),
        (
            "window",
            reload_conf("$http_x_key", "30m", 2, 2),
            "window=30m cannot replace the running window=1h on reload",
            "key",
        ),
    ] {
        let err = ng
            .try_reload_with(&bad)
            .expect_err(&format!("reload with changed {what} must fail"));
        let emerg = err.lines().find(|l| l.contains("[emerg]")).unwrap_or("");
        assert!(
            emerg.contains(says) && emerg.contains("give the new one a new zone name"),
            "changed {what}: {err}"
        );
        assert!(!emerg.contains(not), "changed {what}, names {not}: {emerg}");
        let r = key(&ng, "k");
        assert_eq!(
            (r.status, r.header("X-Gen")),
            (429, Some("1")),
            "old config must keep limiting"
        );
        let other = format!("other-{what}");
        let st: Vec<u16> = (0..3).map(|_| key(&ng, &other).status).collect();
        assert_eq!(st, [200, 200, 429], "old config, fresh key");
        // The unchanged config still reloads fine and keeps the counts.
        ng.reload_with(&reload_conf("$http_x_key", "1h", 2, 1));
        assert_eq!(key(&ng, "k").status, 429);
        assert_eq!(key(&ng, &other).status, 429);
    }
}

// ---------------------------------------------------------------------------
// A limit that cannot run says so (issue 37)
// ---------------------------------------------------------------------------

/// `return` answers in the rewrite phase, before the limits: `nginx -t`
/// warns (and still passes) for a limited location whose first rewrite
/// instruction is `return`, naming the location and the limit's line; a
/// proxied location and a conditional `return` get no warning.
#[test]
fn return_before_the_limit_warns_at_nginx_t() {
    let conf = http_conf(
        r#"rate_limit_window_zone $http_x_key zone=z:1m window=1h;
        server {
            listen 127.0.0.1:{{PORT}};
            location /r {
                rate_limit_window zone=z limit=3;
                return 200 "ok\n";
            }
            location /proxied { rate_limit_window zone=z limit=3; proxy_pass http://{{UPSTREAM}}; }
            location /cond {
                rate_limit_window zone=z limit=3;
                if ($http_x_block) { return 403; }
                proxy_pass http://{{UPSTREAM}};
            }
        }"#,
    );
    let line = 1 + conf
        .lines()
        .position(|l| l.contains("limit=3;") && !l.contains("location"))
        .unwrap();
    let (ok, out) = test_config(&conf);
    assert!(ok, "a warning, not an error: {out}");
    let warns: Vec<&str> = out.lines().filter(|l| l.contains("[warn]")).collect();
    assert_eq!(warns.len(), 1, "{out}");
    assert!(
        warns[0].contains("\"rate_limit_window\" never runs in location \"/r\": its \"return\" answers in the rewrite phase")
            && warns[0].ends_with(&format!("nginx.conf:{line}")),
        "line {line}: {out}"
    );
}

/// What `nginx -t` cannot see (a `rewrite ... break` that does not match,
/// then `return`; `set` then `return`) is told at the first such request:
/// one warning per location and worker, none for a limited proxied location.
#[test]
fn return_before_the_limit_warns_at_the_first_request() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $http_x_key zone=z:1m window=1h;
        server {
            listen 127.0.0.1:{{PORT}};
            location /rw {
                rate_limit_window zone=z limit=3;
                rewrite ^/rw/old$ /rw/new break;
                return 200 "ok\n";
            }
            location /set { rate_limit_window zone=z limit=3; set $x 1; return 200 "ok\n"; }
            location /proxied { rate_limit_window zone=z limit=3; proxy_pass http://{{UPSTREAM}}; }
        }"#,
    ));
    assert!(!ng.error_log().contains("never runs"), "{}", ng.error_log());
    for path in ["/rw/x", "/set"] {
        let st: Vec<u16> = (0..6).map(|_| get_key(ng.port, path, "k").status).collect();
        assert_eq!(st, [200; 6], "{path}: not limited, as the warning says");
    }
    let st: Vec<u16> = (0..4)
        .map(|_| get_key(ng.port, "/proxied", "p").status)
        .collect();
    assert_eq!(st, [200, 200, 200, 429]);
    let log = ng.error_log();
    for name in ["/rw", "/set"] {
        let needle = format!("the limits of location \"{name}\" did not run");
        let n = count_lines(&log, &needle);
        assert!(
            (1..=2).contains(&n),
            "{name}: {n} warnings (2 workers):\n{log}"
        );
    }
    assert_eq!(count_lines(&log, "\"/proxied\" did not run"), 0, "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("[warn]") && l.contains("did not run")),
        "{log}"
    );
}
