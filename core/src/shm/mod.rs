//! A zone's shared memory, as one layout with one version.
//!
//! A zone (`rate_limit_window_zone`, one nginx shared-memory segment) holds:
//!
//! * the **zone header** ([`ZoneHeader`]), its own allocation: the stamp
//!   ([`MAGIC`], [`LAYOUT_VERSION`], its own size and the zone's size),
//!   where the other parts are, and the zone's shared counters, sync lease
//!   and queues;
//! * one region cut into ([`Parts`]): the **slot table** ([`Table`]), the
//!   **cluster-sync ledger** of a Redis-backed zone
//!   ([`Ledger`](crate::cluster::Ledger), half of
//!   what the table would have had), `delay=`'s **queue turns**
//!   ([`Turns`], a 64th of the zone), `in_flight=`'s **places**
//!   ([`Places`], a 64th of the zone) and the **override table**
//!   ([`Overrides`]) at the end.
//!
//! [`format`] writes all of it for a new zone; [`adopt`] is the one place
//! where a reload (or a process that inherits the zone) checks a zone
//! before using it: the stamp first (magic, layout version, sizes), then
//! each part (the table's window, mode and capacity, the override table).
//! [`LAYOUT_VERSION`] covers every part: bump it on any incompatible
//! change of the header, the table or the override region.
//!
//! Beside the zones, [`tally`]: the module's one region of counters that count
//! each request once (and per route), whatever the number of its limits.
//!
//! No nginx type here: the glue allocates the memory and passes pointers.

mod header;
pub mod places;
pub mod shed;
mod stats;
pub mod tally;
pub mod turns;

use core::fmt;
use core::ptr;

pub use header::{ZoneHeader, OVR_PENDING, RESETS};
pub use places::{Owner, Place, Places, Take};
pub use stats::{ChargeStats, DelayStats, Episodes, SyncStats};
use turns::TooSmall;
pub use turns::Turns;

use crate::overrides::Overrides;
use crate::rule::mode::Mode;
use crate::rule::window::Window;
use crate::table::{Table, TableError};
pub use crate::table::{LAYOUT_VERSION, MAGIC};
use header::Stamp;

/// Bytes the override table of `capacity` entries takes at the end of the
/// zone's region (a multiple of 64).
pub fn override_region_bytes(capacity: usize) -> usize {
    Overrides::bytes_for(capacity).next_multiple_of(64)
}

/// Where a zone's parts are in its region: (start, length in bytes) each;
/// the ledger is (null, 0) in a zone without Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parts {
    /// The slot table.
    pub table: (*mut u8, usize),
    /// The cluster-sync ledger.
    pub ledger: (*mut u8, usize),
    /// `delay=`'s queue turns.
    pub turns: (*mut u8, usize),
    /// `in_flight=`'s places.
    pub places: (*mut u8, usize),
    /// The override table.
    pub overrides: (*mut u8, usize),
}

impl Parts {
    /// Cuts `len` bytes at `region` (64-byte aligned): the override table
    /// of `overrides_cap` entries at the end, the places before it and the
    /// queue turns before them ([`Places::bytes_for`] and
    /// [`Turns::bytes_for`] the region), and, `with_ledger`, half of the
    /// rest for the sync ledger (each part starts at a multiple of 64).
    pub fn split(
        region: *mut u8,
        len: usize,
        overrides_cap: usize,
        with_ledger: bool,
    ) -> Result<Parts, TableError> {
        let ovr_len = override_region_bytes(overrides_cap);
        let turns_len = Turns::bytes_for(len);
        let places_len = Places::bytes_for(len);
        let len = len
            .checked_sub(ovr_len + turns_len + places_len)
            .ok_or(TableError::TooSmall)?;
        let (table_len, ledger_len) = if with_ledger {
            let t = len / 2 / 64 * 64;
            (t, len - t)
        } else {
            (len, 0)
        };
        let ledger = if ledger_len > 0 {
            region.wrapping_add(table_len)
        } else {
            ptr::null_mut()
        };
        Ok(Parts {
            table: (region, table_len),
            ledger: (ledger, ledger_len),
            turns: (region.wrapping_add(len), turns_len),
            places: (region.wrapping_add(len + turns_len), places_len),
            overrides: (region.wrapping_add(len + turns_len + places_len), ovr_len),
        })
    }

