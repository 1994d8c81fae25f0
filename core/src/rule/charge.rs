//! `charge=$variable`: what an admitted request finally counts, known only
//! once its response is done (LLM tokens, rows scanned).
//!
//! A request is admitted by its `cost=` (default 1), as always, and counted
//! `cost` at once, so that concurrent requests see it. When the response is
//! done the request is *settled*: it counts `charge` instead, i.e. the
//! difference `charge - cost` is added to (or given back from) the count of
//! the window the request was counted in. This module is the arithmetic of
//! that settlement; [`Table::settle`](crate::Table::settle) applies it to a
//! slot in one CAS loop.
//!
//! # Which window
//!
//! The settlement goes to the window the admission was counted in, never to
//! the window the response ends in: the arrival decision and the charge
//! describe one request and must meet in one count.
//!
//! * the slot is still in that window: its current count moves;
//! * the slot has moved on by exactly one window: its previous count moves
//!   (the sliding estimate still weighs it);
//! * two windows or more later, or the slot now holds another client: the
//!   window no longer weighs in any estimate, nothing moves
//!   ([`Settled::Expired`]). A call longer than one window can thus be
//!   charged nothing beyond its `cost=`.
//!
//! Counts stay in `0..=COUNT_MAX` (2^20 - 1): a give-back never underflows
//! (another settlement, or a reset, may have taken the count down first) and
//! an addition saturates.

use crate::rule::window::MAX_LIMIT;

/// What a settlement did to the client's counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The count already was right (`charge == cost`): nothing written.
    Unchanged,
    /// The count of the admission's window moved by this many requests
    /// (negative: given back), as the slot's current window.
    Current(i64),
    /// As [`Settled::Current`], in the slot's previous window (the window
    /// has moved on by one since the admission).
    Previous(i64),
    /// The admission's window is two or more windows old, or the slot now
    /// holds another client: nothing moved.
    Expired,
}

/// What an admitted request finally counts: nothing when its final status
/// is not counted (`count_status=`), else its charge, or its `cost` when it
/// has no valid charge (none configured, empty or invalid).
pub fn final_count(cost: u32, status_counted: bool, charge: Option<u32>) -> u32 {
    if !status_counted {
        return 0;
    }
    charge.unwrap_or(cost)
}

/// The change a settlement makes to the admission's window: `count - cost`
/// requests (negative: given back).
pub fn delta(cost: u32, count: u32) -> i64 {
    i64::from(count) - i64::from(cost)
}

/// `count` moved by `delta`, kept within `0..=max`.
pub fn moved(count: u32, delta: i64, max: u32) -> u32 {
    (i64::from(count) + delta).clamp(0, i64::from(max)) as u32
}

/// Why a charge value is not usable: its first bytes, for the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChargeError(pub Vec<u8>);

/// Parses a charge: a decimal integer from 0 (the call cost nothing: all
/// of its `cost` is given back) up; values above [`MAX_LIMIT`] count as
/// `MAX_LIMIT`, which is above every limit. No sign, no spaces, at most 20
/// digits; an empty value is an error (the caller keeps `cost=`).
pub fn parse_charge(s: &[u8]) -> Result<u32, ChargeError> {
    if s.is_empty() || s.len() > 20 || !s.iter().all(u8::is_ascii_digit) {
        return Err(ChargeError(s.iter().copied().take(64).collect()));
    }
    let n = s.iter().fold(0u64, |n, &d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    });
    Ok(n.min(u64::from(MAX_LIMIT)) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_count_composes_count_status_and_charge() {
        // A status not counted gives back everything, charge or not.
        assert_eq!(final_count(3, false, Some(500)), 0);
        assert_eq!(final_count(3, false, None), 0);
        // A counted status is charged, or keeps its cost without a charge.
        assert_eq!(final_count(3, true, Some(500)), 500);
        assert_eq!(final_count(3, true, Some(0)), 0);
        assert_eq!(final_count(3, true, None), 3);
    }

    #[test]
    fn delta_is_charge_minus_cost() {
        assert_eq!(delta(1, 1), 0);
        assert_eq!(delta(1, 250), 249);
        assert_eq!(delta(10, 4), -6);
        assert_eq!(delta(10, 0), -10);
        assert_eq!(delta(0, u32::MAX), i64::from(u32::MAX));
    }

    #[test]
    fn moved_never_leaves_the_range() {
        assert_eq!(moved(5, 3, 100), 8);
        assert_eq!(moved(5, -3, 100), 2);
        assert_eq!(moved(5, -9, 100), 0);
        assert_eq!(moved(90, 30, 100), 100);
        assert_eq!(moved(0, i64::MIN / 2, 100), 0);
        assert_eq!(moved(0, i64::MAX / 2, 100), 100);
    }

    #[test]
    fn charges() {
        assert_eq!(parse_charge(b"0"), Ok(0));
        assert_eq!(parse_charge(b"1234"), Ok(1234));
        assert_eq!(parse_charge(b"007"), Ok(7));
        assert_eq!(parse_charge(b"1000000"), Ok(MAX_LIMIT));
        assert_eq!(parse_charge(b"1000001"), Ok(MAX_LIMIT));
        assert_eq!(parse_charge(b"99999999999999999999"), Ok(MAX_LIMIT));
        for bad in [
            &b""[..],
            b"-1",
            b"+5",
            b" 5",
            b"5 ",
            b"1.5",
            b"1e3",
            b"0x10",
            b"abc",
            b"999999999999999999999",
        ] {
            assert!(parse_charge(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_charge(b"12 tokens"),
            Err(ChargeError(b"12 tokens".to_vec()))
        );
    }
}
