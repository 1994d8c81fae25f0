//! Client addresses as `$binary_remote_addr` holds them: IPv6 prefix
//! grouping (`ipv6_prefix=`), the text form of the metrics lookup
//! (`?addr=`) and of an address range (`?cidr=`).
//!
//! `$binary_remote_addr` is 4 bytes for IPv4 and 16 for IPv6 (an
//! IPv4-mapped IPv6 peer stays 16 bytes, `::ffff:a.b.c.d`).

use std::net::IpAddr;

use crate::overrides::range::{Addr, Range};
use crate::units::escape;

/// Smallest `ipv6_prefix=`.
pub const IPV6_PREFIX_MIN: u8 = 32;
/// Largest `ipv6_prefix=` (the default: whole addresses).
pub const IPV6_PREFIX_MAX: u8 = 128;

/// An `ipv6_prefix=` value that is no number of bits from
/// [`IPV6_PREFIX_MIN`] to [`IPV6_PREFIX_MAX`] (the value as written).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid ipv6_prefix \"{}\": use a number of bits from {IPV6_PREFIX_MIN} to \
     {IPV6_PREFIX_MAX} (64 groups a host's /64)",
    escape(.0)
)]
pub struct Ipv6PrefixError(pub Vec<u8>);

/// Parses the value of `ipv6_prefix=N` (bits, [`IPV6_PREFIX_MIN`] to
/// [`IPV6_PREFIX_MAX`]). Err prints the `[emerg]` text.
pub fn parse_ipv6_prefix(v: &[u8]) -> Result<u8, Ipv6PrefixError> {
    let n = std::str::from_utf8(v)
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u32>().ok());
    match n {
        Some(n) if (u32::from(IPV6_PREFIX_MIN)..=u32::from(IPV6_PREFIX_MAX)).contains(&n) => {
            Ok(n as u8)
        }
        _ => Err(Ipv6PrefixError(v.to_vec())),
    }
}

/// Whether 16 address bytes are an IPv4-mapped IPv6 address.
fn v4_mapped(a: &[u8; 16]) -> bool {
    a[..10].iter().all(|&b| b == 0) && a[10] == 0xff && a[11] == 0xff
}

/// The key of `$binary_remote_addr` bytes `key` in a zone with
/// `ipv6_prefix=prefix`: an IPv6 address (16 bytes, not IPv4-mapped) with
/// its bits after the first `prefix` cleared; None when the key is kept as
/// it is (IPv4, IPv4-mapped, a prefix of 128 or more, any other length).
#[inline]
pub fn mask_ipv6(key: &[u8], prefix: u8) -> Option<[u8; 16]> {
    if prefix >= IPV6_PREFIX_MAX {
        return None;
    }
    let mut a: [u8; 16] = key.try_into().ok()?;
    if v4_mapped(&a) {
        return None;
    }
    let bits = u128::from_be_bytes(a);
    let mask = !(u128::MAX >> prefix);
    a = (bits & mask).to_be_bytes();
    Some(a)
}

/// Why a lookup address is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadAddr(pub String);

/// The `$binary_remote_addr` key of an address written as text (`?addr=`:
/// IPv4 dotted quad or IPv6, as nginx would see the client), masked like
/// the zone (`ipv6_prefix`).
pub fn addr_key(text: &[u8], prefix: u8) -> Result<Vec<u8>, BadAddr> {
    let bad = || {
        BadAddr(format!(
            "invalid address \"{}\": use IPv4 (192.0.2.1) or IPv6 (2001:db8::1) text",
            escape(text)
        ))
    };
    let s = std::str::from_utf8(text).map_err(|_| bad())?;
    let s = s
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(s);
    match s.parse::<IpAddr>().map_err(|_| bad())? {
        IpAddr::V4(a) => Ok(a.octets().to_vec()),
        IpAddr::V6(a) => {
            let o = a.octets();
            Ok(mask_ipv6(&o, prefix).unwrap_or(o).to_vec())
        }
    }
}

/// What a `cidr=ADDR/BITS` names in a zone: one address's key (a prefix
/// as long as the zone's keys: /32, /128 or the zone's `ipv6_prefix=`),
/// or a range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cidr {
    /// The key of one address (masked like the zone).
    Key(Vec<u8>),
    /// A range of addresses.
    Range(Range),
}

