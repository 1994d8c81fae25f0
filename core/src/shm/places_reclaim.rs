//! [`Places`]' processes: a starting process takes back the places of
//! the processes that are gone, an exiting one gives back its own, and
//! worker 0's sweep reclaims the dead ones' once a second.

use core::sync::atomic::Ordering;

use super::{freed, pid_of, Owner, Places};

/// A cache of [`Places::reclaim_dead`]'s answers for one scan: a pid is
/// asked once however many words name it.
pub(in crate::shm) struct Seen<F> {
    alive: F,
    known: Vec<(u32, bool)>,
}

impl<F: FnMut(u32) -> bool> Seen<F> {
    pub(in crate::shm) fn new(alive: F) -> Self {
        Seen {
            alive,
            known: Vec::new(),
        }
    }

    /// Whether process `pid` is gone.
    pub(in crate::shm) fn gone(&mut self, pid: u32) -> bool {
        if let Some(&(_, a)) = self.known.iter().find(|(p, _)| *p == pid) {
            return !a;
        }
        let a = (self.alive)(pid);
        if self.known.len() < 4096 {
            self.known.push((pid, a));
        }
        !a
    }
}

impl Places<'_> {
    /// The owner of process `pid`, after taking back the places of every
    /// process that is gone (`alive(pid)` false). None: a pid no ledger
    /// word can name.
    pub fn start(&self, pid: u32, alive: impl FnMut(u32) -> bool) -> Option<Owner> {
        self.reclaim_dead(alive);
        Owner::of(pid)
    }

    /// A process exiting: gives back every place `owner` still holds.
    pub fn stop(&self, owner: Owner) -> u64 {
        self.reclaim_if(|pid| pid == owner.pid)
    }

    /// Takes back the places of every process that is gone (`alive(pid)`
    /// false, asked once per pid); returns the places taken back.
    pub fn reclaim_dead(&self, alive: impl FnMut(u32) -> bool) -> u64 {
        let mut seen = Seen::new(alive);
        self.reclaim_if(|pid| seen.gone(pid))
    }

    /// Takes back every place whose process `gone` says so.
    fn reclaim_if(&self, mut gone: impl FnMut(u32) -> bool) -> u64 {
        let mut n = 0;
        for e in self.ledger {
            let w = e.load(Ordering::Acquire);
            if pid_of(w) == 0 || !gone(pid_of(w)) {
                continue;
            }
            // The word first: of two reclaimers, one takes it back.
            if e.compare_exchange(w, freed(w), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                self.uncount(w);
                n += 1;
            }
        }
        self.header.reclaimed.fetch_add(n, Ordering::Relaxed);
        n
    }
}
