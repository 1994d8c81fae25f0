//! Held HTTP/2 streams: a client gone while its stream is held is not
//! counted, and a held stream does not hold the connection's others.
use super::*;

/// nginx over TLS with HTTP/2 (curl 7.88's h2c prior knowledge cannot
/// multiplex), zone `z` keyed by `?k=`, limit 1 per 2 s, delay 5 s. The
/// certificate directory must outlive nginx.
fn start_h2(clock: &ShiftedClock, up: &Upstream) -> (Nginx, tempfile::TempDir) {
    let certs = tempfile::tempdir().unwrap();
    let tls = tls_h2_listen(certs.path());
    let c = conf_with(
        "rate_limit_window_zone $arg_k zone=z:1m window=2s;",
        "rate_limit_window zone=z limit=1 delay=5s;",
    )
    .replacen("listen 127.0.0.1:{{PORT}} ;", &tls, 1);
    assert!(c.contains("http2 on"), "{c}");
    (start_on(clock, up, &c), certs)
}

/// HTTP/2: a client that gives up on a held stream (curl --max-time closes
/// the connection) is forgotten, like an HTTP/1 client.
#[test]
fn http2_client_gone_while_held_is_not_counted() {
    let clock = ShiftedClock::new();
    let up = Upstream::start();
    let (ng, _certs) = start_h2(&clock, &up);
    clock.jump_to_window_offset(2_000, 100);
    let url = format!("https://127.0.0.1:{}/?k=g", ng.port);
    let run = |max: &str| {
        Command::new("curl")
            .args(["-sk", "--http2", "--max-time", max, "-o", "/dev/null"])
            .args(["-w", "%{http_version} %{http_code}"])
            .arg(&url)
            .output()
            .expect("run curl")
    };
    let first = run("5");
    assert_eq!(String::from_utf8_lossy(&first.stdout), "2 200");
    let gone = run("0.5");
    assert!(!gone.status.success(), "the held stream was answered");
    let metric = |name: &str, labels: &[(&str, &str)]| {
        let out = Command::new("curl")
            .args(["-sk", &format!("https://127.0.0.1:{}/metrics", ng.port)])
            .output()
            .expect("run curl");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        prom_value(&text, name, labels).unwrap_or_else(|| panic!("no {name}:\n{text}"))
    };
    let delayed_total = "rate_limit_window_delayed_total";
    assert!(wait_for(Duration::from_secs(2), || {
        metric(delayed_total, &[("zone", "z"), ("result", "abandoned")]) == 1.0
    }));
    assert_eq!(
        metric("rate_limit_window_delay_held", &[("zone", "z")]),
        0.0
    );
    // Past the moment it would have been admitted: never counted.
    thread::sleep(Duration::from_millis(2_000));
    let admitted = metric(delayed_total, &[("zone", "z"), ("result", "admitted")]);
    assert_eq!(admitted, 0.0);
    assert_eq!(up.received(), 1);
}

/// HTTP/2: one held stream does not hold the others on its connection.
#[test]
fn http2_held_stream_does_not_hold_the_others() {
    let clock = ShiftedClock::new();
    let up = Upstream::start();
    let (ng, _certs) = start_h2(&clock, &up);
    clock.jump_to_window_offset(2_000, 100);
    let base = format!("https://127.0.0.1:{}", ng.port);
    let mut cmd = Command::new("curl");
    cmd.args(["-sSk", "--http2", "--parallel", "--parallel-max", "8"])
        .args([
            "-w",
            "%{http_version} %{http_code} %{num_connects} %{time_total} %{url_effective}\\n",
        ]);
    let urls = ["h", "h", "o1", "o2", "o3", "o4"].map(|k| format!("{base}/?k={k}"));
    for u in &urls {
        cmd.args(["-o", "/dev/null", u]);
    }
    let out = cmd.output().expect("run curl (make test installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    eprintln!("HTTP/2 transfers (version status connects seconds url):\n{text}");
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 6, "{text}");
    assert!(rows.iter().all(|r| r[0] == "2" && r[1] == "200"), "{text}");
    let connects: u32 = rows.iter().map(|r| r[2].parse::<u32>().unwrap()).sum();
    assert_eq!(connects, 1, "streams did not share one connection: {text}");
    let secs = |r: &Vec<&str>| r[3].parse::<f64>().unwrap();
    let mut h: Vec<f64> = rows
        .iter()
        .filter(|r| r[4].ends_with("k=h"))
        .map(secs)
        .collect();
    h.sort_by(f64::total_cmp);
    // The held stream waited for the boundary (~1.9 s); the others did not.
    assert!(h[1] >= 1.0, "{text}");
    for r in rows.iter().filter(|r| !r[4].ends_with("k=h")) {
        assert!(
            secs(r) < h[1] - 0.5,
            "a stream waited for the held one: {text}"
        );
    }
    assert_eq!(up.received(), 6);
}
