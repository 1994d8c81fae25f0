//! Directive value parsers: accepted and rejected inputs, nginx's own
//! semantics for sizes and times (from `src/core/ngx_parse.c`, nginx 1.28;
//! a differential test against the C code needs nginx, so its behaviour is
//! encoded here case by case), and the exact error messages.

use rate_limit_window_core::conf::parse::*;
use rate_limit_window_core::{FailPolicy, Window};

const MIN: usize = 8 * 4096;

fn w(ms: u64) -> Window {
    Window::from_ms(ms).unwrap()
}

#[test]
fn sizes() {
    let table: &[(&str, Option<usize>)] = &[
        ("0", Some(0)),
        ("1", Some(1)),
        ("32768", Some(32_768)),
        ("1k", Some(1024)),
        ("1K", Some(1024)),
        ("1m", Some(1_048_576)),
        ("1M", Some(1_048_576)),
        ("10m", Some(10_485_760)),
        ("0010k", Some(10_240)),
        ("9223372036854775807", Some(9_223_372_036_854_775_807)),
        ("9223372036854775808", None),
        ("9007199254740991k", Some(9_007_199_254_740_991 * 1024)),
        ("9007199254740992k", None),
        ("8796093022207m", Some(8_796_093_022_207 << 20)),
        ("8796093022208m", None),
        ("99999999999999999999999", None),
        ("", None),
        ("k", None),
        ("m", None),
        // ngx_parse_size has no G suffix (ngx_parse_offset does).
        ("1g", None),
        ("1G", None),
        ("1b", None),
        ("1kb", None),
        ("1 m", None),
        (" 1m", None),
        ("1m ", None),
        ("-1", None),
        ("+1", None),
        ("1.5m", None),
        ("1e6", None),
        ("0x100", None),
        ("1mk", None),
    ];
    for &(s, want) in table {
        assert_eq!(parse_size(s.as_bytes()), want, "parse_size({s:?})");
    }
}

#[test]
fn times_in_ms() {
    let table: &[(&str, Option<u64>)] = &[
        // nginx documentation examples (Syntax: "Measurement units").
        ("10m", Some(600_000)),
        ("1h30m", Some(5_400_000)),
        ("1h 30m", Some(5_400_000)),
        ("500ms", Some(500)),
        ("30s", Some(30_000)),
        ("2w", Some(1_209_600_000)),
        ("1d", Some(86_400_000)),
        // is_sec = 0: a number without unit is seconds all the same.
        ("30", Some(30_000)),
        ("0", Some(0)),
        ("1m30", Some(90_000)),
        ("1s500ms", Some(1_500)),
        ("1d2h3m4s5ms", Some(93_784_005)),
        ("1w1d1h1m1s1ms", Some(694_861_001)),
        ("1h  30m  ", Some(5_400_000)),
        // nginx quirks, mirrored on purpose.
        ("1s2", Some(3_000)),
        ("1s 2", Some(3_000)),
        ("1 2", Some(3_000)),
        (" 5", Some(5_000)),
        ("1hm", Some(3_600_000)),
        ("h1", Some(1_000)),
        ("000001s", Some(1_000)),
        // Rejected.
        ("", None),
        (" ", None),
        ("s", None),
        ("ms", None),
        ("1y", None),
        ("1M", None),
        ("1m1h", None),
        ("1s1m", None),
        ("1ms1s", None),
        ("1s1s", None),
        ("1h1h", None),
        ("1msms", None),
        ("5 s", None),
        ("1 2 3", None),
        ("1.5s", None),
        ("-1s", None),
        ("+1s", None),
        ("1S", None),
        ("1H", None),
        ("1sec", None),
        ("1min", None),
        ("1\t", None),
        // Overflow (NGX_MAX_INT_T_VALUE = i64::MAX).
        ("9223372036854775807ms", Some(9_223_372_036_854_775_807)),
        ("9223372036854775808ms", None),
        ("9223372036854775", Some(9_223_372_036_854_775_000)),
        ("9223372036854776", None),
        ("15250284452w", Some(15_250_284_452 * 604_800_000)),
        ("15250284453w", None),
        ("2562047788015h", Some(2_562_047_788_015 * 3_600_000)),
        ("2562047788016h", None),
        ("2562047788015h9223372036854775807ms", None),
        ("99999999999999999999", None),
    ];
    for &(s, want) in table {
        assert_eq!(parse_time_ms(s.as_bytes()), want, "parse_time_ms({s:?})");
    }
}

