//! The per-request record: the decision, and the parts that `delay=`
//! (hold.rs) and `count_status=`/`charge=` (count_status.rs) keep until
//! the request ends.
//!
//! One [`Record`] per main request, in its pool (see pool.rs): an internal
//! redirect, `error_page` or subrequest finds it again, which is how a
//! request is counted once and how an `error_page 429` still gets its
//! headers. A record with a part to settle is dropped when the pool is
//! destroyed, however the request ends ([`Record::settle_at_end`]): each
//! part's file then settles it (a held request abandoned, admissions
//! settled at the final status, in-flight places given back: see
//! in_flight.rs).

use core::cell::{Cell, OnceCell};
use core::mem::MaybeUninit;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};
use rate_limit_window_core::shm::turns::Turn;
use rate_limit_window_core::shm::{self, Places, Turns};

use nginx_sys::{ngx_http_complex_value_t, ngx_pool_cleanup_t, ngx_uint_t};
use ngx::http::Request;
use rate_limit_window_core::conf::limit_opts::StatusSet;
use rate_limit_window_core::Admission;

use crate::conf::{LocConf, HEADERS_IETF, HEADERS_ON};
use crate::ffi::pool::{self, Room};
use crate::zone::ZoneConf;

/// What happened to the request, as `$rate_limit_window_status` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestStatus {
    Passed,
    Rejected,
    /// Refused by `in_flight=`: its client's places were all taken.
    RejectedInFlight,
    /// Shed by `rate_limit_window_shed`.
    Shed,
    RejectedDryRun,
    Exempt,
    /// Settle on a timer (`delay=`), then admitted.
    Delayed,
    /// Dry run: would have been held.
    DelayedDryRun,
}

impl RequestStatus {
    /// The variable's text.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestStatus::Passed => "PASSED",
            RequestStatus::Rejected => "REJECTED",
            RequestStatus::RejectedDryRun => "REJECTED_DRY_RUN",
            RequestStatus::Exempt => "EXEMPT",
            RequestStatus::Delayed => "DELAYED",
            RequestStatus::DelayedDryRun => "DELAYED_DRY_RUN",
            RequestStatus::RejectedInFlight => "REJECTED_IN_FLIGHT",
            RequestStatus::Shed => "SHED",
        }
    }

    /// Whether the request was refused (it gets Retry-After): one range
    /// test, the three being next to each other.
    #[inline(always)]
    pub fn refused(self) -> bool {
        matches!(
            self,
            RequestStatus::Rejected | RequestStatus::RejectedInFlight | RequestStatus::Shed
        )
    }
}

/// One limit that applied to the request, for the RateLimit headers.
#[derive(Clone, Copy)]
pub struct Applied {
    pub zone: &'static ZoneConf,
    /// Limit in requests per window.
    pub limit: u32,
    /// Requests still admitted right now, after this one.
    pub remaining: u32,
    /// Seconds to the next window boundary; under
    /// `rate_limit_window_headers ietf`, of an admission, until
    /// `remaining` next grows (the draft's `t`).
    pub reset_s: u32,
    /// The admission to take back if a later limit rejects the request
    /// (None when this limit did not admit it).
    pub admission: Option<Admission>,
}

/// What was decided for a main request, as its headers and variables
/// report it. Plain data: it lives in pool memory.
#[derive(Clone, Copy)]
pub struct Report {
    pub status: RequestStatus,
    /// `rate_limit_window_headers` of the location that decided.
    pub headers: ngx_uint_t,
    /// Whole seconds for Retry-After on a rejection.
    pub retry_after_s: u32,
    /// Limits that applied (in the main request's pool).
    pub applied: &'static [Applied],
    /// Bit n set: the key of the location's limit n (n < 64) was empty when
    /// the request was decided, so that limit did not apply.
    pub empty_keys: u64,
    /// The decision puts headers on the response ([`gives_headers`]),
    /// worked out once, when it is committed.
    pub gives_headers: bool,
}

/// Whether a decision `status` of a location of `rate_limit_window_headers
/// headers` puts headers on the response: a refusal's Retry-After
/// always, the RateLimit headers where they are on; an exempt request
/// none.
#[inline(always)]
fn gives_headers(status: RequestStatus, headers: ngx_uint_t) -> bool {
    status != RequestStatus::Exempt
        && (status.refused() || headers == HEADERS_ON || headers == HEADERS_IETF)
}

impl Report {
    /// The limits that applied.
    pub fn applied(&self) -> &[Applied] {
        self.applied
    }

