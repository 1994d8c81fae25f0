//! Runtime control against real nginx (2 workers): per-client overrides
//! set, looked up, listed and removed through `rate_limit_window_metrics
//! write=on`, applied by every worker at its next request, kept across a
//! reload; ttl expiry and the `ban=` countdown under a controlled clock
//! (libfaketime); concurrent PUTs; and every kind of bad input, which
//! changes nothing.
use crate::common;

use std::io::{BufReader, Write};
use std::net::TcpStream;

use common::*;

mod bad_input;
mod in_force;

/// 2024-01-01T00:00:00Z.
const T0: i64 = 1_704_067_200;

/// Zone `z` (limit 2 at `/`, 3 at `/two`), zone `b` (limit 2, ban=1h at
/// `/ban`), zone `small` (overrides=4, at `/small`); `/api` is the
/// writable API, `/ro` the read-only one. Every answer names its worker.
fn conf() -> String {
    proxy_conf(
        "rate_limit_window_zone $http_x_key zone=z:1m window=60s;
         rate_limit_window_zone $http_x_key zone=b:1m window=60s;
         rate_limit_window_zone $http_x_key zone=small:1m window=60s overrides=4;",
        "reuseport",
        "add_header X-Pid $pid always;
         location /two { rate_limit_window zone=z limit=3; proxy_pass http://{{UPSTREAM}}; }
         location /ban { rate_limit_window zone=b limit=2 ban=1h; proxy_pass http://{{UPSTREAM}}; }
         location /small { rate_limit_window zone=small limit=2; proxy_pass http://{{UPSTREAM}}; }
         location = /api { rate_limit_window_metrics write=on; }
         location = /ro { rate_limit_window_metrics; }",
        "rate_limit_window zone=z limit=2;",
    )
}

fn start(up: &Upstream) -> Nginx {
    Nginx::builder().upstream_of(up).start(&conf())
}

/// One request with a body (Content-Length, or chunked) on a fresh
/// connection.
pub(crate) fn send_body(
    port: u16,
    method: &str,
    path: &str,
    body: &[u8],
    chunked: bool,
) -> Response {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let framing = if chunked {
        "Transfer-Encoding: chunked".to_string()
    } else {
        format!("Content-Length: {}", body.len())
    };
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: application/json\r\n{framing}\r\n\r\n"
    )
    .into_bytes();
    if chunked {
        for c in body.chunks(1000) {
            req.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            req.extend_from_slice(c);
            req.extend_from_slice(b"\r\n");
        }
        req.extend_from_slice(b"0\r\n\r\n");
    } else {
        req.extend_from_slice(body);
    }
    s.write_all(&req).unwrap();
    read_response(&mut BufReader::new(s), false).unwrap()
}

fn put(ng: &Nginx, zone: &str, key: &str, body: &str) -> Response {
    let path = format!("/api?zone={zone}&key={}", url_encode(key.as_bytes()));
    send_body(ng.port, "PUT", &path, body.as_bytes(), false)
}

pub(crate) fn json(r: &Response) -> serde_json::Value {
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("bad JSON {e}: {}", r.describe()))
}

fn lookup(ng: &Nginx, zone: &str, key: &str) -> serde_json::Value {
    let r = get(ng.port, &format!("/ro?zone={zone}&key={key}"));
    assert_eq!(r.status, 200, "{}", r.describe());
    json(&r)
}

fn list(ng: &Nginx, zone: &str, extra: &str) -> serde_json::Value {
    let r = get(ng.port, &format!("/ro?zone={zone}&overrides{extra}"));
    assert_eq!(r.status, 200, "{}", r.describe());
    json(&r)
}

/// `n` requests of client `key` to `path`: (statuses, worker pids seen).
fn burst(ng: &Nginx, path: &str, key: &str, n: usize) -> (Vec<u16>, Vec<String>) {
    let mut statuses = vec![];
    let mut pids = vec![];
    for _ in 0..n {
        let r = get_key(ng.port, path, key);
        statuses.push(r.status);
        let pid = r.header("X-Pid").unwrap_or("").to_string();
        if !pids.contains(&pid) {
            pids.push(pid);
        }
    }
    (statuses, pids)
}

fn admitted(s: &[u16]) -> usize {
    s.iter().filter(|&&c| c == 200).count()
}

fn metric(ng: &Nginx, name: &str, labels: &[(&str, &str)]) -> f64 {
    let text = get(ng.port, "/ro").text();
    prom_value(&text, name, labels).unwrap_or_else(|| panic!("no {name} {labels:?}:\n{text}"))
}

#[test]
fn both_workers_apply_a_change_at_their_next_request() {
    let up = Upstream::start();
    let ng = start(&up);
    // Without an override: limit=2.
    let (s, _) = burst(&ng, "/", "alice", 6);
    assert_eq!(admitted(&s), 2, "{s:?}");
    // Exempt: every request passes, on both workers.
    assert_eq!(put(&ng, "z", "alice", r#"{"exempt":true}"#).status, 200);
    let (s, pids) = burst(&ng, "/", "alice", 30);
    assert_eq!(admitted(&s), 30, "{s:?}");
    assert_eq!(pids.len(), 2, "both workers answered: {pids:?}");
    // Block: every request is rejected, on both workers, with Retry-After
    // the window (no ttl).
    assert_eq!(put(&ng, "z", "alice", r#"{"block":true}"#).status, 200);
    let (s, pids) = burst(&ng, "/", "alice", 30);
    assert_eq!(admitted(&s), 0, "{s:?}");
    assert_eq!(pids.len(), 2, "both workers answered: {pids:?}");
    assert_eq!(get_key(ng.port, "/", "alice").header_num("Retry-After"), 60);
    // A limit replaces the limit of every line of the zone (2 at /, 3 at
    // /two) for this client: 10 in all, counted together.
    let r = put(&ng, "z", "bob", r#"{"limit":10}"#);
    assert_eq!(r.status, 200, "{}", r.describe());
    let (s1, _) = burst(&ng, "/", "bob", 6);
    let (s2, _) = burst(&ng, "/two", "bob", 10);
    assert_eq!(admitted(&s1) + admitted(&s2), 10, "{s1:?} {s2:?}");
    assert_eq!(admitted(&s1), 6);
    // Another client keeps the configured limits.
    let (s, _) = burst(&ng, "/two", "carol", 5);
    assert_eq!(admitted(&s), 3, "{s:?}");
}

#[test]
fn lookup_list_delete_metrics_and_log() {
    let up = Upstream::start();
    let ng = start(&up);
    assert!(lookup(&ng, "z", "dave")["override"].is_null());
    let r = put(&ng, "z", "dave", r#"{"limit": 7, "ttl": 600}"#);
    assert_eq!(r.status, 200, "{}", r.describe());
    let v = json(&r);
    assert_eq!(v["override"]["action"], "limit");
    assert_eq!(v["override"]["limit"], 7);
    assert!(v["previous"].is_null());
    let fp = v["fingerprint"].as_str().unwrap().to_string();
    let o = &lookup(&ng, "z", "dave")["override"];
    assert_eq!(o["limit"], 7);
    let left = o["expires_in"].as_f64().unwrap();
    assert!(left > 590.0 && left <= 600.0, "{left}");
    // Replacing returns the previous one.
    let v = json(&put(&ng, "z", "dave", r#"{"block": true}"#));
    assert_eq!(v["previous"]["limit"], 7);
    assert!(v["override"]["expires_in"].is_null());
    put(&ng, "z", "erin", r#"{"exempt": true}"#);
    let l = list(&ng, "z", "");
    assert_eq!(l["live"], 2);
    assert_eq!(l["capacity"], 1024);
    assert_eq!(l["overrides"].as_array().unwrap().len(), 2);
    assert!(l["next"].is_null());
    assert!(l["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["fingerprint"] == fp.as_str() && e["action"] == "block"));
    // Paging: one per page, following "next".
    let p1 = list(&ng, "z", "&count=1");
    assert_eq!(p1["overrides"].as_array().unwrap().len(), 1);
    let next = p1["next"].as_u64().expect("a next page");
    let p2 = list(&ng, "z", &format!("&count=1&from={next}"));
    assert_eq!(p2["overrides"].as_array().unwrap().len(), 1);
    assert_ne!(p1["overrides"][0], p2["overrides"][0]);
    // DELETE &override removes it; a second one finds nothing.
    let r = request(ng.port, "DELETE", "/api?zone=z&key=dave&override", &[]);
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(json(&r)["removed"]["action"], "block");
    let r = request(ng.port, "DELETE", "/api?zone=z&key=dave&override", &[]);
    assert!(json(&r)["removed"].is_null());
    assert!(lookup(&ng, "z", "dave")["override"].is_null());
    let (s, _) = burst(&ng, "/", "dave", 4);
    assert_eq!(admitted(&s), 2, "back to limit=2: {s:?}");
    // Counted by action; the gauge.
    let m = |a| {
        metric(
            &ng,
            "rate_limit_window_overrides_total",
            &[("zone", "z"), ("action", a)],
        )
    };
    assert_eq!(
        (m("limit"), m("block"), m("exempt"), m("remove")),
        (1.0, 1.0, 1.0, 1.0)
    );
    assert_eq!(
        metric(&ng, "rate_limit_window_overrides", &[("zone", "z")]),
        1.0
    );
    // Logged at notice with the fingerprint, never the key.
    let log = ng.error_log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("override of client"))
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(lines
        .iter()
        .all(|l| l.contains("[notice]") && l.contains("127.0.0.1")));
    assert!(
        lines[0].contains(&fp) && lines[0].contains("limit 7"),
        "{}",
        lines[0]
    );
    assert!(
        !log.contains("dave") && !log.contains("erin"),
        "a raw key in the log"
    );
}

#[test]
fn a_reload_keeps_overrides() {
    let up = Upstream::start();
    let mut ng = start(&up);
    assert_eq!(put(&ng, "z", "frank", r#"{"block":true}"#).status, 200);
    assert_eq!(put(&ng, "z", "gina", r#"{"limit":5}"#).status, 200);
    ng.reload();
    let (s, _) = burst(&ng, "/", "frank", 10);
    assert_eq!(admitted(&s), 0, "{s:?}");
    let (s, _) = burst(&ng, "/", "gina", 10);
    assert_eq!(admitted(&s), 5, "{s:?}");
    assert_eq!(lookup(&ng, "z", "frank")["override"]["action"], "block");
    assert_eq!(list(&ng, "z", "")["live"], 2);
    // A new overrides= gives the zone new memory: the overrides are
    // carried over.
    let bigger = conf().replace(
        "zone=z:1m window=60s;",
        "zone=z:1m window=60s overrides=64;",
    );
    ng.reload_with(&bigger);
    assert!(wait_for(std::time::Duration::from_secs(10), || {
        list(&ng, "z", "")["capacity"] == 64
    }));
    let l = list(&ng, "z", "");
    assert_eq!(l["live"], 2, "{l}");
    assert_eq!(get_key(ng.port, "/", "frank").status, 429);
    assert!(ng
        .error_log()
        .contains("2 overrides carried over, 0 dropped"));
}

#[test]
fn ttl_expiry_and_the_ban_countdown() {
    let up = Upstream::start();
    let clock = FakeClock::new(T0);
    let ng = start_faked(&clock, &up, "UTC", &conf());
    // A block for 30 s: Retry-After counts down, then it ends by itself.
    put(&ng, "z", "hank", r#"{"block":true,"ttl":30}"#);
    assert_eq!(get_key(ng.port, "/", "hank").header_num("Retry-After"), 30);
    clock.set(T0 + 10);
    let r = get_key(ng.port, "/", "hank");
    assert_eq!((r.status, r.header_num("Retry-After")), (429, 20));
    clock.set(T0 + 30);
    assert_eq!(get_key(ng.port, "/", "hank").status, 200);
    assert!(lookup(&ng, "z", "hank")["override"].is_null());
    // ban=1h: the rejection that trips it says 3600 s.
    let (s, _) = burst(&ng, "/ban", "ivan", 2);
    assert_eq!(admitted(&s), 2);
    let r = get_key(ng.port, "/ban", "ivan");
    assert_eq!((r.status, r.header_num("Retry-After")), (429, 3600));
    assert_eq!(lookup(&ng, "b", "ivan")["override"]["action"], "ban");
    assert_eq!(
        metric(&ng, "rate_limit_window_bans_total", &[("zone", "b")]),
        1.0
    );
    assert_eq!(
        metric(&ng, "rate_limit_window_banned", &[("zone", "b")]),
        1.0
    );
    // Ten minutes on, the window would admit it again: the ban does not.
    clock.set(T0 + 30 + 600);
    let r = get_key(ng.port, "/ban", "ivan");
    assert_eq!((r.status, r.header_num("Retry-After")), (429, 3000));
    // Another client is not banned.
    assert_eq!(get_key(ng.port, "/ban", "judy").status, 200);
    // At its end the client is admitted again, and the gauge drops.
    clock.set(T0 + 30 + 3600);
    assert_eq!(get_key(ng.port, "/ban", "ivan").status, 200);
    assert_eq!(
        metric(&ng, "rate_limit_window_banned", &[("zone", "b")]),
        0.0
    );
    // A reset lifts a ban; so does DELETE &override.
    burst(&ng, "/ban", "ivan", 3);
    assert_eq!(get_key(ng.port, "/ban", "ivan").status, 429);
    let r = request(ng.port, "DELETE", "/api?zone=b&key=ivan", &[]);
    assert_eq!(json(&r)["ban_lifted"], true, "{}", r.describe());
    assert_eq!(get_key(ng.port, "/ban", "ivan").status, 200);
    burst(&ng, "/ban", "ivan", 3);
    assert_eq!(lookup(&ng, "b", "ivan")["override"]["action"], "ban");
    let r = request(ng.port, "DELETE", "/api?zone=b&key=ivan&override", &[]);
    assert_eq!(json(&r)["removed"]["action"], "ban");
    assert_eq!(
        metric(&ng, "rate_limit_window_bans_total", &[("zone", "b")]),
        3.0
    );
}

#[test]
fn an_operators_override_wins_over_ban() {
    let up = Upstream::start();
    let ng = start(&up);
    put(&ng, "b", "kim", r#"{"limit":3}"#);
    let (s, _) = burst(&ng, "/ban", "kim", 5);
    assert_eq!(admitted(&s), 3, "{s:?}");
    assert_eq!(lookup(&ng, "b", "kim")["override"]["action"], "limit");
    assert_eq!(
        metric(&ng, "rate_limit_window_bans_total", &[("zone", "b")]),
        0.0
    );
}

#[test]
fn concurrent_puts() {
    let up = Upstream::start();
    let ng = start(&up);
    // Eight clients into a table of four: exactly four land, four get 409.
    let statuses: Vec<(u16, Response)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|i| {
                let ng = &ng;
                s.spawn(move || {
                    let r = put(ng, "small", &format!("c{i}"), r#"{"limit":1}"#);
                    (r.status, r)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = statuses.iter().filter(|(s, _)| *s == 200).count();
    assert_eq!(
        ok,
        4,
        "{:?}",
        statuses.iter().map(|s| s.0).collect::<Vec<_>>()
    );
    for (s, r) in &statuses {
        if *s != 200 {
            assert_eq!(*s, 409, "{}", r.describe());
            assert!(json(r)["error"].as_str().unwrap().contains("overrides=4"));
        }
    }
    assert_eq!(list(&ng, "small", "")["live"], 4);
    // Sixteen PUTs of one client at once: one entry remains, one of theirs.
    std::thread::scope(|s| {
        for i in 0..16 {
            let ng = &ng;
            s.spawn(move || {
                let r = put(ng, "z", "same", &format!(r#"{{"limit":{}}}"#, 100 + i));
                assert_eq!(r.status, 200, "{}", r.describe());
            });
        }
    });
    let l = list(&ng, "z", "");
    assert_eq!(l["live"], 1, "{l}");
    let entries = l["overrides"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{l}");
    let n = entries[0]["limit"].as_u64().unwrap();
    assert!((100..116).contains(&n), "{n}");
}

#[test]
fn addr_works_where_key_does() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&proxy_conf(
        "rate_limit_window_zone $binary_remote_addr zone=ip:1m window=60s;",
        "",
        "location = /api { rate_limit_window_metrics write=on; }",
        "rate_limit_window zone=ip limit=2;",
    ));
    let r = send_body(
        ng.port,
        "PUT",
        "/api?zone=ip&addr=127.0.0.1",
        b"{\"exempt\":true}",
        false,
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    let (s, _) = burst(&ng, "/", "x", 6);
    assert_eq!(admitted(&s), 6, "{s:?}");
    let r = get(ng.port, "/api?zone=ip&addr=127.0.0.1");
    assert_eq!(json(&r)["override"]["action"], "exempt");
    let r = request(
        ng.port,
        "DELETE",
        "/api?zone=ip&addr=127.0.0.1&override",
        &[],
    );
    assert_eq!(json(&r)["removed"]["action"], "exempt");
    let (s, _) = burst(&ng, "/", "x", 3);
    assert_eq!(admitted(&s), 2, "counted again: {s:?}");
}

/// A real redis-server on a free port, killed on drop.
pub(crate) struct Redis(std::process::Child, pub(crate) u16);

impl Redis {
    pub(crate) fn start() -> Redis {
        let port = free_port();
        let child = std::process::Command::new(common::redis_servers::server_bin())
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server not found: `make test` installs the redis-server package");
        let up = wait_for(std::time::Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "redis-server did not start on {port}");
        Redis(child, port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A gateway (2 workers) whose zone `f` syncs through `redis`.
fn fleet_gateway(redis: &Redis, up: &Upstream) -> Nginx {
    Nginx::builder().upstream_of(up).start(&proxy_conf(
        &format!(
            "rate_limit_window_zone $http_x_key zone=f:1m window=60s redis=127.0.0.1:{} \
             sync=100ms secret=fleet-overrides-secret-01;",
            redis.1
        ),
        "reuseport",
        "location /ban { rate_limit_window zone=f limit=1 ban=1h; proxy_pass http://{{UPSTREAM}}; }
         location = /api { rate_limit_window_metrics write=on; }",
        "rate_limit_window zone=f limit=2;",
    ))
}

/// The fingerprints and actions a gateway lists for zone `f`.
fn listed(ng: &Nginx) -> Vec<(String, String)> {
    let l = json(&get(ng.port, "/api?zone=f&overrides"));
    let mut v: Vec<(String, String)> = l["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["fingerprint"].to_string(), e["action"].to_string()))
        .collect();
    v.sort();
    v
}

#[test]
fn a_fleets_gateways_share_overrides_and_bans() {
    let redis = Redis::start();
    let up = Upstream::start();
    let a = fleet_gateway(&redis, &up);
    let b = fleet_gateway(&redis, &up);
    let soon = std::time::Duration::from_secs(5);
    // Set on A: B applies it within about a second.
    let r = put(&a, "f", "mallory", r#"{"block":true}"#);
    assert_eq!(json(&r)["cluster"], "scheduled", "{}", r.describe());
    assert!(
        wait_for(soon, || lookup_on(&b, "mallory")["override"]["action"]
            == "block"),
        "B never got the block"
    );
    let (s, _) = burst(&b, "/", "mallory", 5);
    assert_eq!(admitted(&s), 0, "{s:?}");
    // The same PUT again (a retry) changes nothing.
    put(&a, "f", "mallory", r#"{"block":true}"#);
    put(&b, "f", "nick", r#"{"limit":5}"#);
    assert!(wait_for(soon, || listed(&a).len() == 2 && listed(&a) == listed(&b)));
    let (s, _) = burst(&a, "/", "nick", 3);
    assert_eq!(admitted(&s), 3, "the limit of 5 from B applies on A: {s:?}");
    // Removed on B: gone on A too.
    let r = request(b.port, "DELETE", "/api?zone=f&key=mallory&override", &[]);
    assert_eq!(json(&r)["cluster"], "scheduled");
    assert!(
        wait_for(soon, || lookup_on(&a, "mallory")["override"].is_null()),
        "A kept the removed block"
    );
    assert_eq!(get_key(a.port, "/", "mallory").status, 200);
    assert!(wait_for(soon, || listed(&a) == listed(&b) && listed(&b).len() == 1));
    // A ban tripped on A holds on B.
    burst(&a, "/ban", "oscar", 2);
    assert!(
        wait_for(soon, || lookup_on(&b, "oscar")["override"]["action"]
            == "ban"),
        "the ban never reached B"
    );
    let r = get_key(b.port, "/ban", "oscar");
    assert_eq!(r.status, 429);
    assert!(r.header_num("Retry-After") > 3500, "{}", r.describe());
}

fn lookup_on(ng: &Nginx, key: &str) -> serde_json::Value {
    json(&get(ng.port, &format!("/api?zone=f&key={key}")))
}

#[test]
fn a_blocked_client_is_never_held_by_delay() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&proxy_conf(
        "rate_limit_window_zone $http_x_key zone=d:1m window=60s;",
        "",
        "location = /api { rate_limit_window_metrics write=on; }",
        "rate_limit_window zone=d limit=2 delay=30s;",
    ));
    put(&ng, "d", "pat", r#"{"block":true,"ttl":600}"#);
    let r = get_key(ng.port, "/", "pat");
    assert_eq!(r.status, 429, "{}", r.describe());
    let left = r.header_num("Retry-After");
    assert!((599..=600).contains(&left), "{left}");
    let text = get(ng.port, "/api").text();
    for result in ["admitted", "rejected", "abandoned", "dry_run"] {
        let held = prom_value(
            &text,
            "rate_limit_window_delayed_total",
            &[("zone", "d"), ("result", result)],
        );
        assert_eq!(held, Some(0.0), "{result}");
    }
    assert_eq!(
        prom_value(
            &text,
            "rate_limit_window_requests_total",
            &[("zone", "d"), ("result", "rejected")]
        ),
        Some(1.0)
    );
}

#[test]
fn a_dry_run_bans_nobody() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&proxy_conf(
        "rate_limit_window_zone $http_x_key zone=d:1m window=60s;",
        "",
        "location = /api { rate_limit_window_metrics write=on; }",
        "rate_limit_window zone=d limit=1 ban=1h; rate_limit_window_dry_run on;",
    ));
    let (s, _) = burst(&ng, "/", "quinn", 4);
    assert_eq!(admitted(&s), 4, "dry run: {s:?}");
    let text = get(ng.port, "/api").text();
    let v = |name, labels: &[(&str, &str)]| prom_value(&text, name, labels);
    assert_eq!(
        v("rate_limit_window_bans_total", &[("zone", "d")]),
        Some(0.0)
    );
    let dry = [("zone", "d"), ("result", "rejected_dry_run")];
    assert_eq!(v("rate_limit_window_requests_total", &dry), Some(3.0));
    let r = get(ng.port, "/api?zone=d&key=quinn");
    assert!(json(&r)["override"].is_null(), "{}", r.describe());
}

/// Overrides by address with nginx's own machinery in the location:
/// realip at location level (the override is found by the real client's
/// address, never the proxy's), `limit_req` beside the limit (each keeps
/// counting the real client), and an `error_page` redirect (the limited
/// request counted once, its override applied before the redirect).
#[test]
fn overrides_by_address_with_realip_limit_req_and_error_page() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&http_conf(
        r#"rate_limit_window_zone $binary_remote_addr zone=ip:1m window=1h;
        limit_req_zone $binary_remote_addr zone=lr:1m rate=1r/m;
        server {
            listen 127.0.0.1:{{PORT}};
            location /app/ {
                set_real_ip_from 127.0.0.1;
                real_ip_header X-Forwarded-For;
                limit_req zone=lr burst=3 nodelay;
                rate_limit_window zone=ip limit=2;
                root html;
                error_page 404 = @up;
            }
            location @up { proxy_pass http://{{UPSTREAM}}; }
            location = /api { rate_limit_window_metrics write=on; }
        }"#,
    ));
    let set = |addr: &str, body: &str| {
        let path = format!("/api?zone=ip&addr={addr}");
        let r = send_body(ng.port, "PUT", &path, body.as_bytes(), false);
        assert_eq!(r.status, 200, "{}", r.describe());
    };
    set("10.9.9.1", "{\"block\":true,\"ttl\":600}");
    set("10.9.9.2", "{\"exempt\":true}");
    set("10.9.9.3", "{\"limit\":3}");
    let from = |addr: &str, n: usize| -> Vec<u16> {
        (0..n)
            .map(|_| {
                let h: &[(&str, &[u8])] = &[("X-Forwarded-For", addr.as_bytes())];
                request(ng.port, "GET", "/app/missing", h).status
            })
            .collect()
    };
    // Blocked: rejected from the first request, Retry-After the ttl left.
    let r = request(
        ng.port,
        "GET",
        "/app/missing",
        &[("X-Forwarded-For", b"10.9.9.1")],
    );
    assert_eq!(r.status, 429, "{}", r.describe());
    assert!((599..=600).contains(&r.header_num("Retry-After")));
    // Exempt from this limit; limit_req (1 + burst 3) still holds it.
    assert_eq!(from("10.9.9.2", 5), [200, 200, 200, 200, 503]);
    // Its own limit (3), not the location's (2); another client gets 2.
    assert_eq!(from("10.9.9.3", 4), [200, 200, 200, 429]);
    assert_eq!(from("10.9.9.4", 3), [200, 200, 429]);
    // Every admitted request went through the error_page redirect once.
    assert_eq!(up.received(), 4 + 3 + 2);
    // The lookup finds the override by the real address.
    let r = get(ng.port, "/api?zone=ip&addr=10.9.9.3");
    assert_eq!(json(&r)["override"]["limit"], 3, "{}", r.describe());
    assert_eq!(json(&r)["current"], 3, "{}", r.describe());
}