#[test]
fn windows() {
    assert_eq!(parse_window(b"1m"), Ok(w(60_000)));
    assert_eq!(parse_window(b"1s"), Ok(w(1_000)));
    assert_eq!(parse_window(b"1"), Ok(w(1_000)));
    assert_eq!(parse_window(b"24h"), Ok(w(86_400_000)));
    assert_eq!(parse_window(b"2d"), Ok(w(2 * 86_400_000)));
    assert_eq!(parse_window(b"31d"), Ok(w(31 * 86_400_000)));
    assert_eq!(parse_window(b"1000ms"), Ok(w(1_000)));
    assert_eq!(parse_window(b"1m30s"), Ok(w(90_000)));
    // The headers count in seconds: a fraction could only be sent wrong.
    for s in ["1500ms", "1s1ms", "86399999ms"] {
        assert_eq!(
            parse_window(s.as_bytes()).unwrap_err(),
            format!(
                "invalid window \"{s}\": it must be a whole number of seconds from 1s to 31d, e.g. window=90s"
            )
        );
    }
    assert_eq!(
        parse_window(b"1x").unwrap_err(),
        "invalid window \"1x\": use a time from 1s to 31d in whole seconds, e.g. window=1m or window=90s"
    );
    assert_eq!(parse_window(b"").unwrap_err(), "invalid window \"\": use a time from 1s to 31d in whole seconds, e.g. window=1m or window=90s");
    for s in ["999ms", "0", "31d1ms", "31d1s", "32d"] {
        assert_eq!(
            parse_window(s.as_bytes()).unwrap_err(),
            format!("invalid window \"{s}\": window must be between 1s and 31d")
        );
    }
}

#[test]
fn limits() {
    for (s, n) in [
        ("0", 0),
        ("1", 1),
        ("100", 100),
        ("1000000", 1_000_000),
        ("0001000000", 1_000_000),
    ] {
        assert_eq!(parse_limit(s.as_bytes()), Ok(n), "{s}");
    }
    for s in [
        "",
        "1000001",
        "-1",
        "+1",
        " 1",
        "1 ",
        "1.0",
        "1e3",
        "10r/s",
        "00000000000",
        "4294967297",
        "$limit",
    ] {
        let e = parse_limit(s.as_bytes()).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "invalid limit \"{s}\": it must be an integer from 0 to 1000000, or a variable"
            )
        );
    }
    let e = parse_limit(b"1\n2\"3\xff").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid limit \"1\\x0a2\\\"3\\xff\": it must be an integer from 0 to 1000000, or a variable"
    );
    let e = parse_limit(&[b'7'; 200]).unwrap_err();
    assert!(e.truncated());
    assert!(e
        .to_string()
        .starts_with(&format!("invalid limit \"{}...\": ", "7".repeat(64))));
}

fn zone(args: &str) -> Result<ZoneParams, String> {
    let words: Vec<&[u8]> = args.split(' ').map(str::as_bytes).collect();
    parse_zone_params(&words, MIN).map_err(|e| e.to_string())
}

