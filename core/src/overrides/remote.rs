//! Overrides of a `redis=` zone shared by the fleet: the Redis hash that
//! holds them and the text of its values (pure; the sync thread's glue is
//! `src/sync/fleet_overrides.rs`).
//!
//! One hash per zone, `rlw:{ZONE}:ovr`; field: the client's fingerprint
//! (14 hex digits); value: `v1 ACTION LIMIT EXPIRES_MS` (ACTION `limit`,
//! `block`, `exempt` or `ban`; EXPIRES_MS UTC epoch ms, 0: none), or
//! `v1 del AT_MS` for a removal (a tombstone, kept [`TOMBSTONE_MS`] so that
//! every gateway sees it, then deleted). Every write is an `HSET` of the
//! whole state, so replaying one never changes the result.

use crate::overrides::{Action, Entry};

/// How long a removal stays in the hash (ms): every gateway reads the
/// hash about once a second.
pub const TOMBSTONE_MS: u64 = 600_000;

/// The zone's override hash.
pub fn ovr_key(zone: &str) -> String {
    format!("rlw:{{{zone}}}:ovr")
}

/// The field of a client.
pub fn field(fp: u64) -> String {
    format!("{fp:014x}")
}

/// The value that states a client's override (None: it has none).
pub fn value(e: Option<&Entry>, now_ms: u64) -> String {
    match e {
        None => format!("v1 del {now_ms}"),
        Some(e) => {
            let limit = match e.action {
                Action::Limit(n) => n,
                _ => 0,
            };
            format!("v1 {} {limit} {}", e.action.name(), e.expires_ms)
        }
    }
}

/// A client's state as the hash holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remote {
    /// Its override.
    Set(Entry),
    /// Removed at this time (UTC epoch ms).
    Deleted(u64),
}

/// Reads one field and value of the hash; None when either is not ours.
pub fn parse(field: &[u8], value: &[u8]) -> Option<Remote> {
    let fp = std::str::from_utf8(field).ok()?;
    if fp.len() != 14 {
        return None;
    }
    let fp = u64::from_str_radix(fp, 16).ok().filter(|&f| f != 0)?;
    let v = std::str::from_utf8(value).ok()?;
    let w: Vec<&str> = v.split(' ').collect();
    let num = |s: &str| s.parse::<u64>().ok();
    match w.as_slice() {
        ["v1", "del", at] => Some(Remote::Deleted(num(at)?)),
        ["v1", action, limit, exp] => {
            let action = match *action {
                "limit" => Action::Limit(u32::try_from(num(limit)?).ok()?.min(crate::MAX_LIMIT)),
                "block" => Action::Block,
                "exempt" => Action::Exempt,
                "ban" => Action::Ban,
                _ => return None,
            };
            Some(Remote::Set(Entry {
                fp,
                action,
                expires_ms: num(exp)?,
            }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        for action in [Action::Limit(7), Action::Block, Action::Exempt, Action::Ban] {
            let e = Entry {
                fp: 0x00ab_cdef_0123_4567,
                action,
                expires_ms: 1_700_000_000_123,
            };
            let f = field(e.fp);
            assert_eq!(f, "abcdef01234567");
            let v = value(Some(&e), 5);
            assert_eq!(parse(f.as_bytes(), v.as_bytes()), Some(Remote::Set(e)));
        }
        let v = value(None, 42);
        assert_eq!(v, "v1 del 42");
        assert_eq!(
            parse(b"00000000000001", v.as_bytes()),
            Some(Remote::Deleted(42))
        );
    }

    #[test]
    fn foreign_fields_are_ignored() {
        for (f, v) in [
            (&b"1"[..], &b"v1 del 1"[..]),
            (b"00000000000000", b"v1 del 1"),
            (b"0000000000000g", b"v1 del 1"),
            (b"00000000000001", b"v2 del 1"),
            (b"00000000000001", b"v1 shout 0 0"),
            (b"00000000000001", b"v1 limit x 0"),
            (b"00000000000001", b"v1 limit 99999999999 0"),
            (b"00000000000001", b"v1 block 0"),
            (b"00000000000001", b"\xff"),
        ] {
            assert_eq!(parse(f, v), None, "{f:?} {v:?}");
        }
        assert_eq!(ovr_key("api"), "rlw:{api}:ovr");
    }
}
