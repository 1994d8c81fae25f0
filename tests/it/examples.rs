//! The example configs in nginx-conf/ actually work: each is started (with
//! its fixed ports swapped for free ones and its backend pointed at the test
//! upstream) and driven the way its comments describe.
use crate::common;

use common::*;

/// Reads nginx-conf/NAME and makes it runnable in a test prefix.
pub(crate) fn example(name: &str) -> String {
    runnable(std::fs::read_to_string(example_conf_dir().join(name)).unwrap())
}

/// A directory that stands for `/var/lib/nginx/` in an example (as the
/// recipes' harness maps it, tests/it/recipes.rs), with its `state/`
/// writable by the workers (`nobody` under a root master).
pub(crate) fn var_lib_nginx() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// `text` with `/var/lib/nginx/` under `dir` (see [`var_lib_nginx`]).
pub(crate) fn under(text: &str, dir: &tempfile::TempDir) -> String {
    text.replace("/var/lib/nginx/", &format!("{}/", dir.path().display()))
}

/// A configuration's text made runnable in a test prefix (see [`example`]).
fn runnable(mut text: String) -> String {
    if !text.contains("daemon off;") {
        // The harness owns the master process: keep it in the foreground.
        text.push_str("\ndaemon off;\n");
    }
    if !text.lines().any(|l| l.trim_start().starts_with("pid ")) {
        // Where the harness looks for it, whatever the nginx build's
        // default (Debian's is /run/nginx.pid: make test NGINX=1.30).
        text.push_str("pid logs/nginx.pid;\n");
    }
    text.replace("listen 127.0.0.1:8080", "listen 127.0.0.1:{{PORT}}")
        .replace("listen 8080", "listen 127.0.0.1:{{PORT}}")
        .replace("127.0.0.1:8081", "127.0.0.1:{{PORT2}}")
        .replace("127.0.0.1:9000", "{{UPSTREAM}}")
        // Keep the test output quiet; the harness shows error.log on failure.
        .replace("error_log stderr", "error_log logs/error.log")
}

#[test]
fn gateway_limits_per_ip_and_serves_metrics() {
    let clock = ShiftedClock::new();
    let ng = clock.builder().start(&example("gateway.conf"));
    clock.clear_of_boundary(60_000, 20_000);
    for i in 0..10 {
        let r = get(ng.port, "/demo");
        assert_eq!(r.status, 200, "request {i}: {}", r.describe());
        assert!(
            r.text().contains("demo"),
            "answered by the demo app: {}",
            r.text()
        );
        assert_eq!(r.header_num("RateLimit-Limit"), 10);
        assert_eq!(r.header_num("RateLimit-Remaining"), 9 - i);
    }
    let r = get(ng.port, "/demo");
    assert_eq!(r.status, 429);
    assert!(r.header_num("Retry-After") >= 1);
    // The app itself is not limited.
    assert_eq!(get(ng.port2, "/").status, 200);
    let m = get(ng.port, "/metrics");
    assert_eq!(
        m.status, 200,
        "metrics are not limited and allowed from 127.0.0.1"
    );
    assert!(
        m.text()
            .contains("rate_limit_window_requests_total{zone=\"per_ip\""),
        "{}",
        m.text()
    );
    // The file's comment says how many clients its zone has room for: the
    // number the metrics give.
    let conf = std::fs::read_to_string(example_conf_dir().join("gateway.conf")).unwrap();
    let said: String = conf
        .split(" client slots")
        .next()
        .and_then(|t| t.rsplit(' ').next())
        .unwrap()
        .replace(',', "");
    let slots = prom_value(&m.text(), "rate_limit_window_slots", &[("zone", "per_ip")]);
    assert_eq!(Some(said.parse::<f64>().unwrap()), slots, "{conf}");
}

