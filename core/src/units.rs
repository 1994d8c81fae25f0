//! nginx's value syntax, shared by every parser: sizes (`ngx_parse_size`),
//! times (`ngx_parse_time`), and [`escape`], which quotes configuration
//! bytes in a message. A leaf module: it imports nothing of this crate, so
//! the directive parsers and the modules they call all depend on it alone.
//!
//! [`parse_size`] and [`parse_time_ms`] mirror nginx's `ngx_parse_size` and
//! `ngx_parse_time(line, 0)` from `src/core/ngx_parse.c` (nginx 1.28) byte
//! for byte: they accept exactly the strings nginx accepts and return the
//! same values. Nothing here panics on any input (see `fuzz/`).

use core::fmt;

/// `NGX_MAX_SIZE_T_VALUE`: the largest `ssize_t`.
const MAX_SIZE: usize = isize::MAX as usize;
/// `NGX_MAX_INT_T_VALUE` on 64-bit platforms: the largest `ngx_int_t`.
const MAX_INT: u64 = i64::MAX as u64;

/// How many bytes of a rejected value a message quotes.
pub const SHOWN_BYTES: usize = 64;

/// Longest path accepted in `redis=unix:PATH`, in bytes: `sun_path` holds
/// 108 bytes including the terminating NUL.
pub const MAX_UNIX_PATH: usize = 107;

/// Parses a size in bytes as `ngx_parse_size` does: decimal digits with an
/// optional single suffix `k`/`K` (×1024) or `m`/`M` (×1024²).
///
/// Returns `None` for an empty string, any other character (no sign, no
/// spaces, no `g` suffix: nginx's `ngx_parse_size` has none), a bare suffix,
/// or a result above `isize::MAX` (nginx's `NGX_MAX_SIZE_T_VALUE`).
///
/// ```
/// use rate_limit_window_core::units::parse_size;
/// assert_eq!(parse_size(b"1m"), Some(1_048_576));
/// assert_eq!(parse_size(b"64K"), Some(65_536));
/// assert_eq!(parse_size(b"k"), None);
/// ```
pub fn parse_size(s: &[u8]) -> Option<usize> {
    let (&unit, head) = s.split_last()?;
    let (digits, scale) = match unit {
        b'k' | b'K' => (head, 1024),
        b'm' | b'M' => (head, 1024 * 1024),
        _ => (s, 1),
    };
    let value = atosz(digits)?;
    if value > MAX_SIZE / scale {
        return None;
    }
    Some(value * scale)
}

/// `ngx_atosz`: non-empty decimal digits up to `NGX_MAX_SIZE_T_VALUE`.
fn atosz(s: &[u8]) -> Option<usize> {
    if s.is_empty() {
        return None;
    }
    let (cutoff, cutlim) = (MAX_SIZE / 10, MAX_SIZE % 10);
    let mut value: usize = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        let d = usize::from(c - b'0');
        if value >= cutoff && (value > cutoff || d > cutlim) {
            return None;
        }
        value = value * 10 + d;
    }
    Some(value)
}

/// Parses a time in milliseconds as `ngx_parse_time(line, 0)` does (the
/// parser behind every `*_timeout`-style directive that takes ms).
///
/// The value is a sequence of `NUMBER UNIT` parts, summed:
/// `w` (week, 7 d), `d` (day), `h` (hour), `m` (minute), `s` (second),
/// `ms` (millisecond). Units must come in this order, each at most once
/// (`1h30m` is 5_400_000, `1s500ms` is 1_500, `1m1h` and `1s1s` are
/// rejected). A final number without a unit is in **seconds**, not
/// milliseconds (`30` is 30_000, `1m30` is 90_000), exactly as in nginx.
/// Spaces may follow a unit; a space after a bare number ends it as seconds
/// and allows only a bare number afterwards (nginx quirks, kept).
/// A unit with no digits before it counts as 0 (`1hm` is 3_600_000), but the
/// whole string must contain at least one digit.
///
/// `y` (year) and `M` (month) are rejected: nginx only allows them when
/// parsing seconds. Returns `None` on any other character or when the
/// total exceeds `i64::MAX` ms (nginx's `NGX_MAX_INT_T_VALUE`).
///
/// ```
/// use rate_limit_window_core::units::parse_time_ms;
/// assert_eq!(parse_time_ms(b"10m"), Some(600_000));
/// assert_eq!(parse_time_ms(b"500ms"), Some(500));
/// assert_eq!(parse_time_ms(b"30"), Some(30_000));
/// assert_eq!(parse_time_ms(b"1m1h"), None);
/// ```
pub fn parse_time_ms(s: &[u8]) -> Option<u64> {
    ngx_parse_time(s, false)
}

// nginx's `step` enum of `ngx_parse_time`, in order.
const STEP_START: u8 = 0;
const STEP_YEAR: u8 = 1;
const STEP_MONTH: u8 = 2;
const STEP_WEEK: u8 = 3;
const STEP_DAY: u8 = 4;
const STEP_HOUR: u8 = 5;
const STEP_MIN: u8 = 6;
const STEP_SEC: u8 = 7;
const STEP_MSEC: u8 = 8;
const STEP_LAST: u8 = 9;

