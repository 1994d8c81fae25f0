//! Helpers for the table's unit tests: an aligned heap region, a table
//! in it, and a few request patterns.

use super::*;

pub(super) use crate::testing::Region;

pub(super) const MIN: u64 = 60_000;
pub(super) const T0: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z, a window start

pub(super) fn win(ms: u64) -> Window {
    Window::from_ms(ms).unwrap()
}

pub(super) fn table(r: &mut Region, w: u64) -> Table<'_> {
    let len = r.len();
    // SAFETY: the buffer is valid, exclusively borrowed for the table's
    // lifetime and 64-byte aligned.
    unsafe { Table::init(r.ptr(), len, win(w), [1, 2]).unwrap() }
}

pub(super) fn small_bytes(slots: usize) -> usize {
    Table::HEADER_BYTES + slots * SLOT_BYTES
}

/// Admits `limit` requests of `h` at `now`, then checks the next is
/// rejected.
pub(super) fn use_up(t: &Table<'_>, h: KeyHash, now: u64, limit: u32) {
    for _ in 0..limit {
        let d = t.acquire(h, now, limit, FailPolicy::Open, 0);
        assert_eq!(d.outcome, Outcome::Admitted);
    }
    let d = t.acquire(h, now, limit, FailPolicy::Open, 0);
    assert_eq!(d.outcome, Outcome::Rejected);
}

pub(super) fn fill(t: &Table<'_>, n: usize, now: u64, policy: FailPolicy) -> Vec<Answer> {
    (0..n)
        .map(|i| {
            t.acquire(
                t.hash_key(format!("key{i}").as_bytes()),
                now,
                100,
                policy,
                i,
            )
        })
        .collect()
}
