//! Text formatting for the metrics page: Prometheus label values, JSON
//! strings, RFC 3339 times, and percent-decoding of query arguments.

use core::fmt::{self, Write as _};

/// A Prometheus label value, escaped as it is written (`\\`, `\"`, `\n`);
/// bytes that are not UTF-8 become U+FFFD, as `String::from_utf8_lossy`
/// makes them.
pub struct Label<'a>(pub &'a [u8]);

impl fmt::Display for Label<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            for c in chunk.valid().chars() {
                match c {
                    '\\' => f.write_str("\\\\")?,
                    '"' => f.write_str("\\\"")?,
                    '\n' => f.write_str("\\n")?,
                    c => f.write_char(c)?,
                }
            }
            if !chunk.invalid().is_empty() {
                f.write_char(char::REPLACEMENT_CHARACTER)?;
            }
        }
        Ok(())
    }
}

/// Escapes a JSON string, quotes included.
pub fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Percent-decoding as in RFC 3986 (`+` stays `+`; send a space as `%20`).
pub fn percent_decode(s: &[u8]) -> Vec<u8> {
    fn hex(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' && i + 2 < s.len() {
            if let (Some(h), Some(l)) = (hex(s[i + 1]), hex(s[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// The server's UTC offset (seconds) at the instant `ms`, from the C library
/// (honours TZ). A human-readable label only: it never keys anything.
pub fn local_offset_s(ms: u64) -> i64 {
    let t = (ms / 1000) as libc::time_t;
    // SAFETY: an all-zero `tm` is a valid value of this plain C struct; t
    // and tm are valid for the call, and localtime_r writes only tm.
    unsafe {
        let mut tm: libc::tm = core::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return 0;
        }
        tm.tm_gmtoff
    }
}

/// Formats epoch `ms` as RFC 3339 at UTC offset `offset_s` (seconds).
pub fn rfc3339(ms: u64, offset_s: i64) -> String {
    let local = (ms / 1000) as i64 + offset_s;
    let days = local.div_euclid(86_400);
    let secs = local.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let mut s = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    );
    if !ms.is_multiple_of(1000) {
        let _ = write!(s, ".{:03}", ms % 1000);
    }
    if offset_s == 0 {
        s.push('Z');
    } else {
        let sign = if offset_s < 0 { '-' } else { '+' };
        let a = offset_s.abs();
        let _ = write!(s, "{sign}{:02}:{:02}", a / 3600, a / 60 % 60);
    }
    s
}
