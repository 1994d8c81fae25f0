//! The table against the exact reference model, and the exactness of
//! `retry_after`.

use proptest::prelude::*;
use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::testing::reference::Model;
use rate_limit_window_core::*;

use rate_limit_window_core::testing::Region;

const T0: u64 = 1_767_225_600_000;

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        key: u8,
        dt: i64,
        limit: u32,
    },
    Undo {
        nth: usize,
    },
    /// `Table::sweep` of `count` slots from `start`, at the earliest time
    /// any later operation uses (no decision may change).
    Sweep {
        start: usize,
        count: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..12, prop_oneof![
                4 => 0i64..2_000,
                2 => 0i64..130_000,
                1 => -130_000i64..0,
            ], 0u32..12)
            .prop_map(|(key, dt, limit)| Op::Acquire { key, dt, limit }),
        1 => (0usize..64).prop_map(|nth| Op::Undo { nth }),
        1 => (0usize..8192, 0usize..8192).prop_map(|(start, count)| Op::Sweep { start, count }),
    ]
}

/// Where the time of `now + d` falls, relative to a state observed at `now`
/// (elapsed `e` into its window), with no other traffic.
fn admits_after(c: Counts, e: u64, w: u64, limit: u32, d: u64) -> bool {
    let t = e + d;
    match t / w {
        0 => admits(c, t, w, limit),
        1 => admits(
            Counts {
                current: 0,
                previous: c.current,
            },
            t - w,
            w,
            limit,
        ),
        _ => admits(Counts::default(), t % w, w, limit),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn table_matches_model(window_ms in prop_oneof![Just(1_000u64), Just(60_000u64), 1_000u64..200_000],
                           seed in any::<[u64; 2]>(),
                           ops in proptest::collection::vec(op(), 1..300)) {
        let w = Window::from_ms(window_ms).unwrap();
        let mut buf = Region::new(Table::HEADER_BYTES + 4096 * SLOT_BYTES);
        let table = buf.table(w.ms(), seed, Mode::Estimate);
        // Keys whose candidate groups are pairwise disjoint: the model knows
        // nothing of placement, and a shared group lets one key reuse another's
        // idle slot, which a later backwards clock step could observe.
        let mut keys: Vec<Vec<u8>> = vec![];
        let mut taken = std::collections::HashSet::new();
        for salt in 0u32.. {
            if keys.len() == 12 {
                break;
            }
            let k = salt.to_le_bytes().to_vec();
            let g = table.candidate_groups(table.hash_key(&k));
            if !taken.contains(&g[0]) && !taken.contains(&g[1]) {
                taken.extend(g);
                keys.push(k);
            }
        }
        let mut model = Model::new(w);
        // The clock after each operation, and the earliest from each on.
        let mut times = Vec::with_capacity(ops.len());
        let mut t = T0;
        for op in &ops {
            if let Op::Acquire { dt, .. } = op {
                t = t.saturating_add_signed(*dt);
            }
            times.push(t);
        }
        let mut earliest = times.clone();
        for i in (0..earliest.len().saturating_sub(1)).rev() {
            earliest[i] = earliest[i].min(earliest[i + 1]);
        }
        let mut now = T0;
        let mut admissions: Vec<(u8, Admission)> = vec![];
        let mut backwards = 0;
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Op::Acquire { key, dt, limit } => {
                    now = now.saturating_add_signed(dt);
                    let h = hash_with_seed(seed, &keys[key as usize]);
                    let d = table.acquire(h, now, limit, FailPolicy::Closed, key as usize);
                    let m = model.acquire(u64::from(key), now, limit);
                    prop_assert_eq!(d.outcome == Outcome::Admitted, m.admitted);
                    prop_assert_eq!(d.remaining, m.remaining);
                    prop_assert_eq!(d.retry_after_s, m.retry_after_s);
                    prop_assert_eq!(d.reset_s, m.reset_s);
                    prop_assert_eq!(d.estimate, m.estimate);
                    prop_assert_eq!(d.events.clock_backwards, m.clock_backwards);
                    prop_assert!(!d.events.evicted_live); // idle reuse is fine: stale counts
                    backwards += u64::from(m.clock_backwards);
                    prop_assert_eq!(d.admission.map(|a| a.window_index()), m.counted_in);
                    if let Some(a) = d.admission {
                        admissions.push((key, a));
                    }
                }
                Op::Undo { nth } => {
                    if !admissions.is_empty() {
                        let (key, a) = admissions.remove(nth % admissions.len());
                        table.undo(&a);
                        model.undo(u64::from(key), a.window_index());
                    }
                }
                Op::Sweep { start, count } => {
                    table.sweep(earliest[i], start, count);
                }
            }
            for key in 0u8..12 {
                let s = table.peek(hash_with_seed(seed, &keys[key as usize]), now);
                let (c, e, idx, _) = model.view(u64::from(key), now);
                prop_assert_eq!((s.current, s.previous, s.window_index), (c.current, c.previous, idx));
                prop_assert_eq!(s.estimate, estimate(c, e, window_ms));
            }
        }
        prop_assert_eq!(table.counter(Counter::ClockBackwards), backwards);
        prop_assert_eq!(table.counter(Counter::FailClosed), 0);
    }

    #[test]
    fn retry_after_is_exact(window_ms in prop_oneof![1_000u64..=86_400_000, 86_400_000u64..=MAX_WINDOW_MS],
                            limit in 1u32..=1_000_000,
                            cur in 0u32..=1_048_575,
                            prev in 0u32..=1_048_575,
                            e_frac in 0u64..1_000_000,
                            small in any::<bool>()) {
        // Bias towards interesting counts near the limit half of the time.
        let (cur, prev) = if small { (cur % (limit + 3), prev % (2 * limit + 3)) } else { (cur, prev) };
        let c = Counts { current: cur, previous: prev };
        let e = window_ms * e_frac / 1_000_000;
        let r = retry_after_ms(c, e, window_ms, limit);
        prop_assert!(admits_after(c, e, window_ms, limit, r));
        if r > 0 {
            prop_assert!(!admits_after(c, e, window_ms, limit, r - 1));
        }
        let s = u64::from(retry_after_secs(c, e, window_ms, limit));
        prop_assert!(admits_after(c, e, window_ms, limit, s * 1000));
        if s > 0 {
            prop_assert!(!admits_after(c, e, window_ms, limit, (s - 1) * 1000));
        }
        prop_assert_eq!(r == 0, admits(c, e, window_ms, limit));
    }

    #[test]
    fn remaining_counts_admissions(window_ms in 1_000u64..=600_000,
                                   limit in 0u32..200,
                                   cur in 0u32..250,
                                   prev in 0u32..400,
                                   e_frac in 0u64..1000) {
        let e = window_ms * e_frac / 1000;
        let mut c = Counts { current: cur, previous: prev };
        let r = remaining(c, e, window_ms, limit);
        let mut n = 0;
        while admits(c, e, window_ms, limit) {
            c.current += 1;
            n += 1;
        }
        prop_assert_eq!(r, n);
    }
}

#[test]
fn limit_zero_retry() {
    let c = Counts::default();
    assert_eq!(retry_after_ms(c, 1_000, 60_000, 0), 59_000 + 60_000);
    assert_eq!(retry_after_secs(c, 1_000, 60_000, 0), 60);
    assert_eq!(retry_after_secs(c, 1_000, 1_500, 0), 2);
}
