//! Loading the one `.so` where nginx's stream module is missing or comes
//! later: its stream half refers to nginx's stream symbols weakly
//! (src/ffi/stream_weak.c), so that its http half still works.

use std::path::PathBuf;
use std::process::Command;

use crate::common;
use common::limits::HOUR_MS;
use common::*;

/// The `.so` refers to nginx's stream symbols weakly only, so that an
/// nginx without stream (or with Debian's stream module loaded after it)
/// still loads it for http (src/ffi/stream_weak.c): `nm -D` lists every
/// undefined `ngx_stream_*` symbol as `w`, none as `U`.
#[test]
fn every_stream_symbol_of_the_module_is_weak() {
    let out = Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(module_so())
        .output()
        .expect("nm (binutils) runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let stream: Vec<&str> = text.lines().filter(|l| l.contains("ngx_stream_")).collect();
    assert!(stream.len() >= 5, "{text}");
    let strong: Vec<&&str> = stream
        .iter()
        .filter(|l| !l.trim_start().starts_with("w "))
        .collect();
    assert!(strong.is_empty(), "strong stream references: {strong:?}");
}

/// The vendored nginx built without stream (scripts/nginx-nostream.sh,
/// which `make test` runs): `RLW_NGINX_NOSTREAM`, else
/// target/nginx-nostream/nginx. None where the tests run another nginx
/// (`RLW_NGINX`, `make test NGINX=1.30`) and no such binary was given: the
/// module is then built against that nginx's version, not the vendored one.
fn nginx_without_stream() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("RLW_NGINX_NOSTREAM") {
        return Some(PathBuf::from(p));
    }
    if std::env::var_os("RLW_NGINX").is_some() {
        eprintln!(
            "nginx without stream: not built for RLW_NGINX's version; set RLW_NGINX_NOSTREAM"
        );
        return None;
    }
    let p = manifest_dir().join("target/nginx-nostream/nginx");
    assert!(
        p.exists(),
        "{} not found: run scripts/nginx-nostream.sh (make test does)",
        p.display()
    );
    Some(p)
}

/// An nginx built without stream loads the module and limits an http
/// location (429 with Retry-After after the limit); `nginx -t` passes; a
/// `stream {}` block there is refused by nginx itself, by name.
#[test]
fn an_nginx_without_stream_loads_the_module_for_http() {
    let Some(bin) = nginx_without_stream() else {
        return;
    };
    let v = Command::new(&bin).arg("-V").output().expect("nginx -V");
    let v = String::from_utf8_lossy(&v.stderr).into_owned();
    assert!(!v.contains("--with-stream"), "built with stream: {v}");
    let up = Upstream::start();
    let conf = proxy_conf(
        "rate_limit_window_zone $http_x_key zone=z:1m window=1h;",
        "",
        "",
        "rate_limit_window zone=z limit=3;",
    );
    let (ok, out) = test_config_with(&bin, &conf);
    assert!(ok, "nginx -t: {out}");
    clear_of_boundary(HOUR_MS, 20_000);
    let ng = Nginx::builder().binary(&bin).upstream_of(&up).start(&conf);
    for i in 0..3 {
        let r = get_key(ng.port, "/", "alice");
        assert_eq!(r.status, 200, "request {i}: {}", r.describe());
    }
    let r = get_key(ng.port, "/", "alice");
    assert_eq!(r.status, 429, "{}", r.describe());
    let ra = r.header_num("Retry-After");
    assert!((1..=3600).contains(&ra), "Retry-After {ra}");
    assert_eq!(up.received(), 3, "a refused request reached the upstream");
    assert_eq!(get_key(ng.port, "/", "bob").status, 200);
    drop(ng);
    let stream = format!(
        "{conf}stream {{\n rate_limit_window_zone $binary_remote_addr zone=s:1m;\n \
         server {{ listen 127.0.0.1:{{{{PORT2}}}}; rate_limit_window zone=s limit=5; \
         proxy_pass 127.0.0.1:9; }}\n}}\n"
    );
    let (ok, out) = test_config_with(&bin, &stream);
    assert!(!ok, "{out}");
    assert!(
        out.contains("[emerg] unknown directive \"stream\""),
        "{out}"
    );
}

/// Debian's nginx, whose stream is a module of its own (`make test
/// NGINX=1.30` from sid's binary: `ngx_stream_module.so` beside the
/// module; `make test-deb` checks the same with the installed
/// libnginx-mod-stream): this module loaded **before** it still works for
/// http, and a `stream {}` block with its directives fails `nginx -t` with
/// the `[emerg]` that says to load the stream module first; loaded after
/// it, the same configuration passes. Runs only where that `.so` exists.
#[test]
fn loaded_before_debians_stream_module_stream_fails_with_the_order_to_fix() {
    let Some(stream_so) = stream_module_so() else {
        eprintln!("no ngx_stream_module.so beside the module: nginx has stream built in");
        return;
    };
    let http = "rate_limit_window_zone $binary_remote_addr zone=z:1m;\n\
         server { listen 127.0.0.1:{{PORT}}; location / { rate_limit_window zone=z limit=5; \
         proxy_pass http://127.0.0.1:9; } }";
    let stream = "stream {\n rate_limit_window_zone $binary_remote_addr zone=s:1m;\n \
         server { listen 127.0.0.1:{{PORT2}}; rate_limit_window zone=s limit=5; \
         proxy_pass 127.0.0.1:9; }\n}\n";
    let load = format!("load_module {};\n", stream_so.display());
    // http_conf's first line loads this module; the stream module after it.
    let after = |conf: String| {
        let (first, rest) = conf.split_once('\n').unwrap();
        format!("{first}\n{load}{rest}")
    };
    let (ok, out) = test_config(&after(http_conf(http)));
    assert!(ok, "http alone, this module first: {out}");
    let (ok, out) = test_config(&after(format!("{}{stream}", http_conf(http))));
    assert!(!ok, "{out}");
    assert!(
        out.contains(
            "[emerg] ngx_stream_rate_limit_window_module needs nginx's stream module loaded \
             before it"
        ),
        "{out}"
    );
    let (ok, out) = test_config(&format!("{load}{}{stream}", http_conf(http)));
    assert!(ok, "the stream module first: {out}");
}
