//! A shed group's shared memory (`rate_limit_window_shed zone=NAME`): a
//! small zone of its own, which every location naming the group shares. A
//! header (magic, the group's `max=` and bytes, the counters of the metrics
//! per priority), then [`Places`] with two groups and a ledger of the rest
//! (at least twice `max` words), where the group's requests in flight are
//! one client's places. A reload with another `max=` adopts the group
//! when its ledger has room for it ([`ShedGroup::attach`]), else a new
//! zone counts the old one's places ([`Places::carry_from`]).
//!
//! The decision (which priority may take a place at which count) is the
//! engine's ([`crate::engine::shed`]); here only the memory.

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use super::places::{BadRegion, Places};

/// Version 2: counters for four priorities (version 1 had two); 3: its
/// bytes in the header, places owned by pid.
const MAGIC: u64 = u64::from_le_bytes(*b"RLWSHED3");
const HEADER_BYTES: usize = 128;
/// The key under which a group's requests are counted in its places.
pub const GROUP_KEY: u64 = 0x5348_4544_0000_0001;
/// Priorities counted apart ([`crate::engine::shed::Priority`]).
pub const PRIORITIES: usize = 4;

/// The group's header.
#[repr(C, align(64))]
struct Header {
    magic: u64,
    /// `max=`, as last formatted or adopted.
    max: AtomicU64,
    /// Bytes of the group, header included, as formatted.
    bytes: u64,
    /// Requests shed, per priority.
    shed: [AtomicU64; PRIORITIES],
    /// Requests admitted, per priority.
    admitted: [AtomicU64; PRIORITIES],
    /// Requests admitted without a place (no owner or no ledger word).
    untracked: AtomicU64,
}

const _: () = assert!(core::mem::size_of::<Header>() == HEADER_BYTES);

/// Why [`ShedGroup::attach`] cannot adopt a zone's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachError {
    /// Null, misaligned or too small, or its places are not formatted.
    Region,
    /// Another header: the 8 bytes of its magic.
    Layout([u8; 8]),
    /// Its ledger counts fewer requests in flight than the new `max=`
    /// (that many).
    Max(u64),
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttachError::Layout(m) if m.starts_with(b"RLWSHED") => write!(
                f,
                "it holds a group of another layout version ({}, this module uses {})",
                m[7] as char,
                MAGIC.to_le_bytes()[7] as char
            ),
            AttachError::Region | AttachError::Layout(_) => {
                f.write_str("its memory does not hold a group")
            }
            AttachError::Max(room) => write!(
                f,
                "it counts {room} requests in flight at most, fewer than the new max="
            ),
        }
    }
}

/// A shed group over its zone's memory.
#[derive(Clone, Copy)]
pub struct ShedGroup<'a> {
    header: &'a Header,
    /// Its requests in flight, under [`GROUP_KEY`].
    pub places: Places<'a>,
}

impl<'a> ShedGroup<'a> {
    /// Bytes of a group of `max` requests in flight (its ledger has twice
    /// that many words, so that a free one is always near).
    pub fn bytes_for(max: u32) -> usize {
        HEADER_BYTES + Places::bytes_with(2 * max as usize + 64)
    }

    /// Formats `len` bytes at `region` for a group of `max`.
    ///
    /// # Safety
    ///
    /// `region` must be 64-byte aligned, valid for reads and writes of
    /// `len` bytes for `'a`, ours alone during the call and afterwards only
    /// accessed through [`ShedGroup`] (of any process).
    pub unsafe fn init(region: *mut u8, len: usize, max: u32) -> Result<ShedGroup<'a>, BadRegion> {
        if region.is_null() || !(region as usize).is_multiple_of(64) || len < Self::bytes_for(max) {
            return Err(BadRegion);
        }
        let h = Header {
            magic: MAGIC,
            max: AtomicU64::new(u64::from(max)),
            bytes: len as u64,
            shed: Default::default(),
            admitted: Default::default(),
            untracked: AtomicU64::new(0),
        };
        // SAFETY: the caller's; the places follow the header.
        unsafe {
            region.cast::<Header>().write(h);
            Places::init_with(region.add(HEADER_BYTES), len - HEADER_BYTES, 2)?;
            ShedGroup::attach(region, len, max).map_err(|_| BadRegion)
        }
    }

    /// The group [`ShedGroup::init`] formatted at `region` (a reload, or
    /// another process), within `len` bytes, now for `max` (a reload may
    /// change it): its ledger must count that many requests in flight.
    ///
    /// # Safety
    ///
    /// As [`ShedGroup::init`], except that others may use it meanwhile.
    pub unsafe fn attach(
        region: *mut u8,
        len: usize,
        max: u32,
    ) -> Result<ShedGroup<'a>, AttachError> {
        if region.is_null() || !(region as usize).is_multiple_of(64) || len < HEADER_BYTES {
            return Err(AttachError::Region);
        }
        // SAFETY: aligned and in bounds; its plain fields never change.
        let header = unsafe { &*region.cast::<Header>() };
        if header.magic != MAGIC {
            return Err(AttachError::Layout(header.magic.to_le_bytes()));
        }
        let bytes = usize::try_from(header.bytes).unwrap_or(usize::MAX);
        if bytes > len || bytes < HEADER_BYTES {
            return Err(AttachError::Region);
        }
        // SAFETY: the caller's, within the group's bytes; `attach` checks
        // what it holds.
        let places = unsafe { Places::attach(region.add(HEADER_BYTES), bytes - HEADER_BYTES) }
            .map_err(|_| AttachError::Region)?;
        let room = places.capacity().0 as u64;
        if room < u64::from(max) {
            return Err(AttachError::Max(room));
        }
        header.max.store(u64::from(max), Ordering::Relaxed);
        Ok(ShedGroup { header, places })
    }

    /// Counts a request shed (`shed`) or admitted, of priority `p` (an
    /// index below [`PRIORITIES`]).
    pub fn count(&self, p: usize, shed: bool) {
        let c = if shed {
            &self.header.shed
        } else {
            &self.header.admitted
        };
        c[p % PRIORITIES].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request admitted without a place.
    pub fn count_untracked(&self) {
        self.header.untracked.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests shed, of priority `p`.
    pub fn shed_total(&self, p: usize) -> u64 {
        self.header.shed[p % PRIORITIES].load(Ordering::Relaxed)
    }

    /// Requests admitted, of priority `p`.
    pub fn admitted_total(&self, p: usize) -> u64 {
        self.header.admitted[p % PRIORITIES].load(Ordering::Relaxed)
    }

    /// Requests admitted without a place.
    pub fn untracked_total(&self) -> u64 {
        self.header.untracked.load(Ordering::Relaxed)
    }

    /// `max=`, as last formatted or adopted.
    pub fn max(&self) -> u64 {
        self.header.max.load(Ordering::Relaxed)
    }

    /// The group's requests in flight now.
    pub fn in_flight(&self) -> u32 {
        self.places.held(GROUP_KEY)
    }
}
