//! A strict zone's table: the same decisions as the pure rule, exact under
//! concurrency, undo, sweep, peek, and how many keys a 1 MiB zone holds.

use std::sync::{Arc, Barrier};

use proptest::prelude::*;
use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::rule::strict::{self, State};
use rate_limit_window_core::*;

use rate_limit_window_core::testing::Region;

const T0: u64 = 1_767_225_600_000;

fn strict_table(buf: &mut Region, window_ms: u64) -> Table<'_> {
    buf.table(window_ms, [1, 2], Mode::Strict)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// One key: every field of every decision equals the pure rule's, undo
    /// takes back exactly one count, sweeps change nothing.
    #[test]
    fn table_matches_pure_rule(window_ms in prop_oneof![Just(1_000u64), Just(10_000u64), 1_000u64..100_000],
                               ops in proptest::collection::vec((prop_oneof![4 => 0i64..3_000, 1 => -3_000i64..0, 1 => 0i64..200_000], 0u32..15, 0u8..10), 1..200)) {
        let mut buf = Region::new(Table::HEADER_BYTES + 1024 * SLOT_BYTES);
        let t = strict_table(&mut buf, window_ms);
        let key = t.hash_key(b"client");
        let mut state = State::default();
        let mut now = T0;
        let mut last = None;
        // Sweeps run at the earliest time any later operation uses (as in
        // tests/model.rs): a clock stepped back past a sweep no longer sees
        // the counts it cleared, by design.
        let times: Vec<u64> = ops
            .iter()
            .scan(T0, |t, op| {
                *t = t.saturating_add_signed(op.0);
                Some(*t)
            })
            .collect();
        for (n, (dt, limit, what)) in ops.into_iter().enumerate() {
            now = now.saturating_add_signed(dt);
            if what == 0 {
                // Undo the last admission, in the model too.
                if let Some((adm, sub)) = last.take() {
                    t.undo(&adm);
                    if let Some(at) = state.index.checked_sub(sub) {
                        if let Some(c) = state.counts.get_mut(at as usize) {
                            if *c > 0 {
                                *c -= 1;
                                *c = if at == 0 { *c } else { strict::quantize(*c) };
                            }
                        }
                    }
                }
                continue;
            }
            if what == 1 {
                let earliest = times[n..].iter().copied().min().unwrap_or(now);
                t.sweep(earliest, 0, t.capacity());
            }
            let v = strict::decide(state, now, window_ms, limit);
            let d = t.acquire(key, now, limit, FailPolicy::Open, 0);
            prop_assert_eq!(d.outcome == Outcome::Admitted, v.admitted);
            prop_assert_eq!(d.remaining, v.remaining);
            prop_assert_eq!(d.retry_after_s, strict::secs_ceil(v.retry_after_ms));
            prop_assert_eq!(d.reset_s, strict::secs_ceil(v.reset_ms));
            prop_assert_eq!(d.events.clock_backwards, v.backwards);
            prop_assert_eq!(t.retry_after_secs(key, now, limit, 1), strict::secs_ceil(strict::retry_after_ms(&v.state, now, window_ms, limit)));
            if v.admitted {
                last = d.admission.map(|a| (a, v.state.index));
                prop_assert_eq!(d.admission.unwrap().window_index(), v.state.index);
                // A rejection writes nothing.
                state = v.state;
            }
            let snap = t.peek(key, now);
            let j = strict::sub_index(now, window_ms).max(state.index);
            prop_assert_eq!(snap.strict.unwrap().counts, state.at(j).counts);
        }
    }
}

/// Four threads, one key, 40 requests per step: never more than the limit
/// in any window, exactly the limit on a fresh key.
#[test]
fn concurrent_threads_never_exceed_the_limit() {
    const THREADS: usize = 4;
    const STEPS: u64 = 120;
    let (w, limit) = (10_000u64, 50u32);
    let mut buf = Region::new(Table::HEADER_BYTES + 4096 * SLOT_BYTES);
    let len = buf.len();
    let addr = buf.ptr() as usize;
    // SAFETY: the buffer outlives every table (threads are joined below).
    let t = unsafe {
        Table::init_mode(
            addr as *mut u8,
            len,
            Window::from_ms(w).unwrap(),
            [3, 4],
            Mode::Strict,
        )
    }
    .unwrap();
    let key = t.hash_key(b"shared");
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|n| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                // SAFETY: attached to the formatted buffer, which outlives us.
                let t = unsafe {
                    Table::attach_mode(
                        addr as *mut u8,
                        len,
                        Window::from_ms(w).unwrap(),
                        Mode::Strict,
                    )
                }
                .unwrap();
                let mut admitted = vec![];
                for step in 0..STEPS {
                    barrier.wait();
                    let now = T0 + step * 700;
                    for _ in 0..20 {
                        if t.acquire(key, now, limit, FailPolicy::Open, n).outcome
                            == Outcome::Admitted
                        {
                            admitted.push(now);
                        }
                    }
                }
                admitted
            })
        })
        .collect();
    let mut all: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all.iter().filter(|&&a| a == T0).count(), limit as usize);
    let mut lo = 0;
    for hi in 0..all.len() {
        while all[lo] + w <= all[hi] {
            lo += 1;
        }
        assert!(
            hi - lo < limit as usize,
            "{} in the window ending at {}",
            hi - lo + 1,
            all[hi]
        );
    }
    let windows = (STEPS * 700) as f64 / w as f64;
    eprintln!(
        "4 threads x 20 per 0.7 s, limit {limit}/10 s: {:.2} per window",
        all.len() as f64 / windows
    );
}

