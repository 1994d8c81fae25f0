//! gRPC-native rejections (issue 35) against real nginx (two workers,
//! HTTP/2 without TLS), a real gRPC server behind `grpc_pass` and a real
//! gRPC client: Debian's python3-grpcio, driven by tests/it/grpc_peer.py
//! (`make test` installs the package). A rejected gRPC call sees
//! RESOURCE_EXHAUSTED with the Retry-After wait as `grpc-retry-pushback-ms`,
//! and a retry policy honours it; `rate_limit_window_grpc off` and
//! non-gRPC requests keep the plain status; both phases; `delay=`; the
//! trailers-only answer is one HEADERS frame that ends the stream.
use crate::common;

use common::*;
use rate_limit_window_core::rule::fit;
use rate_limit_window_core::rule::window::{retry_after_ms, Counts};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Debian's python3-grpcio is installed for the system interpreter.
const PYTHON: &str = "/usr/bin/python3";
const ECHO: &str = "/test.Echo/Call";
const OTHER: &str = "/test.Other/Call";
/// The limited location's gRPC answer, before the wait.
const MESSAGE: &str = "rate limit exceeded, retry in";

fn peer_script() -> PathBuf {
    manifest_dir().join("tests/it/grpc_peer.py")
}

/// The gRPC server (`grpc_peer.py serve`) and the calls it received.
struct GrpcServer {
    child: Child,
    port: u16,
    /// (epoch ms, grpc-previous-rpc-attempts) per call received.
    calls: Arc<Mutex<Vec<(u128, u32)>>>,
}

