//! Tests of the estimate table's acquire path (acquire.rs).
use super::*;
use crate::rule::window::{MAX_LIMIT, MAX_WINDOW_MS};
use crate::table::testing::*;
use crate::table::*;

#[test]
fn a_slot_idle_past_2_pow_23_windows_is_stale_not_ahead() {
    // A 1 s window: a client that used its limit, back 2^23 + 10
    // windows (97 days) later, is a new client (it was read as ahead of
    // the clock, its old counts back, and rejected).
    let mut r = Region::new(small_bytes(4096));
    let t = table(&mut r, 1_000);
    let h = t.hash_key(b"k");
    for _ in 0..3 {
        t.acquire(h, T0, 3, FailPolicy::Open, 0);
    }
    assert_eq!(
        t.acquire(h, T0, 3, FailPolicy::Open, 0).outcome,
        Outcome::Rejected
    );
    let later = T0 + ((1 << 23) + 10) * 1_000;
    let d = t.acquire(h, later, 3, FailPolicy::Open, 0);
    assert_eq!(d.outcome, Outcome::Admitted);
    assert!(!d.events.clock_backwards);
    assert_eq!(d.remaining, 2);
    assert_eq!(t.counter(Counter::ClockBackwards), 0);
    // A real step back is still seen as one, and counts are kept.
    let back = t.acquire(h, later - 5_000, 3, FailPolicy::Open, 0);
    assert!(back.events.clock_backwards);
    assert_eq!(t.peek(h, later).current, 2);
}

#[test]
fn countdown_then_reject() {
    let mut r = Region::new(small_bytes(64));
    let t = table(&mut r, MIN);
    let k = t.hash_key(b"client-1");
    let now = T0 + 10_000;
    let mut rem = vec![];
    for _ in 0..5 {
        let d = t.acquire(k, now, 5, FailPolicy::Open, 3);
        assert_eq!(d.outcome, Outcome::Admitted);
        assert_eq!(d.retry_after_s, 0);
        assert_eq!(d.reset_s, 50);
        rem.push(d.remaining);
    }
    assert_eq!(rem, vec![4, 3, 2, 1, 0]);
    let d = t.acquire(k, now, 5, FailPolicy::Open, 3);
    assert_eq!(d.outcome, Outcome::Rejected);
    assert_eq!(d.remaining, 0);
    assert_eq!(d.estimate, 5);
    assert!(d.admission.is_none());
    // Next window at +1 ms: 5 * (W - 1) < 5 * W.
    assert_eq!(d.retry_after_s, 51);
    assert_eq!(t.peek(k, now).current, 5);
    assert_eq!(
        t.peek(t.hash_key(b"other"), now),
        Snapshot {
            window_index: win(MIN).index(now),
            ..Snapshot::default()
        }
    );
}

#[test]
fn window_rolls_forward() {
    let mut r = Region::new(small_bytes(64));
    let t = table(&mut r, MIN);
    let k = t.hash_key(b"k");
    for _ in 0..10 {
        assert_eq!(
            t.acquire(k, T0 + 59_999, 10, FailPolicy::Open, 0).outcome,
            Outcome::Admitted
        );
    }
    // Boundary: at T0 + 60_000 the 10 are previous with full weight.
    let d = t.acquire(k, T0 + MIN, 10, FailPolicy::Open, 0);
    assert_eq!(d.outcome, Outcome::Rejected);
    assert_eq!(d.estimate, 10);
    // Half way: estimate 5, 5 more admitted.
    let n = (0..10)
        .filter(|_| {
            t.acquire(k, T0 + MIN + 30_000, 10, FailPolicy::Open, 0)
                .outcome
                == Outcome::Admitted
        })
        .count();
    assert_eq!(n, 5); // current * W + 10 * W / 2 < 10 * W  <=>  current < 5
    let s = t.peek(k, T0 + MIN + 30_000);
    assert_eq!((s.current, s.previous), (5, 10));
    // Two windows later everything is forgotten.
    let s = t.peek(k, T0 + 3 * MIN);
    assert_eq!((s.current, s.previous, s.estimate), (0, 0, 0));
    assert_eq!(
        t.acquire(k, T0 + 3 * MIN, 10, FailPolicy::Open, 0)
            .remaining,
        9
    );
}

