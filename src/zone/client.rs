//! A client as its zone counts it, whatever the block (http or stream):
//! the key's bytes made the zone's key (an IPv4-mapped address as its IPv4
//! address, IPv6 masked to `ipv6_prefix=`) and hashed, a limit variable's
//! value read, and the key as an address for range overrides.

use rate_limit_window_core::conf::addr::{mask_ipv6, IPV6_PREFIX_MAX};
use rate_limit_window_core::conf::parse::parse_limit;
use rate_limit_window_core::engine::{Key, LimitRead};
use rate_limit_window_core::overrides::range::Addr;
use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::rule::strict::MAX_STRICT_LIMIT;
use rate_limit_window_core::Table;

use super::{ZoneConf, BINARY_REMOTE_ADDR};

/// The client of the non-empty `key` (as evaluated for the request or
/// session), judged against `limit`, in `zone`'s `table`.
#[inline(always)]
pub fn client_key(zone: &ZoneConf, table: &Table<'static>, key: &[u8], limit: LimitRead) -> Key {
    let key = ipv4_of_mapped(zone, key);
    let masked;
    let key = if zone.ipv6_prefix < IPV6_PREFIX_MAX {
        core::hint::cold_path();
        masked = mask_ipv6(key, zone.ipv6_prefix);
        masked.as_ref().map_or(key, |m| &m[..])
    } else {
        key
    };
    Key::Client {
        hash: table.hash_key(key),
        limit,
    }
}

/// A `$binary_remote_addr` key of an IPv4-mapped client
/// (`::ffff:10.0.0.5`, 16 bytes) as its IPv4 address's (4 bytes): it is
/// counted, overridden (`addr=10.0.0.5`, `cidr=10.0.0.5/32`) and banned as
/// that address.
#[inline(always)]
fn ipv4_of_mapped<'k>(zone: &ZoneConf, key: &'k [u8]) -> &'k [u8] {
    const MAPPED: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
    if key.len() == 16 && key[..12] == MAPPED && zone.key_src.as_bytes() == BINARY_REMOTE_ADDR {
        core::hint::cold_path();
        return &key[12..];
    }
    key
}

/// A limit variable's value `b`, as read: empty, a number, or invalid. A
/// strict zone's value above what it counts is what it counts,
/// [`MAX_STRICT_LIMIT`] (a fixed one is refused at `nginx -t`).
pub fn limit_read(zone: &ZoneConf, b: &[u8]) -> LimitRead {
    if b.is_empty() {
        return LimitRead::Empty;
    }
    let cap = if zone.mode == Mode::Strict {
        MAX_STRICT_LIMIT
    } else {
        u32::MAX
    };
    let read = |n: u32| LimitRead::Set(n.min(cap));
    parse_limit(b).map_or(LimitRead::Invalid, read)
}

/// The key as a client's address, masked like the zone (a zone keyed by
/// `$binary_remote_addr`), for its range overrides; None: not an address.
pub fn key_addr(zone: &ZoneConf, key: &[u8]) -> Option<Addr> {
    if zone.key_src.as_bytes() != BINARY_REMOTE_ADDR {
        return None;
    }
    match mask_ipv6(key, zone.ipv6_prefix) {
        Some(m) => Addr::of_key(&m),
        None => Addr::of_key(key),
    }
}
