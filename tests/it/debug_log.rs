//! The module's debug lines (`ngx_log_debug_http!` at each decision point)
//! are compiled in only against an nginx configured `--with-debug`, so that
//! any other build pays nothing for them on the request path. The vendored
//! nginx has no `--with-debug`: this checks the built module, not the
//! lines' output at run time (see CONTRIBUTING.md, "Debug logging").
use crate::common;

use common::*;
use std::process::Command;

/// Text of debug lines at the decision points (fixed parts of their
/// format strings).
const DEBUG_LINES: [&str; 4] = [
    "rate_limit_window: deciding in the ",
    "does not apply: the key is empty",
    ", slot: ",
    "rate_limit_window: verdict ",
];

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn debug_lines_are_in_the_module_only_with_debug_nginx() {
    let out = Command::new(nginx_bin())
        .arg("-V")
        .output()
        .expect("nginx -V");
    let configure = String::from_utf8_lossy(&out.stderr);
    assert!(configure.contains("configure arguments:"), "{configure}");
    let debug = configure.contains("--with-debug");
    let so = std::fs::read(module_so()).expect("the built module");
    // The check can see format strings: a warning's text is always there.
    assert!(contains(&so, "rate_limit_window: invalid limit "));
    for line in DEBUG_LINES {
        assert_eq!(
            contains(&so, line),
            debug,
            "debug line {line:?} in the module: {}, nginx --with-debug: {debug}",
            contains(&so, line)
        );
    }
}
