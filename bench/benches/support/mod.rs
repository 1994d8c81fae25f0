//! What both benches share: a table over a heap buffer standing in for the
//! nginx zone (a benchmark needs no second process, so no shared mapping).

use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::{Table, Window, SLOT_BYTES};

#[repr(C, align(64))]
struct Line([u8; 64]);

/// A table and the 64-byte aligned heap buffer it lives in.
pub struct HeapTable {
    _buf: Vec<Line>,
    pub table: Table<'static>,
}

/// A zeroed heap region of the header plus `slots` slots (rounded down to
/// whole groups by the table), formatted for `window_ms`, `seed` and `mode`.
pub fn heap_table(slots: usize, window_ms: u64, seed: [u64; 2], mode: Mode) -> HeapTable {
    let bytes = Table::HEADER_BYTES + slots * SLOT_BYTES;
    let mut buf: Vec<Line> = (0..bytes.div_ceil(64)).map(|_| Line([0; 64])).collect();
    let len = buf.len() * 64;
    // SAFETY: the heap buffer never moves and lives as long as `HeapTable`,
    // and nothing else accesses it (Table has no Drop and is never used
    // after the buffer is freed).
    let table = unsafe {
        Table::init_mode(
            buf.as_mut_ptr().cast(),
            len,
            Window::from_ms(window_ms).unwrap(),
            seed,
            mode,
        )
    }
    .unwrap();
    HeapTable { _buf: buf, table }
}
