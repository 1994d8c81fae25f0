//! What the tests and benchmarks share, behind the `testing` feature (and
//! in this crate's own unit tests): the exact reference models
//! ([`reference`]) and [`Region`], the one aligned heap region that tables
//! and zones are built over in place of nginx's shared memory.

pub mod calendar;
pub mod reference;

/// One cache line of a [`Region`] (tables need 64-byte alignment).
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A zeroed, 64-byte aligned heap region standing in for a zone's memory
/// (Miri-friendly: no mmap). Its bytes never move while it lives, so a
/// table over it may be kept beside it.
pub struct Region(Vec<Line>);

impl Region {
    /// A zeroed region of `bytes` bytes, rounded up to whole lines.
    pub fn new(bytes: usize) -> Region {
        Region((0..bytes.div_ceil(64)).map(|_| Line([0; 64])).collect())
    }

    /// Its first byte, 64-byte aligned.
    pub fn ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr().cast()
    }

    /// Its length in bytes (whole lines).
    pub fn len(&self) -> usize {
        self.0.len() * 64
    }

    /// Whether it has no byte at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