impl GrpcServer {
    fn start() -> GrpcServer {
        let mut child = Command::new(PYTHON)
            .arg(peer_script())
            .arg("serve")
            .stdout(Stdio::piped())
            .spawn()
            .expect("run tests/it/grpc_peer.py (make test installs python3-grpcio)");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let port = first
            .strip_prefix("port ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("gRPC server did not start: {first:?}"));
        let calls = Arc::new(Mutex::new(vec![]));
        let seen = calls.clone();
        thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut f = line.split(' ').skip(1).map(|v| v.parse().unwrap_or(0));
                if let (Some(ms), Some(attempts)) = (f.next(), f.next()) {
                    seen.lock().unwrap().push((ms, attempts as u32));
                }
            }
        });
        GrpcServer { child, port, calls }
    }

    fn calls(&self) -> Vec<(u128, u32)> {
        self.calls.lock().unwrap().clone()
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One call as the gRPC client saw it.
#[derive(Debug, Clone)]
struct Call {
    code: String,
    details: String,
    reply: String,
    trailing: Vec<(String, String)>,
    start_ms: u64,
    end_ms: u64,
}

impl Call {
    fn meta(&self, name: &str) -> Option<&str> {
        self.trailing
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn meta_num(&self, name: &str) -> u64 {
        self.meta(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no numeric {name} in {self:?}"))
    }
}

/// `n` unary calls of `method`, one after another on one channel, with
/// metadata `x-key: key`; with `retry`, a retry policy for
/// RESOURCE_EXHAUSTED whose own backoff (10-20 ms) is far below any
/// pushback.
fn grpc_calls(port: u16, method: &str, key: &str, n: usize, retry: bool) -> Vec<Call> {
    run_client(serde_json::json!({
        "target": format!("127.0.0.1:{port}"),
        "method": method, "key": key, "calls": n, "retry": retry, "timeout_s": 20,
    }))
}

/// Runs the gRPC client with `spec` (see tests/it/grpc_peer.py).
fn run_client(spec: serde_json::Value) -> Vec<Call> {
    let n = spec["calls"].as_u64().unwrap() as usize;
    let out = Command::new(PYTHON)
        .arg(peer_script())
        .arg("call")
        .arg(spec.to_string())
        .output()
        .expect("run the gRPC client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "gRPC client failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls: Vec<Call> = stdout.lines().map(parse_call).collect();
    assert_eq!(calls.len(), n, "{stdout}");
    calls
}

fn parse_call(line: &str) -> Call {
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    Call {
        code: s("code"),
        details: s("details"),
        reply: s("reply"),
        trailing: v["trailing"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m[0].as_str().unwrap().into(), m[1].as_str().unwrap().into()))
            .collect(),
        start_ms: v["start_ms"].as_u64().unwrap(),
        end_ms: v["end_ms"].as_u64().unwrap(),
    }
}

/// nginx.conf: zone `z` (keyed by `x-key`) of `window`, `http` at http
/// level, and an HTTP/2 (and HTTP/1.1) server on {{PORT}} with the metrics,
/// `/plain/` (limit 1, proxied to {{UPSTREAM}}), `server`, and `location /`
/// holding `loc` and passing to the gRPC server. The access log
/// `logs/grpc.log` has one line per request: `$msec $status
/// $rate_limit_window_status $http_x_key attempts pushback`.
fn conf(window: &str, http: &str, server: &str, loc: &str, grpc: &GrpcServer) -> String {
    http_conf(
        &r#"
        log_format grpc '$msec $status $rate_limit_window_status $http_x_key '
                        '$http_grpc_previous_rpc_attempts $sent_http_grpc_retry_pushback_ms';
        rate_limit_window_zone $http_x_key zone=z:1m window=WINDOW;
        HTTP
        server {
            listen 127.0.0.1:{{PORT}};
            http2 on;
            access_log logs/grpc.log grpc;
            location = /metrics { rate_limit_window_metrics; }
            location /plain/ {
                rate_limit_window zone=z limit=1;
                proxy_pass http://{{UPSTREAM}};
            }
            SERVER
            location / {
                LOC
                grpc_pass grpc://127.0.0.1:GRPC;
            }
        }"#
        .replace("WINDOW", window)
        .replace("HTTP", http)
        .replace("SERVER", server)
        .replace("LOC", loc)
        .replace("GRPC", &grpc.port.to_string()),
    )
}

/// One access log line.
#[derive(Debug)]
struct Logged {
    msec: f64,
    status: u16,
    verdict: String,
    attempts: String,
    pushback: String,
}

/// The access log lines of `key`, in order.
fn logged(ng: &Nginx, key: &str) -> Vec<Logged> {
    let text = std::fs::read_to_string(ng.prefix().join("logs/grpc.log")).unwrap_or_default();
    text.lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .filter(|f| f.len() == 6 && f[3] == key)
        .map(|f| Logged {
            msec: f[0].parse().unwrap(),
            status: f[1].parse().unwrap(),
            verdict: f[2].into(),
            attempts: f[4].into(),
            pushback: f[5].into(),
        })
        .collect()
}

/// Waits for the access log to hold `n` lines of `key` (nginx writes a
/// line when the request ends, which may be after the client has its
/// answer).
fn logged_n(ng: &Nginx, key: &str, n: usize) -> Vec<Logged> {
    wait_for(Duration::from_secs(5), || logged(ng, key).len() >= n);
    logged(ng, key)
}

fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Retry-After (s) of the core's one rule for a limit of 1 with `counts`
/// at `elapsed_ms` into a window of `window_ms`.
fn expected_wait_s(counts: Counts, elapsed_ms: u64, window_ms: u64) -> u32 {
    let wait = retry_after_ms(counts, elapsed_ms, window_ms, 1);
    fit::retry_after_secs(Some(wait), window_ms)
}

/// Asserts the gRPC answer of a rejection whose Retry-After is `wait_s`.
fn assert_grpc_rejection(c: &Call, wait_s: u64) {
    assert_eq!(c.code, "RESOURCE_EXHAUSTED", "{c:?}");
    assert_eq!(c.details, format!("{MESSAGE} {wait_s} s"), "{c:?}");
    assert_eq!(c.meta_num("grpc-retry-pushback-ms"), wait_s * 1000, "{c:?}");
    assert_eq!(c.meta_num("retry-after"), wait_s, "{c:?}");
}

/// The second call of a client whose limit is 1 is rejected with
/// RESOURCE_EXHAUSTED, the message, and the exact wait as pushback (the
/// core's rule, at a frozen clock 10 s into a 60 s window), the
/// RateLimit headers as trailing metadata; the log and the variable say
/// REJECTED; the gRPC server sees only the admitted call.
#[test]
fn rejected_call_gets_resource_exhausted_and_the_exact_pushback() {
    let (up, grpc) = (Upstream::start(), GrpcServer::start());
    let clock = FakeClock::new(now_s() / 60 * 60 + 10);
    let c = conf("1m", "", "", "rate_limit_window zone=z limit=1;", &grpc);
    let ng = start_faked(&clock, &up, "UTC", &c);
    let calls = grpc_calls(ng.port, ECHO, "t1", 2, false);
    assert_eq!(
        (calls[0].code.as_str(), calls[0].reply.as_str()),
        ("OK", "echo:hi")
    );
    let wait_s = expected_wait_s(
        Counts {
            current: 1,
            previous: 0,
        },
        10_000,
        60_000,
    );
    assert_eq!(wait_s, 51); // 50 s + 1 ms, rounded up
    assert_grpc_rejection(&calls[1], u64::from(wait_s));
    assert_eq!(
        calls[1].meta("ratelimit-limit"),
        Some("1"),
        "{:?}",
        calls[1]
    );
    assert_eq!(calls[1].meta("ratelimit-remaining"), Some("0"));
    assert_eq!(grpc.calls().len(), 1);
    let log = logged_n(&ng, "t1", 2);
    let seen: Vec<_> = log.iter().map(|l| (l.status, l.verdict.as_str())).collect();
    assert_eq!(seen, [(200, "PASSED"), (200, "REJECTED")], "{log:?}");
    assert_eq!(log[1].pushback, "51000");
    assert_eq!(
        count_lines(&ng.error_log(), "limiting requests by zone \"z\""),
        1
    );
    let text = metrics_text(ng.port);
    let rejected = [("zone", "z"), ("result", "rejected")];
    assert_eq!(
        prom_value(&text, "rate_limit_window_requests_total", &rejected),
        Some(1.0)
    );
}

/// A client with a retry policy for RESOURCE_EXHAUSTED retries after the
/// pushback (not after its own 10 ms backoff, which would be rejected
/// again and exhaust its 3 attempts), and the retry is admitted.
#[test]
fn retry_policy_waits_the_pushback_then_succeeds() {
    let (up, grpc) = (Upstream::start(), GrpcServer::start());
    let c = conf("2s", "", "", "rate_limit_window zone=z limit=1;", &grpc);
    let ng = Nginx::builder().upstream_of(&up).start(&c);
    // Both calls 100 ms into a 2 s window (a boundary between them would
    // admit the second): the wait is then 1.9 s and 1 ms, so 2 s.
    let calls = run_client(serde_json::json!({
        "target": format!("127.0.0.1:{}", ng.port),
        "key": "t2", "calls": 2, "retry": true, "timeout_s": 20, "align": [2000, 100],
    }));
    for c in &calls {
        assert_eq!(
            (c.code.as_str(), c.reply.as_str()),
            ("OK", "echo:hi"),
            "{c:?}"
        );
    }
    let log = logged_n(&ng, "t2", 3);
    let seen: Vec<_> = log.iter().map(|l| l.verdict.as_str()).collect();
    assert_eq!(seen, ["PASSED", "REJECTED", "PASSED"], "{log:?}");
    assert_eq!(log[2].attempts, "1", "the retry says it is one: {log:?}");
    assert_eq!(log[1].pushback, "2000", "{log:?}");
    let pushback = 2000.0;
    let gap_ms = (log[2].msec - log[1].msec) * 1000.0;
    assert!(
        gap_ms >= pushback - 5.0,
        "retried {gap_ms} ms after: {log:?}"
    );
    assert!(
        gap_ms < pushback + 1500.0,
        "retried {gap_ms} ms after: {log:?}"
    );
    assert!(calls[1].end_ms - calls[1].start_ms >= pushback as u64 - 5);
    let served: Vec<u32> = grpc.calls().iter().map(|c| c.1).collect();
    assert_eq!(served, [0, 1]);
}

/// `rate_limit_window_grpc off` (inherited from http{}) gives the plain
/// status, which the client maps to UNAVAILABLE; `on` in a location turns
/// the gRPC answer back on there.
#[test]
fn grpc_off_gives_the_plain_status() {
    let (up, grpc) = (Upstream::start(), GrpcServer::start());
    let other = format!(
        "location /test.Other/ {{ rate_limit_window zone=z limit=1; rate_limit_window_grpc on; \
         grpc_pass grpc://127.0.0.1:{}; }}",
        grpc.port
    );
    let c = conf(
        "1m",
        "rate_limit_window_grpc off;",
        &other,
        "rate_limit_window zone=z limit=1;",
        &grpc,
    );
    let ng = Nginx::builder().upstream_of(&up).start(&c);
    // A window boundary between two calls would admit the second.
    clear_of_boundary(60_000, 10_000);
    let off = grpc_calls(ng.port, ECHO, "off", 2, false);
    assert_eq!(off[0].code, "OK");
    assert_eq!(off[1].code, "UNAVAILABLE", "{:?}", off[1]);
    assert!(off[1].details.contains("429"), "{:?}", off[1]);
    assert_eq!(off[1].meta("grpc-retry-pushback-ms"), None, "{:?}", off[1]);
    let on = grpc_calls(ng.port, OTHER, "on", 2, false);
    assert_eq!(on[0].code, "OK");
    let wait_s = on[1].meta_num("retry-after");
    assert!((1..=60).contains(&wait_s), "{:?}", on[1]);
    assert_grpc_rejection(&on[1], wait_s);
    let statuses = |k| {
        logged_n(&ng, k, 2)
            .iter()
            .map(|l| l.status)
            .collect::<Vec<_>>()
    };
    assert_eq!(statuses("off"), [200, 429]);
    assert_eq!(statuses("on"), [200, 200]);
}

/// In dry run a gRPC call over the limit goes through, as any request:
/// `REJECTED_DRY_RUN`, no gRPC answer.
#[test]
fn dry_run_lets_the_call_through() {
    let (up, grpc) = (Upstream::start(), GrpcServer::start());
    let loc = "rate_limit_window zone=z limit=1; rate_limit_window_dry_run on;";
    let ng = Nginx::builder()
        .upstream_of(&up)
        .start(&conf("1m", "", "", loc, &grpc));
    clear_of_boundary(60_000, 5_000);
    for c in grpc_calls(ng.port, ECHO, "dry", 2, false) {
        assert_eq!(
            (c.code.as_str(), c.reply.as_str()),
            ("OK", "echo:hi"),
            "{c:?}"
        );
        assert_eq!(c.meta("grpc-retry-pushback-ms"), None, "{c:?}");
    }
    let log = logged_n(&ng, "dry", 2);
    let seen: Vec<_> = log.iter().map(|l| l.verdict.as_str()).collect();
    assert_eq!(seen, ["PASSED", "REJECTED_DRY_RUN"], "{log:?}");
    assert_eq!(grpc.calls().len(), 2);
}

/// Both phases answer the gRPC way: preaccess, and postaccess after an
/// access check (`allow`) has passed.
#[test]
fn both_phases_answer_the_grpc_way() {
    for phase in ["preaccess", "postaccess"] {
        let (up, grpc) = (Upstream::start(), GrpcServer::start());
        let loc = format!(
            "rate_limit_window zone=z limit=1; rate_limit_window_phase {phase}; \
             allow 127.0.0.1; deny all;"
        );
        let ng = Nginx::builder()
            .upstream_of(&up)
            .start(&conf("1m", "", "", &loc, &grpc));
        clear_of_boundary(60_000, 5_000);
        let calls = grpc_calls(ng.port, ECHO, phase, 3, false);
        assert_eq!(calls[0].code, "OK", "{phase}");
        for c in &calls[1..] {
            let wait_s = c.meta_num("retry-after");
            assert!((1..=60).contains(&wait_s), "{phase}: {c:?}");
            assert_grpc_rejection(c, wait_s);
        }
        let log = logged_n(&ng, phase, 3);
        let seen: Vec<_> = log.iter().map(|l| l.verdict.as_str()).collect();
        assert_eq!(seen, ["PASSED", "REJECTED", "REJECTED"], "{phase}: {log:?}");
        assert_eq!(grpc.calls().len(), 1, "{phase}");
    }
}

/// A gRPC call held by `delay=` whose room is then taken by another
/// request, so that its next room is past the delay, is finally rejected
/// with the gRPC answer and the wait of that moment. The clock is frozen
/// 59 s into a 60 s window: the held call waits 1001 ms (a real timer);
/// meanwhile the clock moves 2 s on and a request of the same client, in
/// a location without `delay=`, takes the room.
#[test]
fn held_call_finally_rejected_gets_the_grpc_answer() {
    let (up, grpc) = (Upstream::start(), GrpcServer::start());
    let t = now_s() / 60 * 60 + 59;
    let clock = FakeClock::new(t);
    let loc = "rate_limit_window zone=z limit=1 delay=3s;";
    let ng = start_faked(&clock, &up, "UTC", &conf("1m", "", "", loc, &grpc));
    assert_eq!(get_key(ng.port, "/plain/", "held").status, 200);
    let port = ng.port;
    let call = thread::spawn(move || grpc_calls(port, ECHO, "held", 1, false));
    let held = || {
        let text = metrics_text(port);
        prom_value(&text, "rate_limit_window_delay_held", &[("zone", "z")]) == Some(1.0)
    };
    assert!(wait_for(Duration::from_secs(5), held), "never held");
    clock.set(t + 2);
    assert_eq!(get_key(ng.port, "/plain/", "held").status, 200);
    let calls = call.join().unwrap();
    // One in the window before, one in this one, 1 s in.
    let wait_s = expected_wait_s(
        Counts {
            current: 1,
            previous: 1,
        },
        1_000,
        60_000,
    );
    assert_grpc_rejection(&calls[0], u64::from(wait_s));
    assert!(
        calls[0].end_ms - calls[0].start_ms >= 1_000,
        "not held: {calls:?}"
    );
    let text = metrics_text(ng.port);
    let rejected = [("zone", "z"), ("result", "rejected")];
    assert_eq!(
        prom_value(&text, "rate_limit_window_delayed_total", &rejected),
        Some(1.0)
    );
    let abandoned = [("zone", "z"), ("result", "abandoned")];
    assert_eq!(
        prom_value(&text, "rate_limit_window_delayed_total", &abandoned),
        Some(0.0)
    );
    let held_now = prom_value(&text, "rate_limit_window_delay_held", &[("zone", "z")]);
    assert_eq!(held_now, Some(0.0));
    let log = logged_n(&ng, "held", 3);
    let seen: Vec<_> = log.iter().map(|l| (l.status, l.verdict.as_str())).collect();
    assert_eq!(seen[2], (200, "REJECTED"), "{log:?}");
    assert!(grpc.calls().is_empty());
}

/// In the gRPC location, requests that are not gRPC calls keep
/// `rate_limit_window_status` (here 503) and its page: no content-type,
/// JSON, gRPC-Web. A gRPC call over HTTP/1.1 gets the trailers-only answer
/// as a header-only 200 with `Content-Length: 0`.
#[test]
fn other_requests_in_the_same_location_keep_the_status() {
    let (up, grpc) = (Upstream::start(), GrpcServer::start());
    let loc = "rate_limit_window zone=z limit=0; rate_limit_window_status 503;";
    let ng = Nginx::builder()
        .upstream_of(&up)
        .start(&conf("1m", "", "", loc, &grpc));
    let key: (&str, &[u8]) = ("X-Key", b"k");
    for ct in [
        None,
        Some("application/json"),
        Some("application/grpc-web+proto"),
    ] {
        let mut hs = vec![key];
        hs.extend(ct.map(|c| ("Content-Type", c.as_bytes())));
        let r = request(ng.port, "POST", ECHO, &hs);
        assert_eq!(r.status, 503, "{ct:?}: {}", r.describe());
        assert_eq!(r.header("grpc-status"), None, "{ct:?}");
        assert!(r.text().contains("503"), "{ct:?}: {}", r.describe());
    }
    let ct: (&str, &[u8]) = ("Content-Type", b"application/grpc+proto");
    let r = request(ng.port, "POST", ECHO, &[key, ct]);
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(r.header("Content-Type"), Some("application/grpc"));
    assert_eq!(r.header("Content-Length"), Some("0"));
    assert_eq!(r.header("grpc-status"), Some("8"));
    assert_eq!(
        r.header("grpc-message"),
        Some("rate limit exceeded, retry in 60 s")
    );
    assert_eq!(r.header("grpc-retry-pushback-ms"), Some("60000"));
    assert!(r.body.is_empty());
    assert!(grpc.calls().is_empty());
}

/// The connection preface of an HTTP/2 client.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A frame header: payload length, type, flags, stream id.
fn frame_header(len: usize, ty: u8, flags: u8, id: u32) -> Vec<u8> {
    let mut h = (len as u32).to_be_bytes()[1..].to_vec();
    h.extend_from_slice(&[ty, flags]);
    h.extend_from_slice(&id.to_be_bytes());
    h
}

/// Appends an HPACK literal (not indexed, no Huffman): `name` is its
/// encoded start (an indexed name, or 0 and a literal name).
fn push_literal(block: &mut Vec<u8>, name: &[u8], value: &str) {
    block.extend_from_slice(name);
    block.push(value.len() as u8);
    block.extend_from_slice(value.as_bytes());
}

/// Sends one HTTP/2 POST (prior knowledge, no body) on stream 1 with
/// `x-key: h2` and `content_type`, and returns (type, flags) of every frame
/// the server sent on stream 1 until one ended it.
fn h2_frames(port: u16, path: &str, content_type: Option<&str>) -> Vec<(u8, u8)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
    push_literal(&mut block, &[0x04], path); // :path
    push_literal(&mut block, &[0x01], "localhost"); // :authority
    push_literal(&mut block, b"\x00\x05x-key", "h2");
    if let Some(ct) = content_type {
        push_literal(&mut block, b"\x00\x0ccontent-type", ct);
    }
    let mut out = PREFACE.to_vec();
    out.extend(frame_header(0, 4, 0, 0)); // SETTINGS
    out.extend(frame_header(block.len(), 1, 0x5, 1)); // HEADERS, END_STREAM | END_HEADERS
    out.extend(block);
    s.write_all(&out).unwrap();
    let mut frames = vec![];
    loop {
        let (ty, flags, id, _) = read_frame(&mut s);
        assert_ne!(ty, 7, "GOAWAY");
        if id != 1 {
            continue;
        }
        frames.push((ty, flags));
        if ty == 3 || flags & 1 != 0 {
            return frames;
        }
    }
}

/// Reads one frame: (type, flags, stream id, payload).
fn read_frame(s: &mut TcpStream) -> (u8, u8, u32, Vec<u8>) {
    let mut h = [0u8; 9];
    s.read_exact(&mut h).unwrap();
    let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
    let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
    let mut payload = vec![0; len];
    s.read_exact(&mut payload).unwrap();
    (h[3], h[4], id, payload)
}

/// Over HTTP/2 the answer is one HEADERS frame with END_STREAM (gRPC's
/// trailers-only form; a 429 page has HEADERS then DATA), and its header
/// lines are as specified, with no content-length and, with
/// `rate_limit_window_headers off`, no RateLimit headers.
#[test]
fn http2_answer_is_one_headers_frame_that_ends_the_stream() {
    let (up, grpc) = (Upstream::start(), GrpcServer::start());
    let loc = "rate_limit_window zone=z limit=0; rate_limit_window_headers off;";
    let ng = Nginx::builder()
        .upstream_of(&up)
        .start(&conf("1m", "", "", loc, &grpc));
    // HEADERS with END_HEADERS | END_STREAM, nothing else.
    assert_eq!(
        h2_frames(ng.port, ECHO, Some("application/grpc")),
        [(1, 0x5)]
    );
    let plain = h2_frames(ng.port, ECHO, None);
    assert_eq!(plain.first(), Some(&(1, 0x4)), "{plain:?}");
    assert_eq!(plain.last().map(|f| f.0), Some(0), "{plain:?}");
    let out = Command::new("curl")
        .args([
            "-sS",
            "--http2-prior-knowledge",
            "-X",
            "POST",
            "-D",
            "-",
            "-o",
            "/dev/null",
        ])
        .args(["-H", "content-type: application/grpc", "-H", "x-key: curl"])
        .arg(format!("http://127.0.0.1:{}{ECHO}", ng.port))
        .output()
        .expect("run curl");
    let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
    let lines: Vec<&str> = head.lines().map(str::trim).collect();
    assert_eq!(lines[0], "http/2 200", "{head}");
    for want in [
        "content-type: application/grpc",
        "grpc-status: 8",
        "grpc-message: rate limit exceeded, retry in 60 s",
        "grpc-retry-pushback-ms: 60000",
        "retry-after: 60",
    ] {
        assert!(lines.contains(&want), "{want} not in {head}");
    }
    assert!(!head.contains("content-length"), "{head}");
    assert!(!head.contains("ratelimit"), "{head}");
    assert!(grpc.calls().is_empty());
}

/// `rate_limit_window_grpc` takes on or off, at every level.
#[test]
fn directive_takes_on_or_off() {
    let ok = http_conf(
        "rate_limit_window_grpc off;
         server { listen 127.0.0.1:{{PORT}}; rate_limit_window_grpc on;
                  location / { rate_limit_window_grpc off; } }",
    );
    let (good, err) = test_config(&ok);
    assert!(good, "{err}");
    let bad = http_conf("rate_limit_window_grpc maybe;");
    let (good, err) = test_config(&bad);
    assert!(!good);
    assert!(
        err.contains("invalid value \"maybe\" in \"rate_limit_window_grpc\" directive, it must be \"on\" or \"off\""),
        "{err}"
    );
}

/// The `log_format` of docs/grpc.md#logging, verbatim (without its
/// `access_log` line).
fn docs_log_format() -> String {
    let doc = std::fs::read_to_string(manifest_dir().join("docs/grpc.md")).unwrap();
    let at = doc.find("## Logging").expect("docs/grpc.md#logging");
    let rest = &doc[at..];
    let start = rest.find("```nginx\n").unwrap() + "```nginx\n".len();
    let len = rest[start..].find("```").unwrap();
    let block = &rest[start..start + len];
    assert!(block.contains("log_format limited"), "{block}");
    block
        .lines()
        .filter(|l| !l.starts_with("access_log"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// With the docs' `log_format`, the access log tells a rejected gRPC call
/// (status 200 on the wire) from an admitted one.
#[test]
fn the_docs_log_format_tells_a_rejected_call_apart() {
    let (up, grpc) = (Upstream::start(), GrpcServer::start());
    let clock = FakeClock::new(now_s() / 60 * 60 + 10);
    // The server's access_log (beside the harness's own) logs with it.
    let server = "access_log logs/limited.log limited;";
    let loc = "rate_limit_window zone=z limit=1;";
    let c = conf("1m", &docs_log_format(), server, loc, &grpc);
    let ng = start_faked(&clock, &up, "UTC", &c);
    let calls = grpc_calls(ng.port, ECHO, "t9", 2, false);
    assert_eq!(calls[0].code, "OK");
    assert_eq!(calls[1].code, "RESOURCE_EXHAUSTED");
    let path = ng.prefix().join("logs/limited.log");
    wait_for(Duration::from_secs(5), || {
        std::fs::read_to_string(&path).is_ok_and(|t| t.matches("POST").count() >= 2)
    });
    let log = std::fs::read_to_string(&path).unwrap_or_default();
    // The harness's readiness probe logs a line too.
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("POST")).collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(
        lines[0].ends_with(&format!(
            "\"POST {ECHO} HTTP/2.0\" 200 rlw=PASSED grpc=- retry_after="
        )),
        "{log}"
    );
    assert!(
        lines[1].ends_with(&format!(
            "\"POST {ECHO} HTTP/2.0\" 200 rlw=REJECTED grpc=8 retry_after=51"
        )),
        "{log}"
    );
}
