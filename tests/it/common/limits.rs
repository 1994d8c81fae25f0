//! Small helpers shared by the basic limit tests (tests/it/limits.rs,
//! tests/it/headers.rs, tests/it/directives.rs): one zone keyed by `X-Key`, one
//! proxied `location /`, and requests that carry a key. Imported by name
//! (`use common::limits::{...}`), not re-exported, so that the files with
//! their own `conf` / `start` keep theirs.
#![allow(dead_code)]

use super::{get_key, proxy_conf, Nginx, Response, Upstream};

/// One hour in milliseconds (the window of most tests here).
pub const HOUR_MS: u128 = 3_600_000;

/// http{} with `zones` at http level and one server whose `location /`
/// holds `loc` and proxies to the upstream. Every response carries the
/// module's variables as X-RLW-Status / X-RLW-Remaining.
pub fn conf(zones: &str, loc: &str) -> String {
    proxy_conf(
        zones,
        "",
        "add_header X-RLW-Status $rate_limit_window_status always;
         add_header X-RLW-Remaining $rate_limit_window_remaining always;",
        loc,
    )
}

/// Zone `z` (1 MB) keyed by the `X-Key` header, with `args` (the window,
/// and anything else) appended.
pub fn zone(args: &str) -> String {
    format!("rate_limit_window_zone $http_x_key zone=z:1m {args};")
}

/// Starts nginx with config `c`, proxying to `up`.
pub fn start(up: &Upstream, c: &str) -> Nginx {
    Nginx::builder().upstream_of(up).start(c)
}

/// `GET /` with `X-Key: k`.
pub fn key(ng: &Nginx, k: &str) -> Response {
    get_key(ng.port, "/", k)
}
