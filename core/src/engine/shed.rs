//! `rate_limit_window_shed zone=NAME max=N priority=$var [reserve=P%]`:
//! load shedding that keeps room for critical traffic. A group (the zone)
//! admits at most `max` requests in flight, every location naming it
//! together, across workers; a `low`, `default` or `high` request is
//! shed once `max` minus its priority's reserve are in flight
//! (`reserve_low=`, `reserve=`, `reserve_high=`: `P%` of `max`, rounded
//! up), a `critical` one only at `max`.
//!
//! A request is shed before any rate limit sees it (never counted by
//! them); one that is admitted holds its place until it ends, and gives it
//! back at once when a rate limit of its location rejects it or holds it.

pub use crate::rule::shed::{Priority, ShedLimits};
use crate::shm::places::Take;
use crate::shm::shed::{ShedGroup, GROUP_KEY};
use crate::shm::{Owner, Place};

/// What becomes of a request of a shed group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shed {
    /// Admitted: it holds this place until it ends.
    Admit(Place),
    /// Admitted without a place: no room to count it (this process has no
    /// owner, or the ledger is full). Counted, never refused for it.
    Untracked,
    /// Shed: the group has `in_flight` requests in flight, at or above the
    /// request's limit.
    Shed {
        /// The group's requests in flight.
        in_flight: u32,
        /// Whole seconds for Retry-After.
        retry_after_s: u32,
    },
    /// A dry run: it would have been shed (the group has `in_flight`
    /// requests in flight); it goes on without a place, counted admitted.
    WouldShed {
        /// The group's requests in flight.
        in_flight: u32,
    },
}

/// Decides a request of priority `p` in `group` under `limits`, as
/// `owner` (this process's), and counts it; in a dry run (`dry_run`) it
/// is never shed.
pub fn decide(
    group: &ShedGroup<'_>,
    owner: Option<Owner>,
    limits: ShedLimits,
    p: Priority,
    dry_run: bool,
) -> Shed {
    let took = match owner {
        Some(o) => group.places.take(o, GROUP_KEY, limits.limit(p)),
        None => Take::NoRoom,
    };
    let out = match took {
        Take::Taken(place) => Shed::Admit(place),
        Take::NoRoom => {
            group.count_untracked();
            Shed::Untracked
        }
        Take::Full { held } if dry_run => Shed::WouldShed { in_flight: held },
        // A place frees when a request ends: a second is the shortest
        // wait Retry-After can say.
        Take::Full { held } => Shed::Shed {
            in_flight: held,
            retry_after_s: 1,
        },
    };
    group.count(p.index(), matches!(out, Shed::Shed { .. }));
    out
}

