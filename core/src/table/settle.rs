//! Settling an admission once the response is done: `charge=` and
//! `count_status=` (see [`crate::rule::charge`] for the rule).

use super::acquire::Admission;
use super::layout::{Slot, COUNT_MAX};
use super::Table;
use crate::rule::charge::{self, Settled};

impl Table<'_> {
    /// Makes `admission` count `count` requests instead of its cost: adds
    /// `count - cost` to the count of the window it was counted in (its
    /// current count if the slot is still in that window, its previous
    /// count if the slot has moved on by one window), within
    /// `0..=COUNT_MAX`. An admission two windows old or more, or whose slot
    /// now holds another client, changes nothing ([`Settled::Expired`]).
    /// One CAS loop. `settle(a, 0)` is [`Table::undo`].
    ///
    /// A strict zone only gives back (`count` below the cost): it promises
    /// that no window admits more than its limit, which a count raised
    /// after the admission would break (nginx refuses `charge=` there).
    pub fn settle(&self, admission: &Admission, count: u32) -> Settled {
        let delta = charge::delta(admission.cost, count);
        if delta == 0 {
            return Settled::Unchanged;
        }
        if self.strict {
            return self.settle_strict(admission, delta);
        }
        let slot = admission.slot as usize;
        if slot >= self.slots.len() {
            return Settled::Expired;
        }
        loop {
            let value = self.load(slot);
            let mut s = Slot::decode(value);
            if s.fp != admission.fingerprint {
                return Settled::Expired;
            }
            let done = match s.delta(admission.window_index, self.ahead(admission.window_index)) {
                0 => {
                    s.current = charge::moved(s.current, delta, COUNT_MAX);
                    Settled::Current(delta)
                }
                -1 => {
                    s.previous = charge::moved(s.previous, delta, COUNT_MAX);
                    Settled::Previous(delta)
                }
                _ => return Settled::Expired,
            };
            if self.cas(slot, value, s.encode()) {
                return done;
            }
        }
    }

    /// [`Table::settle`] of a strict zone: a give-back of the whole cost is
    /// [`Table::undo`]; a partial give-back or an addition changes nothing.
    fn settle_strict(&self, admission: &Admission, delta: i64) -> Settled {
        if delta == -i64::from(admission.cost) {
            self.undo(admission);
            return Settled::Current(delta);
        }
        Settled::Unchanged
    }
}

#[cfg(test)]
mod tests {
    use crate::rule::charge::Settled;
    use crate::table::testing::*;
    use crate::table::*;

    /// Admits one request of `cost` for `k` at `now` under `limit`.
    fn admit(t: &Table<'_>, k: KeyHash, now: u64, limit: u32, cost: u32) -> Admission {
        let d = t.acquire_cost(k, now, limit, cost, FailPolicy::Open, 0);
        assert_eq!(d.outcome, Outcome::Admitted);
        d.admission.unwrap()
    }

