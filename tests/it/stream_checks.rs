//! The checks http lines have, on stream lines: a strict zone's limit
//! above what it counts, the most lines in a server, and what the
//! module-wide tally counts (http requests, not stream sessions).

use crate::common;
use crate::stream::{proxied_with, session, stream_t, Echo, API, ONE};
use common::*;

/// A stream server with `lines` and the zones `zones`.
fn server(zones: &str, lines: &str) -> String {
    format!("{zones}\nserver {{ listen 127.0.0.1:{{{{PORT2}}}}; {lines} proxy_pass 127.0.0.1:9; }}")
}

/// `mode=strict limit=100000` in a stream server: the http `[emerg]`,
/// whether the zone is declared before or after the line; 65535 passes.
#[test]
fn a_strict_stream_limit_above_what_it_counts_is_refused() {
    let zone = "rate_limit_window_zone $binary_remote_addr zone=s:1m window=1m mode=strict;";
    let line = "rate_limit_window zone=s limit=100000;";
    for (before, after) in [(zone, ""), ("", zone)] {
        let (ok, out) = stream_t(&format!("{}\n{after}", server(before, line)), "");
        assert!(!ok, "{out}");
        let want = "limit=100000 is above what the mode=strict zone \"s\" can count (65535)";
        assert!(out.contains("[emerg]") && out.contains(want), "{out}");
    }
    let (ok, out) = stream_t(&server(zone, "rate_limit_window zone=s limit=65535;"), "");
    assert!(ok, "{out}");
}

/// At most 8 `rate_limit_window` lines in a stream server (a session's
/// decision keeps them on the stack; docs/stream.md): 8 pass, a 9th is an
/// `[emerg]` that says so.
#[test]
fn a_stream_server_takes_at_most_eight_lines() {
    let zones: String = (0..9)
        .map(|i| format!("rate_limit_window_zone $binary_remote_addr zone=z{i}:1m;\n"))
        .collect();
    let lines = |n: usize| -> String {
        (0..n)
            .map(|i| format!("rate_limit_window zone=z{i} limit=5; "))
            .collect()
    };
    let (ok, out) = stream_t(&server(&zones, &lines(8)), "");
    assert!(ok, "{out}");
    let (ok, out) = stream_t(&server(&zones, &lines(9)), "");
    assert!(!ok, "{out}");
    assert!(
        out.contains(
            "[emerg] too many \"rate_limit_window\" lines in one stream server (at most 8)"
        ),
        "{out}"
    );
}

/// The value of the sample `name` in the metrics text `m` (0 if absent).
fn sample(m: &str, name: &str) -> u64 {
    m.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

/// Stream sessions are counted in their zone's families
/// (`requests_total{zone}`), not in the module-wide
/// `rate_limit_window_decided_total`, which counts http requests: the leak
/// alert divides the application's HTTP requests by it (docs/stream.md).
#[test]
fn stream_sessions_count_in_their_zone_not_in_decided_total() {
    let echo = Echo::start();
    let clock = ShiftedClock::new();
    clock.clear_of_boundary(60_000, 30_000);
    let http = format!(
        "{API} location /limited {{ rate_limit_window zone=h limit=100; \
         proxy_pass http://127.0.0.1:{{{{PORT}}}}/; }}"
    );
    let conf = proxied_with(
        &http,
        "rate_limit_window_zone $binary_remote_addr zone=s:1m window=1m;",
        "",
        "rate_limit_window zone=s limit=2;",
        &echo,
    )
    .replace(
        "access_log logs/access.log;",
        "access_log logs/access.log;\nrate_limit_window_zone $binary_remote_addr zone=h:1m;",
    );
    let ng = clock.builder().start(&conf);
    assert!(session(ONE, ng.port2).is_some());
    assert!(session(ONE, ng.port2).is_some());
    assert!(
        session(ONE, ng.port2).is_none(),
        "the third session proxied"
    );
    assert_eq!(get(ng.port, "/limited").status, 204);
    let m = get(ng.port, "/api").text();
    let zone = |result: &str| {
        sample(
            &m,
            &format!("rate_limit_window_requests_total{{zone=\"s\",result=\"{result}\"}}"),
        )
    };
    assert_eq!((zone("passed"), zone("rejected")), (2, 1), "{m}");
    let decided = |result: &str| {
        sample(
            &m,
            &format!("rate_limit_window_decided_total{{result=\"{result}\"}}"),
        )
    };
    assert_eq!((decided("passed"), decided("rejected")), (1, 0), "{m}");
}
