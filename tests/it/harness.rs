//! Self-tests of the harness (tests/common) against plain nginx features, so
//! that a failure elsewhere is known to be the module's, not the harness's.
use crate::common;

use common::*;
use std::time::Duration;

#[test]
fn reload_replaces_workers_and_applies_new_config() {
    let up = Upstream::start();
    let conf = |gen: u32| {
        http_conf(&format!(
            "server {{ listen 127.0.0.1:{{{{PORT}}}}; add_header X-Gen {gen} always;
               location / {{ proxy_pass http://{{{{UPSTREAM}}}}; }} }}"
        ))
    };
    let mut ng = Nginx::builder().upstream_of(&up).start(&conf(1));
    let before = ng.worker_pids();
    assert_eq!(before.len(), 2, "{before:?}");
    assert_eq!(get(ng.port, "/").header("X-Gen"), Some("1"));
    ng.reload_with(&conf(2));
    let after = ng.worker_pids();
    assert!(
        after.iter().all(|p| !before.contains(p)),
        "{before:?} -> {after:?}"
    );
    assert_eq!(get(ng.port, "/").header("X-Gen"), Some("2"));
    ng.reload();
    assert_eq!(get(ng.port, "/").header("X-Gen"), Some("2"));
}

#[test]
fn failed_reload_is_reported_and_old_config_serves() {
    let up = Upstream::start();
    let good = http_conf(
        "server { listen 127.0.0.1:{{PORT}}; add_header X-Gen 1 always;
           location / { proxy_pass http://{{UPSTREAM}}; } }",
    );
    let mut ng = Nginx::builder().upstream_of(&up).start(&good);
    let err = ng
        .try_reload_with(&http_conf(
            "server { listen 127.0.0.1:{{PORT}}; no_such_directive; }",
        ))
        .expect_err("reload of a broken config must fail");
    assert!(err.contains("unknown directive"), "{err}");
    assert_eq!(get(ng.port, "/").header("X-Gen"), Some("1"));
}

#[test]
fn nginx_t_reports_success_and_errors() {
    let (ok, out) = test_config(&http_conf("server { listen 127.0.0.1:{{PORT}}; }"));
    assert!(ok, "{out}");
    assert!(out.contains("test is successful"), "{out}");
    let (ok, out) = test_config(&http_conf("server { listen 127.0.0.1:{{PORT}}; bogus; }"));
    assert!(!ok);
    assert!(
        out.contains("[emerg]") && out.contains("unknown directive"),
        "{out}"
    );
}

#[test]
fn client_handles_keepalive_chunked_static_and_big_headers() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .upstream_of(&up)
        .file("html/big.txt", vec![b'x'; 100_000])
        .start(&http_conf(
            "large_client_header_buffers 4 128k;
             server { listen 127.0.0.1:{{PORT}};
               location /p/ { proxy_pass http://{{UPSTREAM}}; add_header X-H $http_x_big always; }
               location /chunk { chunked_transfer_encoding on; gzip on; gzip_min_length 1;
                                 gzip_types text/plain; default_type text/plain; root html; }
               location / { root html; } }",
        ));
    let mut c = Conn::connect(ng.port).unwrap();
    for i in 0..5 {
        let r = c.get(&format!("/p/{i}")).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("X-Path"), Some(format!("/p/{i}").as_str()));
    }
    assert_eq!(up.received(), 5);
    let r = get(ng.port, "/big.txt");
    assert_eq!(r.body.len(), 100_000);
    let big = vec![b'k'; 70 * 1024];
    let r = request(ng.port, "GET", "/p/big", &[("X-Big", &big)]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("X-H").map(|s| s.len()), Some(70 * 1024));
    let st = hammer(ng.port, "/p/h", &[], 200, 4);
    assert_eq!(tally(&st).get(&200), Some(&200));
}

/// libfaketime with a timestamp file controls the clock nginx workers see.
#[test]
fn faketime_file_controls_worker_clock() {
    let Some(lib) = libfaketime() else {
        eprintln!("libfaketime not installed (make test installs it): skipped");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ts = dir.path().join("faketime.rc");
    std::fs::write(&ts, "2024-01-01 00:00:05\n").unwrap();
    let ng = Nginx::builder()
        .env("LD_PRELOAD", lib.to_str().unwrap())
        .env("FAKETIME_TIMESTAMP_FILE", ts.to_str().unwrap())
        .env("FAKETIME_NO_CACHE", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("TZ", "UTC")
        .start(&http_conf(
            "server { listen 127.0.0.1:{{PORT}}; location / { root html; add_header X-T $time_iso8601 always; } }",
        ));
    let r = get(ng.port, "/");
    assert_eq!(
        r.header("X-T"),
        Some("2024-01-01T00:00:05+00:00"),
        "{}",
        r.describe()
    );
    std::fs::write(&ts, "2024-01-01 00:00:09\n").unwrap();
    assert!(wait_for(Duration::from_secs(3), || get(ng.port, "/")
        .header("X-T")
        == Some("2024-01-01T00:00:09+00:00")));
}

/// A wrapper command (here `faketime`, which forks) still gives a usable
/// master pid, and the instance stops cleanly.
#[test]
fn wrapper_command_is_supported() {
    if std::process::Command::new("faketime")
        .arg("--help")
        .output()
        .is_err()
    {
        eprintln!("faketime not installed (make test installs it): skipped");
        return;
    }
    let ng = Nginx::builder().wrapper(&["faketime", "-f", "@2024-01-01 00:00:05"]).env("TZ", "UTC").start(&http_conf(
        "server { listen 127.0.0.1:{{PORT}}; location / { root html; add_header X-T $time_iso8601 always; } }",
    ));
    let r = get(ng.port, "/");
    assert!(
        r.header("X-T")
            .unwrap_or("")
            .starts_with("2024-01-01T00:00:"),
        "{}",
        r.describe()
    );
    let master = ng.master_pid();
    let workers = ng.worker_pids();
    assert_eq!(workers.len(), 2);
    drop(ng);
    for p in std::iter::once(master).chain(workers) {
        assert!(
            !std::path::Path::new(&format!("/proc/{p}")).exists()
                || std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .map_or(true, |s| s.contains(") Z")),
            "process {p} left running"
        );
    }
}
