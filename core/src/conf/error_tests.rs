use super::*;

fn check(directive: &'static str, args: &[&str], valid: &'static [&'static str]) -> String {
    let words: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    check_params(directive, &words, valid)
        .expect_err("refused")
        .to_string()
}

#[test]
fn limit_req_rates_name_window_and_limit() {
    assert_eq!(
        limit_req_rate(b"10r/s"),
        Some(Rate {
            count: 10,
            per: "1s"
        })
    );
    assert_eq!(limit_req_rate(b"300r/m").map(|r| r.per), Some("1m"));
    for bad in [&b"r/s"[..], b"10", b"1.5r/s", b"10r/h", b"-1r/s"] {
        assert_eq!(limit_req_rate(bad), None);
    }
    let e = check("rate_limit_window", &["zone=z", "rate=10r/s"], LIMIT_PARAMS);
    assert_eq!(
        e,
        "\"rate=10r/s\" is limit_req's syntax: rate_limit_window counts requests per window; \
         for 10r/s write \"window=1s\" on \"rate_limit_window_zone\" and \"limit=10\" on \
         \"rate_limit_window\""
    );
    let e = check(
        "rate_limit_window_zone",
        &["zone=z:1m", "rate=30r/m"],
        ZONE_PARAMS,
    );
    assert!(
        e.contains("\"window=1m\"") && e.contains("\"limit=30\""),
        "{e}"
    );
    let e = check("rate_limit_window", &["rate=fast"], LIMIT_PARAMS);
    assert!(e.contains("window=1s limit=10"), "{e}");
}

#[test]
fn burst_and_nodelay_name_limit_and_delay() {
    let e = check(
        "rate_limit_window",
        &["zone=z", "limit=5", "burst=20"],
        LIMIT_PARAMS,
    );
    assert!(e.starts_with("\"burst=20\" is limit_req's syntax"), "{e}");
    assert!(
        e.contains("raise \"limit=\"") && e.contains("\"delay=TIME\""),
        "{e}"
    );
    let e = check("rate_limit_window", &["zone=z", "nodelay"], LIMIT_PARAMS);
    assert!(e.contains("leave \"nodelay\" out"), "{e}");
}

#[test]
fn unknown_parameters_get_the_nearest_name_or_the_list() {
    assert_eq!(
        check("rate_limit_window", &["zone=z", "limt=10"], LIMIT_PARAMS),
        "invalid parameter \"limt=10\" in \"rate_limit_window\": did you mean \"limit=\"?"
    );
    assert_eq!(
        check(
            "rate_limit_window_zone",
            &["zone=z:1m", "widow=1m"],
            ZONE_PARAMS
        ),
        "invalid parameter \"widow=1m\" in \"rate_limit_window_zone\": did you mean \"window=\"?"
    );
    // A bare name without `=` is its parameter.
    assert!(check("rate_limit_window", &["zone"], LIMIT_PARAMS).contains("did you mean \"zone=\"?"));
    assert_eq!(
        check(
            "rate_limit_window",
            &["zone=z", "frobnicate=1"],
            LIMIT_PARAMS
        ),
        "invalid parameter \"frobnicate=1\" in \"rate_limit_window\": use \"zone=\", \
         \"limit=\", \"in_flight=\", \"delay=\", \"delay_max_held=\", \"cost=\", \"count_status=\", \"charge=\", \"ban=\" or \"name=\""
    );
    // The other directive's parameter says where it goes.
    assert_eq!(
        check(
            "rate_limit_window_zone",
            &["zone=z:1m", "limit=10"],
            ZONE_PARAMS
        ),
        "invalid parameter \"limit=10\": it belongs on \"rate_limit_window\""
    );
    assert_eq!(
        check("rate_limit_window", &["zone=z", "window=1s"], LIMIT_PARAMS),
        "invalid parameter \"window=1s\": it belongs on \"rate_limit_window_zone\""
    );
}

#[test]
fn every_duplicate_is_refused() {
    for name in LIMIT_PARAMS {
        let a = format!("{name}1");
        let e = check("rate_limit_window", &[a.as_str(), a.as_str()], LIMIT_PARAMS);
        assert_eq!(
            e,
            format!("duplicate parameter \"{name}\" in \"rate_limit_window\": give it once")
        );
    }
    for name in ZONE_PARAMS {
        let (a, b) = (format!("{name}a"), format!("{name}b"));
        let e = check(
            "rate_limit_window_zone",
            &[&a, "zone=q:1m", &b],
            ZONE_PARAMS,
        );
        assert!(
            e.starts_with(&format!("duplicate parameter \"{name}\"")),
            "{e}"
        );
    }
    let ok: [&[u8]; 3] = [b"zone=z", b"limit=1", b"delay=1s"];
    assert_eq!(check_params("rate_limit_window", &ok, LIMIT_PARAMS), Ok(()));
}

#[test]
fn enum_values_are_listed() {
    assert_eq!(
        invalid_value(
            "rate_limit_window_phase",
            b"post_access",
            &["preaccess", "postaccess"]
        )
        .to_string(),
        "invalid value \"post_access\" in \"rate_limit_window_phase\": use \"preaccess\" or \
         \"postaccess\""
    );
    assert_eq!(
        invalid_value("rate_limit_window_headers", b"x", &["off", "on", "ietf"]).to_string(),
        "invalid value \"x\" in \"rate_limit_window_headers\": use \"off\", \"on\" or \"ietf\""
    );
}

#[test]
fn fractional_times_suggest_whole_units() {
    assert_eq!(fractional_time_ms(b"1.5m"), Some(90_000));
    assert_eq!(fractional_time_ms(b"0.5h"), Some(1_800_000));
    assert_eq!(fractional_time_ms(b"1.25s"), Some(1_250));
    assert_eq!(fractional_time_ms(b"1m"), None);
    assert_eq!(fractional_time_ms(b"1.m"), None);
    assert_eq!(fractional_time_ms(b"1.5x"), None);
    let msg = |v: &str| fractional_time("window", v.as_bytes()).map(|e| e.to_string());
    assert_eq!(
        msg("1.5m").unwrap(),
        "invalid window \"1.5m\": nginx times are whole numbers; write window=90s"
    );
    assert!(msg("1.5h").unwrap().ends_with("write window=90m"));
    assert!(
        msg("2.5")
            .unwrap()
            .ends_with("write window=2s or window=3s"),
        "{:?}",
        msg("2.5")
    );
    assert!(msg("1.25s")
        .unwrap()
        .contains("whole number of seconds; write window=1s or window=2s"));
    assert!(msg("0.5s").unwrap().ends_with("write window=1s"));
    assert_eq!(msg("abc"), None);
    assert_eq!(msg("1m"), None);
}

#[test]
fn units_are_the_largest_whole_one() {
    let s = |ms| Units(ms).to_string();
    assert_eq!(
        [s(90_000), s(120_000), s(3_600_000), s(1_500), s(86_400_000)],
        ["90s", "2m", "1h", "1500ms", "1d"]
    );
}

#[test]
fn undefined_zones_name_the_nearest() {
    let declared: [&[u8]; 2] = [b"per_ip", b"api"];
    assert_eq!(
        undefined_zone(b"per-ip", &declared).to_string(),
        "zone \"per-ip\" used by \"rate_limit_window\" is not defined by any \
         \"rate_limit_window_zone\": did you mean \"per_ip\"?"
    );
    assert_eq!(
        undefined_zone(b"nope", &declared).to_string(),
        "zone \"nope\" used by \"rate_limit_window\" is not defined by any \
         \"rate_limit_window_zone\": declare it in http{} with \"rate_limit_window_zone KEY \
         zone=nope:SIZE;\""
    );
}

#[test]
fn reload_changes_name_what_changed_as_written() {
    let z = |key: &'static str, ms, src: &'static str| ZoneIdentity {
        key: key.as_bytes(),
        window_ms: ms,
        window_src: src.as_bytes(),
    };
    assert_eq!(
        zone_change(b"z", z("$k", 3_600_000, "1h"), z("$k", 3_600_000, "60m")),
        None
    );
    let e = zone_change(b"z", z("$k", 3_600_000, "1h"), z("$k", 1_800_000, "30m"))
        .unwrap()
        .to_string();
    assert_eq!(
        e,
        "rate_limit_window_zone \"z\": window=30m cannot replace the running window=1h on \
         reload (the counts are per window): keep the running value, give the new one a new \
         zone name, or restart nginx"
    );
    assert!(!e.contains("key"), "{e}");
    let e = zone_change(b"z", z("$k", 60_000, ""), z("$j", 60_000, ""))
        .unwrap()
        .to_string();
    assert!(
        e.contains("key \"$j\" cannot replace the running key \"$k\""),
        "{e}"
    );
    assert!(!e.contains("window="), "{e}");
    // The default window is shown in whole units.
    let e = zone_change(b"z", z("$k", 60_000, ""), z("$k", 10_000, "10s"))
        .unwrap()
        .to_string();
    assert!(
        e.contains("window=10s cannot replace the running window=1m"),
        "{e}"
    );
}

#[test]
fn edit_distances() {
    assert_eq!(edit_distance(b"limt", b"limit"), 1);
    assert_eq!(edit_distance(b"", b"abc"), 3);
    assert_eq!(edit_distance(b"kitten", b"sitting"), 3);
    let c: [&str; 2] = ["zone", "limit"];
    assert_eq!(nearest(b"lmit", &c), Some("limit"));
    assert_eq!(nearest(b"xyz", &c), None);
    // One-letter names never match everything.
    assert_eq!(nearest(b"a", &["b"]), None);
}

#[test]
fn zone_value_errors_print_their_emerg_through_conf_error() {
    let cases: [(ZoneConfError, &str); 4] = [
        (
            ZoneConfError::Ipv6Prefix(Ipv6PrefixError(b"200".to_vec())),
            "invalid ipv6_prefix \"200\": use a number of bits from 32 to 128 (64 groups a \
             host's /64)",
        ),
        (
            ZoneConfError::EmptyState,
            "invalid \"state=\": give the path of the zone's state file, e.g. \
             state=/var/lib/nginx/per_ip.state",
        ),
        (
            ZoneConfError::StateWithRedis(b"z".to_vec()),
            "\"state=\" cannot be combined with \"redis=\" in zone \"z\": the counts of a \
             redis= zone are kept in Redis across restarts",
        ),
        (
            ZoneConfError::ShortSecret { min: 16 },
            "\"redis=\" needs \"secret=\" of at least 16 characters, the same on every \
             gateway: it seeds the hash that names clients in Redis",
        ),
    ];
    for (e, text) in cases {
        assert_eq!(e.to_string(), text);
        assert_eq!(ConfError::from(e), text);
    }
}