    /// Bytes of the five parts together.
    fn bytes(&self) -> usize {
        self.table.1 + self.ledger.1 + self.turns.1 + self.places.1 + self.overrides.1
    }
}

/// What a new zone is formatted with.
#[derive(Clone, Copy, Debug)]
pub struct Format {
    /// The zone's size as configured (bytes), kept in the stamp.
    pub zone_bytes: usize,
    /// The window length.
    pub window: Window,
    /// The rule (`mode=`).
    pub mode: Mode,
    /// The key hash's seed.
    pub seed: [u64; 2],
    /// This gateway's id in the cluster store (never 0).
    pub gateway_id: u64,
    /// Entries of the override table (`overrides=`).
    pub overrides_cap: usize,
    /// Whether the zone syncs through Redis (it then has a ledger).
    pub with_ledger: bool,
}

/// What a reload expects of the zone it adopts (its configuration now).
#[derive(Clone, Copy, Debug)]
pub struct Expect {
    /// The zone's size as configured (bytes).
    pub zone_bytes: usize,
    /// The window length.
    pub window: Window,
    /// The rule (`mode=`).
    pub mode: Mode,
}

/// A formatted or adopted zone: its header and the parts it describes.
pub struct Zone<'a> {
    /// The zone header.
    pub header: &'a ZoneHeader,
    /// The slot table.
    pub table: Table<'a>,
    /// The override table.
    pub overrides: Overrides<'a>,
    /// `delay=`'s queue turns.
    pub turns: Turns<'a>,
    /// `in_flight=`'s places.
    pub places: Places<'a>,
}

/// Why a zone cannot be adopted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdoptError {
    /// No header, or one not written by this module ([`MAGIC`]).
    BadHeader,
    /// A header of another layout version.
    BadVersion {
        /// The version in the header.
        found: u32,
    },
    /// A header of another size, or for a zone of another size, or whose
    /// parts do not fit in the zone (bytes).
    BadSize {
        /// The header's size in the header.
        header_bytes: u32,
        /// The zone's size in the header.
        zone_bytes: u64,
    },
    /// The slot table does not fit the configuration.
    Table(TableError),
    /// No override table where the header says.
    NoOverrides,
    /// No queue turns where the header says.
    NoTurns,
    /// No in-flight places where the header says.
    NoPlaces,
}

impl fmt::Display for AdoptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdoptError::BadHeader => f.write_str("bad zone header"),
            AdoptError::BadVersion { found } => write!(
                f,
                "zone of layout version {found}, this module uses {LAYOUT_VERSION}"
            ),
            AdoptError::BadSize {
                header_bytes,
                zone_bytes,
            } => write!(
                f,
                "zone header of {header_bytes} bytes for {zone_bytes} bytes, this module \
                 expects {} bytes for the zone's size",
                size_of::<ZoneHeader>()
            ),
            AdoptError::Table(e) => e.fmt(f),
            AdoptError::NoOverrides => f.write_str("no override table"),
            AdoptError::NoTurns => f.write_str("no delay= queue turns"),
            AdoptError::NoPlaces => f.write_str("no in_flight= places"),
        }
    }
}

impl std::error::Error for AdoptError {}

/// Formats a new zone: the override table, a zeroed ledger, the slot table
/// in `parts`, then the header at `header`.
///
/// # Safety
///
/// `header` must be valid for writing one [`ZoneHeader`] (aligned), and
/// each part of `parts` (from [`Parts::split`] of a 64-byte aligned region)
/// valid for reads and writes of its length, for `'a`; nobody else may
/// access them during `format`, and afterwards only through the returned
/// [`Zone`] and through [`adopt`] (of any process).
pub unsafe fn format<'a>(
    header: *mut ZoneHeader,
    parts: &Parts,
    f: &Format,
) -> Result<Zone<'a>, TableError> {
    let (ovr, ovr_len) = parts.overrides;
    // SAFETY: the caller's guarantees: the override part is ours alone.
    let overrides = unsafe { Overrides::init(ovr, ovr_len, f.overrides_cap) }
        .map_err(|_| TableError::TooSmall)?;
    if parts.ledger.1 > 0 {
        // SAFETY: as above, for the ledger part: zero bytes are an empty
        // ledger.
        unsafe { ptr::write_bytes(parts.ledger.0, 0, parts.ledger.1) };
    }
    let (q, q_len) = parts.turns;
    // SAFETY: as above, for the turns part.
    let turns = unsafe { Turns::init(q, q_len) }.map_err(|TooSmall| TableError::TooSmall)?;
    let (p, p_len) = parts.places;
    // SAFETY: as above, for the places part.
    let places = unsafe { Places::init(p, p_len) }.map_err(|_| TableError::TooSmall)?;
    let (t, t_len) = parts.table;
    // SAFETY: as above, for the table part.
    let table = unsafe { Table::init_mode(t, t_len, f.window, f.seed, f.mode) }?;
    let stamp = Stamp::current(f.zone_bytes);
    // SAFETY: `header` is valid for one aligned write and ours alone
    // (the caller's guarantees); the reference lives as long as the zone.
    let header = unsafe {
        header.write(ZoneHeader::new(stamp, parts, f.gateway_id));
        &*header
    };
    Ok(Zone {
        header,
        table,
        overrides,
        turns,
        places,
    })
}

