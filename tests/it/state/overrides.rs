//! Overrides and bans in the state file: kept across a quit and a start,
//! written again when only they change, and cut to a smaller table.
use super::*;

/// Zone `z` (window 60 s, `overrides` entries) on the site's state file:
/// limit 2 at `/`, limit 2 with `ban=1h` at `/ban`, limit 2 and
/// `in_flight=3` at `/few`, the writable API at `/api`.
fn api_conf(site: &Site, overrides: usize) -> String {
    proxy_conf(
        &format!(
            "rate_limit_window_zone $http_x_key zone=z:1m window=60s overrides={overrides} \
             state={};",
            site.state().display()
        ),
        "",
        "location /ban { rate_limit_window zone=z limit=2 ban=1h; \
                         proxy_pass http://{{UPSTREAM}}; }
         location /few { rate_limit_window zone=z limit=2 in_flight=3; \
                         add_header X-Status $rate_limit_window_status always; \
                         proxy_pass http://{{UPSTREAM}}; }
         location = /api { rate_limit_window_metrics write=on; }",
        "rate_limit_window zone=z limit=2; rate_limit_window_headers on;",
    )
}

/// PUT of an override of `key` in zone `z`, answered 200.
fn put_override(ng: &Nginx, key: &str, body: &str) {
    use std::io::{BufReader, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", ng.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let req = format!(
        "PUT /api?zone=z&key={key} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let r = read_response(&mut BufReader::new(s), false).unwrap();
    assert_eq!(r.status, 200, "{}", r.describe());
}

/// The `"override"` of `key` in zone `z`, as the lookup shows it.
fn override_of(ng: &Nginx, key: &str) -> serde_json::Value {
    let r = get(ng.port, &format!("/api?zone=z&key={key}"));
    assert_eq!(r.status, 200, "{}", r.describe());
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    v["override"].clone()
}

/// (status, Retry-After) of one request of `key` to `path`.
fn answer(ng: &Nginx, path: &str, key: &str) -> (u16, i64) {
    let r = get_key(ng.port, path, key);
    let retry = r
        .header("Retry-After")
        .map_or(0, |_| r.header_num("Retry-After"));
    (r.status, retry)
}

/// A limit, a block with a ttl, an exempt, places (`in_flight`) and a
/// `ban=` ban are kept across `nginx -s quit` and a start: the lookup
/// shows them and requests are decided by them, the countdowns go on from
/// where the clock is; an override whose ttl ended while nginx was down is
/// gone.
#[test]
fn overrides_and_bans_survive_quit_and_start() {
    let t = T0 + 100;
    let site = Site::new(Some(t));
    let ng = site.start_conf(&api_conf(&site, 1024));
    put_override(&ng, "lim", r#"{"limit":4}"#);
    put_override(&ng, "blk", r#"{"block":true,"ttl":600}"#);
    put_override(&ng, "ex", r#"{"exempt":true}"#);
    put_override(&ng, "short", r#"{"block":true,"ttl":30}"#);
    put_override(&ng, "none", r#"{"in_flight":0,"ttl":600}"#);
    assert_eq!(answer(&ng, "/ban", "bad").0, 200);
    assert_eq!(answer(&ng, "/ban", "bad").0, 200);
    assert_eq!(answer(&ng, "/ban", "bad"), (429, 3600));
    assert_eq!(override_of(&ng, "bad")["action"], "ban");
    let log = shut(&ng, libc::SIGQUIT);
    assert!(log.contains("6 overrides,"), "{log}");
    drop(ng);

    // A minute later: "short" (30 s) ended while nginx was down.
    site.set_clock(t + 60);
    let ng = site.start_conf(&api_conf(&site, 1024));
    let log = ng.error_log();
    assert!(
        log.contains("restored 5 overrides and bans")
            && log.contains("(1 expired while nginx was down)"),
        "{log}"
    );
    assert_eq!(override_of(&ng, "lim")["limit"], 4);
    assert_eq!(override_of(&ng, "blk")["action"], "block");
    assert_eq!(override_of(&ng, "ex")["action"], "exempt");
    assert_eq!(override_of(&ng, "bad")["action"], "ban");
    assert!(override_of(&ng, "short").is_null());
    let none = override_of(&ng, "none");
    assert_eq!(
        (none["action"].as_str(), none["in_flight"].as_i64()),
        (Some("in_flight"), Some(0))
    );
    // No place at `/few`, refused for its places; `/` has no in_flight=:
    // the line's rate of 2.
    let r = get_key(ng.port, "/few", "none");
    assert_eq!(
        (r.status, r.header("X-Status")),
        (429, Some("REJECTED_IN_FLIGHT"))
    );
    assert_eq!(admitted(&ng, "none").0, 2);
    // Decided by them: 4 instead of 2; rejected, Retry-After 600 - 60;
    // admitted beyond the limit; banned for 3600 - 60 s.
    assert_eq!(admitted(&ng, "lim").0, 4);
    assert_eq!(answer(&ng, "/", "blk"), (429, 540));
    for _ in 0..10 {
        assert_eq!(answer(&ng, "/", "ex").0, 200);
    }
    assert_eq!(answer(&ng, "/ban", "bad"), (429, 3540));
    assert_eq!(admitted(&ng, "short").0, 2, "the expired block is gone");
    // The countdowns go on: 10 s later, 530 and 3530.
    site.set_clock(t + 70);
    assert_eq!(answer(&ng, "/", "blk"), (429, 530));
    assert_eq!(answer(&ng, "/ban", "bad"), (429, 3530));
    // At their ends the clients are admitted again.
    site.set_clock(t + 600);
    assert_eq!(answer(&ng, "/", "blk").0, 200);
    assert_eq!(answer(&ng, "/ban", "bad").0, 429);
    site.set_clock(t + 3600);
    assert_eq!(answer(&ng, "/ban", "bad").0, 200);
}

/// A zone that serves no request but whose overrides changed is written
/// again by the periodic writer (the file holds the override even when
/// nginx is then killed with no exit write).
#[test]
fn an_idle_zone_is_rewritten_when_its_overrides_change() {
    let site = Site::new(None);
    let conf =
        api_conf(&site, 1024).replace("http {", "http {\n    rate_limit_window_state_interval 1s;");
    let ng = site.start_conf(&conf);
    let off = ng.error_log_len();
    let writes = || {
        ng.error_log_since(off)
            .lines()
            .filter(|l| l.contains("written:"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert!(
        wait_for(Duration::from_millis(3_500), || writes().len() == 1),
        "no periodic write:\n{}",
        ng.error_log()
    );
    put_override(&ng, "idle", r#"{"block":true}"#);
    assert!(
        wait_for(Duration::from_millis(3_500), || writes().len() == 2),
        "the override change was not written:\n{}",
        ng.error_log_since(off)
    );
    assert!(writes()[1].contains("1 overrides,"), "{:?}", writes());
    kill_9(&ng);
    drop(ng);
    let ng = site.start_conf(&api_conf(&site, 1024));
    assert_eq!(override_of(&ng, "idle")["action"], "block");
    assert_eq!(answer(&ng, "/", "idle").0, 429);
}

/// A state file with more overrides than the new `overrides=`: what fits
/// is restored, the rest is dropped and said at `warn`.
#[test]
fn a_smaller_override_table_keeps_what_fits() {
    let site = Site::new(None);
    let ng = site.start_conf(&api_conf(&site, 8));
    for key in ["a", "b", "c"] {
        put_override(&ng, key, r#"{"block":true}"#);
    }
    shut(&ng, libc::SIGQUIT);
    drop(ng);
    let ng = site.start_conf(&api_conf(&site, 2));
    let log = ng.error_log();
    assert!(log.contains("restored 2 overrides and bans"), "{log}");
    let warn = log
        .lines()
        .find(|l| l.contains("[warn]") && l.contains("dropped"))
        .unwrap_or_else(|| panic!("no [warn] line:\n{log}"));
    assert!(
        warn.contains("1 overrides and bans of the state file dropped")
            && warn.contains("overrides=2 holds 2 of the file's 3"),
        "{warn}"
    );
    let blocked = ["a", "b", "c"]
        .iter()
        .filter(|k| answer(&ng, "/", k).0 == 429)
        .count();
    assert_eq!(blocked, 2);
}
