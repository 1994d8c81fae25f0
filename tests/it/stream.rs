//! The stream module (`stream {}`): a TCP connection, or a UDP client's
//! session, is one request. A real nginx (2 workers) proxies to a real
//! echo server that counts what reaches it; the clock is libfaketime's
//! shifted clock, moved instead of waited for.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::common;
use common::*;

/// A TCP echo server on 127.0.0.1 that counts the connections it accepted
/// and those open now.
pub(crate) struct Echo {
    pub(crate) port: u16,
    accepted: Arc<AtomicU64>,
    open: Arc<AtomicU64>,
}

impl Echo {
    pub(crate) fn start() -> Echo {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicU64::new(0));
        let open = Arc::new(AtomicU64::new(0));
        let (a, o) = (accepted.clone(), open.clone());
        thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { continue };
                a.fetch_add(1, Ordering::SeqCst);
                o.fetch_add(1, Ordering::SeqCst);
                let o = o.clone();
                thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = c.read(&mut buf) {
                        if n == 0 || c.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    o.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Echo {
            port,
            accepted,
            open,
        }
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    fn open(&self) -> u64 {
        self.open.load(Ordering::SeqCst)
    }
}

/// A UDP echo server on 127.0.0.1 that counts the datagrams it received.
struct UdpEcho {
    port: u16,
    received: Arc<AtomicU64>,
}

impl UdpEcho {
    fn start() -> UdpEcho {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = s.local_addr().unwrap().port();
        let received = Arc::new(AtomicU64::new(0));
        let r = received.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                r.fetch_add(1, Ordering::SeqCst);
                let _ = s.send_to(&buf[..n], from);
            }
        });
        UdpEcho { port, received }
    }
}

/// A TCP connection from `src` (a loopback address) to 127.0.0.1:`port`.
fn connect_from(src: Ipv4Addr, port: u16) -> TcpStream {
    // SAFETY: plain socket calls on a descriptor this function owns; the
    // sockaddr structs are fully initialised and outlive the calls.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let sa = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(ip).to_be(),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let local = sa(src, 0);
        assert_eq!(libc::bind(fd, (&raw const local).cast(), len), 0);
        let remote = sa(Ipv4Addr::LOCALHOST, port);
        let rc = libc::connect(fd, (&raw const remote).cast(), len);
        assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
        TcpStream::from_raw_fd(fd)
    }
}

/// Whether a connection of `src` to the stream server on `port` is
/// proxied: a line sent comes back from the echo server (true), or nginx
/// closes the connection at once (false). An open connection is returned
/// for the caller to hold.
pub(crate) fn session(src: Ipv4Addr, port: u16) -> Option<TcpStream> {
    let mut c = connect_from(src, port);
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    if c.write_all(b"ping\n").is_err() {
        return None;
    }
    let mut buf = [0u8; 5];
    let mut got = 0;
    while got < buf.len() {
        match c.read(&mut buf[got..]) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                panic!("no answer and no close in 10 s")
            }
            Err(_) => return None,
        }
    }
    assert_eq!(&buf, b"ping\n");
    Some(c)
}

pub(crate) const ONE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const TWO: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// nginx.conf with an http server on {{PORT}} (the harness's readiness
/// probe, and the API where a test has one) and `stream` as the stream block.
pub(crate) fn stream_conf(http_server: &str, stream: &str) -> String {
    let http = http_conf(&format!(
        "server {{ listen 127.0.0.1:{{{{PORT}}}}; location / {{ return 204; }} {http_server} }}"
    ));
    format!("{http}stream {{\n{stream}\n}}\n")
}

