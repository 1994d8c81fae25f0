//! SipHash-1-3 of a key under a zone's seed, with the keyed initial state
//! worked out once per table ([`SipKey`]) and the message read in one pass:
//! the same values as `siphasher`'s `SipHasher13` given the seed's two
//! words and the key's bytes in one `write` (checked in the tests below),
//! so that keys hash as they always have (state files keep slots by hash).

/// SipHash's four state words after keying with a seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SipKey([u64; 4]);

impl SipKey {
    /// The state keyed by `seed` (k0, k1).
    pub(crate) const fn new(seed: [u64; 2]) -> SipKey {
        SipKey([
            seed[0] ^ 0x736f_6d65_7073_6575,
            seed[1] ^ 0x646f_7261_6e64_6f6d,
            seed[0] ^ 0x6c79_6765_6e65_7261,
            seed[1] ^ 0x7465_6462_7974_6573,
        ])
    }

    /// SipHash-1-3 of `msg`: one compression round per 8-byte word, the
    /// last word holding the tail and the length mod 256, three
    /// finalisation rounds.
    #[inline(always)]
    pub(crate) fn hash(&self, msg: &[u8]) -> u64 {
        let mut v = self.0;
        let mut words = msg.chunks_exact(8);
        for w in &mut words {
            let mut le = [0u8; 8];
            le.copy_from_slice(w);
            compress(&mut v, u64::from_le_bytes(le));
        }
        let last = ((msg.len() as u64) << 56) | tail(words.remainder());
        compress(&mut v, last);
        v[2] ^= 0xff;
        round(&mut v);
        round(&mut v);
        round(&mut v);
        v[0] ^ v[1] ^ v[2] ^ v[3]
    }
}

/// One message word: SipHash's c = 1 compression round.
#[inline(always)]
fn compress(v: &mut [u64; 4], m: u64) {
    v[3] ^= m;
    round(v);
    v[0] ^= m;
}

/// One SipRound.
#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

/// The last 0 to 7 bytes of a message as a little-endian word, read with
/// at most two loads (overlapping reads put the same bytes at the same
/// places).
#[inline(always)]
fn tail(t: &[u8]) -> u64 {
    let n = t.len();
    debug_assert!(n < 8);
    if n >= 4 {
        let lo = u64::from(u32::from_le_bytes([t[0], t[1], t[2], t[3]]));
        let hi = u64::from(u32::from_le_bytes([t[n - 4], t[n - 3], t[n - 2], t[n - 1]]));
        lo | hi << (8 * (n - 4))
    } else if n > 0 {
        let (a, b, c) = (t[0], t[n / 2], t[n - 1]);
        u64::from(a) | u64::from(b) << (8 * (n / 2)) | u64::from(c) << (8 * (n - 1))
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use core::hash::Hasher;

    use siphasher::sip::SipHasher13;

    use super::SipKey;

    fn reference(seed: [u64; 2], key: &[u8]) -> u64 {
        let mut h = SipHasher13::new_with_keys(seed[0], seed[1]);
        h.write(key);
        h.finish()
    }

    #[test]
    fn same_values_as_siphasher_for_every_length() {
        let bytes: Vec<u8> = (0..600u32).map(|i| (i * 131 + 7) as u8).collect();
        let seeds = [[0, 0], [1, 2], [u64::MAX, 0x0123_4567_89ab_cdef]];
        for seed in seeds {
            let k = SipKey::new(seed);
            for len in 0..bytes.len() {
                for start in [0, 1, 5] {
                    let key = &bytes[start..start + len.min(bytes.len() - start)];
                    assert_eq!(k.hash(key), reference(seed, key), "len {len}");
                }
            }
        }
    }

    #[test]
    fn known_vector() {
        // SipHash-1-3, key 00..0f, empty message (the reference
        // implementation's first test vector for c=1, d=3).
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        assert_eq!(SipKey::new([k0, k1]).hash(b""), reference([k0, k1], b""));
        assert_ne!(
            SipKey::new([k0, k1]).hash(b"a"),
            SipKey::new([k0, k1]).hash(b"")
        );
    }
}
