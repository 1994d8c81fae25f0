//! `nginx -t` on the Redis connection parameters of
//! `rate_limit_window_zone`: URL forms, modes, TLS files and password
//! files; no message ever repeats a password.
use crate::common;

use common::redis_servers::Pki;
use common::*;
use std::fs;

/// A config with one zone whose Redis parameters are `redis`.
fn conf(redis: &str) -> String {
    http_conf(&format!(
        r#"
        rate_limit_window_zone $remote_addr zone=c:1m secret=0123456789abcdef {redis};
        server {{
            listen 127.0.0.1:{{{{PORT}}}};
            location / {{ rate_limit_window zone=c limit=10; empty_gif; }}
        }}"#
    ))
}

fn ok(redis: &str) {
    let (pass, out) = test_config(&conf(redis));
    assert!(pass, "{redis}: {out}");
}

fn refused(redis: &str, expect: &str) -> String {
    let (pass, out) = test_config(&conf(redis));
    assert!(!pass, "{redis} accepted: {out}");
    assert!(out.contains("[emerg]"), "{out}");
    assert!(out.contains(expect), "{redis}: want {expect:?} in {out}");
    out
}

#[test]
fn url_forms_and_modes_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    fs::write(&pw, "s3cret\n").unwrap();
    let pw = pw.display();
    ok("redis=127.0.0.1:6379");
    ok("redis=unix:/run/redis.sock");
    ok("redis=redis://gw:pa%40ss@127.0.0.1:6379/2");
    ok("redis=rediss://:pw@cache.example");
    ok(&format!("redis=redis://127.0.0.1 redis_password_file={pw}"));
    ok("redis=redis://:sp@127.0.0.1:26379,127.0.0.1:26380 redis_mode=sentinel redis_master=m");
    ok(&format!(
        "redis=redis://127.0.0.1:26379 redis_mode=sentinel redis_master=m redis_password_file={pw}"
    ));
    ok("redis=redis://127.0.0.1:7000,127.0.0.1:7001 redis_mode=cluster sync=50ms");
}

#[test]
fn tls_files_are_read_and_checked_at_load() {
    let pki = Pki::new("conf test CA");
    ok(&format!(
        "redis=rediss://127.0.0.1:6380 redis_ca={} redis_cert={} redis_key={}",
        pki.file("ca.crt"),
        pki.file("client.crt"),
        pki.file("client.key")
    ));
    refused(
        "redis=rediss://127.0.0.1:6380 redis_ca=/nonexistent/ca.pem",
        "cannot read \"redis_ca\" file \"/nonexistent/ca.pem\": No such file or directory",
    );
    refused(
        &format!("redis=rediss://h:1 redis_ca={}", pki.file("client.key")),
        "holds no valid PEM certificate",
    );
    refused(
        &format!(
            "redis=rediss://h:1 redis_cert={} redis_key={}",
            pki.file("client.crt"),
            pki.file("client.crt")
        ),
        "\"redis_key\" file",
    );
    refused(
        &format!("redis=redis://h:1 redis_ca={}", pki.file("ca.crt")),
        "need a \"rediss://\" address",
    );
    refused(
        &format!("redis=rediss://h:1 redis_cert={}", pki.file("client.crt")),
        "\"redis_cert=\" and \"redis_key=\" go together",
    );
}

#[test]
fn messages_never_repeat_a_password() {
    let out = refused(
        "redis=rediss://:hunter2@host:bad",
        "invalid redis address \"rediss://***@host:bad\"",
    );
    assert!(!out.contains("hunter2"), "{out}");
    let out = refused(
        "redis=redis://gw:hunter2@a:1,b:2",
        "several hosts in \"redis=\" need",
    );
    assert!(!out.contains("hunter2"), "{out}");
    // The password file's contents are never quoted either.
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    fs::write(&pw, "\nhunter2\n").unwrap();
    let out = refused(
        &format!("redis=redis://h:1 redis_password_file={}", pw.display()),
        "must hold the password as text on its first line",
    );
    assert!(!out.contains("hunter2"), "{out}");
    let out = refused(
        &format!(
            "redis=redis://:hunter2@h:1 redis_password_file={}",
            pw.display()
        ),
        "the password is given both in \"redis=\" and by \"redis_password_file=\"",
    );
    assert!(!out.contains("hunter2"), "{out}");
    refused(
        "redis=redis://h:1 redis_password_file=/nonexistent/pw",
        "cannot read \"redis_password_file\" file \"/nonexistent/pw\"",
    );
}

#[test]
fn mode_rules() {
    refused(
        "redis=redis://a:1,b:2",
        "several hosts in \"redis=\" need \"redis_mode=sentinel\" or \"redis_mode=cluster\"",
    );
    refused(
        "redis=a:1 redis_mode=sentinel",
        "\"redis_mode=sentinel\" needs \"redis_master=NAME\"",
    );
    refused(
        "redis=a:1 redis_master=m",
        "\"redis_master=\" needs \"redis_mode=sentinel\"",
    );
    refused(
        "redis=redis://a:1/3 redis_mode=cluster",
        "a Redis Cluster has only database 0",
    );
    refused(
        "redis=a:1 redis_mode=primary",
        "invalid redis_mode \"primary\": use single, sentinel or cluster",
    );
    refused(
        "redis_mode=cluster",
        "\"redis_*=\" parameters need \"redis=\"",
    );
}