/// `limit=10 window=1m`: 10 connections of one client are proxied and
/// echoed, the 11th is closed before it reaches the upstream; another
/// client (127.0.0.2) is not affected. One refusal line for the episode.
#[test]
fn ten_connections_a_minute_then_the_eleventh_is_closed() {
    let echo = Echo::start();
    let clock = ShiftedClock::new();
    clock.clear_of_boundary(60_000, 30_000);
    let conf = proxied(
        "rate_limit_window_zone $binary_remote_addr zone=tcp:1m window=1m;",
        "reuseport",
        "rate_limit_window zone=tcp limit=10;",
        &echo,
    );
    let ng = clock.builder().start(&conf);
    for i in 0..10 {
        assert!(session(ONE, ng.port2).is_some(), "connection {i} refused");
    }
    assert_eq!(echo.accepted(), 10);
    for _ in 0..3 {
        assert!(session(ONE, ng.port2).is_none(), "11th connection proxied");
    }
    assert_eq!(
        echo.accepted(),
        10,
        "a refused connection reached the upstream"
    );
    for i in 0..10 {
        assert!(session(TWO, ng.port2).is_some(), "127.0.0.2's {i} refused");
    }
    assert!(session(TWO, ng.port2).is_none());
    assert_eq!(echo.accepted(), 20);
    let log = ng.error_log();
    assert_eq!(
        count_lines(&log, "limiting requests by zone \"tcp\""),
        1,
        "one line per episode:\n{log}"
    );
    // A window later the sliding estimate has room again (the previous
    // window's 10 weigh less than 10 once into the next one).
    clock.advance(60_000 + 30_000);
    assert!(session(ONE, ng.port2).is_some());
}

/// `in_flight=3`: at most 3 connections of a client open at once across
/// the workers, a 4th closed, a place freed when one closes; the places
/// of workers SIGKILLed while holding them are taken back.
#[test]
fn three_in_flight_across_workers_and_a_killed_workers_places_come_back() {
    let echo = Echo::start();
    let conf = proxied(
        "rate_limit_window_zone $binary_remote_addr zone=conns:1m;",
        "reuseport",
        "rate_limit_window zone=conns in_flight=3;",
        &echo,
    );
    let ng = Nginx::builder().workers(2).start(&conf);
    let mut held: Vec<TcpStream> = (0..3)
        .map(|i| session(ONE, ng.port2).unwrap_or_else(|| panic!("{i} refused")))
        .collect();
    for _ in 0..3 {
        assert!(session(ONE, ng.port2).is_none(), "a 4th open at once");
    }
    assert_eq!(echo.open(), 3);
    // Another client has places of its own.
    let other = session(TWO, ng.port2).expect("127.0.0.2 refused");
    drop(other);
    // One closed: its place is given back when nginx ends the session.
    drop(held.pop());
    assert!(
        wait_for(Duration::from_secs(10), || match session(ONE, ng.port2) {
            Some(c) => {
                held.push(c);
                true
            }
            None => false,
        }),
        "the place of a closed connection was not given back"
    );
    assert!(session(ONE, ng.port2).is_none());
    // Every worker SIGKILLed while its sessions hold the 3 places.
    let killed = ng.worker_pids();
    for &p in &killed {
        sigkill(p);
    }
    assert!(wait_for(Duration::from_secs(10), || {
        let now = ng.worker_pids();
        now.len() == 2 && !now.iter().any(|p| killed.contains(p))
    }));
    drop(held);
    let mut again = Vec::new();
    assert!(
        wait_for(Duration::from_secs(10), || {
            if let Some(c) = session(ONE, ng.port2) {
                again.push(c);
            }
            again.len() == 3
        }),
        "the killed workers' places were not taken back"
    );
    assert!(session(ONE, ng.port2).is_none(), "a 4th after the reclaim");
    let unexplained = forget_killed_workers(&ng, &killed);
    assert!(unexplained.is_empty(), "{unexplained:?}");
}

