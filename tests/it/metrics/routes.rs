//! Requests decided once each, per route (`name=`), route names bounded at
//! `nginx -t`, and the help texts the README defines.
use super::*;

/// `rate_limit_window_decided_total{result}`: once per request whatever
/// the number of its limits, by the request's result, and the same per
/// route of `name=` (two limits of one name count a request once); the
/// zones count an admitted request once each. Kept across a reload that
/// reorders and adds routes.
#[test]
fn decided_counts_each_request_once_and_per_route() {
    let up = Upstream::start();
    let zones = "rate_limit_window_zone global zone=all:32k window=1h;
         rate_limit_window_zone $http_x_key zone=per:1m window=1h;";
    let body = |extra: &str| {
        http_conf(&format!(
            r#"{zones}
            server {{
                listen 127.0.0.1:{{{{PORT}}}};
                {extra}
                location /search {{
                    rate_limit_window zone=all limit=5 name=search;
                    rate_limit_window zone=per limit=2 name=search;
                    proxy_pass http://{{{{UPSTREAM}}}};
                }}
                location /dry {{
                    rate_limit_window zone=per limit=1 name=dry;
                    rate_limit_window_dry_run on;
                    proxy_pass http://{{{{UPSTREAM}}}};
                }}
                location /plain {{ rate_limit_window zone=per limit=100; proxy_pass http://{{{{UPSTREAM}}}}; }}
                location = /metrics {{ rate_limit_window_metrics; }}
            }}"#
        ))
    };
    let mut ng = Nginx::builder().upstream_of(&up).start(&body(""));
    clear_of_boundary(HOUR_MS, 20_000);
    let st: Vec<u16> = ["A", "A", "A", "B", "B", ""]
        .iter()
        .map(|k| get_key(ng.port, "/search", k).status)
        .collect();
    // A: 2 then rejected by `per`; B: 2, then `all` has 1 left; the empty
    // key is exempt from `per`, and `all` (limit 5) admits it.
    assert_eq!(st, [200, 200, 429, 200, 200, 200]);
    for _ in 0..3 {
        assert_eq!(get_key(ng.port, "/dry", "d").status, 200);
    }
    assert_eq!(get_key(ng.port, "/plain", "p").status, 200);
    let decided = |m: &Metrics, r: &str| m.val("rate_limit_window_decided_total", &[("result", r)]);
    let route = |m: &Metrics, route: &str, r: &str| {
        m.val(
            "rate_limit_window_route_requests_total",
            &[("route", route), ("result", r)],
        )
    };
    let m = scrape(ng.port);
    // 5 admitted on /search, 1 on /dry, 2 dry-run rejections admitted, 1 on /plain.
    assert_eq!(decided(&m, "passed"), 5.0 + 1.0 + 1.0);
    assert_eq!(decided(&m, "rejected"), 1.0);
    assert_eq!(decided(&m, "rejected_dry_run"), 2.0);
    assert_eq!(decided(&m, "exempt"), 0.0, "the empty key applied to `all`");
    assert_eq!(m.requests("all", "passed"), 5.0);
    assert_eq!(m.requests("per", "passed"), 4.0 + 1.0 + 1.0);
    assert_eq!(up.received(), 5 + 3 + 1, "all but the rejected one");
    assert_eq!(
        route(&m, "search", "passed"),
        5.0,
        "once, not once per limit"
    );
    assert_eq!(route(&m, "search", "rejected"), 1.0);
    assert_eq!(route(&m, "dry", "passed"), 1.0);
    assert_eq!(route(&m, "dry", "rejected_dry_run"), 2.0);
    assert!(
        !m.samples
            .iter()
            .any(|s| s.metric == "rate_limit_window_route_requests_total"
                && !["search", "dry"].contains(&s.labels.get("route").unwrap().as_str())),
        "only the configuration's routes"
    );
    // A reload that adds a route before the others keeps their counts.
    ng.reload_with(&body(
        "location /new { rate_limit_window zone=per limit=9 name=new; proxy_pass http://{{UPSTREAM}}; }",
    ));
    assert_eq!(get_key(ng.port, "/new", "n").status, 200);
    let m = scrape(ng.port);
    assert_eq!(route(&m, "search", "passed"), 5.0);
    assert_eq!(route(&m, "dry", "rejected_dry_run"), 2.0);
    assert_eq!(route(&m, "new", "passed"), 1.0);
    assert_eq!(decided(&m, "passed"), 8.0);
}

/// `name=` is checked at `nginx -t`: its characters, and at most 64
/// names in a configuration, so that the route label's values are bounded.
#[test]
fn route_names_are_bounded_at_nginx_t() {
    let with = |names: usize, extra: &str| {
        let locs: String = (0..names)
            .map(|i| format!("location /r{i} {{ rate_limit_window zone=z limit=5 name=r{i}; }}\n"))
            .collect();
        http_conf(&format!(
            "rate_limit_window_zone $binary_remote_addr zone=z:1m;\n\
             server {{ listen 127.0.0.1:{{{{PORT}}}};\n{locs}{extra} }}"
        ))
    };
    let (ok, out) = test_config(&with(
        64,
        "location /again { rate_limit_window zone=z limit=1 name=r0; }",
    ));
    assert!(ok, "64 names, one used twice: {out}");
    let (ok, out) = test_config(&with(65, ""));
    assert!(!ok, "{out}");
    assert!(
        out.contains("too many route names: name=\"r64\" would be the 65th")
            && out.contains("at most 64"),
        "{out}"
    );
    let (ok, out) = test_config(&with(
        1,
        "location /q { rate_limit_window zone=z limit=1 name=a\"b; }",
    ));
    assert!(!ok && out.contains("invalid name"), "{out}");
}

/// The HELP of `rate_limit_window_sync_lag_seconds` is the README's
/// definition of it, one text.
#[test]
fn sync_lag_help_is_the_readmes_definition() {
    let ng = Nginx::start(&conf(
        "rate_limit_window_zone $http_x_key zone=r:1m redis=127.0.0.1:9 \
         secret=0123456789abcdef0123;",
        "rate_limit_window zone=r limit=5;",
    ));
    let text = get(ng.port, "/metrics").text();
    let help = text
        .lines()
        .find_map(|l| l.strip_prefix("# HELP rate_limit_window_sync_lag_seconds "))
        .unwrap_or_else(|| panic!("{text}"));
    let mut def = help.trim_end_matches('.').to_string();
    def[..1].make_ascii_lowercase();
    let readme = std::fs::read_to_string(manifest_dir().join("README.md"))
        .unwrap()
        .replace('`', "");
    assert!(readme.contains(&def), "README lacks {def:?}");
}
