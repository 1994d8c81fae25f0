use super::*;

/// The directive's words, split at spaces.
fn parse(words: &str) -> Result<LimitDirective, ConfError> {
    let w: Vec<&[u8]> = words.split(' ').map(str::as_bytes).collect();
    parse_limit_directive(&w)
}

/// The `[emerg]` text of a refused directive.
fn err(words: &str) -> String {
    parse(words).expect_err(words).to_string()
}

#[test]
fn costs() {
    assert_eq!(parse_cost(b"1"), Ok(1));
    assert_eq!(parse_cost(b"10"), Ok(10));
    assert_eq!(parse_cost(b"1000000"), Ok(MAX_LIMIT));
    for bad in [
        &b""[..],
        b"0",
        b"-1",
        b" 5",
        b"5 ",
        b"1e3",
        b"0x10",
        b"abc",
        b"1000001",
        b"99999999999",
    ] {
        assert!(parse_cost(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn status_lists() {
    let s = parse_status_list(b"401,403,5xx").unwrap();
    for yes in [401, 403, 500, 504, 599] {
        assert!(s.contains(yes), "{yes}");
    }
    for no in [200, 400, 404, 499, 600, 9999] {
        assert!(!s.contains(no), "{no}");
    }
    assert!(parse_status_list(b"4XX").unwrap().contains(499));
    for bad in [
        &b""[..],
        b"401,",
        b"99",
        b"600",
        b"6xx",
        b"40x",
        b"4011",
        b"abc",
    ] {
        assert!(parse_status_list(bad).is_err(), "{bad:?}");
    }
    assert_eq!(
        parse_status_list(b"401,6xx").unwrap_err().to_string(),
        "invalid status \"6xx\" in \"count_status=\": use codes from 100 to 599 and classes 1xx to 5xx, separated by commas, e.g. count_status=401,403,5xx"
    );
}

#[test]
fn every_parameter_parsed_into_its_type() {
    let d = parse(
        "zone=z cost=$c limit=5 count_status=401 charge=$t delay=1500ms delay_max_held=7 ban=10m",
    )
    .unwrap();
    assert_eq!(d.zone, b"z");
    assert_eq!(d.limit, Some(ValueSpec::Fixed(5)));
    assert_eq!(d.in_flight, None);
    assert_eq!(d.cost, ValueSpec::Variable(b"$c".to_vec()));
    assert!(d.count_status.unwrap().contains(401));
    assert_eq!(d.charge, Some(b"$t".to_vec()));
    assert_eq!(
        d.delay,
        DelayParams {
            delay_ms: 1_500,
            max_held: Some(7)
        }
    );
    assert_eq!(d.ban_ms, Some(600_000));
    let d = parse("zone=z limit=$l").unwrap();
    assert_eq!(d.limit, Some(ValueSpec::Variable(b"$l".to_vec())));
    assert_eq!(
        (d.cost, d.count_status, d.charge, d.delay, d.ban_ms),
        (
            ValueSpec::Fixed(1),
            None,
            None,
            DelayParams::default(),
            None
        )
    );
    // nginx time syntax: a bare number is seconds.
    assert_eq!(
        parse("zone=z limit=1 delay=2").unwrap().delay.delay_ms,
        2_000
    );
    assert_eq!(parse("zone=z limit=1 delay=0").unwrap().delay.delay_ms, 0);
    assert_eq!(parse("zone=z limit=1 ban=30").unwrap().ban_ms, Some(30_000));
    let held = parse("zone=z limit=1 delay_max_held=0").unwrap();
    assert_eq!(held.delay.max_held, Some(0));
}

#[test]
fn every_duplicate_is_refused_one_way() {
    // Valid or not, the second one is refused before any value is read.
    for (first, second) in [
        ("zone=z", "zone=y"),
        ("limit=5", "limit=10"),
        ("limit=5", "limit=5"),
        ("cost=1", "cost=2"),
        ("count_status=401", "count_status=403"),
        ("charge=$a", "charge=$b"),
        ("delay=1s", "delay=2s"),
        ("delay_max_held=1", "delay_max_held=2"),
        ("ban=1m", "ban=2m"),
        ("name=a", "name=b"),
        ("cost=0", "cost=0"),
        ("delay=x", "delay=y"),
    ] {
        let words = format!("zone=a limit=1 {first} {second}");
        let name = &first[..=first.find('=').unwrap()];
        let e = parse(&words).unwrap_err();
        assert_eq!(
            e,
            ConfError::Duplicate {
                directive: "rate_limit_window",
                name: name.as_bytes().to_vec()
            },
            "{words}"
        );
        assert_eq!(
            e.to_string(),
            format!("duplicate parameter \"{name}\" in \"rate_limit_window\": give it once")
        );
    }
}

#[test]
fn bad_values_are_named() {
    assert_eq!(
        err("zone=z limit=1 delay=soon"),
        "invalid delay \"soon\": use delay=TIME, a time from 0 to 1h, e.g. delay=500ms or delay=10s"
    );
    assert!(err("zone=z limit=1 delay=").starts_with("invalid delay \"\": use delay=TIME"));
    assert_eq!(
        err("zone=z limit=1 delay=2h"),
        "delay \"2h\" is longer than 1h: use a delay= from 0 to 1h"
    );
    assert!(parse("zone=z limit=1 delay=1h").is_ok());
    for bad in [
        "delay_max_held=",
        "delay_max_held=-1",
        "delay_max_held=1000001",
    ] {
        let e = err(&format!("zone=z limit=1 {bad}"));
        assert!(e.starts_with("invalid delay_max_held"), "{e}");
    }
    for bad in ["ban=", "ban=500ms", "ban=31d", "ban=x"] {
        let e = err(&format!("zone=z limit=1 {bad}"));
        assert!(e.starts_with("invalid ban"), "{e}");
    }
    assert_eq!(
        err("zone=z limit=5 cost=0"),
        "invalid cost \"0\": an integer from 1 to 1000000, or a variable"
    );
    assert_eq!(
        err("zone=z limit=5 count_status=2"),
        "invalid status \"2\" in \"count_status=\": use codes from 100 to 599 and classes 1xx to 5xx, separated by commas, e.g. count_status=401,403,5xx"
    );
    let e = err("zone=z limit=5 charge=5");
    assert!(e.contains("a fixed count is \"cost=\""), "{e}");
    assert!(parse("zone=z limit=5 charge=").is_err());
    assert_eq!(
        err("zone=z limit=3 cost=4"),
        "cost=4 is above limit=3 in \"rate_limit_window\": such a request is never admitted; use a cost= from 1 to 3, or raise limit="
    );
    assert!(parse("zone=z limit=0 cost=1").is_ok());
    assert!(parse("zone=z limit=$l cost=4").is_ok());
    assert_eq!(
        err("limit=5"),
        "\"rate_limit_window\" must have \"zone\" parameter: write zone=NAME, a rate_limit_window_zone's name"
    );
    assert_eq!(
        err("zone=z"),
        "\"rate_limit_window\" must have \"limit\" parameter: write limit=N (requests per window) or limit=$variable"
    );
    assert_eq!(
        err("zone= limit=5"),
        "invalid zone name \"zone=\" in \"rate_limit_window\": give the name of a rate_limit_window_zone, e.g. zone=per_ip"
    );
}

#[test]
fn errors_come_in_a_fixed_order() {
    // Names first, then ban, delay, delay_max_held, cost, count_status,
    // charge, zone and limit.
    assert!(err("zone=z limit=x burst=5").contains("limit_req's syntax"));
    assert!(err("limit=x ban=x").starts_with("invalid ban"));
    assert!(err("cost=0 delay=x zone=z limit=1").starts_with("invalid delay"));
    assert!(err("limit=x cost=0 zone=z").starts_with("invalid cost"));
    assert!(err("zone=z limit=x count_status=1").starts_with("invalid status"));
    assert!(err("zone=z limit=x").starts_with("invalid limit \"x\""));
}

#[test]
fn route_names() {
    assert_eq!(parse("zone=z limit=1").unwrap().name, None);
    let d = parse("zone=z limit=1 name=search.v2").unwrap();
    assert_eq!(d.name.as_deref(), Some(&b"search.v2"[..]));
    let longest = "a".repeat(ROUTE_NAME_MAX);
    assert!(parse(&format!("zone=z limit=1 name={longest}")).is_ok());
    for bad in ["", "a\"b", "a:b", "a{b}", &"a".repeat(ROUTE_NAME_MAX + 1)] {
        let e = err(&format!("zone=z limit=1 name={bad}"));
        assert!(
            e.starts_with("invalid name \"") && e.contains("a route name of 1 to 64 letters"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn in_flight_with_a_rate_or_alone() {
    let d = parse("zone=z limit=10 in_flight=3").unwrap();
    assert_eq!(d.limit, Some(ValueSpec::Fixed(10)));
    assert_eq!(d.in_flight, Some(ValueSpec::Fixed(3)));
    let d = parse("in_flight=$slots zone=z").unwrap();
    assert_eq!(d.limit, None);
    assert_eq!(d.in_flight, Some(ValueSpec::Variable(b"$slots".to_vec())));
    assert_eq!(d.zone, b"z");
    assert_eq!(
        parse("zone=z in_flight=0").unwrap().in_flight,
        Some(ValueSpec::Fixed(0))
    );
    assert_eq!(
        parse("zone=z in_flight=65535").unwrap().in_flight,
        Some(ValueSpec::Fixed(65535))
    );
    assert_eq!(
        err("zone=z in_flight=65536"),
        "invalid in_flight \"65536\": an integer from 0 to 65535, or a variable"
    );
    assert_eq!(
        err("zone=z in_flight=3 in_flight=4"),
        "duplicate parameter \"in_flight=\" in \"rate_limit_window\": give it once"
    );
    assert_eq!(
        err("zone=z in_flight=3 delay=1s"),
        "\"delay=\" needs \"limit=\": a line with \"in_flight=\" alone counts no rate"
    );
    assert_eq!(
        err("zone=z in_flight=3 cost=2"),
        "\"cost=\" needs \"limit=\": a line with \"in_flight=\" alone counts no rate"
    );
    assert_eq!(
        err("in_flight=3"),
        "\"rate_limit_window\" must have \"zone\" parameter: write zone=NAME, a rate_limit_window_zone's name"
    );
    assert_eq!(
        err("zone=z"),
        "\"rate_limit_window\" must have \"limit\" parameter: write limit=N (requests per window) or limit=$variable"
    );
    for v in [&b""[..], b"-1", b"1.5", b"abc", b"999999"] {
        assert_eq!(parse_in_flight(v), None, "{v:?}");
    }
    assert_eq!(parse_in_flight(b"007"), Some(7));
}
