//! The table's writes: one versioned step for a change made here, a state
//! pulled from the fleet, a removal and a reap (see the module doc of
//! [`super`] for the rules they keep).

use core::sync::atomic::Ordering;

use super::remote::state_text;
use super::slot::{decode, encode, id_of, is_live, version_in, version_word, Next, Slot, GROUP};
use super::{Action, Entry, Full, Overrides, FULL_REAP_MS, ID_MASK};

/// Whose change a write is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// Made here (an operator, a ban, a state file): applies over any
    /// state not newer.
    Local,
    /// Read from the fleet: applies only over an older state, never over
    /// one whose version is unknown (a change here in flight).
    Remote,
    /// The fleet's snapshot after Redis lost data (see
    /// [`Overrides::adopt`]): applies over any sequence, never over a
    /// local change or an unknown version.
    Adopt,
}

/// What a remote state did here ([`Overrides::apply_remote`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// It is the client's state here now.
    Yes,
    /// The state here wins (newer, or an operator's over a ban).
    Stale,
    /// An operator's state that the table has no room for (full of
    /// operators' entries: bans make room); counted
    /// ([`Overrides::remote_misfits`]).
    Full,
}

/// Whether `state` is set by an operator (a live entry other than a ban).
fn by_operator(state: Option<&Entry>) -> bool {
    state.is_some_and(|e| e.action != Action::Ban)
}

/// The kinds' rule, before versions: a ban never replaces an operator's
/// live state (Some(false)); an operator's state from the fleet always
/// replaces a ban here (Some(true)); else the versions decide (None).
fn kinds(state: Option<&Entry>, here: Option<&Entry>, src: Source) -> Option<bool> {
    let is_ban = |e: Option<&Entry>| e.is_some_and(|e| e.action == Action::Ban);
    if is_ban(state) && by_operator(here) {
        return Some(false);
    }
    let fleet = matches!(src, Source::Remote | Source::Adopt);
    (fleet && by_operator(state) && is_ban(here)).then_some(true)
}

/// When a full table reaps its expired entries before it refuses.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Reap {
    /// Every time (an operator's change, a state file).
    Always,
    /// At most once every [`FULL_REAP_MS`] (a ban: the request path).
    Throttled,
}

/// What a write made here did.
pub(super) enum Wrote {
    /// It is the client's state; the live entry it replaced.
    Done(Option<Entry>),
    /// A newer change of the client, or an operator's state over a ban,
    /// stays.
    Stale,
}

/// Most bans one write evicts before it gives up (others' writes race
/// it for the room).
const EVICT_TRIES: usize = 8;

/// What one attempt of a write did.
enum Step {
    /// Done; the live entry it replaced.
    Done(Option<Entry>),
    /// The state here is newer: nothing changed.
    Stale,
    Full,
    Retry,
}

/// Free slots met in a client's two groups.
#[derive(Default)]
struct Free {
    empty: [Option<(usize, u128)>; 2],
    gone: [Option<(usize, u128)>; 2],
    used: [usize; 2],
}