#[test]
fn one_second_and_one_day_windows() {
    let mut r = Region::new(small_bytes(64));
    let t = table(&mut r, 1_000);
    let k = t.hash_key(b"k");
    assert_eq!(
        t.acquire(k, T0 + 999, 1, FailPolicy::Open, 0).outcome,
        Outcome::Admitted
    );
    let d = t.acquire(k, T0 + 999, 1, FailPolicy::Open, 0);
    assert_eq!(
        (d.outcome, d.reset_s, d.retry_after_s),
        (Outcome::Rejected, 1, 1)
    );
    assert_eq!(
        t.acquire(k, T0 + 1_999, 1, FailPolicy::Open, 0).outcome,
        Outcome::Admitted
    );
    let mut r2 = Region::new(small_bytes(64));
    let t = table(&mut r2, 86_400_000);
    let k = t.hash_key(b"k");
    assert_eq!(
        t.acquire(k, T0, 1, FailPolicy::Open, 0).outcome,
        Outcome::Admitted
    );
    let d = t.acquire(k, T0 + 3_600_000, 1, FailPolicy::Open, 0);
    assert_eq!(d.outcome, Outcome::Rejected);
    assert_eq!(d.reset_s, 23 * 3600);
    assert_eq!(d.retry_after_s, 23 * 3600 + 1); // 1 * (W - t) < W from t = 1 ms
}

#[test]
fn clock_backwards_keeps_counts() {
    let mut r = Region::new(small_bytes(64));
    let t = table(&mut r, MIN);
    let k = t.hash_key(b"k");
    for _ in 0..3 {
        t.acquire(k, T0 + 2 * MIN + 5, 10, FailPolicy::Open, 0);
    }
    // A worker whose clock is one window behind.
    let d = t.acquire(k, T0 + MIN + 59_000, 10, FailPolicy::Open, 1);
    assert_eq!(d.outcome, Outcome::Admitted);
    assert!(d.events.clock_backwards);
    assert_eq!(t.counter(Counter::ClockBackwards), 1);
    // Counted in the slot's (newest) window, nothing reset.
    let s = t.peek(k, T0 + 2 * MIN + 5);
    assert_eq!((s.window_index, s.current), (win(MIN).index(T0) + 2, 4));
    let s = t.peek(k, T0);
    assert_eq!((s.window_index, s.current), (win(MIN).index(T0) + 2, 4));
    // Undo of the backwards admission hits the right window.
    t.undo(&d.admission.unwrap());
    assert_eq!(t.peek(k, T0 + 2 * MIN).current, 3);
}

#[test]
fn undo_same_and_next_window_never_underflows() {
    let mut r = Region::new(small_bytes(64));
    let t = table(&mut r, MIN);
    let k = t.hash_key(b"k");
    let a = t.acquire(k, T0, 10, FailPolicy::Open, 0).admission.unwrap();
    let b = t.acquire(k, T0, 10, FailPolicy::Open, 0).admission.unwrap();
    t.undo(&a);
    assert_eq!(t.peek(k, T0).current, 1);
    // Roll one window: b's count is now "previous".
    t.acquire(k, T0 + MIN, 10, FailPolicy::Open, 0);
    t.undo(&b);
    let s = t.peek(k, T0 + MIN);
    assert_eq!((s.current, s.previous), (1, 0));
    t.undo(&b);
    let s = t.peek(k, T0 + MIN);
    assert_eq!((s.current, s.previous), (1, 0));
}

#[test]
fn limit_zero_never_admits_or_tracks() {
    let mut r = Region::new(small_bytes(64));
    let t = table(&mut r, MIN);
    let d = t.acquire(t.hash_key(b"k"), T0 + 1_000, 0, FailPolicy::Open, 0);
    assert_eq!(
        (d.outcome, d.retry_after_s, d.remaining),
        (Outcome::Rejected, 60, 0)
    );
    assert_eq!(t.slots_used(T0), 0);
}