/// A 1 MiB strict zone: as many slots as an estimate zone; reports the
/// first live eviction.
#[test]
fn one_mib_strict_zone_capacity() {
    let mut buf = Region::new(1 << 20);
    let t = strict_table(&mut buf, 3_600_000);
    assert_eq!(t.capacity(), 65_264);
    let mut i = 0u32;
    while t.counter(Counter::EvictLive) == 0 {
        let k = t.hash_key(format!("client-{i}").as_bytes());
        assert_eq!(
            t.acquire(k, T0, 1, FailPolicy::Open, 0).outcome,
            Outcome::Admitted
        );
        i += 1;
    }
    eprintln!(
        "strict capacity: 1 MiB = {} slots; first live eviction at key {i}",
        t.capacity()
    );
    assert!(i > 50_000, "first live eviction at {i}");
    // Every key before the eviction is remembered (one admission each).
    let remembered = (0..40_000u32)
        .filter(|i| {
            let k = t.hash_key(format!("client-{i}").as_bytes());
            t.acquire(k, T0, 1, FailPolicy::Open, 0).outcome == Outcome::Rejected
        })
        .count();
    assert!(remembered >= 39_990, "{remembered}");
}

/// A region formatted for one mode is refused by the other.
#[test]
fn attach_checks_the_mode() {
    let mut buf = Region::new(Table::HEADER_BYTES + 1024 * SLOT_BYTES);
    let len = buf.len();
    let w = Window::from_ms(10_000).unwrap();
    let ptr = buf.ptr();
    // SAFETY: exclusive, aligned buffer that outlives the tables.
    unsafe {
        Table::init_mode(ptr, len, w, [1, 2], Mode::Strict).unwrap();
        assert_eq!(
            Table::attach(ptr, len, w).unwrap_err(),
            TableError::ModeMismatch
        );
        assert_eq!(
            Table::attach_mode(ptr, len, w, Mode::Strict)
                .unwrap()
                .mode(),
            Mode::Strict
        );
    }
}

/// `cost=`: a request counting 4 takes 4 of 10; one counting 7 then waits
/// until the 4 leave the span; undo gives the whole cost back; `clear`
/// (the operator's reset) empties the key.
#[test]
fn cost_undo_and_clear() {
    let mut buf = Region::new(Table::HEADER_BYTES + 1024 * SLOT_BYTES);
    let t = strict_table(&mut buf, 10_000);
    let k = t.hash_key(b"c");
    let d = t.acquire_cost(k, T0, 10, 4, FailPolicy::Open, 0);
    assert_eq!((d.outcome, d.remaining), (Outcome::Admitted, 6));
    let e = t.acquire_cost(k, T0, 10, 3, FailPolicy::Open, 0);
    assert_eq!((e.outcome, e.remaining), (Outcome::Admitted, 3));
    t.undo(&e.admission.unwrap());
    assert_eq!(
        t.peek(k, T0).strict.unwrap().total(),
        4,
        "the whole cost back"
    );
    let r = t.acquire_cost(k, T0, 10, 7, FailPolicy::Open, 0);
    assert_eq!(r.outcome, Outcome::Rejected);
    // The 4 leave with their sub-window at T0 + ceil(7 * 10 s / 6).
    assert_eq!(r.retry_after_s, 12);
    assert_eq!(
        t.acquire_cost(k, T0 + 11_667, 10, 7, FailPolicy::Open, 0)
            .outcome,
        Outcome::Admitted
    );
    // Undoing the first admission, whose sub-window left the span, does
    // nothing.
    t.undo(&d.admission.unwrap());
    assert_eq!(t.peek(k, T0 + 11_667).strict.unwrap().total(), 7);
    let cleared = t.clear(k, T0 + 11_667);
    assert_eq!(cleared.current, 7);
    assert_eq!(t.peek(k, T0 + 11_667).current, 0);
    let never = t.acquire_cost(k, T0 + 11_667, 10, 11, FailPolicy::Open, 0);
    assert_eq!(
        (never.outcome, never.retry_after_s),
        (Outcome::Rejected, 10)
    );
}
