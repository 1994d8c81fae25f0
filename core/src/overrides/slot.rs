//! One slot of the override table: its 128-bit word (all a lookup reads)
//! and its 64-bit version word (what the fleet's sync compares).
//!
//! ```text
//! word, low 64 bits:  change counter (4 bits, 60..64) | kind (3 bits, 57..60)
//!                   | id (57 bits: the 56-bit fingerprint, bit 56 a range)
//! word, high 64 bits: value (20 bits, 44..64) | expiry, UTC epoch ms (44 bits)
//! version word:       change counter (4 bits, 60..64) | version (60 bits)
//! ```
//!
//! The value is a `limit`'s requests per window, or an `in_flight`'s
//! places (0 for the other kinds). One word holds one action: a `limit`
//! and an `in_flight` together would need 36 bits of value beside the
//! 44-bit expiry, and a lookup reads one 16-byte word in one atomic load.
//!
//! Every change of a word adds one to its change counter (mod 16), so a
//! version word belongs to the word whose counter it carries: a version
//! word with another counter is the old one (its writer is between its two
//! steps, or died there), and the slot's version is unknown.

use super::{Action, Entry, MAX_EXPIRY_MS};
use crate::rule::window::MAX_LIMIT;
use crate::shm::places::MAX_IN_FLIGHT;

/// Slots per candidate group.
pub(super) const GROUP: usize = 16;
/// An entry's id: a fingerprint (56 bits) and the range bit.
pub(super) const ID_MASK: u64 = (1 << 57) - 1;
/// Largest version (60 bits).
pub const MAX_VERSION: u64 = (1 << 60) - 1;

const KIND_SHIFT: u32 = 57;
const CTR_SHIFT: u32 = 60;
const LIMIT_SHIFT: u32 = 44;

const K_EMPTY: u64 = 0;
const K_GONE: u64 = 1;
const K_LIMIT: u64 = 2;
const K_BLOCK: u64 = 3;
const K_EXEMPT: u64 = 4;
const K_BAN: u64 = 5;
const K_IN_FLIGHT: u64 = 6;

/// A slot's content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    /// Free.
    Empty,
    /// Free, remembering that the entry `id` was removed (at the version
    /// of its version word): a removal the sync has to write, and an
    /// older state of the client a pull must not bring back. Any insert
    /// may take it.
    Gone(u64),
    /// An entry (possibly expired, until reaped).
    Live(Entry),
}

/// The id in a word's low bits (0: an empty slot).
#[inline(always)]
pub(super) fn id_of(w: u128) -> u64 {
    (w as u64) & ID_MASK
}

/// A word's change counter.
#[inline(always)]
pub(super) fn ctr_of(w: u128) -> u64 {
    (w as u64) >> CTR_SHIFT
}

pub(super) fn decode(w: u128) -> Slot {
    let lo = w as u64;
    let hi = (w >> 64) as u64;
    let action = match (lo >> KIND_SHIFT) & 0x7 {
        K_EMPTY => return Slot::Empty,
        K_GONE => return Slot::Gone(lo & ID_MASK),
        K_LIMIT => Action::Limit((hi >> LIMIT_SHIFT) as u32),
        K_BLOCK => Action::Block,
        K_EXEMPT => Action::Exempt,
        K_BAN => Action::Ban,
        K_IN_FLIGHT => Action::InFlight(((hi >> LIMIT_SHIFT) as u32).min(MAX_IN_FLIGHT)),
        // Never written: read as free.
        _ => return Slot::Empty,
    };
    Slot::Live(Entry {
        fp: lo & ID_MASK,
        action,
        expires_ms: hi & MAX_EXPIRY_MS,
    })
}

/// What a word becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Next {
    Empty,
    Gone(u64),
    Live(Entry),
}

/// The word that follows `old` holding `next` (its counter one more).
pub(super) fn encode(old: u128, next: Next) -> u128 {
    let ctr = ((ctr_of(old) + 1) & 0xf) << CTR_SHIFT;
    let (lo, hi) = match next {
        Next::Empty => (0, 0),
        Next::Gone(id) => ((id & ID_MASK) | (K_GONE << KIND_SHIFT), 0),
        Next::Live(e) => {
            let (kind, limit) = match e.action {
                Action::Limit(n) => (K_LIMIT, u64::from(n.min(MAX_LIMIT))),
                Action::Block => (K_BLOCK, 0),
                Action::Exempt => (K_EXEMPT, 0),
                Action::Ban => (K_BAN, 0),
                Action::InFlight(n) => (K_IN_FLIGHT, u64::from(n.min(MAX_IN_FLIGHT))),
            };
            let lo = (e.fp & ID_MASK) | (kind << KIND_SHIFT);
            (lo, e.expires_ms.min(MAX_EXPIRY_MS) | (limit << LIMIT_SHIFT))
        }
    };
    u128::from(lo | ctr) | (u128::from(hi) << 64)
}

/// The version word of version `v` for the word `w`.
pub(super) fn version_word(w: u128, v: u64) -> u64 {
    (ctr_of(w) << CTR_SHIFT) | (v & MAX_VERSION)
}

/// The version of word `w` that version word `vw` states, if it is `w`'s.
pub(super) fn version_in(w: u128, vw: u64) -> Option<u64> {
    (vw >> CTR_SHIFT == ctr_of(w)).then_some(vw & MAX_VERSION)
}

/// Whether a word holds an entry that counts as live (expired or not).
pub(super) fn is_live(w: u128) -> bool {
    matches!(decode(w), Slot::Live(_))
}
