//! Every `[emerg]` of the module's directives, seen through `nginx -t`,
//! names the directive or parameter it refuses and what to write instead
//! (the accepted values or an example), issue 54: nginx's own bounds check
//! once answered `rate_limit_window_status 399;` with "value must be
//! between 400 and 599", which names no directive.
use crate::common;

use crate::configs::{assert_none_failed, conf_with, ZONE};
use common::*;

/// One wrong configuration: what its `[emerg]` must name (the directive or
/// parameter) and what it must offer (accepted values or an example).
struct Case {
    name: &'static str,
    conf: String,
    names: &'static str,
    offers: &'static str,
}

/// `rate_limit_window_zone $http_x_key PARAMS;` used by a location.
fn zone(name: &'static str, params: &str, names: &'static str, offers: &'static str) -> Case {
    let conf = conf_with(
        &format!("rate_limit_window_zone $http_x_key {params};"),
        "rate_limit_window zone=z limit=5;",
    );
    Case {
        name,
        conf,
        names,
        offers,
    }
}

/// `rate_limit_window PARAMS;` in a location, zone z declared.
fn limit(name: &'static str, params: &str, names: &'static str, offers: &'static str) -> Case {
    let conf = conf_with(ZONE, &format!("rate_limit_window {params};"));
    Case {
        name,
        conf,
        names,
        offers,
    }
}

/// `LINE` in a location, zone z declared.
fn location(name: &'static str, line: &str, names: &'static str, offers: &'static str) -> Case {
    let conf = conf_with(ZONE, line);
    Case {
        name,
        conf,
        names,
        offers,
    }
}

fn zone_cases() -> Vec<Case> {
    vec![
        zone("zone= without size", "zone=z", "zone=", "zone=NAME:SIZE"),
        zone("zone too small", "zone=z:16k", "zone \"z\" is too small", "zone=z:32k or larger"),
        zone("zone name", "zone=a/b:1m", "invalid zone name", "letters, digits"),
        zone("no zone=", "window=1m", "\"zone\" parameter", "zone=NAME:SIZE"),
        zone("window=abc", "zone=z:1m window=abc", "invalid window", "from 1s to 31d"),
        zone("window=0s", "zone=z:1m window=0s", "invalid window", "1s and 31d"),
        zone("window=1.5m", "zone=z:1m window=1.5m", "invalid window", "write window=90s"),
        zone("mode=exact", "zone=z:1m mode=exact", "invalid mode", "\"estimate\" or \"strict\""),
        zone("fail=maybe", "zone=z:1m fail=maybe", "\"fail=\"", "\"open\" or \"closed\""),
        zone("ipv6_prefix=200", "zone=z:1m ipv6_prefix=200", "invalid ipv6_prefix", "number of bits from"),
        zone("calendar=fortnight", "zone=z:1m calendar=fortnight", "invalid calendar", "\"day\", \"week\", \"month\" or \"year\""),
        zone("tz= without calendar=", "zone=z:1m tz=UTC", "\"tz=\"", "needs \"calendar=\""),
        zone("calendar= with window=", "zone=z:1m calendar=day window=1m", "\"calendar=\"", "\"window=\""),
        zone("overrides=0", "zone=z:1m overrides=0", "invalid overrides", "integer from 1 to"),
        zone("state= empty", "zone=z:1m state=", "\"state=\"", "state=/var/lib/nginx/"),
        zone("redis address", "zone=z:1m redis=a:b:c secret=0123456789abcdef", "invalid redis address", "HOST:PORT"),
        zone("sync=5ms", "zone=z:1m redis=127.0.0.1:6379 secret=0123456789abcdef sync=5ms", "\"sync=\"", "between 10ms and 60s"),
        zone("redis_mode=x", "zone=z:1m redis=127.0.0.1:6379 redis_mode=x", "invalid redis_mode", "single, sentinel or cluster"),
        zone("redis_outage=x", "zone=z:1m redis=127.0.0.1:6379 redis_outage=x", "invalid redis_outage", "local, share or closed"),
        zone("redis_master= without sentinel", "zone=z:1m redis=127.0.0.1:6379 redis_master=m", "\"redis_master=\"", "\"redis_mode=sentinel\""),
        zone("sentinel without master", "zone=z:1m redis=127.0.0.1:26379 redis_mode=sentinel", "\"redis_mode=sentinel\"", "\"redis_master=NAME\""),
        zone("redis_ca= empty", "zone=z:1m redis=rediss://127.0.0.1:6379 redis_ca=", "\"redis_ca\"", "redis_ca=/"),
        zone("cluster database", "zone=z:1m redis=redis://127.0.0.1:7000/2 redis_mode=cluster", "\"redis=\"", "write /0"),
        zone("short secret", "zone=z:1m redis=127.0.0.1:6379 secret=abc", "\"secret=\"", "at least"),
        zone("strict with redis", "zone=z:1m mode=strict redis=127.0.0.1:6379", "\"mode=strict\"", "use mode=estimate"),
        zone("unknown parameter", "zone=z:1m frobnicate=1", "\"rate_limit_window_zone\"", "\"window=\""),
        Case {
            name: "zone declared twice",
            conf: conf_with(&format!("{ZONE} {ZONE}"), "rate_limit_window zone=z limit=5;"),
            names: "\"rate_limit_window_zone\"",
            offers: "declare each zone once",
        },
        Case {
            name: "zone declared twice, another key",
            conf: conf_with(
                "rate_limit_window_zone $http_x_key zone=z:1m; rate_limit_window_zone $http_x_other zone=z:1m;",
                "rate_limit_window zone=z limit=5;",
            ),
            names: "zone \"z\"",
            offers: "give the other one a new name",
        },
    ]
}