    /// The applied limit with the fewest requests remaining.
    pub fn tightest(&self) -> Option<&Applied> {
        self.applied().iter().min_by_key(|a| a.remaining)
    }

    /// The seconds its limit `a` tells as its reset (`RateLimit-Reset`,
    /// `t`, `$rate_limit_window_reset`): on a refusal, a limit with nothing
    /// left says the Retry-After (the same moment, never later);
    /// otherwise what was recorded.
    #[inline(always)]
    pub fn reset_of(&self, a: &Applied) -> u32 {
        if self.status.refused() && a.remaining == 0 {
            self.retry_after_s
        } else {
            a.reset_s
        }
    }
}

/// Decisions of this worker, not freed yet, that recorded an empty key
/// (see `logging::warn_on_late_keys`): while there are none, the PRECONTENT
/// check has nothing to look for. Only the worker's event loop touches it
/// (commits, and pool cleanups), hence plain loads and stores.
static LATE_KEY_DECISIONS: AtomicUsize = AtomicUsize::new(0);

/// Whether some live decision of this worker recorded an empty key.
#[inline]
pub fn late_keys_pending() -> bool {
    LATE_KEY_DECISIONS.load(Ordering::Relaxed) != 0
}

/// Adds `n` (1 or `usize::MAX`, i.e. -1) to [`LATE_KEY_DECISIONS`].
fn count_late_keys(n: usize) {
    let v = LATE_KEY_DECISIONS.load(Ordering::Relaxed);
    LATE_KEY_DECISIONS.store(v.wrapping_add(n), Ordering::Relaxed);
}

/// `delay=`'s part of the record: the hold of a main request (hold.rs).
#[derive(Clone, Copy)]
pub struct Held {
    /// The location whose `delay_max_held` place it takes.
    pub lcf: &'static LocConf,
    /// Epoch ms when the request was first held.
    pub since_ms: u64,
    /// Time waited (ms, at most u32::MAX: 49 days), set when the request
    /// is finally decided.
    pub waited_ms: u32,
    /// True while it has a place under `delay_max_held`.
    pub held: bool,
    /// The zone's `delay=` turns it holds one of (the rejecting limit's
    /// zone, shared by its workers): [`Held::turn`].
    pub turns: Option<&'static Turns<'static>>,
    /// That turn, in parts (beside `worker`: the record stays small).
    pub turn_at: u32,
    pub turn_word: u64,
    /// That process's pid, its owner of the turn and of the zones' gauge
    /// of held requests (a u32 beside `held`, so that the record stays
    /// small enough to be written without a call to memcpy).
    pub worker: u32,
}

/// `count_status=`/`charge=`'s part of the record (count_status.rs): one
/// admission to settle when the request ends, given back unless the final
/// status is counted, and made to count its charge.
#[derive(Clone, Copy)]
pub struct Settle {
    pub zone: &'static ZoneConf,
    pub admission: Admission,
    /// `count_status=` (None: every status counts).
    pub statuses: Option<StatusSet>,
    /// `charge=` (null: none), evaluated in the log phase (charge_read.rs).
    pub charge: *mut ngx_http_complex_value_t,
    /// The charge read in the log phase; None: none, or invalid (the
    /// admission keeps its cost).
    pub charged: Option<u32>,
    /// The log phase has read the charge (`$rate_limit_window_charge`).
    pub read: bool,
}

impl Settle {
    /// Whether the final `status` keeps the request counted.
    pub fn counts(&self, status: usize) -> bool {
        self.statuses.is_none_or(|s| s.contains(status))
    }
}

/// An in-flight place a request holds (`in_flight=`, a shed group), given
/// back when its main request's pool is destroyed (in_flight.rs).
#[derive(Clone, Copy)]
pub struct Taken {
    /// The places it is counted in.
    pub places: &'static Places<'static>,
    /// Its place there.
    pub place: shm::Place,
    /// A shed group's place (kept by a request that goes on even when the
    /// engine gives the in-flight places back: a dry run's).
    pub shed: bool,
    /// An `in_flight=` line's: its zone and the in-flight limit in force
    /// (for `RateLimit-Policy`'s `qu="concurrent-requests"` member).
    pub line: Option<(&'static ZoneConf, u32)>,
}

/// A node of a record's list of places, in the main request's pool, with
/// room for the pool's cleanup entry that drops the record (used by the
/// first place kept: one allocation for both).
pub struct PlaceNode {
    t: Taken,
    next: *mut PlaceNode,
    cln: MaybeUninit<ngx_pool_cleanup_t>,
}

/// The places taken out of a record ([`Record::take_places`]).
pub struct PlaceList(*mut PlaceNode);

impl Iterator for PlaceList {
    type Item = Taken;

