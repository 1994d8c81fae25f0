//! The byte region the tests build tables over: in nginx, the zone's shared
//! memory; here, zeroed cache lines on the heap.
use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::{Table, Window};

/// One cache line of a region (tables need 64-byte alignment).
#[repr(C, align(64))]
pub struct Line([u8; 64]);

/// A zeroed region of `bytes` bytes, rounded up to whole lines.
pub fn region(bytes: usize) -> Vec<Line> {
    (0..bytes.div_ceil(64)).map(|_| Line([0; 64])).collect()
}

/// A new `mode` table over all of `buf`: windows of `window_ms`, the key
/// hash keyed by `seed`.
pub fn table_in(buf: &mut [Line], window_ms: u64, seed: [u64; 2], mode: Mode) -> Table<'_> {
    let len = buf.len() * 64;
    // SAFETY: an exclusive, 64-byte aligned buffer of `len` bytes, which
    // the returned table borrows.
    unsafe {
        Table::init_mode(
            buf.as_mut_ptr().cast(),
            len,
            Window::from_ms(window_ms).unwrap(),
            seed,
            mode,
        )
    }
    .unwrap()
}