fn limit_cases() -> Vec<Case> {
    vec![
        limit(
            "limit=abc",
            "zone=z limit=abc",
            "invalid limit",
            "integer from 0 to",
        ),
        limit(
            "no limit=",
            "zone=z",
            "\"limit\" parameter",
            "write limit=N",
        ),
        limit(
            "no zone=",
            "limit=5",
            "\"zone\" parameter",
            "write zone=NAME",
        ),
        limit(
            "zone= empty",
            "zone= limit=5",
            "\"rate_limit_window\"",
            "e.g. zone=per_ip",
        ),
        limit(
            "cost=0",
            "zone=z limit=5 cost=0",
            "invalid cost",
            "integer from 1 to",
        ),
        limit(
            "cost over limit",
            "zone=z limit=10 cost=11",
            "cost=11",
            "cost= from 1 to 10",
        ),
        limit(
            "count_status=6xx",
            "zone=z limit=5 count_status=6xx",
            "\"count_status=\"",
            "from 100 to 599",
        ),
        limit(
            "delay=soon",
            "zone=z limit=5 delay=soon",
            "invalid delay",
            "from 0 to 1h",
        ),
        limit(
            "delay=2h",
            "zone=z limit=5 delay=2h",
            "delay \"2h\"",
            "from 0 to 1h",
        ),
        limit(
            "delay_max_held=x",
            "zone=z limit=5 delay=1s delay_max_held=x",
            "invalid delay_max_held",
            "integer from 0 to",
        ),
        limit(
            "ban=1ms",
            "zone=z limit=5 ban=1ms",
            "invalid ban",
            "from 1s to 30d",
        ),
        limit(
            "name=",
            "zone=z limit=5 name=a/b",
            "invalid name",
            "letters, digits",
        ),
        limit(
            "in_flight=x",
            "zone=z in_flight=x",
            "invalid in_flight",
            "integer from 0 to",
        ),
        limit(
            "charge=5",
            "zone=z limit=5 charge=5",
            "invalid charge",
            "a fixed count is \"cost=\"",
        ),
        limit(
            "cost= alone with in_flight=",
            "zone=z in_flight=3 cost=2",
            "\"cost=\"",
            "needs \"limit=\"",
        ),
        limit(
            "limit=10r/s",
            "zone=z limit=10r/s",
            "\"rate_limit_window\"",
            "limit=10",
        ),
        limit(
            "unknown parameter",
            "zone=z limit=5 limt=6",
            "\"rate_limit_window\"",
            "did you mean \"limit=\"?",
        ),
        location(
            "one zone twice at a level",
            "rate_limit_window zone=z limit=5; rate_limit_window zone=z limit=6;",
            "\"rate_limit_window\" for zone \"z\"",
            "one line per zone",
        ),
        Case {
            name: "delay_max_held= differs at a level",
            conf: conf_with(
                &format!("{ZONE} rate_limit_window_zone $http_x_other zone=y:1m;"),
                "rate_limit_window zone=z limit=5 delay=1s delay_max_held=2;
                 rate_limit_window zone=y limit=5 delay=1s delay_max_held=3;",
            ),
            names: "delay_max_held=3",
            offers: "the same delay_max_held=",
        },
        Case {
            name: "undeclared zone",
            conf: conf_with("", "rate_limit_window zone=nope limit=5;"),
            names: "\"rate_limit_window_zone\"",
            offers: "rate_limit_window_zone KEY zone=nope:SIZE;",
        },
    ]
}

