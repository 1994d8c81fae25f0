//! The alert recipes of docs/operations.md#alerts (issue 45): `promtool
//! check rules` accepts them as printed, and `promtool test rules` runs the
//! leak alert on series a real nginx produced: the metrics of
//! nginx-conf/multi.conf (two limits on one location) scraped before and
//! after real traffic, and the application's count of what it received
//! (the test upstream's). It fires when the application receives more
//! than nginx let through, and not when it receives what was let through.
//! `make test` installs promtool (Debian's `prometheus`).
use crate::common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::*;

/// The rules file of docs/operations.md (the ```yaml block after
/// `<!-- promtool rules -->`), verbatim.
fn rules() -> String {
    let doc = fs::read_to_string(manifest_dir().join("docs/operations.md")).unwrap();
    let at = doc
        .find("<!-- promtool rules -->")
        .expect("the marked rules");
    let rest = &doc[at..];
    let start = rest.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let len = rest[start..].find("```").expect("the block ends");
    rest[start..start + len].to_string()
}

/// `promtool ARGS…` in `dir`: (success, what it printed).
fn promtool(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool (make test installs Debian's prometheus)");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn the_alert_recipes_pass_promtool_check_rules() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("rules.yml"), rules()).unwrap();
    let (ok, out) = promtool(dir.path(), &["check", "rules", "rules.yml"]);
    assert!(ok && out.contains("SUCCESS: 5 rules found"), "{out}");
    // A broken expression is refused: the check checks.
    let broken = rules().replace("> 1.15", "> > 1.15");
    fs::write(dir.path().join("broken.yml"), broken).unwrap();
    let (ok, out) = promtool(dir.path(), &["check", "rules", "broken.yml"]);
    assert!(!ok, "{out}");
}

/// multi.conf, runnable in a test prefix (as tests/it/examples.rs runs it).
fn multi_conf() -> String {
    let text = fs::read_to_string(example_conf_dir().join("multi.conf")).unwrap();
    let metrics = "location = /metrics { rate_limit_window_metrics; }\n        # Everything else";
    assert!(text.contains("        # Everything else"));
    format!("{text}\ndaemon off;\n")
        .replace("listen 8080", "listen 127.0.0.1:{{PORT}}")
        .replace("127.0.0.1:9000", "{{UPSTREAM}}")
        .replace("        # Everything else", &format!("        {metrics}"))
}

/// The module's samples of a scrape, by their exposition name and labels
/// (`rate_limit_window_decided_total{result="passed"}`).
fn samples(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| l.starts_with("rate_limit_window_"))
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            Some((series.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// A `promtool test rules` file: each series of `before` grows, a minute
/// at a time for 30 minutes, by what it grew between the two real scrapes;
/// the application's counter by `app` a minute. `expect` is the leak
/// alert's `exp_alerts` at 20 minutes.
fn rule_test(before: &[(String, f64)], after: &[(String, f64)], app: u64, expect: &str) -> String {
    let mut series =
        format!("      - series: 'app_http_requests_total'\n        values: '0+{app}x30'\n");
    for (name, v0) in before {
        let v1 = after.iter().find(|(n, _)| n == name).map_or(*v0, |s| s.1);
        series.push_str(&format!(
            "      - series: '{name}'\n        values: '{v0}+{}x30'\n",
            v1 - v0
        ));
    }
    format!(
        "rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    \
         input_series:\n{series}    alert_rule_test:\n      - eval_time: 20m\n        \
         alertname: RateLimiterLeaking\n        exp_alerts: {expect}\n"
    )
}

/// What `promtool test rules` says of `test` with `rules` (pass, output).
fn run_rule_test(rules: &str, test: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("rules.yml"), rules).unwrap();
    fs::write(dir.path().join("test.yml"), test).unwrap();
    promtool(dir.path(), &["test", "rules", "test.yml"])
}

/// A location with two limits: `rate_limit_window_decided_total` grows by
/// one per request (the zones' `passed` by two), and the leak alert fires
/// on the series of a run where the application received more than nginx
/// admitted, and only then.
#[test]
fn the_leak_alert_fires_when_the_app_receives_more_than_was_admitted() {
    let up = Upstream::start();
    let clock = ShiftedClock::new();
    let ng = clock.builder().upstream_of(&up).start(&multi_conf());
    clock.clear_of_boundary(60_000, 20_000);
    let before = samples(&get(ng.port, "/metrics").text());
    let st = hammer(ng.port, "/search?q=x", &[], 70, 2);
    assert_eq!(tally(&st).get(&200), Some(&60), "{:?}", tally(&st));
    let after = samples(&get(ng.port, "/metrics").text());
    let grew = |name: &str| {
        let at = |s: &[(String, f64)]| s.iter().find(|(n, _)| n == name).map_or(0.0, |x| x.1);
        at(&after) - at(&before)
    };
    // Once per request whatever the number of limits; the zones count
    // each admitted request once each.
    assert_eq!(
        grew("rate_limit_window_decided_total{result=\"passed\"}"),
        60.0
    );
    assert_eq!(
        grew("rate_limit_window_decided_total{result=\"rejected\"}"),
        10.0
    );
    let zones_passed =
        grew("rate_limit_window_requests_total{zone=\"per_client\",result=\"passed\"}")
            + grew("rate_limit_window_requests_total{zone=\"global\",result=\"passed\"}");
    assert_eq!(zones_passed, 120.0);
    assert_eq!(up.received(), 60, "the app received what was admitted");

    let rules = rules();
    let honest = up.received();
    // The application received what nginx let through: no alert, and
    // expecting one fails (the test can tell).
    let (ok, out) = run_rule_test(&rules, &rule_test(&before, &after, honest, "[]"));
    assert!(ok, "{out}");
    let (ok, out) = run_rule_test(
        &rules,
        &rule_test(&before, &after, honest, "[{exp_labels: {}}]"),
    );
    assert!(!ok, "{out}");

    // Now the application receives more than was admitted: 30 requests
    // reach it around nginx (a second path, a limiter that leaks).
    for _ in 0..30 {
        let r = get(
            up.addr().rsplit(':').next().unwrap().parse().unwrap(),
            "/search",
        );
        assert_eq!(r.status, 200);
    }
    let leaked = up.received();
    assert_eq!(leaked, 90);
    let (ok, out) = run_rule_test(
        &rules,
        &rule_test(&before, &after, leaked, "[{exp_labels: {}}]"),
    );
    assert!(ok, "the leak alert did not fire: {out}");
    let (ok, out) = run_rule_test(&rules, &rule_test(&before, &after, leaked, "[]"));
    assert!(!ok, "{out}");

    // The recipe this one replaced summed the zones' `passed`: with two
    // limits it sees 120 admitted for 90 received, and never fires.
    let old = rules.replace(
        "rate_limit_window_decided_total{result!=\"rejected\"}",
        "rate_limit_window_requests_total{result=~\"passed|exempt\"}",
    );
    assert_ne!(old, rules);
    let (ok, out) = run_rule_test(&old, &rule_test(&before, &after, leaked, "[]"));
    assert!(ok, "the old recipe fired after all: {out}");
}