#[test]
fn zone_params_accepted() {
    let p = zone("zone=api:10m").unwrap();
    assert_eq!(
        p,
        ZoneParams {
            name: b"api".to_vec(),
            size: 10 << 20,
            window: w(60_000),
            window_src: vec![],
            fail: FailPolicy::Open,
            redis: None,
            ipv6_prefix: None,
        }
    );
    assert_eq!(
        zone("zone=a:1m ipv6_prefix=64").unwrap().ipv6_prefix,
        Some(64)
    );
    assert!(zone("zone=a:1m ipv6_prefix=16")
        .unwrap_err()
        .starts_with("invalid ipv6_prefix \"16\""));
    // The name ends at the last `:`, and only token characters pass.
    assert_eq!(
        zone("window=1h zone=a:b:32k fail=closed").unwrap_err(),
        "invalid zone name \"a:b\": use only letters, digits and !#$%&'*+-.^_`|~"
    );
    let p = zone("window=1h zone=a.b:32k fail=closed").unwrap();
    assert_eq!((p.name.as_slice(), p.size), (&b"a.b"[..], 32_768));
    assert_eq!((p.window, p.fail), (w(3_600_000), FailPolicy::Closed));
    // A parameter given twice is refused, whichever it is.
    for twice in [
        "zone=x:1m zone=y:2m",
        "zone=x:1m fail=closed fail=open",
        "zone=x:1m window=1s window=2s",
    ] {
        assert!(
            zone(twice).unwrap_err().starts_with("duplicate parameter"),
            "{twice}"
        );
    }
    let p = zone("zone=x:1m window=90s").unwrap();
    assert_eq!(p.window_src, b"90s");

    let r = zone("zone=z:1m redis=127.0.0.1:6379")
        .unwrap()
        .redis
        .unwrap();
    assert_eq!(
        (r.url.as_str(), r.sync_ms, r.secret.as_slice()),
        ("redis://127.0.0.1:6379/", 100, &b""[..])
    );
    let r = zone("secret=s3cr=t sync=10ms zone=z:1m redis=unix:/run/redis/r.sock")
        .unwrap()
        .redis
        .unwrap();
    assert_eq!(r.url, "redis+unix:///run/redis/r.sock");
    assert_eq!((r.sync_ms, r.secret.as_slice()), (10, &b"s3cr=t"[..]));
    assert_eq!(
        zone("zone=z:1m redis=h:1 sync=60")
            .unwrap()
            .redis
            .unwrap()
            .sync_ms,
        60_000
    );
    assert_eq!(
        zone("zone=z:1m redis=h:1 sync=1s500ms")
            .unwrap()
            .redis
            .unwrap()
            .sync_ms,
        1_500
    );
    assert_eq!(
        zone("zone=z:1m redis=[2001:db8::1]:65535")
            .unwrap()
            .redis
            .unwrap()
            .url,
        "redis://[2001:db8::1]:65535/"
    );
    assert_eq!(
        zone("zone=z:1m redis=cache-1.example.com:6380")
            .unwrap()
            .redis
            .unwrap()
            .url,
        "redis://cache-1.example.com:6380/"
    );
}