#[test]
fn api_tiers_exempts_internal_and_limits_by_plan() {
    let (free, pro) = (&b"k-free-4f1c9a7e3b20"[..], &b"k-pro-8d2e6b0a5c71"[..]);
    let up = Upstream::start();
    // As shipped, 127.0.0.1 is an internal (exempt) client.
    let ng = Nginx::builder()
        .upstream_of(&up)
        .start(&example("api-tiers.conf"));
    for key in [&b"k1"[..], free] {
        for _ in 0..110 {
            let r = request(ng.port, "GET", "/v1/x", &[("X-API-Key", key)]);
            assert_eq!(r.status, 200);
            assert!(
                r.header("RateLimit").is_none(),
                "exempt client got limit headers"
            );
        }
    }
    drop(ng);
    // Without the 127.0.0.1 exemption, the plans apply.
    let conf = example("api-tiers.conf").replace("127.0.0.1/32  1;", "");
    let clock = ShiftedClock::new();
    let ng = clock.builder().upstream_of(&up).start(&conf);
    clock.clear_of_boundary(60_000, 20_000);
    // A free key that claims the pro plan still gets the free limit.
    let forged = [("X-API-Key", free), ("X-Plan", &b"pro"[..])];
    let st = hammer(ng.port, "/v1/x", &forged, 120, 4);
    assert_eq!(tally(&st).get(&200), Some(&100), "{:?}", tally(&st));
    let r = request(ng.port, "GET", "/v1/x", &forged);
    assert_eq!(r.status, 429);
    assert!(
        r.header("RateLimit-Policy")
            .is_some_and(|p| p.contains("\"api_keys\";q=100;w=60")),
        "{}",
        r.describe()
    );
    let st = hammer(ng.port, "/v1/x", &[("X-API-Key", pro)], 300, 4);
    assert_eq!(tally(&st).get(&200), Some(&300), "pro plan has 5000/min");
    // Keys not in the list, a new one on every request and each claiming
    // the pro plan, are one anonymous client: counted by address.
    let st = hammer_with(ng.port, 120, 4, |i| {
        let hs = vec![
            ("X-API-Key".to_string(), format!("made-up-{i}").into_bytes()),
            ("X-Plan".to_string(), b"pro".to_vec()),
        ];
        ("/v1/x".to_string(), hs)
    });
    assert_eq!(tally(&st).get(&200), Some(&100), "{:?}", tally(&st));
    let r = request(ng.port, "GET", "/v1/x", &[("X-API-Key", b"made-up-x")]);
    assert!(
        r.header("RateLimit-Policy")
            .is_some_and(|p| p.contains("\"api_anon\";q=100;w=60")),
        "{}",
        r.describe()
    );
    // Anonymous clients are limited by address too, not exempt: this
    // address has used its 100.
    let st = hammer(ng.port, "/v1/x", &[], 10, 2);
    assert_eq!(tally(&st).get(&429), Some(&10), "{:?}", tally(&st));
}

#[test]
fn multi_per_client_limit_answers_429() {
    let up = Upstream::start();
    let clock = ShiftedClock::new();
    let ng = clock
        .builder()
        .upstream_of(&up)
        .start(&example("multi.conf"));
    clock.clear_of_boundary(60_000, 20_000);
    let st = hammer(ng.port, "/search?q=x", &[], 70, 2);
    let t = tally(&st);
    assert_eq!(t.get(&200), Some(&60), "{t:?}");
    assert_eq!(t.get(&429), Some(&10), "{t:?}");
}

#[test]
fn dry_run_logs_would_be_rejections() {
    let up = Upstream::start();
    let clock = ShiftedClock::new();
    let ng = clock
        .builder()
        .upstream_of(&up)
        .start(&example("dry-run.conf"));
    clock.clear_of_boundary(60_000, 20_000);
    let st = hammer(ng.port, "/", &[], 125, 2);
    assert_eq!(tally(&st).get(&200), Some(&125));
    assert_eq!(up.received(), 125);
    let log_path = ng.prefix().join("logs/rate_limit.log");
    let ok = wait_for(std::time::Duration::from_secs(3), || {
        std::fs::read_to_string(&log_path).is_ok_and(|l| l.lines().count() == 125)
    });
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(ok, "rate_limit.log:\n{log}");
    assert_eq!(log.matches("rlw=REJECTED_DRY_RUN").count(), 5, "{log}");
    assert_eq!(log.matches("rlw=PASSED").count(), 120);
}

