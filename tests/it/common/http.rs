//! A tiny HTTP/1.1 client: one request, keep-alive connections, and the
//! responses with their headers.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// An HTTP/1.1 request without a body (`Host: localhost` unless given).
pub(crate) fn request_bytes(method: &str, path: &str, headers: &[(&str, &[u8])]) -> Vec<u8> {
    let mut req: Vec<u8> = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.extend_from_slice(b"Host: localhost\r\n");
    }
    for (k, v) in headers {
        req.extend_from_slice(k.as_bytes());
        req.extend_from_slice(b": ");
        req.extend_from_slice(v);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"\r\n");
    req
}

#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// First header with that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// All headers with that name.
    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Header parsed as an integer; panics with context when absent/invalid.
    pub fn header_num(&self, name: &str) -> i64 {
        let v = self
            .header(name)
            .unwrap_or_else(|| panic!("header {name} missing in {}", self.describe()));
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("header {name}={v:?} is not an integer"))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn describe(&self) -> String {
        let mut s = format!("HTTP {}\n", self.status);
        for (k, v) in &self.headers {
            s.push_str(&format!("{k}: {v}\n"));
        }
        let body = self.text();
        s.push_str(&body.chars().take(300).collect::<String>());
        s
    }

    fn keep_alive(&self) -> bool {
        !self
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// A keep-alive client connection.
pub struct Conn {
    port: u16,
    reader: BufReader<TcpStream>,
    stream: TcpStream,
    pub closed: bool,
}

impl Conn {
    pub fn connect(port: u16) -> io::Result<Conn> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        let reader = BufReader::new(stream.try_clone()?);
        Ok(Conn {
            port,
            reader,
            stream,
            closed: false,
        })
    }

    /// Sends a request and reads its response. Host and Content-Length are
    /// added unless given.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &[u8])],
    ) -> io::Result<Response> {
        let req = request_bytes(method, path, headers);
        self.stream.write_all(&req)?;
        let resp = read_response(&mut self.reader, method == "HEAD")?;
        if !resp.keep_alive() {
            self.closed = true;
        }
        Ok(resp)
    }

    pub fn get(&mut self, path: &str) -> io::Result<Response> {
        self.request("GET", path, &[])
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

pub(crate) fn read_response(r: &mut BufReader<TcpStream>, head: bool) -> io::Result<Response> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad status line {line:?}"),
            )
        })?;
    let mut headers = vec![];
    loop {
        let mut raw = Vec::new();
        r.read_until(b'\n', &mut raw)?;
        if raw.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "eof in headers",
            ));
        }
        let h = String::from_utf8_lossy(&raw);
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut resp = Response {
        status,
        headers,
        body: vec![],
    };
    if head || status == 204 || status == 304 || (100..200).contains(&status) {
        return Ok(resp);
    }
    let chunked = resp
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        loop {
            let mut sz = String::new();
            r.read_line(&mut sz)?;
            let n = usize::from_str_radix(sz.trim().split(';').next().unwrap_or("0"), 16)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if n == 0 {
                // trailers until empty line
                loop {
                    let mut t = String::new();
                    if r.read_line(&mut t)? == 0 || t.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let mut chunk = vec![0u8; n];
            r.read_exact(&mut chunk)?;
            resp.body.extend_from_slice(&chunk);
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf)?;
        }
    } else if let Some(cl) = resp.header("content-length") {
        let n: usize = cl.parse().unwrap_or(0);
        let mut body = vec![0u8; n];
        r.read_exact(&mut body)?;
        resp.body = body;
    } else {
        r.read_to_end(&mut resp.body)?;
    }
    Ok(resp)
}

