//! Overrides of a `redis=` zone shared by the fleet: the Redis hash that
//! holds them and the text of its values (pure; the sync thread's glue is
//! `src/sync/fleet_overrides.rs`).
//!
//! One hash per zone, `rlw:{ZONE}:ovr`; field: the client's fingerprint
//! (14 hex digits), or `r` and a range's id (its 56 bits, 14 hex digits);
//! value: `v2 VERSION ACTION VALUE EXPIRES_MS` (VERSION 16 hex digits, see
//! [`super`]; ACTION `limit`, `in_flight`, `block`, `exempt` or `ban`;
//! VALUE a `limit`'s requests per window or an `in_flight`'s places, else
//! 0; EXPIRES_MS UTC epoch ms, 0: none), or `v2 VERSION del` for a removal
//! (kept [`TOMBSTONE_MS`] so that every gateway sees it, then deleted).
//! A gateway of a version before `in_flight` reads such a value as not
//! its own (ignored: it keeps the client's state as it had it).
//!
//! A value orders the states of a field: its version first (fixed width,
//! so the text's order is the number's), then the state's text. A write is
//! [`PUSH_SCRIPT`]: the value is set only over a smaller one, so a gateway
//! whose write arrives late never overwrites a newer change, and replaying
//! a write never changes the result. Values of the first format (`v1 …`,
//! older gateways) read as version 0 (a removal: its time) and are
//! overwritten by any `v2` value.

use super::range::RANGE_BIT;
use super::{Action, Entry, MAX_VERSION};

/// How long a removal stays in the hash (ms): every gateway reads the
/// hash about once a second.
pub const TOMBSTONE_MS: u64 = 600_000;

/// Sets field `ARGV[1]` of hash `KEYS[1]` to `ARGV[2]` unless it holds a
/// value as large or larger: 1 when it did, 0 when a newer state stays.
/// The kinds first (as [`super::Overrides::apply_remote`]): a ban never
/// replaces an operator's state that has not ended (by Redis's `TIME`),
/// and an operator's state always replaces a ban.
pub const PUSH_SCRIPT: &str = "local cur = redis.call('HGET', KEYS[1], ARGV[1]) \
if cur then \
local ck, ce = string.match(cur, '^v2 %x+ ([%a_]+) %d+ (%d+)$') \
local nk = string.match(ARGV[2], '^v2 %x+ ([%a_]+)') \
if nk == 'ban' and ck and ck ~= 'ban' then \
local t = redis.call('TIME') \
if ce == '0' or tonumber(ce) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
then return 0 end \
elseif not (ck == 'ban' and nk and nk ~= 'ban' and nk ~= 'del') and cur >= ARGV[2] then \
return 0 end end \
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) return 1";

/// Deletes field `ARGV[1]` of hash `KEYS[1]` if it still holds `ARGV[2]`
/// (an expired entry, an old removal): never a state written meanwhile.
pub const DROP_SCRIPT: &str = "if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then \
return redis.call('HDEL', KEYS[1], ARGV[1]) end return 0";

/// The zone's override hash.
pub fn ovr_key(zone: &str) -> String {
    format!("rlw:{{{zone}}}:ovr")
}

/// The field of an id (a fingerprint, or a range's id).
pub fn field(id: u64) -> String {
    let fp = id & (RANGE_BIT - 1);
    if id & RANGE_BIT != 0 {
        format!("r{fp:014x}")
    } else {
        format!("{fp:014x}")
    }
}

/// The id a field names (None: not one of ours).
pub fn parse_field(f: &[u8]) -> Option<u64> {
    let (range, hex) = match f.strip_prefix(b"r") {
        Some(h) => (RANGE_BIT, h),
        None => (0, f),
    };
    if hex.len() != 14 {
        return None;
    }
    let fp = u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
    // A range's id may be 0 below its range bit (`0.0.0.0/0`).
    (fp != 0 || range != 0).then_some(fp | range)
}

/// The text of a state, without its version: `ACTION VALUE EXPIRES_MS`,
/// or `del`.
pub fn state_text(e: Option<&Entry>) -> String {
    match e {
        None => "del".into(),
        Some(e) => {
            let value = match e.action {
                Action::Limit(n) | Action::InFlight(n) => n,
                _ => 0,
            };
            format!("{} {value} {}", e.action.name(), e.expires_ms)
        }
    }
}

/// The value that states a client's override at `version` (None: it has
/// none).
pub fn value(e: Option<&Entry>, version: u64) -> String {
    format!("v2 {version:016x} {}", state_text(e))
}

/// The UTC epoch ms of a version.
pub fn version_ms(version: u64) -> u64 {
    version >> 12
}

/// One field of the hash, read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    /// The id (a fingerprint, or a range's id).
    pub id: u64,
    /// Its override (None: removed).
    pub entry: Option<Entry>,
    /// The state's version.
    pub version: u64,
}