#[test]
fn auth_gateway_limits_logins_by_ip_and_users_by_plan() {
    use common::auth_server::{Account, AuthServer};
    let up = Upstream::start();
    let auth = AuthServer::start(&[
        Account::new("tok-alice", "alice", "free"),
        Account::new("tok-carol", "carol", "pro"),
    ]);
    let conf = example("auth-gateway.conf").replace("127.0.0.1:9001", &auth.addr());
    let clock = ShiftedClock::new();
    let ng = clock.builder().upstream_of(&up).start(&conf);
    clock.clear_of_boundary(60_000, 20_000);
    let bearer = |token: &str| format!("Bearer {token}");
    // The login is limited by address, before any check.
    let st = hammer(ng.port, "/login", &[], 8, 2);
    assert_eq!(tally(&st).get(&200), Some(&5), "{:?}", tally(&st));
    assert_eq!(tally(&st).get(&429), Some(&3), "{:?}", tally(&st));
    // Failed authentication costs no one anything.
    let bad = bearer("tok-guess");
    let st = hammer(
        ng.port,
        "/api/x",
        &[("Authorization", bad.as_bytes())],
        20,
        2,
    );
    assert_eq!(tally(&st).get(&401), Some(&20), "{:?}", tally(&st));
    // A free user gets 60 a minute, whatever the address's login count.
    let alice = bearer("tok-alice");
    let st = hammer(
        ng.port,
        "/api/x",
        &[("Authorization", alice.as_bytes())],
        70,
        2,
    );
    assert_eq!(tally(&st).get(&200), Some(&60), "{:?}", tally(&st));
    assert_eq!(tally(&st).get(&429), Some(&10), "{:?}", tally(&st));
    // A pro user, 600: the plan comes from the auth server's answer.
    let carol = bearer("tok-carol");
    let r = request(
        ng.port,
        "GET",
        "/api/x",
        &[("Authorization", carol.as_bytes())],
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(r.header_num("RateLimit-Limit"), 600);
    assert_eq!(auth.refused(), 20);
    assert_eq!(up.received(), 5 + 60 + 1);
    let m = get(ng.port, "/metrics").text();
    assert_eq!(
        prom_value(
            &m,
            "rate_limit_window_requests_total",
            &[("zone", "per_user"), ("result", "exempt")]
        ),
        Some(0.0),
        "{m}"
    );
}

#[test]
fn problem_json_answers_rfc9457_with_the_real_numbers() {
    let up = Upstream::start();
    let clock = ShiftedClock::new();
    let ng = clock
        .builder()
        .upstream_of(&up)
        .start(&example("problem-json.conf"));
    clock.clear_of_boundary(60_000, 20_000);
    for i in 0..5 {
        let r = get(ng.port, "/api/x");
        assert_eq!(r.status, 200, "request {i}: {}", r.describe());
    }
    let r = get(ng.port, "/api/x");
    assert_eq!(r.status, 429, "{}", r.describe());
    assert_eq!(
        r.header("Content-Type"),
        Some("application/problem+json"),
        "{}",
        r.describe()
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", r.text()));
    assert_eq!(doc["status"], 429, "{doc}");
    assert_eq!(doc["title"], "Too Many Requests", "{doc}");
    assert_eq!(doc["limit"], 5, "{doc}");
    assert_eq!(doc["remaining"], 0, "{doc}");
    // The headers are still there, and the body carries the same numbers.
    let retry = r.header_num("Retry-After");
    assert!((1..=60).contains(&retry), "{}", r.describe());
    assert_eq!(doc["retry_after"], retry, "{doc}");
    assert_eq!(r.header_num("RateLimit-Limit"), 5);
    assert_eq!(r.header_num("RateLimit-Remaining"), 0);
    assert_eq!(doc["reset"], r.header_num("RateLimit-Reset"), "{doc}");
    assert!(
        doc["detail"]
            .as_str()
            .is_some_and(|d| d.contains(&format!("retry in {retry} s"))),
        "{doc}"
    );
    assert_eq!(
        up.received(),
        5,
        "the rejected request never reached the app"
    );
}

// ---------------------------------------------------------------------------
// The docs run as printed (issue 37)
// ---------------------------------------------------------------------------

/// The first ```nginx block after `after` in the file `doc` (relative to the
/// checkout), verbatim.
fn nginx_block(doc: &str, after: &str) -> String {
    let text = std::fs::read_to_string(example_conf_dir().join("..").join(doc)).unwrap();
    let from = text
        .find(after)
        .unwrap_or_else(|| panic!("{doc}: no {after:?}"));
    let rest = &text[from..];
    let start = rest.find("```nginx\n").expect("an nginx block") + "```nginx\n".len();
    let len = rest[start..].find("```").expect("the block ends");
    rest[start..start + len].to_string()
}

/// `nginx -t -p PREFIX -c conf/nginx.conf` with `files` (relative to
/// PREFIX) written first; PREFIX has modules/ and logs/ like every test's.
fn nginx_t_with(conf: &str, files: &[(&str, &str)]) -> (bool, String) {
    let prefix = make_prefix();
    for (rel, text) in files {
        let path = prefix.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    std::fs::write(prefix.path().join("conf/nginx.conf"), conf).unwrap();
    nginx_t_in(prefix.path(), "conf/nginx.conf")
}

fn nginx_t_in(prefix: &std::path::Path, conf: &str) -> (bool, String) {
    let out = std::process::Command::new(nginx_bin())
        .args(["-t", "-p"])
        .arg(prefix)
        .args(["-c", conf])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run nginx -t");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), text)
}

#[test]
fn readme_quick_start_passes_nginx_t_as_printed() {
    let quick = nginx_block("README.md", "## Quick start");
    assert!(
        quick.contains("rate_limit_window zone=per_ip limit=100;"),
        "{quick}"
    );
    let (ok, out) = nginx_t_with(&quick, &[]);
    assert!(ok && out.contains("test is successful"), "{quick}\n{out}");
}

/// The Debian `conf.d` snippet of docs/operations.md, included inside an
/// `http` block as Debian's nginx.conf does; the whole quick start in its
/// place fails there, as the docs say.
#[test]
fn debian_conf_d_snippet_passes_nginx_t() {
    let snippet = nginx_block("docs/operations.md", "/etc/nginx/conf.d/rate-limit.conf");
    assert!(
        !snippet.contains("load_module") && !snippet.contains("http {"),
        "{snippet}"
    );
    let debian_like = format!(
        "load_module modules/{MODULE_FILE};\n\
         events {{}}\n\
         http {{\n    include conf.d/*.conf;\n}}\n"
    );
    let (ok, out) = nginx_t_with(&debian_like, &[("conf/conf.d/rate-limit.conf", &snippet)]);
    assert!(ok && out.contains("test is successful"), "{snippet}\n{out}");
    let quick = nginx_block("README.md", "## Quick start");
    let (ok, out) = nginx_t_with(&debian_like, &[("conf/conf.d/rate-limit.conf", &quick)]);
    assert!(!ok, "{out}");
    assert!(out.contains("directive is not allowed here"), "{out}");
}

/// docs/operations.md#the-module-path: with `-p DIR`, a relative
/// `load_module` looks in DIR/modules/; the absolute path works.
#[test]
fn module_path_under_p_is_absolute() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let body = "events {}\nhttp { rate_limit_window_zone $binary_remote_addr zone=z:1m; }\n";
    let relative = format!("load_module modules/{MODULE_FILE};\n{body}");
    let absolute = format!(
        "load_module {};\n{body}",
        module_so().canonicalize().unwrap().display()
    );
    for (conf, ok, needle) in [
        (relative, false, "dlopen()"),
        (absolute, true, "test is successful"),
    ] {
        std::fs::write(dir.path().join("nginx.conf"), &conf).unwrap();
        let (good, out) = nginx_t_in(dir.path(), "nginx.conf");
        assert_eq!(good, ok, "{conf}\n{out}");
        assert!(out.contains(needle), "{out}");
    }
}

/// `make run PORT=…`: the Makefile passes PORT and APP_PORT to
/// scripts/run-gateway.sh, which serves gateway.conf on those ports.
#[test]
fn make_run_ports_are_settable() {
    let root = manifest_dir();
    let dry = std::process::Command::new("make")
        .args(["-n", "run", "PORT=9090"])
        .current_dir(&root)
        .output()
        .expect("make -n");
    let plan = String::from_utf8_lossy(&dry.stdout);
    assert!(
        plan.contains("PORT=\"9090\" APP_PORT=\"\" scripts/run-gateway.sh"),
        "{plan}"
    );

    let (port, app) = (free_port(), free_port());
    let mut child = std::process::Command::new(root.join("scripts/run-gateway.sh"))
        .env("PORT", port.to_string())
        .env("APP_PORT", app.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run-gateway.sh");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !probe(port) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let r = get(port, "/demo");
    let direct = get(app, "/");
    // SAFETY: kill(2) on the nginx master this test started (the script
    // execs nginx); SIGQUIT stops it gracefully.
    unsafe { libc::kill(child.id() as i32, libc::SIGQUIT) };
    let _ = child.wait();
    assert_eq!(r.status, 200, "{}", r.describe());
    assert!(r.text().contains("\"app\":\"demo\""), "{}", r.text());
    assert_eq!(r.header_num("RateLimit-Limit"), 10);
    assert_eq!(direct.status, 200);

    for (p, a) in [("0", ""), ("x", ""), ("9090", "9090")] {
        let st = std::process::Command::new(root.join("scripts/run-gateway.sh"))
            .env("PORT", p)
            .env("APP_PORT", a)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(st.code(), Some(2), "PORT={p} APP_PORT={a}");
    }
}

/// llm-tokens.conf: calls are let in by one token and charged the tokens
/// the model reports; the minute and the day budget each refuse in turn,
/// with a Retry-After to the ms that lets the next call in; the day's
/// counts outlive a restart of nginx (its `state=`), the minute's do not.
/// A frozen clock (libfaketime) at a day boundary instead of waits.
#[test]
fn llm_tokens_charges_what_each_call_used_per_minute_and_per_day() {
    use common::status_upstream::StatusUpstream;
    const DAY0: i64 = 1_704_067_200; // 2024-01-01T00:00:00Z
    let (hobby, team) = (&b"k-hobby-2c9e71d04a5b"[..], &b"k-team-7f3a0be6d918"[..]);
    let up = StatusUpstream::start();
    let clock = FakeClock::new(DAY0 + 1);
    let var_lib = var_lib_nginx();
    let conf = under(&example("llm-tokens.conf"), &var_lib);
    let start = || clock.builder().upstream(&up.addr()).start(&conf);
    let ng = start();
    let call = |key: &[u8], tokens: u32| {
        let path = format!("/v1/chat?tokens={tokens}");
        request(ng.port, "GET", &path, &[("X-API-Key", key)])
    };
    let count = |zone: &str| key_json(ng.port, zone, hobby)["current"].as_u64().unwrap();
    let settled = |zone: &str, want: u64| {
        wait_for(std::time::Duration::from_secs(5), || count(zone) == want);
        count(zone)
    };
    // An unknown key never reaches the model.
    assert_eq!(call(b"k-made-up", 5).status, 401);
    assert_eq!(up.received_total(), 0);
    // hobby: 10,000 tokens a minute. Two calls of 6,000: the second is let
    // in (6,000 + 1 fits) and overruns the minute by its own tokens.
    for _ in 0..2 {
        let r = call(hobby, 6_000);
        assert_eq!(r.status, 200, "{}", r.describe());
        assert_eq!(r.header("X-Tokens"), None, "hidden from the client");
    }
    assert_eq!(settled("llm_minute", 12_000), 12_000);
    assert_eq!(settled("llm_day", 12_000), 12_000);
    // Next minute, 12,000 * (60 - e) / 60 < 10,000 from e = 10.001 s.
    let r = call(hobby, 1);
    assert_eq!(r.status, 429, "{}", r.describe());
    assert_eq!(r.header_num("Retry-After"), 70);
    clock.set(DAY0 + 70);
    assert_eq!(call(hobby, 1).status, 429);
    clock.set(DAY0 + 71);
    assert_eq!(call(hobby, 999).status, 200);
    assert_eq!(settled("llm_day", 12_999), 12_999);
    // Later the same day the minute is free, the day (20,000) is not.
    clock.set(DAY0 + 600);
    for _ in 0..3 {
        assert_eq!(call(hobby, 3_000).status, 200);
    }
    assert_eq!(settled("llm_day", 21_999), 21_999);
    let r = call(hobby, 1);
    assert_eq!(r.status, 429, "{}", r.describe());
    // Tomorrow, 21,999 * (W - e) < 20,000 * W from e = 7,850,976 ms
    // (W = 86,400,000 ms): 93,650.976 s from now, so 93,651.
    assert_eq!(r.header_num("Retry-After"), 93_651);
    // The team key has budgets of its own.
    assert_eq!(call(team, 50_000).status, 200);
    assert_eq!(call(team, 50_000).status, 200);
    assert_eq!(up.received_total(), 8);
    assert_eq!(settled("llm_minute", 9_000), 9_000);
    // A restart (nginx stopped, a new master started): the day's counts
    // come back from the state file, the minute's are gone.
    drop(ng);
    let ng = start();
    let count = |zone: &str| key_json(ng.port, zone, hobby)["current"].as_u64().unwrap();
    assert_eq!(count("llm_day"), 21_999);
    assert_eq!(count("llm_minute"), 0);
    let call = |key: &[u8], tokens: u32| {
        let path = format!("/v1/chat?tokens={tokens}");
        request(ng.port, "GET", &path, &[("X-API-Key", key)])
    };
    let r = call(hobby, 1);
    assert_eq!(r.status, 429, "{}", r.describe());
    assert_eq!(r.header_num("Retry-After"), 93_651);
    assert_eq!(up.received_total(), 8);
}

/// docs/in-flight.md's configuration, as printed: 3 of a key's calls at
/// once on /v1/, 2 of its reports, each line its own count (3 calls and 2
/// reports at once); its override `curl` lines, as printed, set one
/// client's places and give them back.
#[test]
fn in_flight_doc_runs_as_printed() {
    let up = Upstream::start();
    let conf = nginx_block("docs/in-flight.md", "# Requests in flight per client");
    let ng = Nginx::builder().upstream_of(&up).start(&runnable(conf));
    let port = ng.port;
    let spawn = |path: &str, key: &'static str| {
        let path = path.to_string();
        std::thread::spawn(move || request(port, "GET", &path, &[("X-Api-Key", key.as_bytes())]))
    };
    let statuses = |hs: Vec<std::thread::JoinHandle<Response>>| {
        let mut rs: Vec<Response> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        rs.sort_by_key(|r| r.status);
        rs
    };
    let codes = |rs: &[Response]| rs.iter().map(|r| r.status).collect::<Vec<u16>>();
    let calls: Vec<_> = (0..4)
        .map(|_| spawn("/v1/chat?sleep=1500", "k-1"))
        .collect();
    let reports: Vec<_> = (0..3)
        .map(|_| spawn("/reports/q?sleep=1500", "k-1"))
        .collect();
    let rs = statuses(calls);
    assert_eq!(codes(&rs), [200, 200, 200, 429]);
    assert_eq!(rs[3].header("retry-after"), Some("1"));
    assert_eq!(codes(&statuses(reports)), [200, 200, 429]);
    // The override lines, as printed (on the test's port).
    let text = std::fs::read_to_string(example_conf_dir().join("../docs/in-flight.md")).unwrap();
    let from = text.find("## Overrides: a client's places").unwrap();
    let block = &text[from..];
    let start = block.find("```sh\n").unwrap() + "```sh\n".len();
    let lines: Vec<&str> = block[start..start + block[start..].find("```").unwrap()]
        .lines()
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let curl = |line: &str| {
        let line = line.replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"));
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{line} -s -o /dev/null -w '%{{http_code}}'"))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(curl(lines[0]), "200", "{}", lines[0]);
    let calls: Vec<_> = (0..2)
        .map(|_| spawn("/v1/chat?sleep=1000", "batch-7"))
        .collect();
    assert_eq!(
        codes(&statuses(calls)),
        [200, 429],
        "in_flight 1 by override"
    );
    assert_eq!(curl(lines[1]), "200", "{}", lines[1]);
    let calls: Vec<_> = (0..3)
        .map(|_| spawn("/v1/chat?sleep=1000", "batch-7"))
        .collect();
    assert_eq!(
        codes(&statuses(calls)),
        [200, 200, 200],
        "the line's 3 again"
    );
}

/// docs/shedding.md's ordered priorities, as printed (max=8,
/// reserve=25% reserve_low=50% reserve_high=10%): held by a slow upstream,
/// 4 low requests fill low's places, then 2 default, 1 high and 1
/// critical the rest; the next request of each priority is shed.
#[test]
fn ordered_priorities_doc_runs_as_printed() {
    let up = Upstream::start();
    let conf = nginx_block("docs/shedding.md", "## Ordered priorities");
    let ng = Nginx::builder().upstream_of(&up).start(&runnable(conf));
    let port = ng.port;
    let in_flight = || {
        let text = metrics_text(port);
        prom_value(
            &text,
            "rate_limit_window_shed_in_flight",
            &[("zone", "jobs")],
        )
    };
    let mut held = vec![];
    for (prio, places, upto) in [
        ("low", 4, 4.0),
        ("", 2, 6.0),
        ("high", 1, 7.0),
        ("critical", 1, 8.0),
    ] {
        for i in 0..places {
            held.push(std::thread::spawn(move || {
                let p = format!("/jobs/{prio}-{i}?sleep=4000");
                request(port, "GET", &p, &[("X-Priority", prio.as_bytes())]).status
            }));
        }
        let filled = wait_for(std::time::Duration::from_secs(3), || {
            in_flight() == Some(upto)
        });
        assert!(filled, "{prio}: {:?} in flight, want {upto}", in_flight());
        let next = request(
            port,
            "GET",
            "/jobs/next",
            &[("X-Priority", prio.as_bytes())],
        );
        assert_eq!(
            (next.status, next.header("retry-after")),
            (503, Some("1")),
            "{prio}"
        );
    }
    for h in held {
        assert_eq!(h.join().unwrap(), 200);
    }
    let text = metrics_text(port);
    for (prio, admitted) in [
        ("low", 4.0),
        ("default", 2.0),
        ("high", 1.0),
        ("critical", 1.0),
    ] {
        let m = |name| prom_value(&text, name, &[("zone", "jobs"), ("priority", prio)]);
        assert_eq!(
            m("rate_limit_window_shed_total"),
            Some(1.0),
            "{prio}: {text}"
        );
        assert_eq!(
            m("rate_limit_window_shed_admitted_total"),
            Some(admitted),
            "{prio}"
        );
    }
    assert!(wait_for(std::time::Duration::from_secs(2), || in_flight()
        == Some(0.0)));
}

/// docs/shedding.md's configuration, as printed: two slow default
/// requests fill the non-reserved places; a third is shed, a payment and a
/// health check are not.
#[test]
fn shedding_doc_runs_as_printed() {
    let up = Upstream::start();
    let conf = nginx_block("docs/shedding.md", "# Load shedding");
    let ng = Nginx::builder().upstream_of(&up).start(&runnable(conf));
    let port = ng.port;
    let slow: Vec<_> = (0..2)
        .map(|i| {
            std::thread::spawn(move || {
                let p = format!("/api/export/{i}?sleep=1200");
                request(port, "GET", &p, &[("X-Client", b"bulk")]).status
            })
        })
        .collect();
    assert!(wait_for(std::time::Duration::from_secs(5), || up
        .concurrent("bulk")
        == 2));
    let shed = get(port, "/api/export/3");
    assert_eq!((shed.status, shed.header("retry-after")), (503, Some("1")));
    assert_eq!(get(port, "/api/pay").status, 200);
    assert_eq!(get(port, "/healthz").status, 200);
    for h in slow {
        assert_eq!(h.join().unwrap(), 200);
    }
    let text = metrics_text(port);
    let shed_default = prom_value(
        &text,
        "rate_limit_window_shed_total",
        &[("zone", "app"), ("priority", "default")],
    );
    assert_eq!(shed_default, Some(1.0), "{text}");
}
