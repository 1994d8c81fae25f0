//! Tests of the state file format: round trips, and every truncation,
//! bit flip or foreign identity refused without a panic.

use proptest::prelude::*;

use super::*;
use crate::overrides::{Action, Entry};
use crate::table::LAYOUT_VERSION;

/// One override of each kind: a limit for ever, a block for an hour, an
/// exempt, places for an hour, a ban.
fn sample_overrides() -> Vec<Entry> {
    let e = |fp, action, expires_ms| Entry {
        fp,
        action,
        expires_ms,
    };
    vec![
        e(0x00ab_cdef_0123_4567, Action::Limit(10), 0),
        e(0x0012_3456_789a_bcde, Action::Block, 1_767_229_200_000),
        e(1, Action::Exempt, 0),
        e(2, Action::InFlight(3), 1_767_229_200_000),
        e((1 << 56) - 1, Action::Ban, 1_767_225_660_000),
    ]
}

fn sample(slots: usize) -> StateFile {
    StateFile {
        identity: Identity {
            zone: b"per_ip".to_vec(),
            key: b"$binary_remote_addr".to_vec(),
            window_ms: 86_400_000,
            strict: false,
        },
        seed: [0x0123_4567_89ab_cdef, 42],
        saved_ms: 1_767_225_600_123,
        table: SavedTable {
            layout: LAYOUT_VERSION,
            strict: false,
            capacity: 65_264,
            newest: 20_454,
            slots: (0..slots)
                .map(|i| (i as u32 * 3, (i as u128) << 72 | 5))
                .collect(),
        },
        overrides: sample_overrides(),
        other: vec![],
    }
}

#[test]
fn crc32c_matches_the_standard_check_value() {
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    assert_eq!(crc32c(b""), 0);
}

#[test]
fn round_trip() {
    for n in [0, 1, 17] {
        for k in [0, 4] {
            let mut f = sample(n);
            f.overrides.truncate(k);
            let bytes = encode(&f);
            // Header, checksum, 4 section heads, IDENTITY, SEED, TABLE,
            // OVERRIDES.
            let want = 24 + 4 + 8 * 4 + 45 + 16 + 40 + 20 * n + 8 + 24 * k;
            assert_eq!(bytes.len(), want);
            assert_eq!(decode(&bytes).unwrap(), f);
        }
    }
}

#[test]
fn unknown_sections_are_skipped_and_kept() {
    let mut f = sample(2);
    f.other = vec![(5, b"future".to_vec()), (900, vec![])];
    let back = decode(&encode(&f)).unwrap();
    assert_eq!(back.other, f.other);
    assert_eq!(back.table, f.table);
    assert_eq!(back.overrides, f.overrides);
}

#[test]
fn every_truncation_is_refused() {
    let bytes = encode(&sample(3));
    for n in 0..bytes.len() {
        let e = decode(&bytes[..n]).unwrap_err();
        assert!(
            matches!(e, StateError::Truncated | StateError::BadMagic),
            "{n}: {e}"
        );
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(decode(&longer).unwrap_err(), StateError::TrailingBytes);
}

#[test]
fn every_bit_flip_is_refused() {
    let bytes = encode(&sample(3));
    for bit in 0..bytes.len() * 8 {
        let mut b = bytes.clone();
        b[bit / 8] ^= 1 << (bit % 8);
        assert!(decode(&b).is_err(), "bit {bit} flipped was accepted");
    }
}

#[test]
fn malformed_sections_are_refused_even_with_a_valid_checksum() {
    // Re-encodes the file with `edit` applied to the body, fixing the
    // length and checksum, so only the section check can refuse it.
    let rebuild = |edit: &dyn Fn(&mut Vec<u8>)| {
        let bytes = encode(&sample(1));
        let mut body = bytes[24..bytes.len() - 4].to_vec();
        edit(&mut body);
        let mut out = bytes[..16].to_vec();
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&body);
        let crc = crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        decode(&out)
    };
    // The IDENTITY section repeated.
    let e = rebuild(&|b| {
        let id_len = 8 + u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
        let id = b[..id_len].to_vec();
        b.extend_from_slice(&id);
    });
    assert_eq!(
        e.unwrap_err(),
        StateError::Section("IDENTITY", "appears twice")
    );
    // The SEED section dropped.
    let e = rebuild(&|b| {
        let id_len = 8 + u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
        b.drain(id_len..id_len + 8 + 16);
    });
    assert_eq!(e.unwrap_err(), StateError::Section("SEED", "missing"));
    // The last byte of the body removed: the TABLE section is cut short.
    assert!(rebuild(&|b| {
        b.pop();
    })
    .is_err());
}

/// The file of `sample(1)` with its OVERRIDES section (the last one)
/// replaced by `payload` (None: no OVERRIDES section), length and
/// checksum fixed: only the section check can refuse it.
fn with_overrides(payload: Option<&[u8]>) -> Result<StateFile, StateError> {
    let mut f = sample(1);
    f.overrides.clear();
    let bytes = encode(&f);
    // The empty section: head (8), count (8); then the checksum (4).
    let mut body = bytes[24..bytes.len() - 4 - 16].to_vec();
    if let Some(p) = payload {
        body.extend_from_slice(&section::OVERRIDES.to_le_bytes());
        body.extend_from_slice(&[0, 0]);
        body.extend_from_slice(&(p.len() as u32).to_le_bytes());
        body.extend_from_slice(p);
    }
    let mut out = bytes[..16].to_vec();
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    let crc = crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    decode(&out)
}