#[test]
fn full_table_open_evicts_least_recent() {
    let mut r = Region::new(small_bytes(16));
    let t = table(&mut r, MIN);
    assert_eq!(t.capacity(), 16);
    // 16 keys at increasing ticks.
    for i in 0..16u64 {
        let k = t.hash_key(format!("key{i}").as_bytes());
        assert_eq!(
            t.acquire(k, T0 + i * 1_000, 100, FailPolicy::Open, 0)
                .outcome,
            Outcome::Admitted
        );
    }
    assert_eq!(t.slots_used(T0 + 20_000), 16);
    let d = t.acquire(t.hash_key(b"new"), T0 + 20_000, 100, FailPolicy::Open, 0);
    assert_eq!(d.outcome, Outcome::Admitted);
    assert!(d.events.evicted_live);
    assert_eq!(t.counter(Counter::EvictLive), 1);
    // The oldest (key0) was evicted, the others are remembered.
    assert_eq!(t.peek(t.hash_key(b"key0"), T0 + 20_000).current, 0);
    assert_eq!(t.peek(t.hash_key(b"key1"), T0 + 20_000).current, 1);
    assert_eq!(t.peek(t.hash_key(b"new"), T0 + 20_000).current, 1);
}

#[test]
fn full_table_closed_fails_closed() {
    let mut r = Region::new(small_bytes(16));
    let t = table(&mut r, MIN);
    let ds = fill(&t, 16, T0 + 30_000, FailPolicy::Closed);
    assert!(ds.iter().all(|d| d.outcome == Outcome::Admitted));
    let d = t.acquire(t.hash_key(b"new"), T0 + 30_000, 100, FailPolicy::Closed, 5);
    assert_eq!(d.outcome, Outcome::FailClosed);
    assert_eq!((d.remaining, d.retry_after_s, d.reset_s), (0, 30, 30));
    assert_eq!(t.counter(Counter::FailClosed), 1);
    assert_eq!(t.counter(Counter::EvictLive), 0);
    // Known keys still work.
    let d = t.acquire(t.hash_key(b"key3"), T0 + 30_000, 100, FailPolicy::Closed, 5);
    assert_eq!(d.outcome, Outcome::Admitted);
    // Two windows later the idle slots are reused.
    let d = t.acquire(t.hash_key(b"new"), T0 + 3 * MIN, 100, FailPolicy::Closed, 5);
    assert_eq!(d.outcome, Outcome::Admitted);
    assert!(d.events.evicted_idle);
    assert_eq!(t.counter(Counter::EvictIdle), 1);
}

#[test]
fn any_key_length() {
    let mut r = Region::new(small_bytes(64));
    let t = table(&mut r, MIN);
    let long: Vec<u8> = (0..70_000u32).map(|i| (i * 7) as u8).collect();
    let mut long2 = long.clone();
    *long2.last_mut().unwrap() ^= 1;
    let keys: [&[u8]; 5] = [b"", b"\0", &[0xff, 0, 0x80], &long, &long2];
    for k in keys {
        assert_eq!(
            t.acquire(t.hash_key(k), T0, 1, FailPolicy::Open, 0).outcome,
            Outcome::Admitted
        );
    }
    for k in keys {
        assert_eq!(
            t.acquire(t.hash_key(k), T0, 1, FailPolicy::Open, 0).outcome,
            Outcome::Rejected
        );
    }
    assert_ne!(t.hash_key(&long), t.hash_key(&long2));
    assert_eq!(t.slots_used(T0), 5);
}

#[test]
#[cfg_attr(miri, ignore = "a million CAS loops")]
fn max_limit_is_exact() {
    let mut r = Region::new(small_bytes(64));
    let t = table(&mut r, MAX_WINDOW_MS);
    let k = t.hash_key(b"k");
    let n = (0..MAX_LIMIT + 10)
        .filter(|_| {
            t.acquire(k, T0 + 5, MAX_LIMIT, FailPolicy::Open, 0).outcome == Outcome::Admitted
        })
        .count();
    assert_eq!(n, MAX_LIMIT as usize);
    assert_eq!(t.peek(k, T0 + 5).current, MAX_LIMIT);
}