/// UDP: sessions of one client behind `listen … udp` are limited the same
/// way (`limit=5`): the 6th client's datagram never reaches the echo server.
#[test]
fn udp_sessions_of_one_client_are_limited() {
    let echo = UdpEcho::start();
    let clock = ShiftedClock::new();
    clock.clear_of_boundary(60_000, 30_000);
    let conf = stream_conf(
        "",
        &format!(
            "rate_limit_window_zone $binary_remote_addr zone=dns:1m window=1m;\n\
             server {{ listen 127.0.0.1:{{{{PORT2}}}} udp;\n\
               rate_limit_window zone=dns limit=5;\n\
               proxy_responses 1; proxy_timeout 2s;\n\
               proxy_pass 127.0.0.1:{};\n}}",
            echo.port
        ),
    );
    let ng = clock.builder().start(&conf);
    let ask = |src: Ipv4Addr| -> bool {
        let s = UdpSocket::bind(SocketAddrV4::new(src, 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(1500)))
            .unwrap();
        s.send_to(b"q", ("127.0.0.1", ng.port2)).unwrap();
        let mut buf = [0u8; 16];
        matches!(s.recv_from(&mut buf), Ok((1, _)))
    };
    for i in 0..5 {
        assert!(ask(ONE), "session {i} of 127.0.0.1 refused");
    }
    assert_eq!(echo.received.load(Ordering::SeqCst), 5);
    assert!(!ask(ONE), "a 6th session answered");
    assert_eq!(echo.received.load(Ordering::SeqCst), 5);
    assert!(ask(TWO), "127.0.0.2 refused");
    assert_eq!(echo.received.load(Ordering::SeqCst), 6);
}

/// A stream server proxying to `echo` on {{PORT2}}, with `lines` before
/// its `proxy_pass`, after `zones` (and anything else of `stream {}`).
fn proxied(zones: &str, listen: &str, lines: &str, echo: &Echo) -> String {
    proxied_with("", zones, listen, lines, echo)
}

/// [`proxied`], with `http_server` in the http server ([`stream_conf`]).
pub(crate) fn proxied_with(
    http_server: &str,
    zones: &str,
    listen: &str,
    lines: &str,
    echo: &Echo,
) -> String {
    stream_conf(
        http_server,
        &format!(
            "{zones}\nserver {{ listen 127.0.0.1:{{{{PORT2}}}} {listen};\n{lines}\n\
             proxy_pass 127.0.0.1:{};\n}}",
            echo.port
        ),
    )
}

/// `$rate_limit_window_status`, `_limit`, `_remaining` and `_retry_after`
/// in a stream `log_format`: what each session's decision was.
#[test]
fn variables_in_the_stream_access_log() {
    let echo = Echo::start();
    let clock = ShiftedClock::new();
    clock.clear_of_boundary(60_000, 30_000);
    let zones = "log_format rlw '$remote_addr $status $rate_limit_window_status \
                 $rate_limit_window_limit $rate_limit_window_remaining \
                 r=$rate_limit_window_retry_after';\n\
                 access_log logs/stream.log rlw;\n\
                 rate_limit_window_zone $binary_remote_addr zone=v:1m window=1m;";
    let ng = clock.builder().start(&proxied(
        zones,
        "",
        "rate_limit_window zone=v limit=3;",
        &echo,
    ));
    for _ in 0..3 {
        drop(session(ONE, ng.port2).expect("refused"));
    }
    assert!(session(ONE, ng.port2).is_none());
    let log = stream_log(&ng, 4);
    let mut lines: Vec<&str> = log.lines().collect();
    lines.sort();
    let passed: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains(" PASSED "))
        .collect();
    assert_eq!(passed.len(), 3, "{log}");
    for left in ["0", "1", "2"] {
        let want = format!("127.0.0.1 200 PASSED 3 {left} r=");
        assert!(passed.iter().any(|l| *l == want), "{want:?} in\n{log}");
    }
    let refused: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains("REJECTED"))
        .collect();
    assert_eq!(refused.len(), 1, "{log}");
    let r = refused[0];
    assert!(r.starts_with("127.0.0.1 503 REJECTED 3 0 r="), "{r}");
    let secs: u32 = r.rsplit("r=").next().unwrap().parse().unwrap();
    assert!((1..=60).contains(&secs), "{r}");
}

