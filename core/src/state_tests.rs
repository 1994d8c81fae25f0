//! Tests of the state file format: round trips, and every truncation,
//! bit flip or foreign identity refused without a panic.

use proptest::prelude::*;

use super::*;
use crate::table::LAYOUT_VERSION;

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
        let f = sample(n);
        let bytes = encode(&f);
        // Header, checksum, 3 section heads, IDENTITY, SEED, TABLE.
        assert_eq!(bytes.len(), 24 + 4 + 8 * 3 + 45 + 16 + 40 + 20 * n);
        assert_eq!(decode(&bytes).unwrap(), f);
    }
}

#[test]
fn unknown_sections_are_skipped_and_kept() {
    let mut f = sample(2);
    f.other = vec![(section::OVERRIDES, b"future".to_vec()), (900, vec![])];
    let back = decode(&encode(&f)).unwrap();
    assert_eq!(back.other, f.other);
    assert_eq!(back.table, f.table);
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

#[test]
fn state_parameter_is_taken_out() {
    let args: [&[u8]; 3] = [b"zone=a:1m", b"state=/var/lib/a.state", b"window=1d"];
    let (p, rest) = take_state(&args).unwrap();
    assert_eq!(p, Some(&b"/var/lib/a.state"[..]));
    assert_eq!(rest, [&b"zone=a:1m"[..], b"window=1d"]);
    assert_eq!(take_state(&args[..1]).unwrap().0, None);
    let e = take_state(&[b"state="]).unwrap_err();
    assert!(e.contains("invalid \"state=\""), "{e}");
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
    ) {
        let f = StateFile {
            identity: Identity { zone, key, window_ms, strict },
            seed,
            saved_ms,
            table: SavedTable { layout: LAYOUT_VERSION, strict, capacity: 1 << 20, newest, slots },
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
    let f = decode(include_bytes!("../testdata/state_v1.bin")).unwrap();
    assert_eq!(f.identity.zone, b"z");
    assert_eq!(f.identity.key, b"$http_x_key");
    assert_eq!((f.identity.window_ms, f.identity.strict), (60_000, false));
    assert_eq!(f.seed, [7, 9]);
    assert_eq!(f.saved_ms, 1_767_225_600_000);
    assert_eq!((f.table.capacity, f.table.slots.len()), (64, 5));
    assert_eq!(
        f.other,
        vec![(section::OVERRIDES, b"overrides later".to_vec())]
    );
}