#[test]
fn zone_params_rejected() {
    let table: &[(&str, &str)] = &[
        (
            "",
            "invalid parameter \"\" in \"rate_limit_window_zone\": use \"zone=\", \"window=\", \"calendar=\", \"tz=\", \"mode=\", \"fail=\", \"ipv6_prefix=\", \"state=\", \"redis=\", \"sync=\", \"secret=\", \"redis_mode=\", \"redis_master=\", \"redis_ca=\", \"redis_cert=\", \"redis_key=\", \"redis_password_file=\", \"redis_outage=\" or \"overrides=\"",
        ),
        (
            "window=1m",
            "\"rate_limit_window_zone\" must have \"zone\" parameter: write zone=NAME:SIZE, e.g. zone=per_ip:10m",
        ),
        (
            "zone=api",
            "invalid zone size \"zone=api\": use zone=NAME:SIZE, the size in bytes, k or m, e.g. zone=per_ip:10m",
        ),
        (
            "zone=:10m",
            "invalid zone size \"zone=:10m\": use zone=NAME:SIZE, the size in bytes, k or m, e.g. zone=per_ip:10m",
        ),
        (
            "zone=api:",
            "invalid zone size \"zone=api:\": use zone=NAME:SIZE, the size in bytes, k or m, e.g. zone=per_ip:10m",
        ),
        (
            "zone=api:10g",
            "invalid zone size \"zone=api:10g\": use zone=NAME:SIZE, the size in bytes, k or m, e.g. zone=per_ip:10m",
        ),
        (
            "zone=api:-1",
            "invalid zone size \"zone=api:-1\": use zone=NAME:SIZE, the size in bytes, k or m, e.g. zone=per_ip:10m",
        ),
        (
            "zone=api:32767",
            "zone \"api\" is too small: it must be at least 32768 bytes; write zone=api:32k or larger",
        ),
        (
            "zone=api:0",
            "zone \"api\" is too small: it must be at least 32768 bytes; write zone=api:32k or larger",
        ),
        (
            "zone=api:1m window=1y",
            "invalid window \"1y\": use a time from 1s to 31d in whole seconds, e.g. window=1m or window=90s",
        ),
        (
            "zone=api:1m window=",
            "invalid window \"\": use a time from 1s to 31d in whole seconds, e.g. window=1m or window=90s",
        ),
        (
            "zone=api:1m window=500ms",
            "invalid window \"500ms\": window must be between 1s and 31d",
        ),
        (
            "zone=api:1m fail=maybe",
            "invalid value \"maybe\" in \"fail=\": use \"open\" or \"closed\"",
        ),
        (
            "zone=api:1m fail=",
            "invalid value \"\" in \"fail=\": use \"open\" or \"closed\"",
        ),
        (
            "zone=api:1m Zone=x:1m",
            "invalid parameter \"Zone=x:1m\" in \"rate_limit_window_zone\": did you mean \"zone=\"?",
        ),
        (
            "zone=api:1m window=1.5m",
            "invalid window \"1.5m\": nginx times are whole numbers; write window=90s",
        ),
        (
            "zone=api:1m rate=10r/s",
            "\"rate=10r/s\" is limit_req's syntax: rate_limit_window counts requests per window; \
             for 10r/s write \"window=1s\" on \"rate_limit_window_zone\" and \"limit=10\" on \
             \"rate_limit_window\"",
        ),
        (
            "zone=api:1m sync=1s",
            "\"sync=\" and \"secret=\" need \"redis=\"",
        ),
        (
            "zone=api:1m secret=x",
            "\"sync=\" and \"secret=\" need \"redis=\"",
        ),
        (
            "zone=api:1m secret=",
            "\"sync=\" and \"secret=\" need \"redis=\"",
        ),
        (
            "zone=api:1m redis=h:1 sync=9ms",
            "invalid sync interval \"9ms\" in \"sync=\": it must be between 10ms and 60s, e.g. sync=100ms",
        ),
        (
            "zone=api:1m redis=h:1 sync=60s1ms",
            "invalid sync interval \"60s1ms\" in \"sync=\": it must be between 10ms and 60s, e.g. sync=100ms",
        ),
        (
            "zone=api:1m redis=h:1 sync=fast",
            "invalid sync interval \"fast\" in \"sync=\": it must be between 10ms and 60s, e.g. sync=100ms",
        ),
    ];
    for &(args, msg) in table {
        assert_eq!(zone(args).unwrap_err(), msg, "{args:?}");
    }
    for addr in [
        "",
        "localhost",
        "localhost:",
        ":6379",
        "h:0",
        "h:65536",
        "h:99999999",
        "h:-1",
        "h:+1",
        "h:6379x",
        "a/b:1",
        "::1:6379",
        "[::1]",
        "[]:1",
        "[zz]:1",
        "redis://h:1/x",
        "unix:",
        "unix:relative.sock",
        "tcp:/x",
    ] {
        assert_eq!(
            zone(&format!("zone=api:1m redis={addr}")).unwrap_err(),
            format!(
                "invalid redis address \"{addr}\": use HOST:PORT, unix:/path or \
                 redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DB]"
            ),
            "{addr:?}"
        );
    }
    // Bytes from the file are escaped and cut in messages.
    let long = format!("zone=api:1m x{}", "y".repeat(100));
    assert_eq!(
        zone(&long).unwrap_err(),
        format!(
            "invalid parameter \"x{}...\" in \"rate_limit_window_zone\": {}",
            "y".repeat(63),
            "use \"zone=\", \"window=\", \"calendar=\", \"tz=\", \"mode=\", \"fail=\", \"ipv6_prefix=\", \"state=\", \"redis=\", \"sync=\", \"secret=\", \"redis_mode=\", \"redis_master=\", \"redis_ca=\", \"redis_cert=\", \"redis_key=\", \"redis_password_file=\", \"redis_outage=\" or \"overrides=\""
        )
    );
    let words: [&[u8]; 2] = [b"zone=a:1m", b"bad\n"];
    assert_eq!(
        parse_zone_params(&words, MIN).unwrap_err(),
        format!("invalid parameter \"bad\\x0a\" in \"rate_limit_window_zone\": {}", "use \"zone=\", \"window=\", \"calendar=\", \"tz=\", \"mode=\", \"fail=\", \"ipv6_prefix=\", \"state=\", \"redis=\", \"sync=\", \"secret=\", \"redis_mode=\", \"redis_master=\", \"redis_ca=\", \"redis_cert=\", \"redis_key=\", \"redis_password_file=\", \"redis_outage=\" or \"overrides=\"")
    );
    // A zone name of other than token characters, escaped in the message.
    for (name, shown) in [
        (&b"a\x1b[31m"[..], "a\\x1b[31m"),
        (b"a\"b", "a\\\"b"),
        (b"a\r\nb", "a\\x0d\\x0ab"),
        (b"a b", "a b"),
        (b"a,b", "a,b"),
    ] {
        let arg = [b"zone=", name, b":1m"].concat();
        assert_eq!(
            parse_zone_params(&[&arg], MIN).unwrap_err(),
            format!("invalid zone name \"{shown}\": use only letters, digits and !#$%&'*+-.^_`|~")
        );
    }
    let every = b"zone=AZaz09!#$%&'*+-.^_`|~:1m";
    assert_eq!(
        parse_zone_params(&[every], MIN).unwrap().name,
        b"AZaz09!#$%&'*+-.^_`|~"
    );
}

