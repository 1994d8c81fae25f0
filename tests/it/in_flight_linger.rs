//! An `in_flight=` place goes back when the request's response is
//! complete, not when nginx frees the request: a lingering close
//! (`lingering_close always`, a client that keeps sending after its
//! answer, a request body being discarded) keeps the connection and the
//! request for up to `lingering_time`, and must not keep the client's
//! place; a strictly sequential client, a new connection per request,
//! never meets its own previous request's place.
use crate::common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// `/slow/` proxied and `/gif` answered by nginx itself, both limited to
/// one request in flight per `X-Client`; every connection lingers after
/// its answer for up to 30 s while the client keeps sending.
fn conf() -> String {
    http_conf(
        r#"
        rate_limit_window_zone $http_x_client zone=lg:1m window=1m;
        lingering_close always;
        lingering_time 30s;
        lingering_timeout 10s;
        log_format lg "$request_uri $status";
        server {
            listen 127.0.0.1:{{PORT}};
            access_log logs/lg.log lg;
            add_header X-Status $rate_limit_window_status always;
            location /slow/ {
                rate_limit_window zone=lg in_flight=1;
                proxy_pass http://{{UPSTREAM}};
            }
            location = /gif {
                rate_limit_window zone=lg in_flight=1;
                empty_gif;
            }
            location = /page.shtml {
                rate_limit_window zone=lg in_flight=1;
                ssi on;
                default_type text/html;
                root html;
            }
            location /up/ { proxy_pass http://{{UPSTREAM}}; }
            location = /metrics { rate_limit_window_metrics; }
        }"#,
    )
}

/// Reads from `s` until `end` has been read (the whole answer), bounded.
pub(super) fn read_until(s: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(end.len()).any(|w| w == end) {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

/// Asserts that `answer` begins with `status_line`.
pub(super) fn answered(answer: &[u8], status_line: &str) {
    assert!(
        answer.starts_with(status_line.as_bytes()),
        "{}",
        String::from_utf8_lossy(answer)
    );
}

/// Keeps writing a byte to `w` every 100 ms until `stop` (nginx's
/// lingering close reads and drops them, and so keeps the connection).
fn keep_sending<W: Write + Send + 'static>(
    mut w: W,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<bool> {
    thread::spawn(move || {
        let mut wrote_all = true;
        while !stop.load(Ordering::Relaxed) {
            wrote_all &= w.write_all(b"x").and_then(|()| w.flush()).is_ok();
            thread::sleep(Duration::from_millis(100));
        }
        wrote_all
    })
}

/// Lines of the access log naming `uri` (written when nginx frees the
/// request, i.e. after its lingering close).
fn logged(ng: &Nginx, uri: &str) -> usize {
    let log = std::fs::read_to_string(ng.prefix().join("logs/lg.log")).unwrap_or_default();
    log.lines().filter(|l| l.starts_with(uri)).count()
}

/// While the client keeps writing to `w`, the connection of its answered
/// request `first` (not logged yet: nginx has not freed it) lingers; its
/// next request `second` is admitted within 1 s; once it stopped, the
/// place was given back once (the gauge back to 0, never below).
pub(super) fn lingering_keeps_no_place<W: Write + Send + 'static>(
    ng: &Nginx,
    w: W,
    client: &str,
    (first, second): (&str, &str),
) {
    let stop = Arc::new(AtomicBool::new(false));
    let sender = keep_sending(w, stop.clone());
    let t0 = Instant::now();
    let mut refused = 0;
    let admitted = wait_for(Duration::from_secs(1), || {
        let r = as_client(ng.port, second, client);
        refused += usize::from(r.status == 429);
        r.status == 200
    });
    assert!(
        admitted,
        "second request refused {refused} times in {:?}",
        t0.elapsed()
    );
    assert_eq!(logged(ng, first), 0, "the first request still lingers");
    stop.store(true, Ordering::Relaxed);
    assert!(
        sender.join().unwrap(),
        "the lingering connection stayed open"
    );
    assert!(wait_for(Duration::from_secs(3), || in_flight_gauge(
        ng.port
    ) == 0.0));
}

#[test]
fn a_lingering_close_keeps_no_place() {
    let up = Upstream::start();
    let ng = Nginx::builder().workers(2).upstream_of(&up).start(&conf());
    let mut a = TcpStream::connect(("127.0.0.1", ng.port)).unwrap();
    let req = "GET /slow/first HTTP/1.1\r\nHost: t\r\nX-Client: carol\r\nConnection: close\r\n\r\n";
    a.write_all(req.as_bytes()).unwrap();
    let answer = read_until(&mut a, b"upstream ok\n");
    answered(&answer, "HTTP/1.1 200");
    lingering_keeps_no_place(&ng, a, "carol", ("/slow/first", "/slow/second"));
}

#[test]
fn a_discarded_body_keeps_no_place() {
    let up = Upstream::start();
    let ng = Nginx::builder().workers(2).upstream_of(&up).start(&conf());
    // A body announced but sent slowly: empty_gif refuses a POST at once
    // (405) and nginx discards the body as it comes, for up to
    // lingering_time.
    let mut a = TcpStream::connect(("127.0.0.1", ng.port)).unwrap();
    let req = "POST /gif HTTP/1.1\r\nHost: t\r\nX-Client: carol\r\nContent-Length: 100000\r\n\r\n";
    a.write_all(req.as_bytes()).unwrap();
    let answer = read_until(&mut a, b"</html>");
    answered(&answer, "HTTP/1.1 405");
    lingering_keeps_no_place(&ng, a, "carol", ("/gif", "/slow/after-gif"));
}

#[test]
fn a_sequential_client_never_meets_its_own_place() {
    let up = Upstream::start();
    let ng = Nginx::builder().workers(4).upstream_of(&up).start(&conf());
    let mut statuses = Vec::new();
    for i in 0..50 {
        let path = if i % 2 == 0 {
            format!("/slow/s{i}")
        } else {
            "/gif".to_string()
        };
        let r = as_client(ng.port, &path, "dave");
        statuses.push((i, r.status, r.header("x-status").map(str::to_string)));
    }
    let refused: Vec<_> = statuses.iter().filter(|s| s.1 != 200).collect();
    assert!(refused.is_empty(), "refused: {refused:?}");
    assert_eq!(up.max_concurrent("dave"), 1);
}

/// A page whose SSI include is still being fetched (a subrequest started
/// after the page's own last buffer) keeps its place until the include is
/// done: the client's next request is refused meanwhile, admitted after.
#[test]
fn an_ssi_page_keeps_its_place_while_its_include_runs() {
    let up = Upstream::start();
    let ng = Nginx::builder()
        .workers(2)
        .upstream_of(&up)
        .file(
            "html/page.shtml",
            "<p>head</p><!--# include virtual=\"/up/inc?sleep=1500\" --><p>tail</p>\n",
        )
        .start(&conf());
    let port = ng.port;
    let page = thread::spawn(move || as_client(port, "/page.shtml", "erin"));
    assert!(wait_for(Duration::from_secs(5), || up.concurrent("erin") == 1));
    let r = as_client(port, "/gif", "erin");
    assert_eq!(r.status, 429, "{}", r.describe());
    let page = page.join().unwrap();
    assert_eq!(page.status, 200, "{}", page.describe());
    let body = String::from_utf8_lossy(&page.body);
    assert!(
        body.contains("upstream ok") && body.contains("tail"),
        "{body}"
    );
    assert!(wait_for(Duration::from_secs(3), || {
        as_client(port, "/gif", "erin").status == 200
    }));
}

/// `rate_limit_window_in_flight` summed over the zone's series.
pub(super) fn in_flight_gauge(port: u16) -> f64 {
    let text = metrics_text(port);
    prom_value(&text, "rate_limit_window_in_flight", &[("zone", "lg")]).unwrap_or(-1.0)
}