impl Overrides<'_> {
    /// The version of word `w` at `idx`, if its version word is `w`'s.
    pub(super) fn version_at(&self, idx: usize, w: u128) -> Option<u64> {
        version_in(w, self.versions[idx].load(Ordering::Acquire))
    }

    /// Writes `state` (None: removed) of `id` made here at version `v`.
    /// A full table first reaps its expired entries: always for an
    /// operator's change (`reap`: Always), at most once every
    /// [`FULL_REAP_MS`] for a ban (the request path); an operator's change
    /// then evicts bans ([`Overrides::evict_ban`]).
    pub(super) fn write_local(
        &self,
        state: Option<Entry>,
        id: u64,
        (v, reap): (u64, Reap),
        now_ms: u64,
    ) -> Result<Wrote, Full> {
        self.write(state, id & ID_MASK, (v, Source::Local, reap), now_ms)
    }

    /// One write until done: reaps, then evicts bans for an operator's
    /// state, when the table is full.
    fn write(
        &self,
        state: Option<Entry>,
        id: u64,
        (v, src, reap): (u64, Source, Reap),
        now_ms: u64,
    ) -> Result<Wrote, Full> {
        let mut reaped = false;
        let mut evictions = 0;
        loop {
            match self.step(id, state, v, src, now_ms) {
                Step::Done(prev) => return Ok(Wrote::Done(prev)),
                Step::Stale => return Ok(Wrote::Stale),
                Step::Full if !reaped && self.reap_all(reap, now_ms) => reaped = true,
                Step::Full
                    if by_operator(state.as_ref())
                        && evictions < EVICT_TRIES
                        && self.evict_ban(id, now_ms) =>
                {
                    evictions += 1
                }
                Step::Full => {
                    return Err(Full {
                        capacity: self.capacity(),
                    })
                }
                Step::Retry => core::hint::spin_loop(),
            }
        }
    }

    /// Applies the state of `id` read from the fleet (None: removed) at
    /// version `v`, unless the state here is as new or newer (equal
    /// versions: the greater state text wins), or it is a ban and the
    /// state here an operator's; an operator's state replaces a ban here
    /// whatever their sequences, and makes room by evicting bans. A local
    /// change not yet acknowledged is above every sequence
    /// ([`super::order`]): nothing read replaces it.
    /// Returns whether it applied.
    pub fn apply_remote(&self, id: u64, state: Option<Entry>, v: u64, now_ms: u64) -> bool {
        self.apply_remote_as(id, state, v, now_ms) == Applied::Yes
    }

    /// [`Overrides::apply_remote`], saying why it did not apply.
    pub fn apply_remote_as(&self, id: u64, state: Option<Entry>, v: u64, now_ms: u64) -> Applied {
        self.apply_fleet(id, state, v, Source::Remote, now_ms)
    }

    /// Applies the state of `id` from the fleet's snapshot at sequence `v`
    /// over any state of the fleet here, older or not: after Redis lost
    /// data the sequences here are of an order that is gone. Never over a
    /// local change not yet acknowledged; the kinds as in
    /// [`Overrides::apply_remote`].
    pub fn adopt(&self, id: u64, state: Option<Entry>, v: u64, now_ms: u64) -> bool {
        self.adopt_as(id, state, v, now_ms) == Applied::Yes
    }

    /// [`Overrides::adopt`], saying why it did not apply.
    pub fn adopt_as(&self, id: u64, state: Option<Entry>, v: u64, now_ms: u64) -> Applied {
        self.apply_fleet(id, state, v, Source::Adopt, now_ms)
    }

    fn apply_fleet(
        &self,
        id: u64,
        state: Option<Entry>,
        v: u64,
        src: Source,
        now_ms: u64,
    ) -> Applied {
        let v = v.min(super::order::LOCAL - 1);
        match self.write(state, id & ID_MASK, (v, src, Reap::Throttled), now_ms) {
            Ok(Wrote::Done(_)) => Applied::Yes,
            Ok(Wrote::Stale) => Applied::Stale,
            Err(_) => {
                self.header.misfits.fetch_add(1, Ordering::Relaxed);
                Applied::Full
            }
        }
    }

    /// One attempt of a write.
    fn step(&self, id: u64, state: Option<Entry>, v: u64, src: Source, now_ms: u64) -> Step {
        let next = match state {
            Some(e) => Next::Live(Entry { fp: id, ..e }),
            None => Next::Gone(id),
        };
        let Some((idx, w)) = self.find_unexpired(id, now_ms) else {
            return self.insert(id, next, v, src, now_ms);
        };
        let here = match decode(w) {
            Slot::Live(e) => Some(e),
            _ => None,
        };
        let newer = match kinds(state.as_ref(), here.as_ref(), src) {
            Some(wins) => wins,
            None => self.newer(idx, w, (state, here), v, src),
        };
        if !newer {
            return Step::Stale;
        }
        // A removal's slot taken again by its client: one more live entry.
        let begins = here.is_none() && state.is_some();
        if begins && !self.reserve() {
            return Step::Full;
        }
        let Some(new) = self.replace(idx, w, next) else {
            if begins {
                self.header.live.fetch_sub(1, Ordering::Relaxed);
            }
            return Step::Retry;
        };
        self.publish(idx, new, v);
        self.kill_later(id, idx);
        Step::Done(here)
    }

    /// Whether `state` at version `v` is newer than the slot's `here`.
    fn newer(
        &self,
        idx: usize,
        w: u128,
        (state, here): (Option<Entry>, Option<Entry>),
        v: u64,
        src: Source,
    ) -> bool {
        match (src, self.version_at(idx, w)) {
            (Source::Local, Some(c)) => v >= c,
            (Source::Local, None) => true,
            (Source::Remote, Some(c)) => {
                v > c || (v == c && state_text(state.as_ref()) > state_text(here.as_ref()))
            }
            (Source::Remote | Source::Adopt, None) => false,
            (Source::Adopt, Some(c)) => !super::order::is_local(c),
        }
    }

    /// The first slot of `id`, after reaping the expired entries of `id`
    /// met first.
    fn find_unexpired(&self, id: u64, now_ms: u64) -> Option<(usize, u128)> {
        loop {
            let (idx, w) = self.find(id)?;
            match decode(w) {
                Slot::Live(e) if e.expired(now_ms) => {
                    self.reap(idx, w);
                }
                _ => return Some((idx, w)),
            }
        }
    }

    /// Puts `next` of an absent `id` in a free slot of its groups. A
    /// removal with no free slot is done (nothing to remember it by).
    fn insert(&self, id: u64, next: Next, v: u64, src: Source, now_ms: u64) -> Step {
        let live = matches!(next, Next::Live(_));
        if live && !self.reserve() {
            return Step::Full;
        }
        let Some((idx, w)) = self.free_slot(id, now_ms) else {
            if live {
                self.header.live.fetch_sub(1, Ordering::Relaxed);
                return Step::Full;
            }
            return Step::Done(None);
        };
        let Some(new) = self.replace(idx, w, next) else {
            if live {
                self.header.live.fetch_sub(1, Ordering::Relaxed);
            }
            return Step::Retry;
        };
        self.publish(idx, new, v);
        if self.yields(id, idx, v) {
            // A concurrent insert of the client sits earlier, or later
            // with a newer state: give way (a change here then updates
            // that one).
            self.replace(idx, new, Next::Empty);
            return match src {
                Source::Local => Step::Retry,
                Source::Remote | Source::Adopt => Step::Stale,
            };
        }
        self.kill_later(id, idx);
        Step::Done(None)
    }

    /// Whether the entry of `id` just put at `idx` (version `v`) gives way
    /// to another of `id`: one earlier in the candidate order, or a later
    /// one of a newer (or unknown) version. Else the later ones go.
    fn yields(&self, id: u64, idx: usize, v: u64) -> bool {
        let mut after = false;
        for i in self.candidates(id) {
            if i == idx {
                after = true;
                continue;
            }
            let w = self.load(i);
            if id_of(w) != id {
                continue;
            }
            if !after || self.version_at(i, w).is_none_or(|c| c > v) {
                return true;
            }
        }
        false
    }

    /// One more live entry, within capacity.
    fn reserve(&self) -> bool {
        let cap = self.header.capacity;
        self.header
            .live
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < cap).then_some(n + 1)
            })
            .is_ok()
    }

    /// A free slot for `id`: an empty one of the group with fewer
    /// entries, else of the other, else a removal's of either (expired
    /// entries met are reaped first).
    fn free_slot(&self, id: u64, now_ms: u64) -> Option<(usize, u128)> {
        let mut f = Free::default();
        for (pos, idx) in self.candidates(id).enumerate() {
            let g = pos / GROUP;
            let mut w = self.load(idx);
            if let Slot::Live(e) = decode(w) {
                if e.expired(now_ms) && self.reap(idx, w) {
                    w = self.load(idx);
                }
            }
            match decode(w) {
                Slot::Empty => {
                    f.empty[g].get_or_insert((idx, w));
                }
                Slot::Gone(_) => {
                    f.gone[g].get_or_insert((idx, w));
                }
                Slot::Live(_) => f.used[g] += 1,
            }
        }
        let (a, b) = if f.used[1] < f.used[0] {
            (1, 0)
        } else {
            (0, 1)
        };
        f.empty[a].or(f.empty[b]).or(f.gone[a]).or(f.gone[b])
    }

    /// Changes slot `idx` from `w` to `next` (one CAS) and counts what it
    /// ended or began (the live count of an entry that began is the
    /// caller's reservation); the new word, or None if the slot changed.
    fn replace(&self, idx: usize, w: u128, next: Next) -> Option<u128> {
        let new = encode(w, next);
        if !self.ops.cas(&self.slots[idx], w, new) {
            return None;
        }
        match (is_live(w), is_live(new)) {
            (true, false) => {
                self.header.live.fetch_sub(1, Ordering::Relaxed);
                self.prefixes.sub(id_of(w));
            }
            (false, true) => self.prefixes.add(id_of(new)),
            _ => {}
        }
        Some(new)
    }

    /// Writes version `v` of word `w` at `idx`, unless the slot changed
    /// again meanwhile (the later change writes its own).
    fn publish(&self, idx: usize, w: u128, v: u64) {
        let vw = version_word(w, v);
        loop {
            let cur = self.versions[idx].load(Ordering::Acquire);
            if self.load(idx) != w {
                return;
            }
            if self.versions[idx]
                .compare_exchange(cur, vw, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return;
            }
        }
    }

    /// Empties the slots of `id` after slot `idx` in its candidate order
    /// (stale duplicates of a race between two inserts).
    fn kill_later(&self, id: u64, idx: usize) {
        let mut after = false;
        for i in self.candidates(id) {
            if after {
                let w = self.load(i);
                if id_of(w) == id {
                    self.replace(i, w, Next::Empty);
                }
            }
            after |= i == idx;
        }
    }

    /// Reaps the expired entry `w` at `idx`; true if this call did.
    pub(super) fn reap(&self, idx: usize, w: u128) -> bool {
        self.replace(idx, w, Next::Empty).is_some()
    }

    /// A full table reaps every expired entry (`Reap::Throttled`: at most
    /// once every [`FULL_REAP_MS`], by one process): true if this call did.
    fn reap_all(&self, reap: Reap, now_ms: u64) -> bool {
        let at = &self.header.reaped_at;
        let last = at.load(Ordering::Acquire);
        if reap == Reap::Throttled
            && (now_ms < last.saturating_add(FULL_REAP_MS)
                || at
                    .compare_exchange(last, now_ms, Ordering::AcqRel, Ordering::Relaxed)
                    .is_err())
        {
            return false;
        }
        self.reap_expired(0, self.slots.len(), now_ms);
        true
    }
}