fn limit(args: &str) -> Result<LimitParams, String> {
    let words: Vec<&[u8]> = args.split(' ').map(str::as_bytes).collect();
    parse_limit_params(&words).map_err(|e| e.to_string())
}

#[test]
fn limit_params() {
    assert_eq!(
        limit("zone=api limit=100").unwrap(),
        LimitParams {
            zone: b"api".to_vec(),
            limit: LimitSpec::Fixed(100)
        }
    );
    assert_eq!(
        limit("limit=$http_x_tier_limit zone=api").unwrap(),
        LimitParams {
            zone: b"api".to_vec(),
            limit: LimitSpec::Variable(b"$http_x_tier_limit".to_vec())
        }
    );
    assert_eq!(limit("zone=a limit=0").unwrap().limit, LimitSpec::Fixed(0));
    assert_eq!(
        limit("zone=a limit=${tier}x").unwrap().limit,
        LimitSpec::Variable(b"${tier}x".to_vec())
    );
    assert_eq!(
        limit("zone=a limit=1 limit=2 zone=b").unwrap_err(),
        "duplicate parameter \"limit=\" in \"rate_limit_window\": give it once"
    );

    let table: &[(&str, &str)] = &[
        (
            "limit=1",
            "\"rate_limit_window\" must have \"zone\" parameter: write zone=NAME, a rate_limit_window_zone's name",
        ),
        (
            "zone=api",
            "\"rate_limit_window\" must have \"limit\" parameter: write limit=N (requests per window) or limit=$variable",
        ),
        (
            "zone= limit=1",
            "invalid zone name \"zone=\" in \"rate_limit_window\": give the name of a rate_limit_window_zone, e.g. zone=per_ip",
        ),
        (
            "zone=a limit=",
            "invalid limit \"\": it must be an integer from 0 to 1000000, or a variable",
        ),
        (
            "zone=a limit=1000001",
            "invalid limit \"1000001\": it must be an integer from 0 to 1000000, or a variable",
        ),
        (
            "zone=a limit=10r/s",
            "\"limit=10r/s\" is limit_req's syntax: rate_limit_window counts requests per window; \
             for 10r/s write \"window=1s\" on \"rate_limit_window_zone\" and \"limit=10\" on \
             \"rate_limit_window\"",
        ),
        (
            "zone=a limit=1 limit=2",
            "duplicate parameter \"limit=\" in \"rate_limit_window\": give it once",
        ),
        (
            "zone=a limit=1 limt=2",
            "invalid parameter \"limt=2\" in \"rate_limit_window\": did you mean \"limit=\"?",
        ),
    ];
    for &(args, msg) in table {
        assert_eq!(limit(args).unwrap_err(), msg, "{args:?}");
    }
}

#[test]
fn never_panics_on_short_inputs() {
    // Every string of up to 3 bytes over an alphabet of the interesting
    // characters, through every parser.
    let alphabet = b"019kKmMgGwdhsyM :=$/[]x\xff";
    let mut inputs: Vec<Vec<u8>> = vec![vec![]];
    for len in 1..=3 {
        let prev: Vec<Vec<u8>> = inputs
            .iter()
            .filter(|v| v.len() == len - 1)
            .cloned()
            .collect();
        for p in prev {
            for &c in alphabet {
                let mut v = p.clone();
                v.push(c);
                inputs.push(v);
            }
        }
    }
    for s in &inputs {
        let _ = parse_size(s);
        let _ = parse_time_ms(s);
        let _ = parse_limit(s);
        let _ = parse_window(s);
        for prefix in [
            &b"zone=a:"[..],
            b"zone=",
            b"window=",
            b"redis=",
            b"redis=unix:",
            b"sync=",
            b"limit=",
        ] {
            let arg = [prefix, s.as_slice()].concat();
            let _ = parse_zone_params(&[b"zone=z:1m", b"redis=h:1", &arg], MIN);
            let _ = parse_limit_params(&[b"zone=z", &arg]);
        }
    }
}
