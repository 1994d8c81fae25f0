//! Formatting a zone, and the adopt/refuse rule of a reload.

use core::sync::atomic::Ordering;

use super::*;
use crate::testing::Region;

/// A zone's memory: its header's allocation and its region.
struct Mem {
    header: Region,
    region: Region,
}

const ZONE: usize = 1 << 20;
const WINDOW_MS: u64 = 60_000;

impl Mem {
    fn new() -> Mem {
        Mem {
            header: Region::new(size_of::<ZoneHeader>()),
            region: Region::new(ZONE - 4096),
        }
    }

    fn header(&mut self) -> *mut ZoneHeader {
        self.header.ptr().cast()
    }

    fn parts(&mut self, with_ledger: bool) -> Parts {
        let len = self.region.len();
        Parts::split(self.region.ptr(), len, 100, with_ledger).unwrap()
    }

    /// Formats the zone (a Redis zone `with_ledger`).
    fn format(&mut self, with_ledger: bool) -> Zone<'_> {
        let parts = self.parts(with_ledger);
        let f = Format {
            zone_bytes: ZONE,
            window: win(WINDOW_MS),
            mode: Mode::Estimate,
            seed: [1, 2],
            gateway_id: 7,
            overrides_cap: 100,
            with_ledger,
        };
        // SAFETY: the buffers are aligned, sized for the header and the
        // parts, and borrowed by the zone for its lifetime.
        unsafe { format(self.header(), &parts, &f) }.unwrap()
    }

    /// Adopts the zone as a reload expecting `want` would.
    fn adopt(&mut self, want: Expect) -> Result<Zone<'_>, AdoptError> {
        // SAFETY: the header buffer is readable for a whole header; when
        // stamped, `format` wrote it over this same memory.
        unsafe { adopt(self.header(), &want) }
    }

    /// The stamp, to corrupt it as a zone of another module would be.
    fn stamp(&mut self) -> &mut Stamp {
        // SAFETY: the stamp is the header's first field; nothing else
        // borrows the memory now.
        unsafe { &mut *self.header().cast::<Stamp>() }
    }
}

fn win(ms: u64) -> Window {
    Window::from_ms(ms).unwrap()
}

fn expect() -> Expect {
    Expect {
        zone_bytes: ZONE,
        window: win(WINDOW_MS),
        mode: Mode::Estimate,
    }
}

fn refusal(mem: &mut Mem, want: Expect) -> AdoptError {
    mem.adopt(want).err().expect("the zone must be refused")
}

#[test]
fn adopt_keeps_the_counts_and_the_parts() {
    let mut mem = Mem::new();
    let z = mem.format(true);
    let h = z.table.hash_key(b"client");
    assert!(z
        .table
        .acquire(h, 1_000, 10, crate::FailPolicy::Open, 0)
        .admission
        .is_some());
    z.header.swept.fetch_add(3, Ordering::Relaxed);
    let cap = z.table.capacity();
    let a = mem.adopt(expect()).unwrap();
    assert_eq!(a.header.swept.load(Ordering::Relaxed), 3);
    assert_eq!(a.header.gateway_id, 7);
    assert_eq!(a.table.capacity(), cap);
    assert_eq!(a.table.peek(h, 1_000).current, 1);
    assert_eq!(a.overrides.capacity(), 100);
    assert!(a.header.ledger(cap).is_some());
    assert!(a.header.overrides().is_some());
}

#[test]
fn a_zone_without_redis_has_no_ledger() {
    let mut mem = Mem::new();
    let z = mem.format(false);
    let cap = z.table.capacity();
    assert!(z.header.ledger(cap).is_none());
    let parts = mem.parts(false);
    assert_eq!(parts.ledger, (ptr::null_mut(), 0));
    assert_eq!(parts.overrides.1, override_region_bytes(100));
    assert_eq!(parts.bytes(), mem.region.len());
}

#[test]
fn no_header_or_a_foreign_magic_is_refused() {
    // SAFETY: null is allowed by the contract.
    let e = unsafe { adopt(ptr::null(), &expect()) }.err();
    assert_eq!(e, Some(AdoptError::BadHeader));
    let mut mem = Mem::new();
    assert_eq!(
        refusal(&mut mem, expect()),
        AdoptError::BadHeader,
        "never formatted"
    );
    mem.format(false);
    // The zone header of the layouts before this one.
    mem.stamp().magic = u64::from_le_bytes(*b"RLWZONEA");
    assert_eq!(refusal(&mut mem, expect()), AdoptError::BadHeader);
    assert_eq!(AdoptError::BadHeader.to_string(), "bad zone header");
}

#[test]
fn another_layout_version_is_refused() {
    let mut mem = Mem::new();
    mem.format(false);
    mem.stamp().version = LAYOUT_VERSION + 1;
    let e = refusal(&mut mem, expect());
    assert_eq!(
        e,
        AdoptError::BadVersion {
            found: LAYOUT_VERSION + 1
        }
    );
    assert_eq!(
        e.to_string(),
        format!(
            "zone of layout version {}, this module uses {LAYOUT_VERSION}",
            LAYOUT_VERSION + 1
        )
    );
}

#[test]
fn another_size_is_refused() {
    let mut mem = Mem::new();
    mem.format(false);
    let want = Expect {
        zone_bytes: ZONE * 2,
        ..expect()
    };
    let e = refusal(&mut mem, want);
    assert_eq!(
        e,
        AdoptError::BadSize {
            header_bytes: size_of::<ZoneHeader>() as u32,
            zone_bytes: ZONE as u64
        }
    );
    assert!(e.to_string().contains(&format!("for {ZONE} bytes")), "{e}");
    // A header of another size (fields added without a version bump).
    mem.stamp().header_bytes -= 8;
    assert!(matches!(
        refusal(&mut mem, expect()),
        AdoptError::BadSize { .. }
    ));
}

#[test]
fn parts_larger_than_the_zone_are_refused() {
    let mut mem = Mem::new();
    mem.format(true);
    // A stamp that claims a zone smaller than its parts.
    mem.stamp().zone_bytes = 4096;
    let want = Expect {
        zone_bytes: 4096,
        ..expect()
    };
    assert!(matches!(
        refusal(&mut mem, want),
        AdoptError::BadSize { .. }
    ));
}

#[test]
fn another_window_or_mode_is_refused_by_the_table() {
    let mut mem = Mem::new();
    mem.format(false);
    let want = Expect {
        window: win(1_000),
        ..expect()
    };
    assert_eq!(
        refusal(&mut mem, want),
        AdoptError::Table(TableError::WindowMismatch {
            stored_ms: WINDOW_MS,
            wanted_ms: 1_000
        })
    );
    let want = Expect {
        mode: Mode::Strict,
        ..expect()
    };
    let e = refusal(&mut mem, want);
    assert_eq!(e, AdoptError::Table(TableError::ModeMismatch));
    assert_eq!(e.to_string(), TableError::ModeMismatch.to_string());
}

#[test]
fn a_region_too_small_for_the_overrides_is_refused_at_format() {
    let mut r = [0u8; 64];
    let e = Parts::split(r.as_mut_ptr(), 64, 100, false);
    assert_eq!(e, Err(TableError::TooSmall));
}

#[test]
fn outage_is_logged_once() {
    let mut mem = Mem::new();
    let z = mem.format(true);
    assert_eq!(z.header.outage_to_log(), None);
    z.header.down_since_ms.store(5, Ordering::Relaxed);
    assert_eq!(z.header.outage_to_log(), Some(5));
    assert_eq!(z.header.outage_to_log(), None);
}
