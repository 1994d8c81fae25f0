//! Helpers for the table's unit tests: an aligned heap region, a table
//! in it, and a few request patterns.

use super::*;

/// A 64-byte aligned heap buffer (Miri-friendly: no mmap).
#[repr(C, align(64))]
pub(super) struct Line([u8; 64]);

pub(super) struct Region(Vec<Line>);

impl Region {
    pub(super) fn new(bytes: usize) -> Region {
        Region((0..bytes.div_ceil(64)).map(|_| Line([0; 64])).collect())
    }
    pub(super) fn ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr().cast()
    }
    pub(super) fn len(&self) -> usize {
        self.0.len() * 64
    }
}

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

pub(super) fn fill(t: &Table<'_>, n: usize, now: u64, policy: FailPolicy) -> Vec<Decision> {
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