/// One request on a fresh connection (`Connection: close`).
pub fn request(port: u16, method: &str, path: &str, headers: &[(&str, &[u8])]) -> Response {
    let mut hs: Vec<(&str, &[u8])> = headers.to_vec();
    if !hs.iter().any(|(k, _)| k.eq_ignore_ascii_case("connection")) {
        hs.push(("Connection", b"close"));
    }
    let mut c = Conn::connect(port).unwrap_or_else(|e| panic!("connect 127.0.0.1:{port}: {e}"));
    c.request(method, path, &hs)
        .unwrap_or_else(|e| panic!("{method} {path} on port {port}: {e}"))
}

pub fn get(port: u16, path: &str) -> Response {
    request(port, "GET", path, &[])
}

/// GET with one `X-Key` header (the tests' usual client identity).
pub fn get_key(port: u16, path: &str, key: &str) -> Response {
    request(port, "GET", path, &[("X-Key", key.as_bytes())])
}

/// GET `path` as `client` (its `X-Client` header), on a fresh connection.
pub fn as_client(port: u16, path: &str, client: &str) -> Response {
    request(port, "GET", path, &[("X-Client", client.as_bytes())])
}

/// A GET of `client` (`X-Client`) sent on a connection left open, its
/// answer not read: the request stays in flight until the connection
/// closes or the upstream answers.
pub fn send_open(port: u16, path: &str, client: &str) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nX-Client: {client}\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s
}

/// Percent-encodes every byte outside unreserved characters.
pub fn url_encode(bytes: &[u8]) -> String {
    let mut s = String::new();
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// A request that got no complete response.
#[derive(Debug)]
pub struct RequestFailure {
    /// The connection failed before any byte of the response arrived.
    pub before_any_byte: bool,
    pub error: io::Error,
}

impl RequestFailure {
    /// The read or write timed out (IO_TIMEOUT, 10 s): a hang, not a close.
    pub fn timed_out(&self) -> bool {
        matches!(
            self.error.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        )
    }
}

impl Conn {
    /// Like `request`, but on failure says whether any response byte had
    /// arrived: a keep-alive connection closed by a gracefully exiting
    /// worker fails before any byte, and only then is a retry safe.
    pub fn request_checked(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &[u8])],
    ) -> Result<Response, RequestFailure> {
        let req = request_bytes(method, path, headers);
        let early = |error| RequestFailure {
            before_any_byte: true,
            error,
        };
        if let Err(e) = self.stream.write_all(&req) {
            self.closed = true;
            return Err(early(e));
        }
        match self.reader.fill_buf() {
            Ok([]) => {
                self.closed = true;
                return Err(early(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before any response byte",
                )));
            }
            Ok(_) => {}
            Err(e) => {
                self.closed = true;
                return Err(early(e));
            }
        }
        match read_response(&mut self.reader, method == "HEAD") {
            Ok(resp) => {
                if !resp.keep_alive() {
                    self.closed = true;
                }
                Ok(resp)
            }
            Err(error) => {
                self.closed = true;
                Err(RequestFailure {
                    before_any_byte: false,
                    error,
                })
            }
        }
    }
}

/// `urls` as streams of one HTTP/2 connection (TLS, any certificate),
/// each with `header` (`Name: value`), one after the other or all at once:
/// their statuses.
pub fn curl_h2(urls: &[String], header: &str, at_once: bool) -> Vec<u16> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sSk", "--http2"]);
    if at_once {
        cmd.arg("-Z");
    }
    cmd.arg("-H")
        .arg(header)
        .args(["-w", "%{http_version} %{num_connects} %{http_code}\\n"]);
    for u in urls {
        cmd.args(["-o", "/dev/null", u]);
    }
    let out = cmd.output().expect("run curl (make test installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut connects = 0;
    let codes = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.first(), Some(&"2"), "not HTTP/2: {text}");
            connects += f.get(1).and_then(|c| c.parse::<u32>().ok()).unwrap_or(0);
            f.get(2).and_then(|c| c.parse().ok()).unwrap_or(0)
        })
        .collect();
    assert_eq!(connects, 1, "not one connection: {text}");
    codes
}
