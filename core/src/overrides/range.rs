//! Overrides of address ranges (`cidr=ADDR/BITS`) in a zone keyed by
//! `$binary_remote_addr`.
//!
//! A range is an entry of the same table, under an id of its own: bit 56
//! set, the prefix's code (IPv4 /0../32: 0..=32; IPv6 /0../128: 33..=161)
//! in bits 48..56, and in bits 0..48 the masked address itself when it
//! fits (every IPv4 prefix, IPv6 up to /48), else 48 bits of the key hash
//! of the masked address and its length. Ids never collide with a
//! client's fingerprint (bit 56 is 0 in those), and the fleet shares them
//! like any entry.
//!
//! The table counts its live ranges per prefix ([`PrefixCounts`]) and
//! keeps a bitmap of the prefixes in use, so that a request's lookup asks
//! only for those: after its own entry, one lookup per prefix length in
//! use in its family, longest first; the first found is the most specific
//! and wins. A zone with no range reads one word of the bitmap (and only
//! when it holds an override at all).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{Entry, Overrides};
use crate::KeyHash;

/// Bit 56 of an id: a range.
pub const RANGE_BIT: u64 = 1 << 56;
/// Prefix codes: IPv4 /0 to /32, then IPv6 /0 to /128.
pub(super) const CODES: usize = 33 + 129;
const CODE_SHIFT: u32 = 48;
const LOW_MASK: u64 = (1 << CODE_SHIFT) - 1;

/// An address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// IPv4 (an IPv4-mapped IPv6 address included).
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// Bits of an address.
    pub fn bits(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }
}

/// A client's address as a `$binary_remote_addr` key holds it (an
/// IPv4-mapped IPv6 address is its IPv4 address), as a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addr {
    /// Its family.
    pub family: Family,
    /// The address, right-aligned (IPv4: the low 32 bits).
    pub bits: u128,
}

impl Addr {
    /// The address of a `$binary_remote_addr` key: 4 or 16 bytes (None
    /// for any other length).
    #[inline]
    pub fn of_key(key: &[u8]) -> Option<Addr> {
        if let Ok(a) = <[u8; 4]>::try_from(key) {
            return Some(Addr::v4(u32::from_be_bytes(a)));
        }
        let a = <[u8; 16]>::try_from(key).ok()?;
        let bits = u128::from_be_bytes(a);
        if bits >> 32 == 0xffff {
            return Some(Addr::v4(bits as u32));
        }
        Some(Addr {
            family: Family::V6,
            bits,
        })
    }

    fn v4(a: u32) -> Addr {
        Addr {
            family: Family::V4,
            bits: u128::from(a),
        }
    }

    /// The address with only its first `len` bits.
    pub fn masked(self, len: u8) -> Addr {
        let width = u32::from(self.family.bits());
        let len = u32::from(len).min(width);
        let all = u128::MAX >> (128 - width);
        let keep = match len {
            0 => 0,
            l if l >= width => all,
            l => all & !(all >> l),
        };
        Addr {
            bits: self.bits & keep,
            ..self
        }
    }

    /// As an `IpAddr`.
    pub fn ip(self) -> IpAddr {
        match self.family {
            Family::V4 => IpAddr::V4(Ipv4Addr::from(self.bits as u32)),
            Family::V6 => IpAddr::V6(Ipv6Addr::from(self.bits)),
        }
    }

    /// The key bytes of this address in a `$binary_remote_addr` zone.
    pub fn key(self) -> Vec<u8> {
        match self.family {
            Family::V4 => (self.bits as u32).to_be_bytes().to_vec(),
            Family::V6 => self.bits.to_be_bytes().to_vec(),
        }
    }
}

/// A range: the masked address and its prefix length (bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// The address, its bits after `len` cleared.
    pub addr: Addr,
    /// The prefix length (bits).
    pub len: u8,
}

impl Range {
    /// The range of the first `len` bits of `addr`.
    pub fn new(addr: Addr, len: u8) -> Range {
        let len = len.min(addr.family.bits());
        Range {
            addr: addr.masked(len),
            len,
        }
    }

    fn code(self) -> u64 {
        match self.addr.family {
            Family::V4 => u64::from(self.len),
            Family::V6 => 33 + u64::from(self.len),
        }
    }

    /// Whether the id holds the address itself (else a hash of it).
    fn direct(family: Family, len: u8) -> bool {
        family == Family::V4 || len <= 48
    }

    /// The range's id; `hash` is the zone's key hash (used for IPv6
    /// prefixes over /48 only).
    #[inline]
    pub fn id(self, hash: impl FnOnce(&[u8]) -> KeyHash) -> u64 {
        let low = if Range::direct(self.addr.family, self.len) {
            match self.addr.family {
                Family::V4 => self.addr.bits as u64,
                Family::V6 => (self.addr.bits >> 80) as u64,
            }
        } else {
            let mut key = self.addr.key();
            key.push(self.len);
            hash(&key).fingerprint() & LOW_MASK
        };
        RANGE_BIT | (self.code() << CODE_SHIFT) | low
    }

    /// `ADDR/BITS`.
    pub fn text(self) -> String {
        format!("{}/{}", self.addr.ip(), self.len)
    }
}

