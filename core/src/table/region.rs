//! A table over a test [`Region`] (tests and benchmarks), beside the
//! table so that the region's module needs nothing of it.

use crate::rule::mode::Mode;
use crate::rule::window::Window;
use crate::testing::Region;

use super::Table;

impl Region {
    /// A new table over all of it deciding by `window` (a calendar's
    /// periods, or a length), the key hash keyed by `seed`.
    pub fn table_of(&mut self, window: Window, seed: [u64; 2]) -> Table<'_> {
        let len = self.len();
        // SAFETY: an exclusive, 64-byte aligned buffer of `len` bytes, which
        // the returned table borrows.
        unsafe { Table::init_mode(self.ptr(), len, window, seed, Mode::Estimate) }.unwrap()
    }

    /// A new `mode` table over all of it: windows of `window_ms`, the key
    /// hash keyed by `seed`.
    pub fn table(&mut self, window_ms: u64, seed: [u64; 2], mode: Mode) -> Table<'_> {
        let len = self.len();
        // SAFETY: an exclusive, 64-byte aligned buffer of `len` bytes, which
        // the returned table borrows.
        unsafe {
            Table::init_mode(
                self.ptr(),
                len,
                Window::from_ms(window_ms).unwrap(),
                seed,
                mode,
            )
        }
        .unwrap()
    }
}
