//! `redis=` with a password, an ACL user limited to the module's keys, a
//! password file, and TLS with a client certificate: two gateways share
//! one client's limit. A wrong CA or a wrong password is refused by Redis
//! (or TLS), requests keep being served from local counts, and the
//! password never reaches the error log.
use crate::common;

use common::redis_servers::*;
use common::*;
use std::fs;
use std::time::Duration;

/// Two gateways on `redis` share limit 40 of one client: the cluster
/// admits 40 (+ about one sync interval of traffic), both gateways admit.
fn share(redis: &str) -> [u32; 2] {
    let up = Upstream::start();
    let clock = ShiftedClock::new();
    let a = redis_gateway_on(&clock, redis, &up, 40);
    let b = redis_gateway_on(&clock, redis, &up, 40);
    clock.clear_of_boundary(60_000, 8_000);
    let admitted = alternate([a.port, b.port], "client-1", 80);
    let total = admitted[0] + admitted[1];
    eprintln!("{redis}: admitted {admitted:?} = {total} for limit 40");
    assert!(
        (40..=44).contains(&total),
        "two gateways admitted {total} for limit 40 ({admitted:?})"
    );
    assert!(admitted[0] > 0 && admitted[1] > 0);
    assert!(zone_metric(a.port, "rate_limit_window_sync_rounds_total") > 0.0);
    // Credentials and TLS were accepted: no failure but a round timed out
    // (a handshake on 2 loaded cores can pass the sync's deadline).
    for kind in ["connection", "reply", "auth", "tls", "key"] {
        assert_eq!(sync_failures(a.port, kind), 0.0, "kind={kind}");
    }
    for g in [&a, &b] {
        let log = g.error_log();
        let shown = shown_to_operators(g.port);
        for secret in [ADMIN_PASSWORD, ACL_PASSWORD, TLS_PASSWORD] {
            assert!(!log.contains(secret), "password in the error log:\n{log}");
            assert!(
                !shown.contains(secret),
                "password in metrics or key lookup:\n{shown}"
            );
        }
    }
    admitted
}

#[test]
fn password_and_acl_user() {
    let redis = AuthRedis::start();
    let p = redis.port();
    share(&format!("redis=redis://:{ADMIN_PASSWORD}@127.0.0.1:{p}"));
    // The ACL user may touch rlw:* only, and did.
    let denied = cli(&[
        "-p",
        &p.to_string(),
        "--user",
        ACL_USER,
        "--pass",
        ACL_PASSWORD,
        "--no-auth-warning",
        "SET",
        "other",
        "1",
    ]);
    assert!(denied.contains("NOPERM"), "{denied}");
    redis.admin(&["FLUSHALL"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("redis.pw");
    fs::write(&file, format!("{ACL_PASSWORD}\n")).unwrap();
    share(&format!(
        "redis=redis://{ACL_USER}:@127.0.0.1:{p} redis_password_file={}",
        file.display()
    ));
    let keys = redis.admin(&["--scan", "--pattern", "rlw:*"]);
    assert!(keys.lines().count() >= 1, "no keys written: {keys}");
}

#[test]
fn tls_with_client_certificate() {
    let redis = TlsRedis::start();
    let pki = &redis.pki;
    share(&format!(
        "redis=rediss://:{TLS_PASSWORD}@127.0.0.1:{} redis_ca={} redis_cert={} redis_key={}",
        redis.port(),
        pki.file("ca.crt"),
        pki.file("client.crt"),
        pki.file("client.key")
    ));
    let keys = redis.cli(&["--scan", "--pattern", "rlw:*"]);
    assert!(keys.lines().count() >= 1, "no keys over TLS: {keys}");
}

/// A gateway whose sync is refused keeps serving from local counts, counts
/// the failures, logs the outage once, and never logs the password.
fn refused_keeps_serving(redis: &str, secret: &str, kind: &str, what: &str) {
    let up = Upstream::start();
    let clock = ShiftedClock::new();
    let g = redis_gateway_on(&clock, redis, &up, 5);
    clock.clear_of_boundary(60_000, 8_000);
    let statuses: Vec<u16> = (0..8).map(|_| get_key(g.port, "/", "k").status).collect();
    // The local limit still holds: 5 admitted, then 429.
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 429, 429, 429],
        "{redis}"
    );
    // Waits for this kind: on loaded cores a round may time out first.
    assert!(
        wait_for(Duration::from_secs(15), || sync_failures(g.port, kind)
            > 0.0),
        "kind={kind} not counted:\n{}",
        get(g.port, "/metrics").text()
    );
    assert_eq!(
        zone_metric(g.port, "rate_limit_window_sync_rounds_total"),
        0.0
    );
    let (log, line) = outage_line(&g);
    assert!(line.contains("[error]") && line.contains(what), "{line}");
    assert!(!log.contains(secret), "password in the error log:\n{log}");
    let shown = shown_to_operators(g.port);
    assert!(
        !shown.contains(secret),
        "password in metrics or key lookup:\n{shown}"
    );
}

/// What the metrics location shows an operator: the Prometheus text and the
/// key lookup (JSON) of the client the tests send.
fn shown_to_operators(port: u16) -> String {
    let metrics = get(port, "/metrics").text();
    let lookup = get(port, "/metrics?zone=c&key=client-1").text();
    assert!(lookup.contains("\"zone\""), "key lookup answered: {lookup}");
    metrics + &lookup
}

#[test]
fn wrong_ca_is_refused_and_requests_are_served() {
    let redis = TlsRedis::start();
    let other = Pki::new("some other CA");
    let pki = &redis.pki;
    refused_keeps_serving(
        &format!(
            "redis=rediss://:{TLS_PASSWORD}@127.0.0.1:{} redis_ca={} redis_cert={} redis_key={}",
            redis.port(),
            other.file("ca.crt"),
            pki.file("client.crt"),
            pki.file("client.key")
        ),
        TLS_PASSWORD,
        "tls",
        "the TLS handshake with redis failed",
    );
    let keys = redis.cli(&["--scan", "--pattern", "rlw:*"]);
    assert_eq!(keys.trim(), "", "a refused gateway wrote keys");
}

#[test]
fn wrong_password_is_refused_and_requests_are_served() {
    let redis = AuthRedis::start();
    refused_keeps_serving(
        &format!("redis=redis://:wrong-hunter2@127.0.0.1:{}", redis.port()),
        "wrong-hunter2",
        "auth",
        "redis refused the credentials",
    );
}