#[cfg(test)]
#[path = "shed_tests.rs"]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::shed::AttachError;
    use crate::testing::Region;

    fn group(max: u32) -> ShedGroup<'static> {
        let buf = Box::leak(Box::new(Region::new(ShedGroup::bytes_for(max))));
        // SAFETY: an exclusive, 64-byte aligned buffer that lives forever.
        unsafe { ShedGroup::init(buf.ptr(), buf.len(), max) }.unwrap()
    }

    #[test]
    fn the_reserve_is_rounded_up() {
        let l = ShedLimits::new;
        assert_eq!(l(4, 50).limit(Priority::Default), 2);
        assert_eq!(l(4, 50).limit(Priority::Critical), 4);
        assert_eq!(l(4, 10).limit(Priority::Default), 3, "10% of 4 keeps one");
        assert_eq!(l(4, 0).limit(Priority::Default), 4);
        assert_eq!(l(4, 100).limit(Priority::Default), 0);
        assert_eq!(l(1000, 20).reserve(), 200);
        assert_eq!(Priority::of(b"CRITICAL"), Priority::Critical);
        assert_eq!(Priority::of(b""), Priority::Default);
        assert_eq!(Priority::of(b"high"), Priority::High);
        assert_eq!(Priority::of(b"Low"), Priority::Low);
        assert_eq!(Priority::of(b"urgent"), Priority::Default);
        // Only reserve=: high and low are shed as default (as before them).
        assert_eq!(l(4, 50).limit(Priority::High), 2);
        assert_eq!(l(4, 50).limit(Priority::Low), 2);
        let levels = ShedLimits {
            reserve_low_pct: 50,
            reserve_high_pct: 10,
            ..l(8, 25)
        };
        let at = Priority::ALL.map(|p| levels.limit(p));
        assert_eq!(at, [8, 7, 6, 4], "critical, high, default, low");
    }

    #[test]
    fn default_requests_are_shed_first_critical_ones_at_max() {
        let g = group(4);
        let me = g.places.start(1, |_| true).unwrap();
        let limits = ShedLimits::new(4, 50);
        let d = |p| decide(&g, Some(me), limits, p, false);
        let a = d(Priority::Default);
        let b = d(Priority::Default);
        assert!(matches!((a, b), (Shed::Admit(_), Shed::Admit(_))));
        assert_eq!(
            d(Priority::Default),
            Shed::Shed {
                in_flight: 2,
                retry_after_s: 1
            }
        );
        assert!(matches!(d(Priority::Critical), Shed::Admit(_)));
        assert!(matches!(d(Priority::Critical), Shed::Admit(_)));
        assert!(matches!(
            d(Priority::Critical),
            Shed::Shed { in_flight: 4, .. }
        ));
        assert_eq!(g.in_flight(), 4);
        if let Shed::Admit(p) = a {
            g.places.give(p);
        }
        assert_eq!(g.in_flight(), 3);
        assert!(matches!(d(Priority::Critical), Shed::Admit(_)));
        assert_eq!(g.shed_total(Priority::Default.index()), 1);
        assert_eq!(g.shed_total(Priority::Critical.index()), 1);
        assert_eq!(g.admitted_total(Priority::Critical.index()), 3);
        assert_eq!(
            decide(&g, None, limits, Priority::Default, false),
            Shed::Untracked
        );
        assert_eq!(g.untracked_total(), 1);
    }

    #[test]
    fn a_dry_run_is_never_shed() {
        let g = group(2);
        let me = g.places.start(1, |_| true).unwrap();
        let limits = ShedLimits::new(2, 0);
        let d = |dry| decide(&g, Some(me), limits, Priority::Default, dry);
        assert!(matches!(d(true), Shed::Admit(_)));
        assert!(matches!(d(false), Shed::Admit(_)));
        // Full: a dry run goes on without a place, counted admitted.
        assert_eq!(d(true), Shed::WouldShed { in_flight: 2 });
        assert_eq!(g.in_flight(), 2);
        assert_eq!(g.shed_total(Priority::Default.index()), 0);
        assert_eq!(g.admitted_total(Priority::Default.index()), 3);
        assert!(matches!(d(false), Shed::Shed { in_flight: 2, .. }));
        assert_eq!(g.shed_total(Priority::Default.index()), 1);
    }

    #[test]
    fn a_group_is_formatted_for_its_max() {
        let mut r = Region::new(ShedGroup::bytes_for(8));
        // SAFETY: an exclusive, aligned buffer, borrowed by the groups below.
        unsafe {
            assert!(ShedGroup::init(r.ptr(), r.len(), 8).is_ok());
            assert!(ShedGroup::attach(r.ptr(), r.len(), 8).is_ok());
            // Another max= (a reload): adopted while its ledger has room.
            let g = ShedGroup::attach(r.ptr(), r.len(), 9).unwrap();
            assert_eq!(g.max(), 9);
            let room = g.places.capacity().0 as u64;
            let e = ShedGroup::attach(r.ptr(), r.len(), room as u32 + 1).err();
            assert_eq!(e, Some(AttachError::Max(room)));
            assert_eq!(
                e.unwrap().to_string(),
                format!("it counts {room} requests in flight at most, fewer than the new max=")
            );
            assert!(
                ShedGroup::attach(r.ptr(), 64, 8).is_err(),
                "beyond its bytes"
            );
            assert!(ShedGroup::init(r.ptr(), 64, 8).is_err());
            // A group of the first layout (two priorities' counters).
            r.ptr().copy_from(b"RLWSHED1".as_ptr(), 8);
            let e = ShedGroup::attach(r.ptr(), r.len(), 8).err().unwrap();
            assert_eq!(
                e.to_string(),
                "it holds a group of another layout version (1, this module uses 3)"
            );
            r.ptr().write_bytes(0, 8);
            let e = ShedGroup::attach(r.ptr(), r.len(), 8).err().unwrap();
            assert_eq!(e.to_string(), "its memory does not hold a group");
        }
        assert!(group(8).places.capacity().0 >= 16);
    }
}