    fn next(&mut self) -> Option<Taken> {
        // SAFETY: a non-null node was written by `keep_place` in the main
        // request's pool, which outlives the record and every list of it.
        let node = unsafe { self.0.as_ref() }?;
        self.0 = node.next;
        Some(node.t)
    }
}

/// What a part's file does with it when the main request's pool is
/// destroyed (given the main request, intact then).
pub type OnFree<T> = fn(&Request, &T);

/// A part of the record that a later file of the request path fills, and
/// what that file does with it when the main request's pool is destroyed.
pub struct Part<T> {
    pub data: T,
    on_free: Cell<Option<OnFree<T>>>,
}

impl<T> Part<T> {
    /// Sets what to do with the part when the pool is destroyed.
    pub fn on_free(&self, f: OnFree<T>) {
        self.on_free.set(Some(f));
    }

    fn free(&self, main: &Request) {
        if let Some(f) = self.on_free.get() {
            f(main, &self.data);
        }
    }
}

/// The record of a main request.
pub struct Record {
    /// The main request, allocated from the pool that holds the record.
    main: NonNull<Request>,
    /// Set once, by [`commit`].
    report: OnceCell<Report>,
    /// Where [`reserve`] records the applied limits.
    room: Cell<&'static Room<Applied>>,
    /// `delay=`: the hold, if the request was ever held.
    pub hold: Part<Cell<Option<Held>>>,
    /// `count_status=`/`charge=`: the admissions to settle.
    pub reservations: Part<OnceCell<Box<[Cell<Settle>]>>>,
    /// `in_flight=` and `rate_limit_window_shed`: the places to give back
    /// when the pool is destroyed, a list of nodes in the main request's
    /// pool (null: none; see in_flight.rs). One plain word: the record is
    /// written into the pool by every new request, in place, as long as it
    /// holds nothing to drop and stays at 160 bytes (else it is built
    /// aside and copied by a call to memcpy).
    places: Cell<*mut PlaceNode>,
    /// Whether the pool drops the record ([`Record::settle_at_end`]).
    dropped_by_pool: Cell<bool>,
}

// SAFETY: Record is the only type stored in the pool's record slot.
unsafe impl pool::Slotted for Record {}

impl Drop for Record {
    /// The main request's pool is being destroyed (only once
    /// [`Record::settle_at_end`] has been called, or a place kept): the
    /// parts are settled
    /// (the newest first, as nginx runs cleanups), and a decision that
    /// recorded an empty key is no longer pending.
    fn drop(&mut self) {
        // The common record has no part to settle: two tests, no frame.
        if self.reservations.on_free.get().is_some() | self.hold.on_free.get().is_some() {
            self.settle_parts();
        }
        // Every place the request still keeps is given back, once.
        for t in self.take_places() {
            t.places.give(t.place);
        }
        if self.report.get().is_some_and(|d| d.empty_keys != 0) {
            count_late_keys(usize::MAX);
        }
    }
}

impl Record {
    /// Has the record dropped when the main request's pool is destroyed:
    /// a file calls it before it fills a part, and a decision with an
    /// empty key when it is committed. False: out of memory (the part must
    /// not be filled).
    pub fn settle_at_end(&'static self) -> bool {
        if !self.dropped_by_pool.get() {
            // SAFETY: see settle_parts; the main request is alive while a
            // part is being filled or the decision committed.
            let main = unsafe { self.main.as_ref() };
            self.dropped_by_pool.set(pool::drop_with_pool(main, self));
        }
        self.dropped_by_pool.get()
    }

    /// Settles the parts a later file filled, the newest first.
    #[cold]
    #[inline(never)]
    fn settle_parts(&self) {
        // SAFETY: the main request is allocated from the pool whose cleanups
        // run now, and stays intact until they are done.
        let main = unsafe { self.main.as_ref() };
        self.reservations.free(main);
        self.hold.free(main);
    }
}

/// The record of `r`'s main request, if one was reserved.
pub fn record(r: &Request) -> Option<&'static Record> {
    pool::find::<Record>(r)
}

/// Where the record of a main request is kept, and the record if one was
/// reserved: looked up once by the handler, for [`reserve`].
#[derive(Clone, Copy)]
pub struct Place {
    slot: pool::Slot,
    pub rec: Option<&'static Record>,
}

