//! `nginx -t` on the example configs and on every configuration error the
//! module must refuse.
use crate::common;

use common::*;
use std::fs;

/// Every nginx-conf/*.conf passes `nginx -t` as shipped (in a prefix with
/// modules/ and logs/, `/var/lib/nginx/` in a test directory with its
/// `state/`, as the recipes map it; `nginx -t` does not bind the fixed
/// ports).
#[test]
fn example_configs_pass_nginx_t() {
    let mut files: Vec<_> = fs::read_dir(example_conf_dir())
        .expect("nginx-conf/ exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "conf"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 4,
        "expected the four example configs, found {files:?}"
    );
    let mut failures = vec![];
    for f in &files {
        let var_lib = crate::examples::var_lib_nginx();
        let text = crate::examples::under(&fs::read_to_string(f).unwrap(), &var_lib);
        let (ok, out) = test_config(&text);
        if !ok || !out.contains("test is successful") {
            failures.push(format!("{}:\n{out}", f.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "nginx -t failed for:\n{}",
        failures.join("\n")
    );
}

/// Conventions of the example configs: load_module first, relative pid and
/// log paths, at least two workers.
#[test]
fn example_configs_follow_conventions() {
    for name in [
        "gateway.conf",
        "api-tiers.conf",
        "multi.conf",
        "dry-run.conf",
        "problem-json.conf",
        "llm-tokens.conf",
        "quotas.conf",
        "stream.conf",
    ] {
        let path = example_conf_dir().join(name);
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let directives: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        assert_eq!(
            directives.first().copied(),
            Some("load_module modules/ngx_http_rate_limit_window_module.so;"),
            "{name}: first directive"
        );
        let workers = directives
            .iter()
            .find_map(|l| l.strip_prefix("worker_processes "))
            .unwrap_or_else(|| panic!("{name}: no worker_processes"));
        let n: usize = workers.trim_end_matches(';').trim().parse().unwrap_or(0);
        assert!(n >= 2, "{name}: worker_processes {workers}");
        for l in &directives {
            if l.starts_with("pid ") || l.starts_with("error_log ") || l.starts_with("access_log ")
            {
                assert!(!l.contains(" /"), "{name}: absolute path in {l:?}");
            }
        }
    }
    let gw = fs::read_to_string(example_conf_dir().join("gateway.conf")).unwrap();
    for needle in [
        "listen 127.0.0.1:8080",
        "listen 127.0.0.1:8081",
        "rate_limit_window_zone $binary_remote_addr zone=per_ip:10m window=1m;",
        "rate_limit_window zone=per_ip limit=10;",
        "location = /metrics",
        "rate_limit_window_metrics;",
        "proxy_pass http://127.0.0.1:8081",
    ] {
        assert!(gw.contains(needle), "gateway.conf lacks {needle:?}");
    }
}

/// A config whose http block is `body`, with a server on {{PORT}}.
pub(crate) fn conf_with(http_level: &str, location: &str) -> String {
    http_conf(&format!(
        "{http_level}
         server {{ listen 127.0.0.1:{{{{PORT}}}};
           location / {{ {location} proxy_pass http://{{{{UPSTREAM}}}}; }} }}"
    ))
}

pub(crate) const ZONE: &str = "rate_limit_window_zone $http_x_key zone=z:1m window=1m;";

/// A valid config using every directive and edge values passes nginx -t.
#[test]
fn valid_config_with_every_directive() {
    let conf = http_conf(
        "rate_limit_window_zone $http_x_key zone=a:32k;
         rate_limit_window_zone $binary_remote_addr zone=b:1m window=1s fail=closed;
         rate_limit_window_zone \"global\" zone=c:64k window=24h fail=open;
         rate_limit_window_zone $http_x_key$http_x_other zone=d:1m window=90s;
         map $http_x_plan $lim { pro 1000000; default 0; }
         rate_limit_window zone=a limit=10;
         rate_limit_window_status 400;
         rate_limit_window_headers on;
         rate_limit_window_dry_run off;
         rate_limit_window_log_level info;
         server { listen 127.0.0.1:{{PORT}};
           rate_limit_window zone=b limit=1000000;
           rate_limit_window_status 599;
           rate_limit_window_headers ietf;
           rate_limit_window_log_level notice;
           location / { rate_limit_window zone=a limit=0; rate_limit_window zone=b limit=$lim;
                        rate_limit_window zone=c limit=5; rate_limit_window zone=d limit=7;
                        rate_limit_window_headers off; rate_limit_window_dry_run on;
                        rate_limit_window_log_level warn;
                        add_header X-S $rate_limit_window_status;
                        add_header X-R $rate_limit_window_remaining;
                        proxy_pass http://{{UPSTREAM}}; }
           location /e { rate_limit_window_log_level error; rate_limit_window_status 429; }
           location = /metrics { rate_limit_window_metrics; } } ",
    );
    let (ok, out) = test_config(&conf);
    assert!(ok, "{out}");
}

/// Each case: (name, config, substring the [emerg] must contain).
fn error_cases() -> Vec<(&'static str, String, &'static str)> {
    vec![
        (
            "undefined zone",
            conf_with("", "rate_limit_window zone=nope limit=5;"),
            "is not defined",
        ),
        (
            "undefined zone next to a defined one",
            conf_with(ZONE, "rate_limit_window zone=nope limit=5;"),
            "is not defined",
        ),
        (
            "zone too small",
            conf_with(
                "rate_limit_window_zone $http_x_key zone=z:16k;",
                "rate_limit_window zone=z limit=5;",
            ),
            "is too small",
        ),
        (
            "zone without size",
            conf_with(
                "rate_limit_window_zone $http_x_key zone=z;",
                "rate_limit_window zone=z limit=5;",
            ),
            "invalid zone size",
        ),
        (
            "zone with bad size",
            conf_with(
                "rate_limit_window_zone $http_x_key zone=z:lots;",
                "rate_limit_window zone=z limit=5;",
            ),
            "invalid zone size",
        ),
        (
            "zone declaration without zone=",
            conf_with("rate_limit_window_zone $http_x_key window=1m;", ""),
            "must have \"zone\" parameter",
        ),
        (
            "window=0s",
            conf_with(
                "rate_limit_window_zone $http_x_key zone=z:1m window=0s;",
                "rate_limit_window zone=z limit=5;",
            ),
            "invalid window",
        ),
        (
            "window=abc",
            conf_with(
                "rate_limit_window_zone $http_x_key zone=z:1m window=abc;",
                "rate_limit_window zone=z limit=5;",
            ),
            "invalid window",
        ),
        (
            "window=32d (over 31d)",
            conf_with(
                "rate_limit_window_zone $http_x_key zone=z:1m window=32d;",
                "rate_limit_window zone=z limit=5;",
            ),
            "invalid window",
        ),
        (
            "window=2678401s (over 31d)",
            conf_with(
                "rate_limit_window_zone $http_x_key zone=z:1m window=2678401s;",
                "rate_limit_window zone=z limit=5;",
            ),
            "invalid window",
        ),
        (
            "window=500ms (under 1s)",
            conf_with(
                "rate_limit_window_zone $http_x_key zone=z:1m window=500ms;",
                "rate_limit_window zone=z limit=5;",
            ),
            "invalid window",
        ),
        (
            "same zone name, other key",
            conf_with(
                "rate_limit_window_zone $http_x_key zone=z:1m;
                 rate_limit_window_zone $http_x_other zone=z:1m;",
                "rate_limit_window zone=z limit=5;",
            ),
            "is already bound",
        ),
        (
            "limit=-1",
            conf_with(ZONE, "rate_limit_window zone=z limit=-1;"),
            "invalid limit",
        ),
        (
            "limit=abc",
            conf_with(ZONE, "rate_limit_window zone=z limit=abc;"),
            "invalid limit",
        ),
        (
            "limit=2000000",
            conf_with(ZONE, "rate_limit_window zone=z limit=2000000;"),
            "invalid limit",
        ),
        (
            "limit=1000001",
            conf_with(ZONE, "rate_limit_window zone=z limit=1000001;"),
            "invalid limit",
        ),
        (
            "no limit=",
            conf_with(ZONE, "rate_limit_window zone=z;"),
            "must have \"limit\" parameter",
        ),
        (
            "rate_limit_window without zone=",
            conf_with(ZONE, "rate_limit_window limit=5;"),
            "must have \"zone\" parameter",
        ),
        (
            "unknown parameter burst=5",
            conf_with(ZONE, "rate_limit_window zone=z limit=5 burst=5;"),
            "is limit_req's syntax",
        ),
        (
            "unknown zone parameter",
            conf_with(
                "rate_limit_window_zone $http_x_key zone=z:1m rate=5r/s;",
                "rate_limit_window zone=z limit=5;",
            ),
            "is limit_req's syntax",
        ),
        (
            "same zone twice in one location",
            conf_with(
                ZONE,
                "rate_limit_window zone=z limit=5; rate_limit_window zone=z limit=6;",
            ),
            "duplicate",
        ),
        (
            "status 399",
            conf_with(ZONE, "rate_limit_window_status 399;"),
            "must be between 400 and 599",
        ),
        (
            "status 600",
            conf_with(ZONE, "rate_limit_window_status 600;"),
            "must be between 400 and 599",
        ),
        (
            "headers maybe",
            conf_with(ZONE, "rate_limit_window_headers maybe;"),
            "invalid value",
        ),
        (
            "dry_run maybe",
            conf_with(ZONE, "rate_limit_window_dry_run maybe;"),
            "invalid value",
        ),
        // Not listed in the spec with a message: any [emerg] is accepted.
        (
            "log_level bogus",
            conf_with(ZONE, "rate_limit_window_log_level bogus;"),
            "",
        ),
        (
            "fail=maybe",
            conf_with(
                "rate_limit_window_zone $http_x_key zone=z:1m fail=maybe;",
                "",
            ),
            "",
        ),
        (
            "zone directive outside http",
            http_conf(
                "server { listen 127.0.0.1:{{PORT}};
                   rate_limit_window_zone $http_x_key zone=z:1m; }",
            ),
            "is not allowed here",
        ),
        (
            "metrics directive outside location",
            http_conf("rate_limit_window_metrics;"),
            "is not allowed here",
        ),
    ]
}

/// Table of configuration errors; reports every case that misbehaves.
#[test]
fn config_errors_are_refused() {
    let mut failures = vec![];
    for (name, conf, needle) in error_cases() {
        let (ok, out) = test_config(&conf);
        let emerg_line = out.lines().find(|l| l.contains("[emerg]")).unwrap_or("");
        if ok {
            failures.push(format!(
                "[{name}] nginx -t succeeded, expected failure with {needle:?}"
            ));
        } else if emerg_line.is_empty() || !emerg_line.contains(needle) {
            failures.push(format!(
                "[{name}] expected [emerg] containing {needle:?}, got:\n{out}"
            ));
        } else if emerg_line.contains("unknown directive") {
            failures.push(format!("[{name}] directive not implemented: {emerg_line}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} config error cases failed:\n{}",
        failures.len(),
        error_cases().len(),
        failures.join("\n")
    );
}

/// The same key/zone declared twice identically is still a single zone use;
/// a zone may be used from several locations and servers.
#[test]
fn zone_used_from_several_places() {
    let conf = http_conf(
        "rate_limit_window_zone $http_x_key zone=z:1m window=1m;
         server { listen 127.0.0.1:{{PORT}}; rate_limit_window zone=z limit=3;
           location /a { rate_limit_window zone=z limit=5; proxy_pass http://{{UPSTREAM}}; }
           location /b { proxy_pass http://{{UPSTREAM}}; } }
         server { listen 127.0.0.1:{{PORT2}};
           location / { rate_limit_window zone=z limit=9; proxy_pass http://{{UPSTREAM}}; } }",
    );
    let (ok, out) = test_config(&conf);
    assert!(ok, "{out}");
}

/// A zone name goes unescaped into the RateLimit-Policy sf-string, the
/// Prometheus labels and the Redis key names: only HTTP token characters
/// (RFC 9110 `tchar`) are accepted. nginx's quoted-string escapes can put
/// `"`, `\r` and `\n` into an argument; each is refused with an [emerg]
/// that says which characters are allowed, and every token character
/// still passes.
#[test]
fn zone_names_are_tokens() {
    let zone = |arg: &str| conf_with(&format!("rate_limit_window_zone $http_x_key {arg};"), "");
    for (name, arg) in [
        ("double quote", r#""zone=a\"b:1m""#),
        ("CR LF", r#""zone=a\r\nX-Injected: 1:1m""#),
        ("space", r#""zone=a b:1m""#),
        ("colon", "zone=a:b:1m"),
        ("comma", "zone=a,b:1m"),
        ("backslash", r#""zone=a\\b:1m""#),
        ("brace", "\"zone=a{b}:1m\""),
        ("non-ASCII", "zone=zoné:1m"),
    ] {
        let (ok, out) = test_config(&zone(arg));
        let emerg = out.lines().find(|l| l.contains("[emerg]")).unwrap_or("");
        assert!(!ok, "[{name}] {arg} was accepted:\n{out}");
        assert!(
            emerg.contains("invalid zone name") && emerg.contains("!#$%&'*+-.^_`|~"),
            "[{name}] {arg}: {out}"
        );
    }
    let every_tchar = "zone=Az09!#$%&'*+-.^_`|~:1m";
    let (ok, out) = test_config(&conf_with(
        &format!("rate_limit_window_zone $http_x_key \"{every_tchar}\";"),
        "rate_limit_window \"zone=Az09!#$%&'*+-.^_`|~\" limit=5;",
    ));
    assert!(ok, "{out}");
}

/// RateLimit-Policy's `w=` is an integer number of seconds (sf-integer,
/// draft-ietf-httpapi-ratelimit-headers), and so are Retry-After and
/// RateLimit-Reset: a window that is not a whole number of seconds cannot
/// be told to clients, so nginx -t refuses it instead of sending `w=1` for
/// `window=1500ms`.
#[test]
fn windows_are_whole_seconds() {
    for w in ["1500ms", "1001ms", "90500ms", "1s500ms", "1m1ms"] {
        let (ok, out) = test_config(&conf_with(
            &format!("rate_limit_window_zone $http_x_key zone=z:1m window={w};"),
            "rate_limit_window zone=z limit=5;",
        ));
        let emerg = out.lines().find(|l| l.contains("[emerg]")).unwrap_or("");
        assert!(!ok, "window={w} was accepted:\n{out}");
        assert!(
            emerg.contains(&format!("invalid window \"{w}\""))
                && emerg.contains("whole number of seconds"),
            "window={w}: {out}"
        );
    }
    for w in [
        "1000ms", "2s", "90", "1m30s", "24h", "2d", "31d", "2678400s",
    ] {
        let (ok, out) = test_config(&conf_with(
            &format!("rate_limit_window_zone $http_x_key zone=z:1m window={w};"),
            "rate_limit_window zone=z limit=5;",
        ));
        assert!(ok, "window={w}: {out}");
    }
}

#[test]
fn metrics_reset_parameter() {
    for (param, ok) in [
        ("", true),
        ("reset=on", true),
        ("reset=off", true),
        ("reset=yes", false),
        ("reset=on reset=on", false),
        ("write=on", true),
        ("write=off", true),
        ("write=yes", false),
    ] {
        let conf = http_conf(&format!(
            "server {{ listen 127.0.0.1:{{{{PORT}}}}; location = /m {{ rate_limit_window_metrics {param}; }} }}"
        ));
        let (good, out) = test_config(&conf);
        assert_eq!(good, ok, "{param:?}: {out}");
        if !ok {
            assert!(out.contains("[emerg]"), "{out}");
        }
    }
}

/// Each case: (name, config, text the [emerg] must contain): what to write
/// instead, not only what is wrong (issue 37).
fn hint_cases() -> Vec<(&'static str, String, &'static str)> {
    let zone = |params: &str| {
        conf_with(
            &format!("rate_limit_window_zone $http_x_key {params};"),
            "rate_limit_window zone=z limit=5;",
        )
    };
    let limit = |params: &str| conf_with(ZONE, &format!("rate_limit_window {params};"));
    let window_and_limit = |rate: &str, w: &str, n: &str| -> String {
        format!("for {rate} write \"window={w}\" on \"rate_limit_window_zone\" and \"limit={n}\" on \"rate_limit_window\"")
    };
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    vec![
        ("limit=10r/s", limit("zone=z limit=10r/s"), leak(window_and_limit("10r/s", "1s", "10"))),
        ("limit=30r/m", limit("zone=z limit=30r/m"), leak(window_and_limit("30r/m", "1m", "30"))),
        ("rate= on the limit", limit("zone=z rate=5r/s"), leak(window_and_limit("5r/s", "1s", "5"))),
        ("rate= on the zone", zone("zone=z:1m rate=20r/m"), leak(window_and_limit("20r/m", "1m", "20"))),
        (
            "burst=",
            limit("zone=z limit=5 burst=10"),
            "\"burst=10\" is limit_req's syntax: a window admits up to \"limit=\" requests at any pace, so there is no burst: raise \"limit=\"",
        ),
        ("nodelay", limit("zone=z limit=5 nodelay"), "leave \"nodelay\" out"),
        (
            "window=1.5m",
            zone("zone=z:1m window=1.5m"),
            "invalid window \"1.5m\": nginx times are whole numbers; write window=90s",
        ),
        (
            "window=abc",
            zone("zone=z:1m window=abc"),
            "invalid window \"abc\": use a time from 1s to 31d in whole seconds, e.g. window=1m",
        ),
        (
            "zone= without size",
            zone("zone=z"),
            "invalid zone size \"zone=z\": use zone=NAME:SIZE, the size in bytes, k or m, e.g. zone=per_ip:10m",
        ),
        (
            "window=1.25s",
            zone("zone=z:1m window=1.25s"),
            "write window=1s or window=2s",
        ),
        (
            "limt=10",
            limit("zone=z limt=10"),
            "invalid parameter \"limt=10\" in \"rate_limit_window\": did you mean \"limit=\"?",
        ),
        (
            "unknown limit parameter",
            limit("zone=z limit=5 frobnicate=1"),
            "use \"zone=\", \"limit=\", \"in_flight=\", \"delay=\", \"delay_max_held=\", \"cost=\", \"count_status=\", \"charge=\", \"ban=\" or \"name=\"",
        ),
        (
            "widow=1m",
            zone("zone=z:1m widow=1m"),
            "invalid parameter \"widow=1m\" in \"rate_limit_window_zone\": did you mean \"window=\"?",
        ),
        (
            "limit= on the zone",
            zone("zone=z:1m limit=5"),
            "invalid parameter \"limit=5\": it belongs on \"rate_limit_window\"",
        ),
        (
            "phase post_access",
            conf_with(ZONE, "rate_limit_window_phase post_access;"),
            "invalid value \"post_access\" in \"rate_limit_window_phase\": use \"preaccess\" or \"postaccess\"",
        ),
        (
            "headers maybe",
            conf_with(ZONE, "rate_limit_window_headers maybe;"),
            "invalid value \"maybe\" in \"rate_limit_window_headers\": use \"off\", \"on\" or \"ietf\"",
        ),
        (
            "log_level bogus",
            conf_with(ZONE, "rate_limit_window_log_level bogus;"),
            "invalid value \"bogus\" in \"rate_limit_window_log_level\": use \"info\", \"notice\", \"warn\" or \"error\"",
        ),
        (
            "dry_run maybe (nginx's flag message)",
            conf_with(ZONE, "rate_limit_window_dry_run maybe;"),
            "it must be \"on\" or \"off\"",
        ),
        (
            "fail=maybe",
            zone("zone=z:1m fail=maybe"),
            "invalid value \"maybe\" in \"fail=\": use \"open\" or \"closed\"",
        ),
        ("mode=exact", zone("zone=z:1m mode=exact"), "use \"estimate\" or \"strict\""),
        (
            "redis_mode=x",
            zone("zone=z:1m redis=127.0.0.1:6379 redis_mode=x"),
            "use single, sentinel or cluster",
        ),
        (
            "metrics reset=yes",
            http_conf("server { listen 127.0.0.1:{{PORT}}; location = /m { rate_limit_window_metrics reset=yes; } }"),
            "write=on or write=off",
        ),
        (
            "limit= twice",
            limit("zone=z limit=5 limit=10"),
            "duplicate parameter \"limit=\" in \"rate_limit_window\": give it once",
        ),
        ("zone= twice", limit("zone=z zone=z limit=5"), "duplicate parameter \"zone=\""),
        ("delay= twice", limit("zone=z limit=5 delay=1s delay=2s"), "duplicate parameter \"delay=\""),
        ("cost= twice", limit("zone=z limit=5 cost=1 cost=2"), "duplicate parameter \"cost=\""),
        (
            "window= twice",
            zone("zone=z:1m window=1m window=2m"),
            "duplicate parameter \"window=\" in \"rate_limit_window_zone\": give it once",
        ),
        ("mode= twice", zone("zone=z:1m mode=strict mode=estimate"), "duplicate parameter \"mode=\""),
        ("fail= twice", zone("zone=z:1m fail=open fail=closed"), "duplicate parameter \"fail=\""),
        // Every parameter is refused the same way when given twice (issue
        // 31): valid or not, the second one is named before any value.
        (
            "count_status= twice",
            limit("zone=z limit=5 count_status=401 count_status=403"),
            "duplicate parameter \"count_status=\" in \"rate_limit_window\": give it once",
        ),
        (
            "charge= twice",
            limit("zone=z limit=5 charge=$a charge=$b"),
            "duplicate parameter \"charge=\" in \"rate_limit_window\": give it once",
        ),
        (
            "delay_max_held= twice",
            limit("zone=z limit=5 delay=1s delay_max_held=1 delay_max_held=2"),
            "duplicate parameter \"delay_max_held=\" in \"rate_limit_window\": give it once",
        ),
        (
            "invalid cost= twice",
            limit("zone=z limit=5 cost=0 cost=0"),
            "duplicate parameter \"cost=\" in \"rate_limit_window\": give it once",
        ),
        (
            "limit= twice, the first invalid",
            limit("zone=z limit=abc limit=5"),
            "duplicate parameter \"limit=\" in \"rate_limit_window\": give it once",
        ),
        (
            "state= twice",
            zone("zone=z:1m state=/tmp/a state=/tmp/b"),
            "duplicate parameter \"state=\" in \"rate_limit_window_zone\": give it once",
        ),
        (
            "ipv6_prefix= twice",
            zone("zone=z:1m ipv6_prefix=64 ipv6_prefix=48"),
            "duplicate parameter \"ipv6_prefix=\" in \"rate_limit_window_zone\": give it once",
        ),
        (
            "invalid mode= twice",
            zone("zone=z:1m mode=x mode=y"),
            "duplicate parameter \"mode=\" in \"rate_limit_window_zone\": give it once",
        ),
        (
            "headers twice at one level",
            conf_with(ZONE, "rate_limit_window_headers on; rate_limit_window_headers off;"),
            "\"rate_limit_window_headers\" directive is duplicate",
        ),
        (
            "headers in another case",
            conf_with(ZONE, "rate_limit_window_headers IETF; rate_limit_window_headers maybe;"),
            "invalid value \"maybe\" in \"rate_limit_window_headers\"",
        ),
        (
            "undeclared zone near a declared one",
            conf_with(ZONE, "rate_limit_window zone=zz limit=5;"),
            "zone \"zz\" used by \"rate_limit_window\" is not defined by any \"rate_limit_window_zone\": did you mean \"z\"?",
        ),
        (
            "undeclared zone, nothing near",
            conf_with(ZONE, "rate_limit_window zone=nothing_like_it limit=5;"),
            "declare it in http{} with \"rate_limit_window_zone KEY zone=nothing_like_it:SIZE;\"",
        ),
    ]
}

/// Every `[emerg]` says what to do (issue 37), checked through `nginx -t`.
#[test]
fn every_emerg_says_what_to_do() {
    let mut failures = vec![];
    let cases = hint_cases();
    for (name, conf, needle) in &cases {
        let (ok, out) = test_config(conf);
        let emerg = out.lines().find(|l| l.contains("[emerg]")).unwrap_or("");
        if ok || !emerg.contains(needle) {
            failures.push(format!(
                "[{name}] expected [emerg] containing {needle:?}, got:\n{out}"
            ));
        }
    }
    assert_none_failed(&failures, cases.len());
}

/// Fails with the list of `failures`, if any, of `total` cases.
pub(crate) fn assert_none_failed(failures: &[String], total: usize) {
    assert!(
        failures.is_empty(),
        "{} of {total} cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// An undeclared zone's [emerg] names the line of its use, and only that
/// (not the end of the http block as a second location).
#[test]
fn undeclared_zone_names_its_use_only() {
    let conf = conf_with(ZONE, "rate_limit_window zone=nope limit=5;");
    let line = 1 + conf
        .lines()
        .position(|l| l.contains("zone=nope"))
        .expect("the use is in the config");
    let (ok, out) = test_config(&conf);
    assert!(!ok, "{out}");
    let emerg = out.lines().find(|l| l.contains("[emerg]")).unwrap_or("");
    assert_eq!(emerg.matches("nginx.conf:").count(), 1, "{out}");
    assert!(
        emerg.ends_with(&format!("conf/nginx.conf:{line}")),
        "line {line}: {out}"
    );
}
