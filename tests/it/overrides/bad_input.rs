//! Bad input changes nothing: every malformed override request is refused
//! with its reason and leaves the zone as it was; bad directive parameters
//! fail `nginx -t`.
use super::*;

#[test]
fn bad_input_changes_nothing() {
    let up = Upstream::start();
    let ng = start(&up);
    let bad = [
        ("not JSON", "limit=5", "not JSON"),
        ("truncated", r#"{"limit":5"#, "not JSON"),
        ("unknown field", r#"{"limit":5,"burst":2}"#, "unknown field"),
        ("negative", r#"{"limit":-1}"#, "negative"),
        ("fractional", r#"{"limit":1.5}"#, "whole"),
        (
            "huge",
            r#"{"limit":10000000000000000000000}"#,
            "from 0 to 1000000",
        ),
        (
            "over the maximum",
            r#"{"limit":1000001}"#,
            "from 0 to 1000000",
        ),
        ("string limit", r#"{"limit":"5"}"#, "integer"),
        ("two actions", r#"{"limit":5,"exempt":true}"#, "one of"),
        ("no action", r#"{"ttl":5}"#, "one of"),
        ("negative ttl", r#"{"block":true,"ttl":-5}"#, "negative"),
        ("block false", r#"{"block":false}"#, "must be true"),
        ("empty", "", "not JSON"),
        // One text per mistake, the range said alike (issue 45).
        (
            "an array",
            "[1]",
            "not an object: the body must be one JSON object",
        ),
        (
            "limit twice",
            r#"{"limit":5,"limit":6}"#,
            "duplicate field \"limit\"",
        ),
        (
            "ttl 0",
            r#"{"limit":5,"ttl":0}"#,
            "\"ttl\" must be an integer from 1 to 315360000",
        ),
        (
            "ttl past ten years",
            r#"{"limit":5,"ttl":315360001}"#,
            "\"ttl\" must be an integer from 1 to 315360000",
        ),
    ];
    for (what, body, msg) in bad {
        let r = put(&ng, "z", "lee", body);
        assert_eq!(r.status, 400, "{what}: {}", r.describe());
        assert!(r
            .header("Content-Type")
            .unwrap()
            .starts_with("application/json"));
        let e = json(&r)["error"].as_str().unwrap().to_string();
        assert!(e.contains(msg), "{what}: {e}");
    }
    // Over 4 KB, with a length and chunked.
    let big = format!(r#"{{"limit":5{}}}"#, " ".repeat(5000));
    let path = "/api?zone=z&key=lee";
    let r = send_body(ng.port, "PUT", path, big.as_bytes(), false);
    assert_eq!(r.status, 413, "{}", r.describe());
    assert!(json(&r)["error"].as_str().unwrap().contains("4096"));
    let r = send_body(ng.port, "PUT", path, big.as_bytes(), true);
    assert_eq!(r.status, 413, "{}", r.describe());
    // Unknown zone, no key, both key= and addr=, addr= on a non-address zone.
    let r = send_body(
        ng.port,
        "PUT",
        "/api?zone=nope&key=lee",
        b"{\"limit\":1}",
        false,
    );
    assert_eq!(r.status, 404, "{}", r.describe());
    assert!(json(&r)["error"].as_str().unwrap().contains("nope"));
    for q in ["zone=z", "zone=z&key=a&addr=1.2.3.4", "zone=z&addr=1.2.3.4"] {
        let r = send_body(
            ng.port,
            "PUT",
            &format!("/api?{q}"),
            b"{\"limit\":1}",
            false,
        );
        assert_eq!(r.status, 400, "{q}: {}", r.describe());
        assert!(json(&r)["error"].is_string());
    }
    // PUT where the API is read-only.
    let r = send_body(
        ng.port,
        "PUT",
        "/ro?zone=z&key=lee",
        b"{\"limit\":1}",
        false,
    );
    assert_eq!(r.status, 405, "{}", r.describe());
    // Bad paging.
    assert_eq!(get(ng.port, "/ro?zone=z&overrides&count=0").status, 400);
    assert_eq!(get(ng.port, "/ro?zone=z&overrides&from=x").status, 400);
    // Nothing changed.
    assert!(lookup(&ng, "z", "lee")["override"].is_null());
    assert_eq!(list(&ng, "z", "")["live"], 0);
    let (s, _) = burst(&ng, "/", "lee", 4);
    assert_eq!(admitted(&s), 2);
    let m = |a| {
        metric(
            &ng,
            "rate_limit_window_overrides_total",
            &[("zone", "z"), ("action", a)],
        )
    };
    assert_eq!(m("limit") + m("block") + m("exempt") + m("remove"), 0.0);
}

#[test]
fn bad_parameters_fail_nginx_t() {
    let conf = |zone_extra: &str, limit_extra: &str| {
        proxy_conf(
            &format!("rate_limit_window_zone $http_x_key zone=z:1m {zone_extra};"),
            "",
            "",
            &format!("rate_limit_window zone=z limit=5 {limit_extra};"),
        )
    };
    for (zone_extra, limit_extra, needle) in [
        ("overrides=0", "", "invalid overrides \"0\""),
        ("overrides=x", "", "invalid overrides \"x\""),
        ("overrides=1048577", "", "an integer from 1 to 1048576"),
        (
            "overrides=2 overrides=3",
            "",
            "duplicate parameter \"overrides=\"",
        ),
        ("", "ban=500ms", "invalid ban \"500ms\""),
        ("", "ban=31d", "use a time from 1s to 30d"),
        ("", "ban=1m ban=2m", "duplicate parameter \"ban=\""),
        (
            "",
            "overrides=5",
            "it belongs on \"rate_limit_window_zone\"",
        ),
    ] {
        let (ok, out) = test_config(&conf(zone_extra, limit_extra));
        assert!(!ok, "{zone_extra} {limit_extra}: accepted");
        assert!(out.contains(needle), "{zone_extra} {limit_extra}: {out}");
    }
    let (ok, out) = test_config(&conf("overrides=1", "ban=30d"));
    assert!(ok, "{out}");
}
