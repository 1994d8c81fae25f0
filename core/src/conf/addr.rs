//! Client addresses as `$binary_remote_addr` holds them: IPv6 prefix
//! grouping (`ipv6_prefix=`) and the text form of the metrics lookup
//! (`?addr=`).
//!
//! `$binary_remote_addr` is 4 bytes for IPv4 and 16 for IPv6 (an
//! IPv4-mapped IPv6 peer stays 16 bytes, `::ffff:a.b.c.d`).

use std::net::IpAddr;

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
}