fn other_directive_cases() -> Vec<Case> {
    let metrics = |arg: &str| {
        http_conf(&format!(
            "server {{ listen 127.0.0.1:{{{{PORT}}}}; location = /m {{ rate_limit_window_metrics {arg}; }} }}"
        ))
    };
    vec![
        location(
            "status 399",
            "rate_limit_window_status 399;",
            "\"rate_limit_window_status\"",
            "between 400 and 599",
        ),
        location(
            "status 600",
            "rate_limit_window_status 600;",
            "\"rate_limit_window_status\"",
            "between 400 and 599",
        ),
        location(
            "status abc",
            "rate_limit_window_status abc;",
            "\"rate_limit_window_status\"",
            "between 400 and 599",
        ),
        location(
            "headers",
            "rate_limit_window_headers maybe;",
            "\"rate_limit_window_headers\"",
            "\"off\", \"on\" or \"ietf\"",
        ),
        location(
            "log_level",
            "rate_limit_window_log_level loud;",
            "\"rate_limit_window_log_level\"",
            "\"info\", \"notice\", \"warn\" or \"error\"",
        ),
        location(
            "phase",
            "rate_limit_window_phase access;",
            "\"rate_limit_window_phase\"",
            "\"preaccess\" or \"postaccess\"",
        ),
        location(
            "dry_run",
            "rate_limit_window_dry_run maybe;",
            "\"rate_limit_window_dry_run\"",
            "\"on\" or \"off\"",
        ),
        location(
            "grpc",
            "rate_limit_window_grpc maybe;",
            "\"rate_limit_window_grpc\"",
            "\"on\" or \"off\"",
        ),
        Case {
            name: "metrics reset=yes",
            conf: metrics("reset=yes"),
            names: "\"rate_limit_window_metrics\"",
            offers: "write=on or write=off",
        },
        Case {
            name: "state_interval 0",
            conf: conf_with(&format!("{ZONE} rate_limit_window_state_interval 0;"), ""),
            names: "rate_limit_window_state_interval",
            offers: "from 1s to 1h",
        },
        location(
            "shed without max=",
            "rate_limit_window_shed zone=g priority=$arg_p;",
            "\"max\" parameter",
            "write max=N",
        ),
        location(
            "shed status=200",
            "rate_limit_window_shed zone=g max=4 priority=$arg_p status=200;",
            "invalid status",
            "from 400 to 599",
        ),
        location(
            "shed reserve=150%",
            "rate_limit_window_shed zone=g max=4 priority=$arg_p reserve=150%;",
            "invalid reserve",
            "from 0% to 100%",
        ),
        location(
            "shed max=0",
            "rate_limit_window_shed zone=g max=0 priority=$arg_p;",
            "invalid max",
            "integer from 1 to",
        ),
    ]
}

/// Every case fails `nginx -t` with an `[emerg]` that names its directive
/// or parameter and offers what to write; all failures are listed.
#[test]
fn every_emerg_names_its_option_and_what_to_write() {
    let cases: Vec<Case> = [zone_cases(), limit_cases(), other_directive_cases()]
        .into_iter()
        .flatten()
        .collect();
    let mut failures = vec![];
    for c in &cases {
        let (ok, out) = test_config(&c.conf);
        let emerg = out.lines().find(|l| l.contains("[emerg]")).unwrap_or("");
        if ok || !emerg.contains(c.names) || !emerg.contains(c.offers) {
            failures.push(format!(
                "[{}] expected an [emerg] naming {:?} and offering {:?}, got:\n{out}",
                c.name, c.names, c.offers
            ));
        }
    }
    assert_none_failed(&failures, cases.len());
}