/// The place of `r`'s main request's record (None: a configuration
/// without the module's variables, which postconfiguration refuses).
pub fn place(r: &Request) -> Option<Place> {
    let slot = pool::slot(r)?;
    Some(Place {
        slot,
        rec: slot.get(),
    })
}

/// Finds the decision made for `r`'s main request, if any.
pub fn find(r: &Request) -> Option<&'static Report> {
    record(r)?.report.get()
}

/// A decision being made: its record, with room for one [`Applied`] per
/// limit of the location. [`find`] cannot see it until [`commit`].
pub struct Pending {
    rec: &'static Record,
    room: &'static Room<Applied>,
    len: usize,
    empty_keys: u64,
    /// Some limit recorded so far left its estimate near its limit
    /// (`near_limit::is_near`): only then does an admission look for the
    /// ones to count.
    near: bool,
}

impl Pending {
    /// Records a limit that applied.
    pub fn push(&mut self, a: Applied) {
        if let Some(slot) = self.room.get(self.len) {
            slot.set(MaybeUninit::new(a));
            self.len += 1;
        }
    }

    /// Notes that a limit recorded left its estimate near its limit.
    #[inline(always)]
    pub fn note_near(&mut self) {
        self.near = true;
    }

    /// Whether some limit recorded left its estimate near its limit.
    #[inline(always)]
    pub fn any_near(&self) -> bool {
        self.near
    }

    /// Records that the key of the location's limit `n` was empty.
    pub fn key_empty(&mut self, n: usize) {
        if n < 64 {
            self.empty_keys |= 1 << n;
        }
    }

    /// The record being filled.
    pub fn record(&self) -> &'static Record {
        self.rec
    }

    /// The admissions recorded so far were given back (a later limit
    /// refused the request): each limit's `remaining` is what it is after
    /// the undo (its cost back, up to the limit), with no admission left.
    pub fn undone(&mut self) {
        for slot in self.room.iter().take(self.len) {
            // SAFETY: the first `len` entries were written by `push`.
            let mut a = unsafe { slot.get().assume_init() };
            if let Some(adm) = a.admission.take() {
                a.remaining = a.remaining.saturating_add(adm.cost()).min(a.limit);
                slot.set(MaybeUninit::new(a));
            }
        }
    }

    /// Sets the reset (seconds) of the `i`th limit recorded.
    pub fn set_reset(&mut self, i: usize, reset_s: u32) {
        if let Some(slot) = self.room.get(i).filter(|_| i < self.len) {
            // SAFETY: the first `len` entries were written by `push`.
            let mut a = unsafe { slot.get().assume_init() };
            a.reset_s = reset_s;
            slot.set(MaybeUninit::new(a));
        }
    }

    /// The limits recorded so far.
    pub fn applied(&self) -> &'static [Applied] {
        // SAFETY: the first `len` entries were written by `push` and are not
        // written again (a room is reused only before a commit, by a new
        // Pending); a Cell<MaybeUninit<Applied>> has Applied's layout.
        unsafe { core::slice::from_raw_parts(self.room.as_ptr().cast::<Applied>(), self.len) }
    }
}

/// Bytes kept after every record for the digits of the response's numbers
/// (Retry-After and the RateLimit-* values, filter.rs): allocated with the
/// record, so that the header filter takes no pool memory of its own.
pub const DIGITS: usize = 40;

/// Reserves the record of a decision for `r`'s main request, with room for
/// `limits` applied limits; `at` is what [`place`] returned for it (the
/// record of a held request is reused). Call it before any shared-memory
/// operation: it allocates. None if the pool is out of memory.
pub fn reserve(r: &Request, at: Place, limits: usize) -> Option<Pending> {
    const _: () = assert!(size_of::<Record>().is_multiple_of(align_of::<Applied>()));
    let (rec, room) = match at.rec {
        // SAFETY: `init` writes every field of the record.
        None => unsafe {
            at.slot
                .add::<_, _, DIGITS>(r, |p| Record::init(p, r), limits)
        }?,
        Some(rec) => (rec, rec.room_for(r, limits)?),
    };
    Some(Pending {
        rec,
        room,
        len: 0,
        empty_keys: 0,
        near: false,
    })
}

impl Held {
    /// The `delay=` turn it holds, if any, and its zone's turns.
    pub fn turn(&self) -> Option<(&'static Turns<'static>, Turn)> {
        Some((self.turns?, Turn::from_parts(self.turn_at, self.turn_word)))
    }
}

const _: () = assert!(
    size_of::<Record>() <= 160,
    "the record must stay at 160 bytes"
);

