//! Overrides of address ranges (`cidr=ADDR/BITS`) against real nginx (2
//! workers) in zones keyed by `$binary_remote_addr`, the clients' addresses
//! given by realip (`X-Forwarded-For` from 127.0.0.1): a range blocks or
//! exempts its addresses only, the most specific override wins (the
//! address's own over a /24, a /24 over a /16), IPv4 and IPv6; GET shows
//! it, the listing names it, DELETE lifts it; kept by `state=`; shared by
//! the fleet through Redis; and refused, changing nothing, on other zones
//! or for a bad prefix.
use crate::common;
use crate::overrides::{json, send_body, Redis};

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::fault_proxy::pid_gone;
use common::*;

/// Zone `ip` keyed by the client's address (limit 3 a minute at `/`),
/// zone `k` keyed by a header; `zone_args` after `ip`'s size; the writable
/// API at `/api`.
fn conf(zone_args: &str) -> String {
    http_conf(&format!(
        r#"rate_limit_window_zone $binary_remote_addr zone=ip:1m window=60s {zone_args};
        rate_limit_window_zone $http_x_key zone=k:1m window=60s;
        server {{
            listen 127.0.0.1:{{{{PORT}}}} reuseport;
            set_real_ip_from 127.0.0.1;
            real_ip_header X-Forwarded-For;
            location / {{ rate_limit_window zone=ip limit=3; proxy_pass http://{{{{UPSTREAM}}}}; }}
            location = /api {{ rate_limit_window_metrics write=on; }}
        }}"#
    ))
}

/// One request from `addr` (status).
fn from(ng: &Nginx, addr: &str) -> u16 {
    let h: &[(&str, &[u8])] = &[("X-Forwarded-For", addr.as_bytes())];
    request(ng.port, "GET", "/", h).status
}

/// `n` requests from `addr`: how many were admitted.
fn admitted(ng: &Nginx, addr: &str, n: usize) -> usize {
    (0..n).filter(|_| from(ng, addr) == 200).count()
}

/// PUT of `body` for `what` (`cidr=…` or `addr=…`) in zone `zone`.
fn put(ng: &Nginx, zone: &str, what: &str, body: &str) -> Response {
    let path = format!("/api?zone={zone}&{what}");
    send_body(ng.port, "PUT", &path, body.as_bytes(), false)
}

fn put_ok(ng: &Nginx, what: &str, body: &str) -> serde_json::Value {
    let r = put(ng, "ip", what, body);
    assert_eq!(r.status, 200, "{}", r.describe());
    json(&r)
}

fn get_json(ng: &Nginx, path: &str) -> serde_json::Value {
    let r = get(ng.port, path);
    assert_eq!(r.status, 200, "{}", r.describe());
    json(&r)
}

#[test]
fn a_range_blocks_its_addresses_and_the_most_specific_wins() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&conf(""));
    let j = put_ok(&ng, "cidr=127.0.0.0/24", r#"{"block":true}"#);
    assert_eq!(j["cidr"], "127.0.0.0/24", "{j}");
    assert_eq!(j["override"]["action"], "block");
    assert_eq!(admitted(&ng, "127.0.0.5", 4), 0, "inside the /24");
    assert_eq!(
        admitted(&ng, "127.0.1.5", 4),
        3,
        "outside it: the limit of 3"
    );
    let r = request(ng.port, "GET", "/", &[("X-Forwarded-For", b"127.0.0.200")]);
    assert_eq!(r.status, 429);
    assert_eq!(r.header_num("Retry-After"), 60, "no ttl: a window");
    // GET shows it: the range itself, and the range in force for one of
    // its addresses.
    let j = get_json(&ng, "/api?zone=ip&cidr=127.0.0.0/24");
    assert_eq!(j["override"]["action"], "block", "{j}");
    let j = get_json(&ng, "/api?zone=ip&addr=127.0.0.5");
    assert_eq!(j["override"]["action"], "block", "{j}");
    assert_eq!(j["override"]["cidr"], "127.0.0.0/24", "{j}");
    assert!(get_json(&ng, "/api?zone=ip&addr=127.0.1.5")["override"].is_null());
    // The listing names it.
    let l = get_json(&ng, "/api?zone=ip&overrides");
    let items = l["overrides"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{l}");
    assert_eq!(items[0]["cidr"], "127.0.0.0/24");
    assert_eq!(items[0]["prefix"], 24);

    // A /16 around it exempts, the /24 still blocks, and an address's own
    // override wins over its /24.
    put_ok(&ng, "cidr=127.0.0.0/16", r#"{"exempt":true}"#);
    assert_eq!(admitted(&ng, "127.0.9.9", 10), 10, "the /16 exempts");
    assert_eq!(admitted(&ng, "127.0.0.6", 2), 0, "the /24 inside it blocks");
    put_ok(&ng, "addr=127.0.0.7", r#"{"limit":1}"#);
    assert_eq!(admitted(&ng, "127.0.0.7", 3), 1, "its own limit of 1");
    assert_eq!(
        get_json(&ng, "/api?zone=ip&addr=127.0.0.7")["override"]["limit"],
        1
    );

    // DELETE lifts the /24: its addresses fall under the /16 again.
    let r = request(
        ng.port,
        "DELETE",
        "/api?zone=ip&cidr=127.0.0.0/24&override",
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(json(&r)["removed"]["action"], "block");
    assert_eq!(admitted(&ng, "127.0.0.5", 5), 5);
    let r = request(
        ng.port,
        "DELETE",
        "/api?zone=ip&cidr=127.0.0.0/16&override",
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(admitted(&ng, "127.0.0.8", 5), 3, "no range left: the limit");
    assert!(get_json(&ng, "/api?zone=ip&cidr=127.0.0.0/24")["override"].is_null());
    // A ttl'd range ends by itself.
    put_ok(&ng, "cidr=127.0.3.0/24", r#"{"block":true,"ttl":1}"#);
    assert_eq!(from(&ng, "127.0.3.1"), 429);
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(from(&ng, "127.0.3.1"), 200);
}

#[test]
fn ipv6_ranges_and_a_prefix_as_long_as_the_key() {
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&conf(""));
    put_ok(&ng, "cidr=2001:db8:1::/48", r#"{"block":true}"#);
    put_ok(&ng, "cidr=2001:db8:1:2::/64", r#"{"limit":5}"#);
    assert_eq!(admitted(&ng, "2001:db8:1:9::1", 3), 0, "in the /48");
    assert_eq!(admitted(&ng, "2001:db8:1:2::1", 7), 5, "the /64 inside it");
    assert_eq!(admitted(&ng, "2001:db8:2::1", 4), 3, "outside: the limit");
    let l = get_json(&ng, "/api?zone=ip&overrides");
    let mut cidrs: Vec<String> = l["overrides"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| format!("{}{}", e["cidr"], e["prefix"]))
        .collect();
    cidrs.sort();
    // A /64's id holds a hash of the address, not the address: listed by
    // its prefix only.
    assert_eq!(cidrs, ["\"2001:db8:1::/48\"48", "null64"], "{l}");
    // /32 is one address: its own override (what addr= sets).
    let j = put_ok(&ng, "cidr=127.0.0.9/32", r#"{"block":true}"#);
    assert!(j.get("cidr").is_none(), "{j}");
    assert_eq!(
        get_json(&ng, "/api?zone=ip&addr=127.0.0.9")["override"]["action"],
        "block"
    );
    assert_eq!(from(&ng, "127.0.0.10"), 200);
}

#[test]
fn cidr_is_refused_where_it_cannot_apply() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .upstream_of(&up)
        .start(&conf("ipv6_prefix=64"));
    let refused = |zone: &str, what: &str, needle: &str| {
        let r = put(&ng, zone, what, r#"{"block":true}"#);
        assert_eq!(r.status, 400, "{what}: {}", r.describe());
        assert_eq!(r.header("Content-Type"), Some("application/json"));
        let e = json(&r)["error"].as_str().unwrap().to_string();
        assert!(e.contains(needle), "{what}: {e}");
    };
    refused(
        "k",
        "cidr=127.0.0.0/24",
        "needs a zone keyed by $binary_remote_addr",
    );
    refused("ip", "cidr=127.0.0.0/33", "at most 32 bits");
    refused("ip", "cidr=127.0.0.0/x", "no number of bits");
    refused("ip", "cidr=127.0.0.0", "no /BITS");
    refused("ip", "cidr=127.0.0/24", "not an address");
    refused("ip", "cidr=2001:db8::/80", "first 64 bits");
    refused("ip", "cidr=127.0.0.0/24&addr=127.0.0.1", "give one of");
    // A reset names one client, never a range.
    let r = request(ng.port, "DELETE", "/api?zone=ip&cidr=127.0.0.0/24", &[]);
    assert_eq!(r.status, 400, "{}", r.describe());
    let r = get(ng.port, "/api?zone=ip&cidr=10.0.0.0/99");
    assert_eq!(r.status, 400, "{}", r.describe());
    // Nothing changed.
    let l = get_json(&ng, "/api?zone=ip&overrides");
    assert_eq!(l["overrides"].as_array().unwrap().len(), 0, "{l}");
    assert_eq!(admitted(&ng, "127.0.0.5", 3), 3);
}

#[test]
fn ranges_are_kept_by_the_state_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let state = dir.path().join("ip.state");
    let conf = conf(&format!("state={}", state.display()));
    let up = Upstream::start();
    let ng = Nginx::builder().upstream_of(&up).start(&conf);
    put_ok(&ng, "cidr=127.0.0.0/24", r#"{"block":true}"#);
    put_ok(&ng, "cidr=2001:db8::/56", r#"{"exempt":true}"#);
    assert_eq!(from(&ng, "127.0.0.5"), 429);
    let master = ng.master_pid();
    // SAFETY: kill(2) only sends a signal to a pid.
    unsafe { libc::kill(master, libc::SIGQUIT) };
    assert!(
        wait_for(Duration::from_secs(10), || pid_gone(master)),
        "nginx did not quit"
    );
    drop(ng);
    let ng = Nginx::builder().upstream_of(&up).start(&conf);
    assert!(
        ng.error_log().contains("restored 2 overrides"),
        "{}",
        ng.error_log()
    );
    assert_eq!(from(&ng, "127.0.0.5"), 429, "the /24 still blocks");
    assert_eq!(admitted(&ng, "2001:db8::77", 6), 6, "the /56 still exempts");
    assert_eq!(admitted(&ng, "127.0.1.5", 4), 3);
}

/// A gateway (2 workers) whose zone `ip` syncs through Redis on `port`.
fn fleet_conf(port: u16) -> String {
    conf(&format!(
        "redis=127.0.0.1:{port} sync=100ms secret=range-fleet-secret-0001"
    ))
}

#[test]
fn a_fleet_shares_ranges() {
    let redis = Redis::start();
    let up = Upstream::start();
    let a = Nginx::builder()
        .upstream_of(&up)
        .start(&fleet_conf(redis.1));
    let b = Nginx::builder()
        .upstream_of(&up)
        .start(&fleet_conf(redis.1));
    let soon = Duration::from_secs(5);
    let j = put_ok(&a, "cidr=10.20.0.0/16", r#"{"block":true}"#);
    assert_eq!(j["cluster"], "scheduled", "{j}");
    let hash = || {
        let out = std::process::Command::new(common::redis_servers::cli_bin())
            .args(["-p", &redis.1.to_string(), "HGETALL", "rlw:{ip}:ovr"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert!(
        wait_for(soon, || get_json(&b, "/api?zone=ip&cidr=10.20.0.0/16")
            ["override"]["action"]
            == "block"),
        "B never applied the range; Redis holds {}",
        hash()
    );
    assert_eq!(from(&b, "10.20.30.40"), 429);
    assert_eq!(from(&b, "10.21.0.1"), 200);
    assert_eq!(
        get_json(&b, "/api?zone=ip&cidr=10.20.0.0/16")["override"]["action"],
        "block"
    );
    let r = request(
        b.port,
        "DELETE",
        "/api?zone=ip&cidr=10.20.0.0/16&override",
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    assert!(
        wait_for(soon, || from(&a, "10.20.30.41") == 200),
        "A kept the removed range"
    );
}

/// `n` requests from each of `addrs` at once to `/few/` (held 600 ms by
/// the upstream): how many of each address were admitted, in order.
fn few_at_once(ng: &Nginx, addrs: &[&'static str], n: usize) -> Vec<usize> {
    let port = ng.port;
    let hs: Vec<Vec<_>> = addrs
        .iter()
        .map(|&a| {
            (0..n)
                .map(|_| {
                    std::thread::spawn(move || {
                        let h: &[(&str, &[u8])] = &[("X-Forwarded-For", a.as_bytes())];
                        let r = request(port, "GET", "/few/x?sleep=600", h);
                        if r.status != 200 {
                            assert_eq!(r.header("X-Status"), Some("REJECTED_IN_FLIGHT"));
                        }
                        r.status == 200
                    })
                })
                .collect()
        })
        .collect();
    hs.into_iter()
        .map(|v| v.into_iter().map(|h| h.join().unwrap()))
        .map(|oks| oks.filter(|&ok| ok).count())
        .collect()
}

/// An override of places (`{"in_flight": N}`) on a range gives each of
/// its addresses N places of its own (not N for the range); the most
/// specific override wins, as for the others; a line without
/// `in_flight=` is not given places by it.
#[test]
fn a_range_sets_the_places_of_each_of_its_addresses() {
    let up = Upstream::start();
    let few = "add_header X-Status $rate_limit_window_status always;
            location /few/ { rate_limit_window zone=ip in_flight=2; proxy_pass http://{{UPSTREAM}}; }
            location = /api {";
    let ng = Nginx::builder()
        .upstream_of(&up)
        .start(&conf("").replace("location = /api {", few));
    let j = put_ok(&ng, "cidr=10.1.0.0/16", r#"{"in_flight":1}"#);
    assert_eq!(j["override"]["in_flight"], 1, "{j}");
    // Two addresses of the range: one place each; one outside it: 2.
    let got = few_at_once(&ng, &["10.1.9.8", "10.1.9.9", "10.2.0.1"], 3);
    assert_eq!(got, [1, 1, 2]);
    // The address's own override wins over its range's.
    put_ok(&ng, "addr=10.1.9.9", r#"{"in_flight":3}"#);
    assert_eq!(few_at_once(&ng, &["10.1.9.8", "10.1.9.9"], 3), [1, 3]);
    let g = get_json(&ng, "/api?zone=ip&addr=10.1.9.8");
    assert_eq!(g["override"]["cidr"], "10.1.0.0/16", "{g}");
    // `/` has no in_flight=: its rate of 3, whatever the range says.
    assert_eq!(admitted(&ng, "10.1.9.8", 4), 3);
}
