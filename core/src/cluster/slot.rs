//! Redis Cluster key slots: which of the 16,384 slots a key belongs to
//! (CRC16 of the key, or of its `{hash tag}`, modulo 16,384), and which
//! argument of a command is its key, so that the sync's cluster client
//! (`src/sync/cluster_link.rs`) sends each command to the node that serves
//! its slot. The rules are Redis's (the cluster specification's "Keys
//! distribution model").

/// Slots of a Redis Cluster.
pub const SLOTS: u16 = 16_384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0, no
/// reflection), the checksum Redis Cluster hashes keys with.
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The part of `key` that is hashed: what lies between the first `{` and
/// the first `}` after it, when that is not empty; else the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    let rest = &key[open + 1..];
    match rest.iter().position(|&b| b == b'}') {
        Some(close) if close > 0 => &rest[..close],
        _ => key,
    }
}

/// The slot of `key` (0..16384).
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % SLOTS
}

/// Commands the sync sends that name no key (any node answers them).
const KEYLESS: [&str; 10] = [
    "TIME", "PING", "INFO", "CLUSTER", "SCRIPT", "ECHO", "ROLE", "DBSIZE", "COMMAND", "ASKING",
];

/// The key of a command given as its arguments (`args[0]` is the
/// command's name): the first key of `EVAL`/`EVALSHA`/`FCALL` (after the
/// key count; none when the count is 0), nothing for a keyless command,
/// else the first argument. The sync's commands name one key each, or
/// several with one hash tag.
pub fn command_key<'a>(args: &[&'a [u8]]) -> Option<&'a [u8]> {
    let name = args.first()?;
    let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    if [
        "EVAL",
        "EVALSHA",
        "EVAL_RO",
        "EVALSHA_RO",
        "FCALL",
        "FCALL_RO",
    ]
    .iter()
    .any(|n| is(n))
    {
        let count = core::str::from_utf8(args.get(2)?)
            .ok()?
            .parse::<u64>()
            .ok()?;
        return if count == 0 {
            None
        } else {
            args.get(3).copied()
        };
    }
    if KEYLESS.iter().any(|n| is(n)) {
        return None;
    }
    args.get(1).copied()
}

/// The slot of a command given as its arguments; `None` for a keyless one.
pub fn command_slot(args: &[&[u8]]) -> Option<u16> {
    command_key(args).map(key_slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_is_xmodem() {
        // The cluster specification's check value: "123456789" -> 0x31C3.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn slots_of_known_keys() {
        // Values `CLUSTER KEYSLOT` gives (Redis documentation and servers).
        assert_eq!(key_slot(b"123456789"), 0x31C3 % SLOTS);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"hello"), 866);
        assert_eq!(key_slot(b"somekey"), 11058);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{user1000}.followers"), key_slot(b"user1000"));
    }

    #[test]
    fn hash_tags_follow_the_specification() {
        // The specification's examples.
        assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"no tag"), b"no tag");
        assert_eq!(hash_tag(b"open{only"), b"open{only");
        assert_eq!(hash_tag(b"}{x}"), b"x");
    }

    #[test]
    fn the_key_of_each_command() {
        let k = |a: &[&str]| {
            let v: Vec<&[u8]> = a.iter().map(|s| s.as_bytes()).collect();
            command_key(&v).map(|b| String::from_utf8(b.to_vec()).unwrap())
        };
        assert_eq!(
            k(&["HSET", "rlw:{z:1}:5", "g", "3"]).as_deref(),
            Some("rlw:{z:1}:5")
        );
        assert_eq!(k(&["hgetall", "a"]).as_deref(), Some("a"));
        assert_eq!(
            k(&["EVALSHA", "abc", "2", "k1", "k2", "x"]).as_deref(),
            Some("k1")
        );
        assert_eq!(k(&["eval", "return 1", "0", "x"]), None);
        assert_eq!(k(&["TIME"]), None);
        assert_eq!(k(&["CLUSTER", "SLOTS"]), None);
        assert_eq!(k(&[]), None);
        assert_eq!(k(&["EVAL", "s"]), None);
    }
}