    #[test]
    fn a_charge_above_the_cost_is_added_in_the_same_window() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"api-key");
        let a = admit(&t, k, T0 + 1_000, 1_000, 1);
        assert_eq!(t.settle(&a, 400), Settled::Current(399));
        assert_eq!(t.peek(k, T0 + 2_000).current, 400);
        // The next call still fits (cost 1), the budget is 1,000.
        let b = admit(&t, k, T0 + 3_000, 1_000, 1);
        assert_eq!(t.settle(&b, 599), Settled::Current(598));
        assert_eq!(t.peek(k, T0 + 3_000).current, 999);
        // One call of cost 1 still fits (999 + 1 <= 1,000), then nothing.
        let c = admit(&t, k, T0 + 3_000, 1_000, 1);
        let d = t.acquire_cost(k, T0 + 3_000, 1_000, 1, FailPolicy::Open, 0);
        assert_eq!(d.outcome, Outcome::Rejected);
        // It then reports 300: the budget is overrun by one call's charge.
        t.settle(&c, 300);
        assert_eq!(t.peek(k, T0 + 3_000).current, 1_299);
    }

    #[test]
    fn a_charge_below_the_cost_gives_back_and_zero_is_undo() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"k");
        let a = admit(&t, k, T0, 100, 10);
        let b = admit(&t, k, T0, 100, 10);
        assert_eq!(t.settle(&a, 4), Settled::Current(-6));
        assert_eq!(t.peek(k, T0).current, 14);
        assert_eq!(t.settle(&b, 0), Settled::Current(-10));
        assert_eq!(t.peek(k, T0).current, 4);
        // The same charge as the cost writes nothing.
        let c = admit(&t, k, T0, 100, 5);
        assert_eq!(t.settle(&c, 5), Settled::Unchanged);
        assert_eq!(t.peek(k, T0).current, 9);
    }

    #[test]
    fn after_one_window_the_previous_count_moves_after_two_nothing() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"k");
        let a = admit(&t, k, T0 + 59_000, 1_000, 1);
        // Another request moves the slot into the next window.
        admit(&t, k, T0 + MIN + 1_000, 1_000, 1);
        assert_eq!(t.settle(&a, 101), Settled::Previous(100));
        let s = t.peek(k, T0 + MIN + 1_000);
        assert_eq!((s.previous, s.current), (101, 1));
        // Two windows on, the admission's window weighs nothing any more.
        let b = admit(&t, k, T0 + MIN + 2_000, 1_000, 1);
        admit(&t, k, T0 + 3 * MIN, 1_000, 1);
        assert_eq!(t.settle(&b, 500), Settled::Expired);
        let s = t.peek(k, T0 + 3 * MIN);
        assert_eq!((s.previous, s.current), (0, 1));
    }

    #[test]
    fn a_slot_taken_by_another_client_is_left_alone() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"k");
        let mut a = admit(&t, k, T0, 100, 1);
        let before = t.peek(k, T0);
        a.fingerprint ^= 1 << 20;
        assert_eq!(t.settle(&a, 50), Settled::Expired);
        assert_eq!(t.peek(k, T0), before);
    }

    #[test]
    fn counts_saturate_and_never_underflow() {
        let mut r = Region::new(small_bytes(64));
        let t = table(&mut r, MIN);
        let k = t.hash_key(b"k");
        let a = admit(&t, k, T0, 10, 1);
        t.clear(k, T0);
        assert_eq!(t.settle(&a, 0), Settled::Current(-1));
        assert_eq!(t.peek(k, T0).current, 0);
        let b = admit(&t, k, T0, 10, 1);
        for _ in 0..3 {
            t.settle(&b, u32::MAX);
        }
        assert_eq!(t.peek(k, T0).current, (1 << 20) - 1);
    }

    #[test]
    fn a_strict_zone_only_gives_the_whole_cost_back() {
        let mut r = Region::new(small_bytes(64));
        let len = r.len();
        // SAFETY: the buffer is valid, exclusively borrowed and aligned.
        let t = unsafe {
            Table::init_mode(
                r.ptr(),
                len,
                win(MIN),
                [1, 2],
                crate::rule::mode::Mode::Strict,
            )
        }
        .unwrap();
        let k = t.hash_key(b"k");
        let a = admit(&t, k, T0, 10, 2);
        assert_eq!(t.settle(&a, 9), Settled::Unchanged);
        assert_eq!(t.peek(k, T0).estimate, 2);
        assert_eq!(t.settle(&a, 1), Settled::Unchanged);
        assert_eq!(t.settle(&a, 0), Settled::Current(-2));
        assert_eq!(t.peek(k, T0).estimate, 0);
    }

    /// One step of a client's life: a call arrives `dt_ms` after the last
    /// one with `cost`, or call `which` (mod the calls so far) is settled at
    /// `charge`.
    #[derive(Clone, Debug)]
    enum Op {
        Admit { dt_ms: u64, cost: u32 },
        Settle { which: usize, charge: u32 },
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (0u64..90_000, 1u32..5).prop_map(|(dt_ms, cost)| Op::Admit { dt_ms, cost }),
            (0usize..64, 0u32..2_000).prop_map(|(which, charge)| Op::Settle { which, charge }),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

        /// Against an exact model (each window's count: its calls' costs,
        /// then each settled call's charge in place of its cost, when
        /// settled at most one window later): the table's current and
        /// previous counts are always the model's.
        #[test]
        fn settlements_match_an_exact_model(ops in proptest::collection::vec(op(), 1..60)) {
            let mut r = Region::new(small_bytes(64));
            let t = table(&mut r, MIN);
            let k = t.hash_key(b"k");
            let w = win(MIN);
            let mut now = T0;
            let mut calls: Vec<(Admission, u64, bool)> = vec![];
            let mut counts = std::collections::HashMap::<u64, i64>::new();
            let mut slot_window = None;
            for op in ops {
                match op {
                    Op::Admit { dt_ms, cost } => {
                        now += dt_ms;
                        let a = admit(&t, k, now, 1_000_000, cost);
                        *counts.entry(w.index(now)).or_default() += i64::from(cost);
                        slot_window = Some(w.index(now));
                        calls.push((a, w.index(now), false));
                    }
                    Op::Settle { which, charge } => {
                        if calls.is_empty() {
                            continue;
                        }
                        let n = calls.len();
                        let (a, at, settled) = &mut calls[which % n];
                        if std::mem::replace(settled, true) {
                            continue;
                        }
                        let done = t.settle(a, charge);
                        let behind = slot_window.unwrap() - *at;
                        let delta = i64::from(charge) - i64::from(a.cost());
                        let want = match (delta, behind) {
                            (0, _) => Settled::Unchanged,
                            (d, 0) => Settled::Current(d),
                            (d, 1) => Settled::Previous(d),
                            _ => Settled::Expired,
                        };
                        proptest::prop_assert_eq!(done, want);
                        if behind <= 1 {
                            *counts.entry(*at).or_default() += delta;
                        }
                    }
                }
                let Some(sw) = slot_window else { continue };
                let s = t.peek(k, now);
                let c = |i: u64| counts.get(&i).copied().unwrap_or(0);
                proptest::prop_assert_eq!(i64::from(s.current), c(sw));
                proptest::prop_assert_eq!(i64::from(s.previous), c(sw - 1));
            }
        }
    }
}