/// Adopts a zone formatted by [`format`] (before a reload, or by another
/// process): checks the stamp (magic, layout version, the header's and
/// the zone's sizes) and that the parts fit the zone, then attaches the
/// table (window, mode, capacity) and the override table.
///
/// # Safety
///
/// `header` must be null or point at readable memory of at least
/// [`ZoneHeader`]'s size (a zone's first allocation); when it holds this
/// module's stamp, it must be a header [`format`] wrote, whose parts stay
/// valid for `'a` and are only accessed through [`Zone`]s meanwhile.
pub unsafe fn adopt<'a>(header: *const ZoneHeader, want: &Expect) -> Result<Zone<'a>, AdoptError> {
    if header.is_null() {
        return Err(AdoptError::BadHeader);
    }
    // SAFETY: readable (the caller's guarantee); only the stamp, the first
    // bytes of every header this module wrote, is read before it is checked.
    let stamp = unsafe { header.cast::<Stamp>().read() };
    check(stamp, want.zone_bytes)?;
    // SAFETY: the stamp is this module's, of this layout: a header `format`
    // wrote, valid for `'a` (the caller's guarantee).
    let h = unsafe { &*header };
    let parts = h.parts();
    if parts.bytes() > want.zone_bytes {
        return Err(size_error(stamp));
    }
    let (t, t_len) = parts.table;
    // SAFETY: the table part `format` wrote, valid for `'a`; `attach_mode`
    // checks its own header.
    let table = unsafe { Table::attach_mode(t, t_len, want.window, want.mode) }
        .map_err(AdoptError::Table)?;
    let (o, o_len) = parts.overrides;
    // SAFETY: as for the table: the override part `format` wrote, valid
    // for `'a`; `attach` checks what it holds.
    let overrides = unsafe { Overrides::attach(o, o_len) }.map_err(|_| AdoptError::NoOverrides)?;
    let (q, q_len) = parts.turns;
    // SAFETY: as for the table: the turns part `format` wrote, valid for
    // `'a`.
    let turns = unsafe { Turns::attach(q, q_len) }.map_err(|TooSmall| AdoptError::NoTurns)?;
    let (p, p_len) = parts.places;
    // SAFETY: as for the table: the places part `format` wrote, valid for
    // `'a`; `attach` checks what it holds.
    let places = unsafe { Places::attach(p, p_len) }.map_err(|_| AdoptError::NoPlaces)?;
    Ok(Zone {
        header: h,
        table,
        overrides,
        turns,
        places,
    })
}

/// The stamp's checks, in order: magic, version, sizes.
fn check(stamp: Stamp, zone_bytes: usize) -> Result<(), AdoptError> {
    if stamp.magic != MAGIC {
        return Err(AdoptError::BadHeader);
    }
    if stamp.version != LAYOUT_VERSION {
        return Err(AdoptError::BadVersion {
            found: stamp.version,
        });
    }
    if stamp != Stamp::current(zone_bytes) {
        return Err(size_error(stamp));
    }
    Ok(())
}

fn size_error(stamp: Stamp) -> AdoptError {
    AdoptError::BadSize {
        header_bytes: stamp.header_bytes,
        zone_bytes: stamp.zone_bytes,
    }
}

#[cfg(test)]
mod tests;
