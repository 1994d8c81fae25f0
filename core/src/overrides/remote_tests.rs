//! Tests of the fleet's values (core/src/overrides/remote.rs).

use super::*;

fn key() -> MacKey {
    MacKey::new(b"api", b"fleet-secret-0001")
}

const ME: Origin = Origin {
    gateway: 0xabcd,
    change: 0x0800_0000_0000_0042,
};

/// The hash value the write script makes of `body` at `seq`.
fn stored(seq: u64, body: &str) -> String {
    format!("v3 {seq} 00ff00ff00ff00ff {body}")
}

#[test]
fn values_round_trip_through_the_hash_and_the_log() {
    let all = [
        Action::Limit(7),
        Action::InFlight(2),
        Action::InFlight(0),
        Action::Block,
        Action::Exempt,
        Action::Ban,
    ];
    for action in all {
        for id in [
            0x00ab_cdef_0123_4567,
            RANGE_BIT | 0x0018_0000_7f00_0000,
            RANGE_BIT,
        ] {
            let e = Entry {
                fp: id,
                action,
                expires_ms: 1_700_000_000_123,
            };
            let b = body(&key(), id, Some(&e), ME);
            let want = Read {
                id,
                entry: Some(e),
                seq: 42,
                origin: ME,
            };
            let f = field(id);
            assert_eq!(
                parse_value(&key(), f.as_bytes(), stored(42, &b).as_bytes()),
                Ok(want)
            );
            let member = format!("42 {f} {b}");
            assert_eq!(parse_log(&key(), member.as_bytes()), Ok(want));
        }
    }
    assert_eq!(field(0x00ab_cdef_0123_4567), "abcdef01234567");
    assert_eq!(field(RANGE_BIT | 0x18_0000_7f00_0000), "r1800007f000000");
    // `0.0.0.0/0`'s id is the range bit alone: it is shared too.
    assert_eq!(parse_field(b"r00000000000000"), Some(RANGE_BIT));
    let gone = body(&key(), 1, None, ME);
    assert!(
        gone.starts_with("000000000000abcd.800000000000042 del "),
        "{gone}"
    );
    let r = parse_log(&key(), format!("9 00000000000001 {gone}").as_bytes()).unwrap();
    assert_eq!((r.id, r.entry, r.seq), (1, None, 9));
}

#[test]
fn another_secret_or_a_changed_value_is_not_ours() {
    let e = Entry {
        fp: 5,
        action: Action::Exempt,
        expires_ms: 0,
    };
    let b = body(&key(), 5, Some(&e), ME);
    let f = field(5);
    let other = MacKey::new(b"api", b"fleet-secret-0002");
    let zone = MacKey::new(b"apj", b"fleet-secret-0001");
    for k in [&other, &zone] {
        assert_eq!(
            parse_log(k, format!("3 {f} {b}").as_bytes()),
            Err(Ignored::Mac)
        );
    }
    // The state changed, the field changed, the origin changed: the MAC
    // no longer matches.
    let changed = b.replace("exempt", "block");
    assert_eq!(
        parse_log(&key(), format!("3 {f} {changed}").as_bytes()),
        Err(Ignored::Mac)
    );
    let moved = format!("3 {} {b}", field(6));
    assert_eq!(parse_log(&key(), moved.as_bytes()), Err(Ignored::Mac));
    let forged = b.replacen("000000000000abcd", "000000000000abce", 1);
    assert_eq!(
        parse_log(&key(), format!("3 {f} {forged}").as_bytes()),
        Err(Ignored::Mac)
    );
    // The sequence is Redis's, not signed: any valid one reads.
    assert!(parse_log(&key(), format!("77 {f} {b}").as_bytes()).is_ok());
}

#[test]
fn malformed_values_are_ignored() {
    let k = key();
    let good = body(&k, 1, None, ME);
    for v in [
        "".to_string(),
        "v2 0000000000000001 del".into(),
        format!("v3 0 e {good}"),
        format!("v3 -1 e {good}"),
        format!("v3 99999999999999999999 e {good}"),
        format!("v3 1x e {good}"),
        "v3 1 e".into(),
        "v3 1 e 000000000000abcd.1 del".into(),
        "v3 1 e 000000000000abcd.1 shout 0 0 00000000000000000000000000000000".into(),
        "v3 1 e 000000000000abcd.1 limit x 0 00000000000000000000000000000000".into(),
        "v3 1 e 000000000000abcd.1 limit 99999999999 0 00000000000000000000000000000000".into(),
        "v3 1 e 000000000000abcd.1 block 0 00000000000000000000000000000000".into(),
        "v3 1 e abcd.1 del 00000000000000000000000000000000".into(),
        "v3 1 e 000000000000abcd. del 00000000000000000000000000000000".into(),
    ] {
        assert_eq!(
            parse_value(&k, b"00000000000001", v.as_bytes()),
            Err(Ignored::Malformed),
            "{v}"
        );
    }
    assert_eq!(
        parse_value(&k, b"00000000000001", b"\xff"),
        Err(Ignored::Malformed)
    );
    for f in [
        &b"1"[..],
        b"00000000000000",
        b"0000000000000g",
        b"x0000000000001",
        b"+0000000000001",
    ] {
        assert_eq!(parse_field(f), None, "{f:?}");
    }
}

#[test]
fn keys_share_one_cluster_slot_and_scripts_have_their_sha1_names() {
    let k = Keys::new("api");
    assert_eq!(k.hash, "rlw:{api}:ovr3");
    assert_eq!(k.seq, "rlw:{api}:ovr3:seq");
    assert_eq!(k.log, "rlw:{api}:ovr3:log");
    assert_eq!(k.epoch, "rlw:{api}:ovr3:epoch");
    assert_eq!(
        k.dedupe(ME),
        "rlw:{api}:ovr3:w:000000000000abcd.800000000000042"
    );
    // The SHA1 of "" is well known.
    assert_eq!(
        Script { text: "" }.sha(),
        "da39a3ee5e6b4b0d3255bfef95601890afd80709"
    );
    assert_eq!(WRITE.sha().len(), 40);
    assert!(WRITE.text.contains("return s") && HEAL.text.contains("next_seq()"));
    assert!(format!("{:?}", key()) == "MacKey(***)");
}