/// `proxy_protocol` with `set_real_ip_from`: the address in the PROXY
/// header is the key, not the proxy's (the handler runs after realip).
#[test]
fn the_real_client_behind_proxy_protocol_is_the_key() {
    let echo = Echo::start();
    let clock = ShiftedClock::new();
    clock.clear_of_boundary(60_000, 30_000);
    let ng = clock.builder().start(&proxied(
        "rate_limit_window_zone $binary_remote_addr zone=pp:1m window=1m;",
        "proxy_protocol",
        "set_real_ip_from 127.0.0.0/8; rate_limit_window zone=pp limit=2;",
        &echo,
    ));
    let via_proxy = |client: &str| -> bool {
        let mut c = connect_from(ONE, ng.port2);
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let header = format!("PROXY TCP4 {client} 127.0.0.1 40000 80\r\nping\n");
        if c.write_all(header.as_bytes()).is_err() {
            return false;
        }
        let mut buf = [0u8; 5];
        c.read_exact(&mut buf).is_ok() && &buf == b"ping\n"
    };
    assert!(via_proxy("192.0.2.7"));
    assert!(via_proxy("192.0.2.7"));
    assert!(!via_proxy("192.0.2.7"), "a 3rd of one real client");
    // The same proxy, other real clients: counted apart.
    assert!(via_proxy("192.0.2.8"));
    assert!(via_proxy("198.51.100.1"));
    assert_eq!(echo.accepted(), 4);
}

/// What `nginx -t` says of a stream configuration.
pub(crate) fn stream_t(stream: &str, http: &str) -> (bool, String) {
    let conf = http_conf(&format!(
        "{http}\nserver {{ listen 127.0.0.1:{{{{PORT}}}}; location / {{ return 204; }} }}"
    ));
    test_config(&format!("{conf}stream {{\n{stream}\n}}\n"))
}

/// The parameters only an HTTP request has are refused in stream, named;
/// an undeclared zone is refused at its line; a zone name is unique
/// across http and stream.
#[test]
fn stream_configuration_errors_name_what_is_wrong() {
    let zone = "rate_limit_window_zone $binary_remote_addr zone=s:1m;";
    let server = |line: &str| {
        format!(
            "{zone}\nserver {{ listen 127.0.0.1:{{{{PORT2}}}}; {line} proxy_pass 127.0.0.1:9; }}"
        )
    };
    for (param, line) in [
        (
            "count_status=",
            "rate_limit_window zone=s limit=5 count_status=200;",
        ),
        (
            "charge=",
            "rate_limit_window zone=s limit=5 charge=$bytes_sent;",
        ),
        ("delay=", "rate_limit_window zone=s limit=5 delay=1s;"),
        ("name=", "rate_limit_window zone=s limit=5 name=ssh;"),
    ] {
        let (ok, out) = stream_t(&server(line), "");
        assert!(!ok, "{line}");
        assert!(
            out.contains(&format!(
                "[emerg] \"{param}\" of \"rate_limit_window\" is for http only"
            )),
            "{out}"
        );
    }
    let (ok, out) = stream_t(&server("rate_limit_window zone=nope limit=5;"), "");
    assert!(
        !ok && out.contains("[emerg]") && out.contains("\"nope\""),
        "{out}"
    );
    // The same name in http {}: nginx's own refusal of a shared zone
    // declared for another use.
    let (ok, out) = stream_t(
        &server("rate_limit_window zone=s limit=5;"),
        "rate_limit_window_zone $binary_remote_addr zone=s:1m;",
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("the shared memory zone \"s\" is already declared for a different use"),
        "{out}"
    );
    // A valid stream configuration passes, with the stream's variables
    // in the key and in limit=.
    let (ok, out) = stream_t(
        "map $remote_addr $lim { default 7; }\n\
         rate_limit_window_zone $remote_addr$server_port zone=k:1m window=10s;\n\
         server { listen 127.0.0.1:{{PORT2}}; rate_limit_window zone=k limit=$lim in_flight=2; \
         rate_limit_window_log_level warn; rate_limit_window_dry_run on; proxy_pass 127.0.0.1:9; }",
        "",
    );
    assert!(ok, "{out}");
}