impl Record {
    /// Adds a place to the record's list (a node in the main request's
    /// pool), given back when the record is dropped: the first place to
    /// give back has the record dropped with the pool (its cleanup entry in
    /// the node), unless it is already. False: out of memory.
    pub fn keep_place(&'static self, t: Taken) -> bool {
        // SAFETY: the main request is alive while a decision is made.
        let main = unsafe { self.main.as_ref() };
        let Some(room) = pool::room::<PlaceNode>(main, 1) else {
            return false;
        };
        let next = self.places.get();
        let node = room[0].as_ptr().cast::<PlaceNode>();
        // SAFETY: `node` is the room's, in the main request's pool (alive
        // until its cleanups have run), written here field by field and
        // its entry once, only by this call.
        unsafe {
            (&raw mut (*node).t).write(t);
            (&raw mut (*node).next).write(next);
            if t.place != shm::Place::NONE && !self.dropped_by_pool.get() {
                pool::drop_with_pool_at(main, self, &mut (*node).cln);
                self.dropped_by_pool.set(true);
            }
        }
        self.places.set(node);
        true
    }

    /// The record's places, left in it.
    pub fn kept_places(&self) -> PlaceList {
        PlaceList(self.places.get())
    }

    /// Takes the record's places out (the list is empty again).
    pub fn take_places(&self) -> PlaceList {
        PlaceList(self.places.replace(core::ptr::null_mut()))
    }

    /// The [`DIGITS`] bytes kept after the record, zeroed, for the header
    /// filter of its main request (their only user, once per response
    /// header): pool memory, alive as long as the request; the headers it
    /// adds point into them.
    pub fn digits(&'static self) -> *mut [u8; DIGITS] {
        // SAFETY: every record is made by `reserve`, with DIGITS bytes after
        // it (`pool::gap`), which nothing else refers to.
        unsafe {
            let p = pool::gap::<Record, DIGITS>(self).cast::<[u8; DIGITS]>();
            p.cast::<u8>().write_bytes(0, DIGITS);
            p
        }
    }

    /// The decision, once committed, and whether the record still keeps
    /// places.
    #[inline(always)]
    pub fn decided_keeping(&'static self) -> Option<(&'static Report, bool)> {
        Some((self.report.get()?, !self.places.get().is_null()))
    }

    /// Whether the decision was committed.
    pub fn decided(&self) -> bool {
        self.report.get().is_some()
    }

    /// Writes a new record for `r`'s main request at `p`, field by field
    /// (a handful of stores: only what a record holds when it is made).
    ///
    /// # Safety
    /// `p` is valid for writes of a `Record` and aligned.
    unsafe fn init(p: *mut Record, r: &Request) {
        // SAFETY: each field of `*p`, per the contract.
        unsafe {
            (&raw mut (*p).main).write(NonNull::from(pool::main_of(r)));
            (&raw mut (*p).report).write(OnceCell::new());
            (&raw mut (*p).room).write(Cell::new(&[]));
            (&raw mut (*p).hold.data).write(Cell::new(None));
            (&raw mut (*p).hold.on_free).write(Cell::new(None));
            (&raw mut (*p).reservations.data).write(OnceCell::new());
            (&raw mut (*p).reservations.on_free).write(Cell::new(None));
            (&raw mut (*p).places).write(Cell::new(core::ptr::null_mut()));
            (&raw mut (*p).dropped_by_pool).write(Cell::new(false));
        }
    }

    /// Room for `limits` applied limits: the record's, unless too small or
    /// already committed.
    fn room_for(&self, r: &Request, limits: usize) -> Option<&'static Room<Applied>> {
        let room = self.room.get();
        if self.report.get().is_none() && room.len() >= limits {
            return Some(room);
        }
        let room = pool::room(r, limits)?;
        self.room.set(room);
        Some(room)
    }
}

/// Completes the record reserved for a main request: from now on [`find`]
/// returns it, for that request and every internal redirect or subrequest
/// of it. False when the request had a record already (never counted
/// twice).
pub fn commit(p: &Pending, status: RequestStatus, headers: ngx_uint_t, retry_after_s: u32) -> bool {
    let d = Report {
        status,
        headers,
        retry_after_s,
        applied: p.applied(),
        empty_keys: p.empty_keys,
        gives_headers: gives_headers(status, headers),
    };
    // Counted while the record is alive: its drop takes the count back.
    let set = p.rec.report.set(d).is_ok();
    if set && p.empty_keys != 0 && p.rec.settle_at_end() {
        count_late_keys(1);
    }
    set
}