/// The unit letter `c` of `ngx_parse_time` (`next`: the byte after it):
/// its step, its length in seconds (ms: 1 ms), and whether it took `next`
/// too (`ms`). None: not a unit, or `ms` where seconds are parsed.
fn time_unit(c: u8, next: Option<&u8>, is_sec: bool) -> Option<(u8, u64, bool)> {
    Some(match c {
        b'y' => (STEP_YEAR, 60 * 60 * 24 * 365, false),
        b'M' => (STEP_MONTH, 60 * 60 * 24 * 30, false),
        b'w' => (STEP_WEEK, 60 * 60 * 24 * 7, false),
        b'd' => (STEP_DAY, 60 * 60 * 24, false),
        b'h' => (STEP_HOUR, 60 * 60, false),
        b'm' if next == Some(&b's') => {
            if is_sec {
                return None;
            }
            (STEP_MSEC, 1, true)
        }
        b'm' => (STEP_MIN, 60, false),
        b's' => (STEP_SEC, 1, false),
        // A space ends the value; it may follow anything up to minutes.
        b' ' => (STEP_LAST, 1, false),
        _ => return None,
    })
}

/// `value` in the unit of `step` (`scale` seconds, or 1 ms for `ms`) in the
/// result's unit (ms unless `is_sec`); None past nginx's `NGX_MAX_INT_T`.
fn scaled(value: u64, step: u8, mut scale: u64, is_sec: bool) -> Option<u64> {
    let mut max = MAX_INT / scale;
    if step != STEP_MSEC && !is_sec {
        scale *= 1000;
        max /= 1000;
    }
    if value > max {
        return None;
    }
    Some(value * scale)
}

/// `ngx_parse_time`, both flavours: `is_sec` returns seconds and accepts
/// `y` and `M` but not `ms`.
fn ngx_parse_time(s: &[u8], is_sec: bool) -> Option<u64> {
    let (cutoff, cutlim) = (MAX_INT / 10, MAX_INT % 10);
    let mut valid = false;
    let mut value: u64 = 0;
    let mut total: u64 = 0;
    let mut step = if is_sec { STEP_START } else { STEP_MONTH };
    let mut i = 0;

    while i < s.len() {
        let c = s[i];
        i += 1;
        if c.is_ascii_digit() {
            let d = u64::from(c - b'0');
            if value >= cutoff && (value > cutoff || d > cutlim) {
                return None;
            }
            value = value * 10 + d;
            valid = true;
            continue;
        }
        let (unit, scale, took_next) = time_unit(c, s.get(i), is_sec)?;
        if took_next {
            i += 1;
        }
        // Units come in decreasing order, each at most once.
        let after = if c == b' ' { STEP_SEC } else { unit };
        if step >= after {
            return None;
        }
        step = unit;
        value = scaled(value, step, scale, is_sec)?;
        if total > MAX_INT - value {
            return None;
        }
        total += value;
        value = 0;

        while s.get(i) == Some(&b' ') {
            i += 1;
        }
    }

    if !valid {
        return None;
    }
    if !is_sec {
        if value > MAX_INT / 1000 {
            return None;
        }
        value *= 1000;
    }
    if total > MAX_INT - value {
        return None;
    }
    Some(total + value)
}

/// Quotes configuration bytes in a message: at most [`SHOWN_BYTES`] bytes
/// (then `...`), printable UTF-8 as is, `"` and `\` backslashed, control
/// characters and invalid UTF-8 as `\xNN` (or `\u{N}` for non-ASCII
/// controls). The result cannot break a log line.
pub fn escape(bytes: &[u8]) -> Escaped<'_> {
    Escaped(bytes)
}

/// The [`fmt::Display`] returned by [`escape`].
#[derive(Clone, Copy, Debug)]
pub struct Escaped<'a>(&'a [u8]);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cut = self.0.len() > SHOWN_BYTES;
        let head = &self.0[..self.0.len().min(SHOWN_BYTES)];
        for chunk in head.utf8_chunks() {
            for ch in chunk.valid().chars() {
                match ch {
                    '"' | '\\' => write!(f, "\\{ch}")?,
                    c if c.is_ascii_control() => write!(f, "\\x{:02x}", c as u32)?,
                    c if c.is_control() => write!(f, "\\u{{{:x}}}", c as u32)?,
                    c => write!(f, "{c}")?,
                }
            }
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        if cut {
            f.write_str("...")?;
        }
        Ok(())
    }
}

/// A duration in ms written in its largest whole unit (`90s`, `2m`, `1h`,
/// `1500ms`).
pub struct Units(pub u64);

impl fmt::Display for Units {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0;
        for (unit, len) in [
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1000),
        ] {
            if ms >= len && ms.is_multiple_of(len) {
                return write!(f, "{}{unit}", ms / len);
            }
        }
        write!(f, "{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_flavour() {
        assert_eq!(ngx_parse_time(b"1y", true), Some(31_536_000));
        assert_eq!(ngx_parse_time(b"1M", true), Some(2_592_000));
        assert_eq!(
            ngx_parse_time(b"1y1M1w", true),
            Some(31_536_000 + 2_592_000 + 604_800)
        );
        assert_eq!(ngx_parse_time(b"30", true), Some(30));
        assert_eq!(ngx_parse_time(b"1ms", true), None);
    }
}
