//! When an `in_flight=` place goes back, beyond plain HTTP/1.1 bodies
//! (in_flight_linger.rs): over TLS and HTTP/2, for header-only answers
//! (HEAD), and while work nginx does for the request after the client's
//! answer still runs (a `mirror` subrequest, a `post_action`): the place is
//! kept until that work ends, as nginx keeps the request (and `limit_conn`
//! its connection) until then.
use crate::common;
use crate::in_flight_linger::{answered, in_flight_gauge, lingering_keeps_no_place, read_until};

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

/// Locations limited to one request in flight per `X-Client`, a plain and
/// a TLS (HTTP/2 and HTTP/1.1) listener, every connection lingering after
/// its answer while the client keeps sending. The mirror's and the
/// post_action's requests reach the upstream as client `side-<client>`.
fn conf(tls: &str) -> String {
    http_conf(&format!(
        r#"
        rate_limit_window_zone $http_x_client zone=lg:1m window=1m;
        proxy_cache_path cache keys_zone=lgc:1m;
        lingering_close always;
        lingering_time 30s;
        lingering_timeout 10s;
        log_format lg "$request_uri $status";
        server {{
            listen 127.0.0.1:{{{{PORT}}}};
            {tls}
            access_log logs/lg.log lg;
            location /slow/ {{
                rate_limit_window zone=lg in_flight=1;
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location = /gif {{
                rate_limit_window zone=lg in_flight=1;
                empty_gif;
            }}
            location /cached/ {{
                rate_limit_window zone=lg in_flight=1;
                proxy_cache lgc;
                proxy_cache_valid 200 1m;
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location /mir/ {{
                rate_limit_window zone=lg in_flight=1;
                mirror /_side;
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location /pa/ {{
                rate_limit_window zone=lg in_flight=1;
                post_action /_side;
                proxy_pass http://{{{{UPSTREAM}}}};
            }}
            location = /_side {{
                internal;
                proxy_set_header X-Client side-$http_x_client;
                proxy_pass http://{{{{UPSTREAM}}}}/side/sleep=1500;
            }}
            location = /metrics {{ rate_limit_window_metrics; }}
        }}"#
    ))
}

fn start(up: &Upstream, workers: usize) -> (Nginx, tempfile::TempDir) {
    let certs = tempfile::tempdir().unwrap();
    let tls = tls_h2_listen(certs.path()).replace(
        "listen 127.0.0.1:{{PORT}} ssl;",
        "listen 127.0.0.1:{{PORT2}} ssl;",
    );
    let ng = Nginx::builder()
        .workers(workers)
        .upstream_of(up)
        .start(&conf(&tls));
    (ng, certs)
}

#[test]
fn http2_streams_one_after_another_each_get_the_place() {
    let up = Upstream::start();
    let (ng, _certs) = start(&up, 2);
    let base = format!("https://127.0.0.1:{}", ng.port2);
    let urls: Vec<String> = (0..20)
        .map(|i| match i % 2 {
            0 => format!("{base}/slow/h2-{i}"),
            _ => format!("{base}/gif"),
        })
        .collect();
    let codes = curl_h2(&urls, "X-Client: hana", false);
    assert!(codes.iter().all(|&c| c == 200), "{codes:?}");
    assert!(wait_for(Duration::from_secs(3), || in_flight_gauge(
        ng.port
    ) == 0.0));
    // Given back once each: the place still holds one request.
    let slow = format!("{base}/slow/sleep=800");
    let mut two = curl_h2(&[slow.clone(), slow], "X-Client: hana", true);
    two.sort_unstable();
    assert_eq!(two, vec![200, 429]);
}

/// `openssl s_client` connected to the TLS listener (HTTP/1.1), its input
/// and output.
fn tls_client(port: u16) -> Child {
    Command::new("openssl")
        .args(["s_client", "-quiet", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run openssl (make test installs it)")
}

/// Reads `child`'s output until `end` (bounded by 10 s: a reader thread).
fn read_child_until(child: &mut Child, end: &'static [u8]) -> Vec<u8> {
    let mut out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(end.len()).any(|w| w == end) {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let _ = tx.send(got);
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default()
}

/// Over TLS, a body nginx discards as it trickles in (a 405 answered at
/// once, the client still sending) keeps no place. (A lingering close
/// after a complete request cannot be held open from `openssl s_client`:
/// it ends at nginx's close_notify.)
#[test]
fn a_tls_discarded_body_keeps_no_place() {
    let up = Upstream::start();
    let (ng, _certs) = start(&up, 2);
    let mut c = tls_client(ng.port2);
    let mut input = c.stdin.take().unwrap();
    let req =
        "POST /gif?tls HTTP/1.1\r\nHost: t\r\nX-Client: ines\r\nContent-Length: 100000\r\n\r\n";
    input.write_all(req.as_bytes()).unwrap();
    input.flush().unwrap();
    let answer = read_child_until(&mut c, b"</html>");
    answered(&answer, "HTTP/1.1 405");
    lingering_keeps_no_place(&ng, input, "ines", ("/gif?tls", "/gif"));
    let _ = c.kill();
    let _ = c.wait();
}

/// Answers without a body (a HEAD, nginx's own or proxied; a 304 that
/// nginx's not_modified filter makes of a conditional GET) keep no place
/// while their connection lingers.
#[test]
fn a_lingering_header_only_answer_keeps_no_place() {
    let up = Upstream::start();
    let (ng, _certs) = start(&up, 2);
    let since = "If-Modified-Since: Mon, 28 Sep 1970 06:00:00 GMT\r\n";
    for (method, path, extra, status) in [
        ("HEAD", "/gif?first", "", "200"),
        ("HEAD", "/slow/head", "", "200"),
        ("GET", "/gif?cond", since, "304"),
    ] {
        let mut a = TcpStream::connect(("127.0.0.1", ng.port)).unwrap();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: t\r\nX-Client: jon\r\n{extra}Connection: close\r\n\r\n"
        );
        a.write_all(req.as_bytes()).unwrap();
        let answer = read_until(&mut a, b"\r\n\r\n");
        answered(&answer, &format!("HTTP/1.1 {status}"));
        lingering_keeps_no_place(&ng, a, "jon", (path, "/gif"));
    }
}

#[test]
fn a_sequential_head_client_never_meets_its_own_place() {
    let up = Upstream::start();
    let (ng, _certs) = start(&up, 4);
    let refused: Vec<(usize, u16)> = (0..50)
        .map(|i| {
            let path = if i % 2 == 0 {
                format!("/slow/h{i}")
            } else {
                "/gif".into()
            };
            (
                i,
                request(ng.port, "HEAD", &path, &[("X-Client", b"kim")]).status,
            )
        })
        .filter(|&(_, s)| s != 200)
        .collect();
    assert!(refused.is_empty(), "refused: {refused:?}");
}

/// The client's answer comes back at once; the side request (`mirror` or
/// `post_action`) runs 1.5 s more. Meanwhile the client's next request is
/// refused; once the side request ended, admitted; the upstream never
/// sees two side requests of the client at once.
fn side_request_keeps_the_place(path: &str, client: &str) {
    let up = Upstream::start();
    let (ng, _certs) = start(&up, 2);
    let side = format!("side-{client}");
    let port = ng.port;
    let (p, c) = (path.to_string(), client.to_string());
    let first = thread::spawn(move || as_client(port, &p, &c));
    assert!(
        wait_for(Duration::from_secs(5), || up.concurrent(&side) == 1),
        "no side request"
    );
    let r = as_client(port, "/gif", client);
    assert_eq!(r.status, 429, "{}", r.describe());
    assert_eq!(first.join().unwrap().status, 200);
    assert!(wait_for(Duration::from_secs(5), || up.concurrent(&side) == 0));
    assert!(wait_for(Duration::from_secs(3), || {
        as_client(port, "/gif", client).status == 200
    }));
    for _ in 0..3 {
        assert_eq!(as_client(port, path, client).status, 200);
        assert!(wait_for(Duration::from_secs(5), || as_client(
            port, "/gif", client
        )
        .status
            == 200));
    }
    assert_eq!(up.max_concurrent(&side), 1);
    assert!(wait_for(Duration::from_secs(3), || in_flight_gauge(port) == 0.0));
}

#[test]
fn a_mirrored_request_keeps_its_place_until_its_mirror_ends() {
    side_request_keeps_the_place("/mir/a", "lena");
}

#[test]
fn a_post_action_keeps_the_place_until_it_ends() {
    side_request_keeps_the_place("/pa/a", "mia");
}

/// A HEAD answered from a `proxy_cache` location: nginx asks the upstream
/// for the whole body (to fill the cache) and answers the client's HEAD
/// with the header alone; the place is kept until the upstream is done.
#[test]
fn a_head_whose_upstream_fills_the_cache_keeps_its_place() {
    let up = Upstream::start();
    let (ng, _certs) = start(&up, 2);
    let t0 = std::time::Instant::now();
    let r = request(
        ng.port,
        "HEAD",
        "/cached/body_after=1500",
        &[("X-Client", b"nora")],
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    assert!(
        t0.elapsed() < Duration::from_millis(1200),
        "{:?}",
        t0.elapsed()
    );
    let r = as_client(ng.port, "/gif", "nora");
    assert_eq!(r.status, 429, "{}", r.describe());
    assert!(wait_for(Duration::from_secs(5), || as_client(
        ng.port, "/gif", "nora"
    )
    .status
        == 200));
    assert!(
        t0.elapsed() >= Duration::from_millis(1400),
        "{:?}",
        t0.elapsed()
    );
}