/// Reads one field and value of the hash; None when either is not ours.
pub fn parse(field: &[u8], value: &[u8]) -> Option<Read> {
    let id = parse_field(field)?;
    let v = std::str::from_utf8(value).ok()?;
    let w: Vec<&str> = v.split(' ').collect();
    let num = |s: &str| s.parse::<u64>().ok();
    let (version, state) = match w.as_slice() {
        ["v2", ver, state @ ..] if ver.len() == 16 => {
            let ver = u64::from_str_radix(ver, 16).ok()?;
            (ver, state)
        }
        ["v1", "del", at] => (num(at)?.min(MAX_VERSION >> 12) << 12, &w[1..2]),
        ["v1", state @ ..] => (0, state),
        _ => return None,
    };
    if version > MAX_VERSION {
        return None;
    }
    let entry = match state {
        ["del"] => None,
        [action, limit, exp] => Some(Entry {
            fp: id,
            action: match *action {
                "limit" => Action::Limit(u32::try_from(num(limit)?).ok()?.min(crate::MAX_LIMIT)),
                "in_flight" => Action::InFlight(
                    u32::try_from(num(limit)?)
                        .ok()?
                        .min(crate::shm::places::MAX_IN_FLIGHT),
                ),
                "block" => Action::Block,
                "exempt" => Action::Exempt,
                "ban" => Action::Ban,
                _ => return None,
            },
            expires_ms: num(exp)?.min(super::MAX_EXPIRY_MS),
        }),
        _ => return None,
    };
    Some(Read { id, entry, version })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        let all = [
            Action::Limit(7),
            Action::InFlight(2),
            Action::InFlight(0),
            Action::Block,
            Action::Exempt,
            Action::Ban,
        ];
        for action in all {
            for id in [0x00ab_cdef_0123_4567, RANGE_BIT | 0x0018_0000_7f00_0000] {
                let e = Entry {
                    fp: id,
                    action,
                    expires_ms: 1_700_000_000_123,
                };
                let f = field(e.fp);
                let v = value(Some(&e), 0xabc_1234);
                let want = Read {
                    id,
                    entry: Some(e),
                    version: 0xabc_1234,
                };
                assert_eq!(parse(f.as_bytes(), v.as_bytes()), Some(want));
            }
        }
        assert_eq!(field(0x00ab_cdef_0123_4567), "abcdef01234567");
        assert_eq!(field(RANGE_BIT | 0x18_0000_7f00_0000), "r1800007f000000");
        let v = value(None, 42);
        assert_eq!(v, "v2 000000000000002a del");
        assert_eq!(
            parse(b"00000000000001", v.as_bytes()),
            Some(Read {
                id: 1,
                entry: None,
                version: 42
            })
        );
    }

    #[test]
    fn the_text_orders_states_by_version_first() {
        let e = Entry {
            fp: 1,
            action: Action::Block,
            expires_ms: 0,
        };
        assert!(value(None, 0x1_0000) > value(Some(&e), 0xffff));
        assert!(value(Some(&e), 0x1_0000) > value(None, 0xffff));
        assert!(value(Some(&e), 7) > value(Some(&e), 6));
    }

    /// An `in_flight` state's text, as every gateway of this version
    /// writes and reads it; its places above 65535 read as 65535.
    #[test]
    fn in_flight_values_are_read() {
        let e = Entry {
            fp: 1,
            action: Action::InFlight(3),
            expires_ms: 5,
        };
        assert_eq!(value(Some(&e), 0x2a), "v2 000000000000002a in_flight 3 5");
        let r = parse(b"00000000000001", b"v2 000000000000002a in_flight 70000 0").unwrap();
        assert_eq!(r.entry.unwrap().action, Action::InFlight(65_535));
        let bad = parse(b"00000000000001", b"v2 000000000000002a in_flight x 0");
        assert_eq!(bad, None);
    }

    #[test]
    fn first_format_values_read_as_old() {
        let r = parse(b"00000000000001", b"v1 block 0 0").unwrap();
        assert_eq!(r.version, 0);
        assert_eq!(r.entry.unwrap().action, Action::Block);
        let r = parse(b"00000000000001", b"v1 del 5").unwrap();
        assert_eq!((r.version, r.entry), (5 << 12, None));
        // Any v2 value is greater, so it overwrites them.
        assert!(value(None, 0).as_str() > "v1 block 0 0");
    }

    #[test]
    fn foreign_fields_are_ignored() {
        for (f, v) in [
            (&b"1"[..], &b"v2 0000000000000001 del"[..]),
            (b"00000000000000", b"v2 0000000000000001 del"),
            (b"0000000000000g", b"v2 0000000000000001 del"),
            (b"x0000000000001", b"v2 0000000000000001 del"),
            (b"00000000000001", b"v3 0000000000000001 del"),
            (b"00000000000001", b"v2 1 del"),
            (b"00000000000001", b"v2 ffffffffffffffff del"),
            (b"00000000000001", b"v2 0000000000000001 shout 0 0"),
            (b"00000000000001", b"v2 0000000000000001 limit x 0"),
            (
                b"00000000000001",
                b"v2 0000000000000001 limit 99999999999 0",
            ),
            (b"00000000000001", b"v2 0000000000000001 block 0"),
            (b"00000000000001", b"\xff"),
        ] {
            assert_eq!(parse(f, v), None, "{f:?} {v:?}");
        }
        assert_eq!(ovr_key("api"), "rlw:{api}:ovr");
    }

    /// `cidr=0.0.0.0/0`'s id is the range bit alone: its field is read
    /// back (the fleet shares it), a client's zero fingerprint is not.
    #[test]
    fn the_whole_ipv4_range_is_a_field() {
        use crate::overrides::range::{Addr, Range};
        let all = Range::new(Addr::of_key(&[10, 0, 0, 5]).unwrap(), 0);
        let id = all.id(|_| unreachable!());
        assert_eq!(field(id), "r00000000000000");
        assert_eq!(parse_field(field(id).as_bytes()), Some(id));
        assert_eq!(parse_field(b"00000000000000"), None);
    }
}
