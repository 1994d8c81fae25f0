use super::*;

fn tcp(host: &str, port: u16) -> RedisNode {
    RedisNode::Tcp {
        host: host.into(),
        port,
    }
}

fn args(words: &[&str]) -> Result<Option<RedisParams>, RedisError> {
    let mut r = RedisArgs::default();
    for w in words {
        assert!(r.accept(w.as_bytes())?, "{w} not taken");
    }
    r.finish()
}

fn one(words: &[&str]) -> RedisParams {
    args(words).unwrap().unwrap()
}

#[test]
fn plain_forms_as_before() {
    let p = one(&["redis=127.0.0.1:6379"]);
    assert_eq!(p.url, "redis://127.0.0.1:6379/");
    assert_eq!(p.addr.nodes, vec![tcp("127.0.0.1", 6379)]);
    assert_eq!(
        (p.mode, p.sync_ms, p.addr.tls),
        (RedisMode::Single, 100, false)
    );
    assert_eq!(
        one(&["redis=redis.local:06379"]).url,
        "redis://redis.local:6379/"
    );
    assert_eq!(one(&["redis=[::1]:6379"]).url, "redis://[::1]:6379/");
    assert_eq!(
        one(&["redis=[::1]:6379"]).addr.nodes,
        vec![tcp("::1", 6379)]
    );
    let p = one(&["redis=unix:/run/redis.sock"]);
    assert_eq!(p.url, "redis+unix:///run/redis.sock");
    assert_eq!(
        p.addr.nodes,
        vec![RedisNode::Unix("/run/redis.sock".into())]
    );
    assert_eq!(
        one(&["redis=unix:/run/a b%"]).url,
        "redis+unix:///run/a%20b%25"
    );
    assert!(parse_redis_addr(format!("unix:/{}", "a".repeat(106)).as_bytes()).is_ok());
    assert!(parse_redis_addr(format!("unix:/{}", "a".repeat(107)).as_bytes()).is_err());
}