/// Parses `ADDR/BITS` (IPv4 or IPv6; the bits after the prefix are
/// cleared; an IPv4-mapped IPv6 range of 96 bits or more is its IPv4
/// range) for a zone of `ipv6_prefix=prefix`, whose IPv6 keys hold only
/// their first `prefix` bits: a longer IPv6 prefix is refused.
pub fn parse_cidr(text: &[u8], prefix: u8) -> Result<Cidr, BadAddr> {
    let bad = |why: &str| {
        BadAddr(format!(
            "invalid cidr \"{}\": {why}; use ADDRESS/BITS (192.0.2.0/24, 2001:db8::/32)",
            escape(text)
        ))
    };
    let s = std::str::from_utf8(text).map_err(|_| bad("not text"))?;
    let (a, bits) = s.rsplit_once('/').ok_or_else(|| bad("no /BITS"))?;
    let ip = a.parse::<IpAddr>().map_err(|_| bad("not an address"))?;
    let len = Some(bits)
        .filter(|b| !b.is_empty() && b.len() <= 3 && b.bytes().all(|c| c.is_ascii_digit()))
        .and_then(|b| b.parse::<u8>().ok())
        .ok_or_else(|| bad("the prefix is no number of bits"))?;
    let key = match ip {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    };
    let addr = Addr::of_key(&key).ok_or_else(|| bad("not an address"))?;
    let width = if ip.is_ipv4() { 32 } else { 128 };
    if len > width {
        return Err(bad(&format!(
            "an IPv{} prefix has at most {width} bits",
            if width == 32 { 4 } else { 6 }
        )));
    }
    // An IPv4-mapped IPv6 range: its IPv4 part.
    let len = if width == 128 && addr.family == crate::overrides::range::Family::V4 {
        len.checked_sub(96)
            .ok_or_else(|| bad("an IPv4-mapped range needs 96 bits or more"))?
    } else {
        len
    };
    let full = match addr.family {
        crate::overrides::range::Family::V4 => 32,
        crate::overrides::range::Family::V6 => prefix.min(IPV6_PREFIX_MAX),
    };
    if len > full {
        return Err(bad(&format!(
            "the zone keeps IPv6 addresses to their first {full} bits (ipv6_prefix={full})"
        )));
    }
    if len == full {
        let key = Range::new(addr, len).addr.key();
        return Ok(Cidr::Key(
            mask_ipv6(&key, prefix).map_or(key, |m| m.to_vec()),
        ));
    }
    Ok(Cidr::Range(Range::new(addr, len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6(s: &str) -> [u8; 16] {
        s.parse::<std::net::Ipv6Addr>().unwrap().octets()
    }

    #[test]
    fn prefix_values() {
        assert_eq!(parse_ipv6_prefix(b"64"), Ok(64));
        assert_eq!(parse_ipv6_prefix(b"32"), Ok(32));
        assert_eq!(parse_ipv6_prefix(b"128"), Ok(128));
        for bad in [
            &b"31"[..],
            b"129",
            b"",
            b"-1",
            b"64b",
            b"0x40",
            b"99999999999",
        ] {
            let e = parse_ipv6_prefix(bad).unwrap_err();
            assert_eq!(e, Ipv6PrefixError(bad.to_vec()));
            assert!(e.to_string().contains("from 32 to 128"), "{e}");
        }
    }

    #[test]
    fn prefix_error_text() {
        assert_eq!(
            parse_ipv6_prefix(b"12\"x").unwrap_err().to_string(),
            "invalid ipv6_prefix \"12\\\"x\": use a number of bits from 32 to 128 \
             (64 groups a host's /64)"
        );
        let long = [b'9'; 70];
        let e = parse_ipv6_prefix(&long).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("invalid ipv6_prefix \"{}...\"", "9".repeat(64))),
            "{e}"
        );
    }

    #[test]
    fn masks_ipv6_only() {
        let m = mask_ipv6(&v6("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), 64).unwrap();
        assert_eq!(m, v6("2001:db8:1:2::"));
        let m = mask_ipv6(&v6("2001:db8:1:2:aaaa::1"), 48).unwrap();
        assert_eq!(m, v6("2001:db8:1::"));
        let m = mask_ipv6(&v6("2001:db8:1:ffff:aaaa::1"), 57).unwrap();
        assert_eq!(m, v6("2001:db8:1:ff80::"), "{m:x?}");
        let m = mask_ipv6(&v6("2001:db8:ffff::1"), 32).unwrap();
        assert_eq!(m, v6("2001:db8::"));
        // Two hosts of one /64 share a key; another /64 does not.
        assert_eq!(
            mask_ipv6(&v6("2001:db8::1"), 64),
            mask_ipv6(&v6("2001:db8::ffff:1"), 64)
        );
        assert_ne!(
            mask_ipv6(&v6("2001:db8::1"), 64),
            mask_ipv6(&v6("2001:db8:0:1::1"), 64)
        );
        // Unchanged: 128, IPv4, IPv4-mapped, other lengths.
        assert_eq!(mask_ipv6(&v6("2001:db8::1"), 128), None);
        assert_eq!(mask_ipv6(&[10, 0, 0, 1], 64), None);
        assert_eq!(mask_ipv6(&v6("::ffff:10.0.0.1"), 64), None);
        assert_eq!(mask_ipv6(b"not an address", 64), None);
    }

    #[test]
    fn lookup_text() {
        assert_eq!(addr_key(b"127.0.0.1", 128), Ok(vec![127, 0, 0, 1]));
        assert_eq!(
            addr_key(b"2001:db8::1", 128),
            Ok(v6("2001:db8::1").to_vec())
        );
        assert_eq!(
            addr_key(b"[2001:db8::1]", 128),
            Ok(v6("2001:db8::1").to_vec())
        );
        assert_eq!(
            addr_key(b"2001:db8::1:2:3:4", 64),
            Ok(v6("2001:db8::").to_vec())
        );
        assert_eq!(addr_key(b"10.0.0.1", 64), Ok(vec![10, 0, 0, 1]));
        assert_eq!(
            addr_key(b"::ffff:10.0.0.1", 64),
            Ok(v6("::ffff:10.0.0.1").to_vec())
        );
        for bad in [
            &b"10.0.0"[..],
            b"host",
            b"",
            b"10.0.0.1:80",
            b"\xff",
            b"1.2.3.4/24",
        ] {
            let e = addr_key(bad, 128).unwrap_err();
            assert!(e.0.starts_with("invalid address"), "{e:?}");
        }
    }

    #[test]
    fn cidr_values() {
        let r = |t: &str, p| parse_cidr(t.as_bytes(), p);
        let range = |t: &str| match r(t, 128).unwrap() {
            Cidr::Range(x) => x.text(),
            Cidr::Key(k) => panic!("{t}: a key {k:?}"),
        };
        assert_eq!(range("127.0.0.0/24"), "127.0.0.0/24");
        assert_eq!(range("127.0.0.77/24"), "127.0.0.0/24");
        assert_eq!(range("10.0.0.0/0"), "0.0.0.0/0");
        assert_eq!(range("2001:db8::/32"), "2001:db8::/32");
        assert_eq!(range("2001:db8:1:2::5/127"), "2001:db8:1:2::4/127");
        assert_eq!(range("::ffff:192.0.2.9/120"), "192.0.2.0/24");
        assert_eq!(r("192.0.2.1/32", 128), Ok(Cidr::Key(vec![192, 0, 2, 1])));
        assert_eq!(
            r("2001:db8::1/128", 128),
            Ok(Cidr::Key(v6("2001:db8::1").to_vec()))
        );
        assert_eq!(
            r("2001:db8:0:0:1::1/64", 64),
            Ok(Cidr::Key(v6("2001:db8::").to_vec()))
        );
        assert!(matches!(r("2001:db8::/48", 64), Ok(Cidr::Range(_))));
        for (bad, why) in [
            ("127.0.0.0", "no /BITS"),
            ("127.0.0.0/", "no number"),
            ("127.0.0.0/33", "at most 32"),
            ("127.0.0.0/-1", "no number"),
            ("127.0.0.0/024x", "no number"),
            ("127.0.0.0/99999", "no number"),
            ("2001:db8::/129", "at most 128"),
            ("2001:db8::/65", "first 64 bits"),
            ("::ffff:1.2.3.4/90", "96 bits"),
            ("example.com/24", "not an address"),
            ("[2001:db8::]/32", "not an address"),
        ] {
            let e =
                parse_cidr(bad.as_bytes(), if bad.contains("/65") { 64 } else { 128 }).unwrap_err();
            assert!(
                e.0.contains(why) && e.0.contains("ADDRESS/BITS"),
                "{bad}: {}",
                e.0
            );
        }
    }
}