/// What an id says of its range: the family and prefix length, and the
/// range itself when the id holds its address (None: not a range).
pub fn range_of_id(id: u64) -> Option<(Family, u8, Option<Range>)> {
    if id & RANGE_BIT == 0 {
        return None;
    }
    let code = ((id >> CODE_SHIFT) & 0xff) as u8;
    let (family, len) = match code {
        0..=32 => (Family::V4, code),
        33..=161 => (Family::V6, code - 33),
        _ => return None,
    };
    let low = u128::from(id & LOW_MASK);
    let range = Range::direct(family, len).then(|| {
        let bits = match family {
            Family::V4 => low,
            Family::V6 => low << 80,
        };
        Range {
            addr: Addr { family, bits },
            len,
        }
    });
    Some((family, len, range))
}

/// The code of a range id (None: not a range, or a bad code).
fn code_of(id: u64) -> Option<usize> {
    let (family, len, _) = range_of_id(id)?;
    Some(match family {
        Family::V4 => usize::from(len),
        Family::V6 => 33 + usize::from(len),
    })
}

/// Live ranges per prefix code, and the bitmap of the codes in use (bit c
/// of the 192-bit map: IPv4 /n at bit n of word 0, IPv6 /n at bit n of
/// words 1 to 3). A count is changed right after the slot change it
/// counts (the CAS that made or ended a live range), so each transition is
/// counted once; a bit is set when its count leaves 0 and cleared when it
/// reaches 0 (and set again if a concurrent one left 0 meanwhile). A worker
/// killed between the two steps leaves a count one off: at worst a prefix
/// looked up for nothing (a request's one more lookup), never a range
/// missed while its count is above 0.
#[repr(C)]
pub(super) struct PrefixCounts {
    pub(super) map: [AtomicU64; 4],
    pub(super) count: [AtomicU32; CODES],
}

/// Bytes of [`PrefixCounts`], rounded to 64.
pub(super) const PREFIX_BYTES: usize = core::mem::size_of::<PrefixCounts>().next_multiple_of(64);

fn bit_of(code: usize) -> (usize, u64) {
    let (word, bit) = if code < 33 {
        (0, code)
    } else {
        (1 + (code - 33) / 64, (code - 33) % 64)
    };
    (word, 1u64 << bit)
}

impl PrefixCounts {
    /// One more live entry of `id`, if a range.
    pub(super) fn add(&self, id: u64) {
        let Some(code) = code_of(id) else { return };
        if self.count[code].fetch_add(1, Ordering::AcqRel) == 0 {
            let (w, b) = bit_of(code);
            self.map[w].fetch_or(b, Ordering::AcqRel);
        }
    }

    /// One live entry of `id` fewer, if a range.
    pub(super) fn sub(&self, id: u64) {
        let Some(code) = code_of(id) else { return };
        let prev = self.count[code]
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .unwrap_or(0);
        if prev == 1 {
            let (w, b) = bit_of(code);
            self.map[w].fetch_and(!b, Ordering::AcqRel);
            if self.count[code].load(Ordering::Acquire) > 0 {
                self.map[w].fetch_or(b, Ordering::AcqRel);
            }
        }
    }

    /// Whether a range of `family` is in use.
    #[inline(always)]
    pub(super) fn any(&self, family: Family) -> bool {
        match family {
            Family::V4 => self.map[0].load(Ordering::Relaxed) != 0,
            Family::V6 => (1..4).any(|w| self.map[w].load(Ordering::Relaxed) != 0),
        }
    }

    /// The prefix lengths of `family` in use, longest first.
    fn lengths(&self, family: Family) -> impl Iterator<Item = u8> + '_ {
        let words: &[AtomicU64] = match family {
            Family::V4 => &self.map[..1],
            Family::V6 => &self.map[1..],
        };
        words.iter().enumerate().rev().flat_map(|(i, w)| {
            let mut m = w.load(Ordering::Acquire);
            core::iter::from_fn(move || {
                if m == 0 {
                    return None;
                }
                let b = 63 - m.leading_zeros();
                m &= !(1u64 << b);
                Some((i * 64) as u8 + b as u8)
            })
        })
    }
}

impl Overrides<'_> {
    /// Whether the table holds a live range of `family` (one relaxed load
    /// for IPv4).
    #[inline(always)]
    pub fn has_ranges(&self, family: Family) -> bool {
        self.prefixes.any(family)
    }

    /// The most specific live range override that holds `addr`, and the
    /// range, at `now_ms`: one lookup per prefix length in use in its
    /// family, longest first. `hash` is the zone's key hash.
    pub fn range_get(
        &self,
        addr: Addr,
        hash: impl Fn(&[u8]) -> KeyHash,
        now_ms: u64,
    ) -> Option<(Entry, Range)> {
        if !self.has_ranges(addr.family) {
            return None;
        }
        for len in self.prefixes.lengths(addr.family) {
            let r = Range::new(addr, len);
            if let Some(e) = self.get(r.id(&hash), now_ms) {
                return Some((e, r));
            }
        }
        None
    }

    /// The prefix lengths of `family` in use, longest first (metrics,
    /// tests).
    pub fn prefix_lengths(&self, family: Family) -> Vec<u8> {
        self.prefixes.lengths(family).collect()
    }
}