#[test]
fn urls_with_credentials_tls_and_db() {
    let p = one(&["redis=rediss://:pa%40ss@cache.example:6380"]);
    assert!(p.addr.tls);
    assert_eq!(p.addr.nodes, vec![tcp("cache.example", 6380)]);
    assert_eq!(p.addr.username, None);
    assert_eq!(p.addr.password, Some(Secret(b"pa@ss".to_vec())));
    assert_eq!(p.url, "rediss://cache.example:6380/");
    let p = one(&["redis=redis://gw:p:w@@10.0.0.1/3"]);
    assert_eq!(p.addr.username.as_deref(), Some("gw"));
    assert_eq!(p.addr.password.as_ref().map(Secret::as_str), Some("p:w@"));
    assert_eq!((p.addr.db, p.url.as_str()), (3, "redis://10.0.0.1:6379/3"));
    let p = one(&["redis=redis://h"]);
    assert_eq!(p.addr.nodes, vec![tcp("h", 6379)]);
    assert_eq!(
        (p.addr.username.clone(), p.addr.password.clone()),
        (None, None)
    );
    let p = one(&["redis=redis://user:@h:1/"]);
    assert_eq!(
        (p.addr.username.as_deref(), p.addr.password.clone()),
        (Some("user"), None)
    );
    // Debug never shows a password.
    let shown = format!("{:?}", one(&["redis=redis://u:hunter2@h:1"]));
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[test]
fn sentinel_and_cluster() {
    let p = one(&[
        "redis=redis://:sp@s1:26380,s2,[::1]:26381",
        "redis_mode=sentinel",
        "redis_master=mymaster",
    ]);
    assert_eq!(p.mode, RedisMode::Sentinel);
    assert_eq!(
        p.addr.nodes,
        vec![tcp("s1", 26380), tcp("s2", 26379), tcp("::1", 26381)]
    );
    assert_eq!(p.master.as_deref(), Some("mymaster"));
    let p = one(&["redis_mode=cluster", "redis=rediss://n1:7000,n2"]);
    assert_eq!(p.mode, RedisMode::Cluster);
    assert_eq!(p.addr.nodes, vec![tcp("n1", 7000), tcp("n2", 6379)]);
    let p = one(&[
        "redis=rediss://h:1",
        "redis_ca=/etc/ca.pem",
        "redis_cert=/etc/c.pem",
        "redis_key=/etc/k.pem",
        "redis_password_file=/etc/pw",
    ]);
    assert_eq!(p.ca.as_deref(), Some(&b"/etc/ca.pem"[..]));
    assert_eq!(p.key.as_deref(), Some(&b"/etc/k.pem"[..]));
    assert_eq!(p.password_file.as_deref(), Some(&b"/etc/pw"[..]));
}

#[test]
fn rejected_combinations() {
    let err = |w: &[&str]| args(w).unwrap_err();
    assert_eq!(
        err(&["redis=redis://a:1,b:2"]),
        "several hosts in \"redis=\" need \"redis_mode=sentinel\" or \"redis_mode=cluster\""
    );
    assert_eq!(
        err(&["redis=a:1", "redis_mode=sentinel"]),
        "\"redis_mode=sentinel\" needs \"redis_master=NAME\""
    );
    assert_eq!(
        err(&["redis=a:1", "redis_master=m"]),
        "\"redis_master=\" needs \"redis_mode=sentinel\""
    );
    assert_eq!(
        err(&["redis=unix:/s", "redis_mode=cluster"]),
        "\"redis_mode=sentinel\" and \"redis_mode=cluster\" need TCP hosts"
    );
    assert_eq!(
        err(&["redis=redis://a:1/2", "redis_mode=cluster"]),
        "a Redis Cluster has only database 0: leave the /DB out of \"redis=\" or write /0"
    );
    assert_eq!(
        err(&["redis=a:1", "redis_ca=/x"]),
        "\"redis_ca=\", \"redis_cert=\" and \"redis_key=\" need a \"rediss://\" address"
    );
    assert_eq!(
        err(&["redis=rediss://a:1", "redis_cert=/x"]),
        "\"redis_cert=\" and \"redis_key=\" go together"
    );
    assert_eq!(
        err(&["redis=redis://:pw@a:1", "redis_password_file=/p"]),
        "the password is given both in \"redis=\" and by \"redis_password_file=\""
    );
    assert_eq!(
        err(&["sync=1s"]),
        "\"sync=\" and \"secret=\" need \"redis=\""
    );
    assert_eq!(
        err(&["redis_mode=cluster"]),
        "\"redis_*=\" parameters need \"redis=\""
    );
    assert_eq!(
        err(&["redis=a:1", "redis_mode=ha"]),
        "invalid redis_mode \"ha\": use single, sentinel or cluster"
    );
    assert_eq!(
        err(&["redis_ca="]),
        "invalid \"redis_ca\" path \"\": give a file's path, e.g. redis_ca=/etc/nginx/redis/file"
    );
    assert!(err(&["redis_master=a b"])
        .to_string()
        .starts_with("invalid redis_master \"a b\": the master's name"));
    assert_eq!(args(&[]), Ok(None));
    let mut r = RedisArgs::default();
    assert_eq!(r.accept(b"window=1s"), Ok(false));
    assert_eq!(r.accept(b"redis"), Ok(false));
}

#[test]
fn bad_addresses_never_quote_the_password() {
    for bad in [
        "",
        ":6379",
        "host",
        "host:",
        "host:0",
        "host:65536",
        "host:123456",
        "a/b:1",
        "::1:6379",
        "[]:1",
        "[x]:1",
        "u@h:1",
        "unix:",
        "unix:rel/path",
        "unix:/a\0b",
        "h:+1",
        "redis://",
        "redis://h:0",
        "redis://h:1/x",
        "redis://h:1/123456",
        "redis://a,,b",
        "redis://user@h",
        "redis://:p%zz@h",
        "redis://:p%00@h",
        "rediss://h:1:2",
        "tcp://h:1",
    ] {
        let e = parse_redis_addr(bad.as_bytes()).unwrap_err().to_string();
        assert!(e.starts_with("invalid redis address \""), "{bad:?}: {e}");
    }
    let many = vec!["h:1"; MAX_HOSTS + 1].join(",");
    assert!(parse_redis_addr(format!("redis://{many}").as_bytes()).is_err());
    for (v, shown) in [
        ("rediss://:hunter2@host:bad", "rediss://***@host:bad"),
        ("redis://u:hunter2@h:1/db", "redis://***@h:1/db"),
        ("u:hunter2@h:x", "***@h:x"),
        ("redis://h:x", "redis://h:x"),
    ] {
        let e = parse_redis_addr(v.as_bytes()).unwrap_err().to_string();
        assert!(!e.contains("hunter2"), "{e}");
        assert!(e.contains(&format!("\"{shown}\"")), "{e}");
    }
    assert_eq!(redact(b"a@b@c"), b"***@c".to_vec());
}

#[test]
fn redis_outage_takes_local_share_or_closed_with_redis() {
    assert_eq!(one(&["redis=127.0.0.1:6379"]).outage, OutagePolicy::Local);
    for p in OutagePolicy::ALL {
        let w = format!("redis_outage={}", p.name());
        assert_eq!(one(&["redis=127.0.0.1:6379", &w]).outage, p);
    }
    let bad = args(&["redis=127.0.0.1:6379", "redis_outage=open"]).unwrap_err();
    assert_eq!(
        bad,
        "invalid redis_outage \"open\": use local, share or closed"
    );
    let alone = args(&["redis_outage=share"]).unwrap_err();
    assert_eq!(alone, RedisError::NeedsRedis);
}