/// An OVERRIDES payload of `records` (fp, action code, limit, expiry).
fn overrides_payload(records: &[(u64, u8, u32, u64)]) -> Vec<u8> {
    let mut p = (records.len() as u64).to_le_bytes().to_vec();
    for &(fp, code, limit, exp) in records {
        p.extend_from_slice(&fp.to_le_bytes());
        p.extend_from_slice(&[code, 0, 0, 0]);
        p.extend_from_slice(&limit.to_le_bytes());
        p.extend_from_slice(&exp.to_le_bytes());
    }
    p
}

#[test]
fn a_file_without_overrides_reads_as_none() {
    let f = with_overrides(None).unwrap();
    assert!(f.overrides.is_empty());
    assert_eq!(f.table, sample(1).table);
}

#[test]
fn valid_override_records_are_read() {
    let p = overrides_payload(&[
        (7, 1, 1_000_000, 0),
        (8, 4, 0, 5),
        (9, 3, 0, 9),
        (10, 5, 65_535, 0),
        (11, 5, 0, 7),
    ]);
    let f = with_overrides(Some(&p)).unwrap();
    let want = [
        (7, Action::Limit(1_000_000), 0),
        (8, Action::Ban, 5),
        (9, Action::Exempt, 9),
        (10, Action::InFlight(65_535), 0),
        (11, Action::InFlight(0), 7),
    ];
    let got: Vec<_> = f
        .overrides
        .iter()
        .map(|e| (e.fp, e.action, e.expires_ms))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn malformed_overrides_are_refused_even_with_a_valid_checksum() {
    let bad = StateError::Section("OVERRIDES", "malformed");
    let max_exp = crate::overrides::MAX_EXPIRY_MS;
    let cases: [(&str, Vec<u8>); 13] = [
        ("fingerprint 0", overrides_payload(&[(0, 2, 0, 0)])),
        (
            "an id over 57 bits",
            overrides_payload(&[(1 << 57, 2, 0, 0)]),
        ),
        (
            "a range id of no prefix",
            overrides_payload(&[((1 << 56) | (200 << 48), 2, 0, 0)]),
        ),
        ("action 0", overrides_payload(&[(5, 0, 0, 0)])),
        ("action 6", overrides_payload(&[(5, 6, 0, 0)])),
        ("places over 65535", overrides_payload(&[(5, 5, 65_536, 0)])),
        ("a limit on a block", overrides_payload(&[(5, 2, 3, 0)])),
        ("a huge limit", overrides_payload(&[(5, 1, 1_000_001, 0)])),
        ("a ban without end", overrides_payload(&[(5, 4, 0, 0)])),
        (
            "an expiry out of range",
            overrides_payload(&[(5, 2, 0, max_exp + 1)]),
        ),
        (
            "one client twice",
            overrides_payload(&[(5, 2, 0, 0), (5, 3, 0, 0)]),
        ),
        ("a count past the records", {
            let mut p = overrides_payload(&[(5, 2, 0, 0)]);
            p[0] = 2;
            p
        }),
        ("a huge count", {
            let mut p = overrides_payload(&[]);
            p[..8].copy_from_slice(&u64::MAX.to_le_bytes());
            p
        }),
    ];
    for (what, p) in cases {
        assert_eq!(with_overrides(Some(&p)).unwrap_err(), bad, "{what}");
    }
    let mut flag = overrides_payload(&[(5, 2, 0, 0)]);
    flag[17] = 1; // a reserved byte after the action
    assert_eq!(with_overrides(Some(&flag)).unwrap_err(), bad);
    // The section twice.
    let e = with_overrides(Some(&overrides_payload(&[]))).map(|_| ());
    assert!(e.is_ok());
    let mut f = sample(1);
    f.other = vec![(section::OVERRIDES, overrides_payload(&[]))];
    assert_eq!(
        decode(&encode(&f)).unwrap_err(),
        StateError::Section("OVERRIDES", "appears twice")
    );
}

/// What an override table's scan may show (a client twice during two
/// concurrent inserts) is saved as a file that decodes: one entry per
/// client, the first met.
#[test]
fn savable_keeps_one_entry_per_client() {
    let mut scan = sample_overrides();
    let mut twice = scan[0];
    twice.action = Action::Block;
    scan.insert(2, twice);
    scan.push(Entry {
        fp: 0,
        action: Action::Block,
        expires_ms: 0,
    });
    scan.push(Entry {
        fp: 77,
        action: Action::Ban,
        expires_ms: 0,
    });
    let mut f = sample(1);
    f.overrides = scan.clone();
    assert_eq!(
        decode(&encode(&f)).unwrap_err(),
        StateError::Section("OVERRIDES", "malformed")
    );
    f.overrides = savable(scan);
    assert_eq!(f.overrides, sample_overrides());
    assert_eq!(decode(&encode(&f)).unwrap(), f);
}

#[test]
fn another_version_or_magic_is_refused() {
    let mut b = encode(&sample(0));
    b[8] = 2;
    assert_eq!(decode(&b).unwrap_err(), StateError::Version(2));
    assert_eq!(
        decode(b"#!/bin/sh\necho\n").unwrap_err(),
        StateError::BadMagic
    );
}

#[test]
fn identity_mismatches_are_foreign() {
    let ours = sample(0).identity;
    assert!(check_identity(&ours, &ours).is_ok());
    type Edit<'a> = &'a dyn Fn(&mut Identity);
    let cases: [(Edit, &str); 4] = [
        (&|i| i.zone = b"other".to_vec(), "zone \"other\""),
        (&|i| i.key = b"$http_x_key".to_vec(), "key \"$http_x_key\""),
        (&|i| i.window_ms = 60_000, "window 60000ms"),
        (&|i| i.strict = true, "mode=strict"),
    ];
    for (edit, want) in cases {
        let mut saved = ours.clone();
        edit(&mut saved);
        let e = check_identity(&saved, &ours).unwrap_err().to_string();
        assert!(
            e.starts_with("written by another zone: ") && e.contains(want),
            "{e}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any content survives a round trip.
    #[test]
    fn any_file_round_trips(
        zone in proptest::collection::vec(any::<u8>(), 0..40),
        key in proptest::collection::vec(any::<u8>(), 0..40),
        window_ms in any::<u64>(),
        strict in any::<bool>(),
        seed in any::<[u64; 2]>(),
        saved_ms in any::<u64>(),
        newest in any::<u64>(),
        slots in proptest::collection::vec((any::<u32>(), any::<u128>()), 0..50),
        other in proptest::collection::vec((5u16.., proptest::collection::vec(any::<u8>(), 0..20)), 0..3),
        ovr in proptest::collection::btree_map(1u64..1 << 56, (0u8..5, 0u32..=1_000_000, 0u64..1 << 44), 0..20),
    ) {
        let overrides = ovr
            .into_iter()
            .map(|(fp, (code, n, exp))| {
                let places = Action::InFlight(n % 65_536);
                let action = [Action::Limit(n), Action::Block, Action::Exempt, Action::Ban, places][code as usize];
                let expires_ms = if action == Action::Ban { exp.max(1) } else { exp };
                Entry { fp, action, expires_ms }
            })
            .collect();
        let f = StateFile {
            identity: Identity { zone, key, window_ms, strict },
            seed,
            saved_ms,
            table: SavedTable { layout: LAYOUT_VERSION, strict, capacity: 1 << 20, newest, slots },
            overrides,
            other,
        };
        prop_assert_eq!(decode(&encode(&f)).unwrap(), f);
    }

    /// Any truncation, and any flip of 1 to 32 adjacent bits, is refused.
    #[test]
    fn damage_is_refused(n in 0usize..30, cut in any::<prop::sample::Index>(),
                         at in any::<prop::sample::Index>(), burst in 1u32..=32, pattern in any::<u32>()) {
        let bytes = encode(&sample(n));
        let cut = cut.index(bytes.len());
        prop_assert!(decode(&bytes[..cut]).is_err());
        let mut b = bytes.clone();
        let bits = (pattern | 1 | (1 << (burst - 1))) & (u32::MAX >> (32 - burst));
        let start = at.index(bytes.len() * 8 - 32);
        for i in 0..burst {
            if bits >> i & 1 == 1 {
                let bit = start + i as usize;
                b[bit / 8] ^= 1 << (bit % 8);
            }
        }
        prop_assert!(decode(&b).is_err());
    }

    /// Arbitrary bytes, with or without the magic, never panic.
    #[test]
    fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..300), magic in any::<bool>()) {
        let mut b = if magic { MAGIC.to_vec() } else { vec![] };
        b.extend_from_slice(&tail);
        let _ = decode(&b);
    }
}

/// A version 1 file as written by hand from the format's description
/// (also the fuzz target's seed): this version must keep reading it.
#[test]
fn reads_the_version_1_reference_file() {
    let f = decode(include_bytes!("../../testdata/state_v1.bin")).unwrap();
    assert_eq!(f.identity.zone, b"z");
    assert_eq!(f.identity.key, b"$http_x_key");
    assert_eq!((f.identity.window_ms, f.identity.strict), (60_000, false));
    assert_eq!(f.seed, [7, 9]);
    assert_eq!(f.saved_ms, 1_767_225_600_000);
    assert_eq!((f.table.capacity, f.table.slots.len()), (64, 5));
    let o: Vec<_> = f
        .overrides
        .iter()
        .map(|e| (e.fp, e.action, e.expires_ms))
        .collect();
    assert_eq!(
        o,
        [
            (0x00_aabb_ccdd_eeff, Action::Limit(10), 0),
            (0x11, Action::Ban, 1_767_225_660_000)
        ]
    );
    assert_eq!(f.other, vec![(9, b"a later section".to_vec())]);
}