/// logs/stream.log once it has `lines` lines (waited for up to 10 s).
fn stream_log(ng: &Nginx, lines: usize) -> String {
    let path = ng.prefix().join("logs/stream.log");
    let mut log = String::new();
    assert!(
        wait_for(Duration::from_secs(10), || {
            log = std::fs::read_to_string(&path).unwrap_or_default();
            log.lines().count() == lines
        }),
        "{log}"
    );
    log
}

/// The http API's location, in the http server beside the stream block.
pub(crate) const API: &str = "location = /api { rate_limit_window_metrics write=on; }";

/// The http API lists and changes stream zones: an override
/// `{"block":true}` of an address closes its next connection at once; the
/// lookup shows its count; the metrics name the zone's context.
#[test]
fn an_override_set_through_the_http_api_closes_the_next_connection() {
    let echo = Echo::start();
    let clock = ShiftedClock::new();
    clock.clear_of_boundary(60_000, 30_000);
    let conf = proxied_with(
        API,
        "rate_limit_window_zone $binary_remote_addr zone=ssh:1m window=1m;",
        "",
        "rate_limit_window zone=ssh limit=100;",
        &echo,
    );
    let ng = clock.builder().start(&conf);
    assert!(session(ONE, ng.port2).is_some());
    let r = get(ng.port, "/api?zone=ssh&addr=127.0.0.1");
    assert_eq!(r.status, 200, "{}", r.describe());
    let j = crate::overrides::json(&r);
    assert_eq!(j["current"], 1, "{j}");
    let r = crate::overrides::send_body(
        ng.port,
        "PUT",
        "/api?zone=ssh&addr=127.0.0.1",
        br#"{"block":true}"#,
        false,
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    assert!(
        session(ONE, ng.port2).is_none(),
        "a blocked address proxied"
    );
    assert!(session(TWO, ng.port2).is_some(), "another address blocked");
    assert_eq!(echo.accepted(), 2);
    let r = get(ng.port, "/api?zone=ssh&overrides");
    assert!(
        r.text().contains("127.0.0.1") || r.text().contains("block"),
        "{}",
        r.text()
    );
    let r = request(
        ng.port,
        "DELETE",
        "/api?zone=ssh&addr=127.0.0.1&override",
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    assert!(session(ONE, ng.port2).is_some(), "the block was lifted");
    let m = get(ng.port, "/api").text();
    assert!(
        m.contains("rate_limit_window_zone_info{zone=\"ssh\",context=\"stream\"} 1"),
        "{m}"
    );
    assert!(m.contains("{zone=\"ssh\"}"), "{m}");
}

/// Sends SIGQUIT to nginx's master and waits until it and its workers are
/// gone (the workers write the state files at exit).
fn quit(ng: &Nginx) {
    let master = ng.master_pid();
    let workers = ng.worker_pids();
    // SAFETY: kill(2) only sends a signal to a pid.
    unsafe { libc::kill(master, libc::SIGQUIT) };
    // SAFETY: as above; signal 0 only checks that the pid exists.
    let alive = |p: i32| unsafe { libc::kill(p, 0) } == 0 && !zombie(p);
    assert!(wait_for(Duration::from_secs(10), || {
        !alive(master) && workers.iter().all(|&w| !alive(w))
    }));
}

/// Whether `pid` is a zombie (exited, not yet reaped).
fn zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

/// `state=`: a stream zone's counts survive a stop and a start.
#[test]
fn a_stream_zones_counts_survive_a_restart_with_state() {
    let echo = Echo::start();
    let clock = ShiftedClock::new();
    clock.clear_of_boundary(3_600_000, 600_000);
    let dir = tempfile::tempdir().unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o777);
    std::fs::set_permissions(dir.path(), mode).unwrap();
    let conf = proxied_with(
        "",
        &format!(
            "rate_limit_window_zone $binary_remote_addr zone=st:1m window=1h state={};",
            dir.path().join("st.state").display()
        ),
        "",
        "rate_limit_window zone=st limit=3;",
        &echo,
    );
    let ng = clock.builder().start(&conf);
    for _ in 0..3 {
        assert!(session(ONE, ng.port2).is_some());
    }
    assert!(session(ONE, ng.port2).is_none());
    quit(&ng);
    drop(ng);
    let ng = clock.builder().start(&conf);
    assert!(
        ng.error_log().contains("restored"),
        "the state file was not read:\n{}",
        ng.error_log()
    );
    assert!(session(ONE, ng.port2).is_none(), "the count was lost");
    assert!(session(TWO, ng.port2).is_some());
    assert_eq!(echo.accepted(), 4);
}

/// Two gateways with `redis=` share a stream client's count: what one
/// admitted, the other counts (a real redis-server).
#[test]
fn two_gateways_share_a_stream_clients_count_through_redis() {
    let redis = crate::overrides::Redis::start();
    let echo = Echo::start();
    let clock = ShiftedClock::new();
    clock.clear_of_boundary(3_600_000, 600_000);
    let gateway = || {
        clock.builder().start(&stream_conf(
            API,
            &format!(
                "rate_limit_window_zone $binary_remote_addr zone=fleet:1m window=1h \
                 redis=127.0.0.1:{} sync=100ms secret=stream-fleet-secret-01;\n\
                 server {{ listen 127.0.0.1:{{{{PORT2}}}};\n\
                   rate_limit_window zone=fleet limit=10;\n\
                   proxy_pass 127.0.0.1:{};\n}}",
                redis.1, echo.port
            ),
        ))
    };
    let (a, b) = (gateway(), gateway());
    // One client alternating between the gateways, about 20 connections
    // a second (as the http fleet test paces its client).
    let mut admitted = [0u64; 2];
    for i in 0..40 {
        let ng = if i % 2 == 0 { &a } else { &b };
        if session(ONE, ng.port2).is_some() {
            admitted[i % 2] += 1;
        }
        thread::sleep(Duration::from_millis(50));
    }
    let total = admitted[0] + admitted[1];
    // Without the sync each would admit 10 (20 in all); the bound is about
    // one sync interval of traffic (100 ms x 20/s = 2).
    assert!(
        (10..=12).contains(&total),
        "the fleet admitted {total} for limit 10 ({admitted:?})"
    );
    assert!(admitted[0] > 0 && admitted[1] > 0, "{admitted:?}");
    assert_eq!(echo.accepted(), total);
    assert!(session(TWO, b.port2).is_some(), "B refused another client");
}

/// nginx-conf/stream.conf, run as printed (ports swapped): 3 connections
/// at once, a 4th closed; 10 a minute, the 11th closed; the stream log and
/// the metrics say so.
#[test]
fn the_stream_example_limits_as_its_comments_say() {
    let echo = Echo::start();
    let clock = ShiftedClock::new();
    clock.clear_of_boundary(60_000, 30_000);
    let ng = clock
        .builder()
        .upstream(&format!("127.0.0.1:{}", echo.port))
        .start(&crate::examples::example("stream.conf"));
    let held: Vec<TcpStream> = (0..3).filter_map(|_| session(ONE, ng.port2)).collect();
    assert_eq!(held.len(), 3);
    assert!(session(ONE, ng.port2).is_none(), "a 4th at once");
    drop(held);
    let mut admitted = 3;
    assert!(wait_for(Duration::from_secs(10), || {
        if session(ONE, ng.port2).is_some() {
            admitted += 1;
        }
        admitted == 10
    }));
    assert!(session(ONE, ng.port2).is_none(), "an 11th in the minute");
    assert_eq!(echo.accepted(), 10);
    let m = get(ng.port, "/metrics").text();
    assert!(
        m.contains("rate_limit_window_requests_total{zone=\"ssh\",result=\"passed\"} 10"),
        "{m}"
    );
    let path = ng.prefix().join("logs/stream.log");
    assert!(wait_for(Duration::from_secs(10), || {
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        log.contains(" 503 REJECTED_IN_FLIGHT ") && log.contains(" 503 REJECTED ")
    }));
}

/// `rate_limit_window_dry_run on`: every session is proxied, those over
/// the limit logged as `REJECTED_DRY_RUN`.
#[test]
fn dry_run_proxies_every_session_and_logs_the_refusals() {
    let echo = Echo::start();
    let clock = ShiftedClock::new();
    clock.clear_of_boundary(60_000, 30_000);
    let zones = "log_format rlw '$remote_addr $rate_limit_window_status';\n\
                 access_log logs/stream.log rlw;\n\
                 rate_limit_window_zone $binary_remote_addr zone=dry:1m window=1m;";
    let lines = "rate_limit_window_dry_run on; rate_limit_window zone=dry limit=1;";
    let ng = clock.builder().start(&proxied(zones, "", lines, &echo));
    for i in 0..3 {
        assert!(session(ONE, ng.port2).is_some(), "{i} closed in a dry run");
    }
    assert_eq!(echo.accepted(), 3);
    let log = stream_log(&ng, 3);
    assert_eq!(count_lines(&log, "127.0.0.1 PASSED"), 1, "{log}");
    assert_eq!(count_lines(&log, "127.0.0.1 REJECTED_DRY_RUN"), 2, "{log}");
    assert!(ng
        .error_log()
        .contains("dry run, limiting requests by zone \"dry\""));
}

/// `ban=1h`: a client its count refused stays refused once its window
/// has passed, and the API shows the ban; another client is not banned.
#[test]
fn a_ban_outlasts_the_window_in_stream() {
    let echo = Echo::start();
    let clock = ShiftedClock::new();
    clock.clear_of_boundary(60_000, 30_000);
    let ng = clock.builder().start(&proxied_with(
        API,
        "rate_limit_window_zone $binary_remote_addr zone=b:1m window=1m;",
        "",
        "rate_limit_window zone=b limit=2 ban=1h;",
        &echo,
    ));
    assert!(session(ONE, ng.port2).is_some());
    assert!(session(ONE, ng.port2).is_some());
    assert!(session(ONE, ng.port2).is_none(), "the 3rd of limit=2");
    // Two windows later the count alone would admit it: the ban does not.
    clock.advance(120_000);
    assert!(session(ONE, ng.port2).is_none(), "banned, yet admitted");
    assert!(session(TWO, ng.port2).is_some(), "another client banned");
    let r = get(ng.port, "/api?zone=b&addr=127.0.0.1");
    let j = crate::overrides::json(&r);
    assert!(!j["override"].is_null(), "{j}");
    assert!(
        ng.error_log().contains("banned for 3600s"),
        "{}",
        ng.error_log()
    );
    assert_eq!(echo.accepted(), 3);
}

/// A reload that resizes a stream zone carries its clients: a client at
/// its limit stays refused, another is admitted.
#[test]
fn a_resized_stream_zone_keeps_its_counts_on_reload() {
    let echo = Echo::start();
    let clock = ShiftedClock::new();
    clock.clear_of_boundary(60_000, 30_000);
    let conf = |size: &str| {
        proxied(
            &format!("rate_limit_window_zone $binary_remote_addr zone=rs:{size} window=1m;"),
            "",
            "rate_limit_window zone=rs limit=3;",
            &echo,
        )
    };
    let mut ng = clock.builder().start(&conf("1m"));
    for _ in 0..3 {
        assert!(session(ONE, ng.port2).is_some());
    }
    assert!(session(ONE, ng.port2).is_none());
    ng.reload_with(&conf("2m"));
    assert!(
        ng.error_log()
            .contains("rate_limit_window_zone \"rs\" resized from"),
        "no resize line:\n{}",
        ng.error_log()
    );
    assert!(session(ONE, ng.port2).is_none(), "the count was lost");
    assert!(session(TWO, ng.port2).is_some());
    assert_eq!(echo.accepted(), 4);
}
