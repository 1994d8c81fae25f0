//! What both benches share: a table over a heap buffer standing in for the
//! nginx zone (a benchmark needs no second process, so no shared mapping).

use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::testing::Region;
use rate_limit_window_core::{Table, Window, SLOT_BYTES};

/// A table and the 64-byte aligned heap buffer it lives in.
pub struct HeapTable {
    _buf: Region,
    pub table: Table<'static>,
}

/// A zeroed heap region of the header plus `slots` slots (rounded down to
/// whole groups by the table), formatted for `window_ms`, `seed` and `mode`.
pub fn heap_table(slots: usize, window_ms: u64, seed: [u64; 2], mode: Mode) -> HeapTable {
    let bytes = Table::HEADER_BYTES + slots * SLOT_BYTES;
    let mut buf = Region::new(bytes);
    let len = buf.len();
    // SAFETY: the heap buffer never moves and lives as long as `HeapTable`,
    // and nothing else accesses it (Table has no Drop and is never used
    // after the buffer is freed).
    let table = unsafe {
        Table::init_mode(
            buf.ptr(),
            len,
            Window::from_ms(window_ms).unwrap(),
            seed,
            mode,
        )
    }
    .unwrap();
    HeapTable { _buf: buf, table }
}
