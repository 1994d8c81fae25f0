//! Eviction under a flood of new clients (issue 36): when no idle slot is
//! left, the victim is the candidate whose loss admits least, the lowest
//! count, and never a client refused since its last admission (at or over
//! its limit) while another candidate is below it. If every candidate is
//! at its limit, `fail=` decides: `open` evicts one, `closed` refuses.
//! The same rule in both modes: each case runs on an estimate and a strict
//! table.

use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::*;

use rate_limit_window_core::testing::Region;

const W: u64 = 60_000;
/// A window boundary (2026-01-01T00:00:00Z).
const T0: u64 = 1_767_225_600_000;

const MODES: [Mode; 2] = [Mode::Estimate, Mode::Strict];

/// A table of `slots` slots (16: one group, so every slot is a candidate
/// for every key) in `mode`.
fn with_table(slots: usize, mode: Mode, f: impl FnOnce(&Table)) {
    let bytes = Table::HEADER_BYTES + slots * SLOT_BYTES;
    let mut buf = Region::new(bytes);
    let t = buf.table(W, [1, 2], mode);
    assert_eq!(t.mode(), mode);
    f(&t);
}

fn ask(t: &Table, key: &str, now: u64, limit: u32, policy: FailPolicy) -> Answer {
    t.acquire(t.hash_key(key.as_bytes()), now, limit, policy, 0)
}

/// `limit` admitted, then one refused: an abuser at its limit.
fn abuse(t: &Table, key: &str, now: u64, limit: u32) {
    for _ in 0..limit {
        assert_eq!(
            ask(t, key, now, limit, FailPolicy::Open).outcome,
            Outcome::Admitted
        );
    }
    assert_eq!(
        ask(t, key, now, limit, FailPolicy::Open).outcome,
        Outcome::Rejected
    );
}

#[test]
fn a_flood_of_new_clients_never_frees_a_refused_client() {
    for (mode, policy) in MODES
        .into_iter()
        .flat_map(|m| [(m, FailPolicy::Open), (m, FailPolicy::Closed)])
    {
        with_table(16, mode, |t| {
            assert_eq!(t.capacity(), 16);
            // 15 abusers at a limit of 1 (the same count as each new
            // client's), one ordinary client.
            for i in 0..15 {
                abuse(t, &format!("abuser{i}"), T0, 1);
            }
            assert_eq!(ask(t, "ordinary", T0, 5, policy).outcome, Outcome::Admitted);
            for i in 0..10_000 {
                let d = ask(t, &format!("new{i}"), T0 + 1 + i / 10, 5, policy);
                match policy {
                    FailPolicy::Open => {
                        assert_eq!(d.outcome, Outcome::Admitted);
                        assert!(d.events.evicted_live && !d.events.evicted_over_limit);
                    }
                    FailPolicy::Closed => assert_eq!(d.outcome, Outcome::FailClosed),
                }
            }
            for i in 0..15 {
                let d = ask(t, &format!("abuser{i}"), T0 + 2_000, 1, policy);
                assert_eq!(
                    d.outcome,
                    Outcome::Rejected,
                    "abuser{i} freed ({mode:?}, {policy:?})"
                );
            }
        });
    }
}

#[test]
fn the_lowest_count_is_evicted_first() {
    for mode in MODES {
        with_table(16, mode, |t| {
            // key7 holds 1 request, every other key 3 + i; key7 is also
            // the most recently active (a later sub-window of a strict
            // zone), so age alone would spare it.
            let recent = T0 + 15_000;
            for i in 0..16u32 {
                let key = format!("key{i}");
                let n = if i == 7 { 1 } else { 3 + i };
                let now = if i == 7 { recent } else { T0 };
                for _ in 0..n {
                    assert_eq!(
                        ask(t, &key, now, 100, FailPolicy::Open).outcome,
                        Outcome::Admitted
                    );
                }
            }
            let d = ask(t, "new", recent + 1_000, 100, FailPolicy::Open);
            assert!(d.events.evicted_live);
            let peek = |k: &str| t.peek(t.hash_key(k.as_bytes()), recent + 2_000).current;
            assert_eq!(peek("key7"), 0, "the lowest count was kept ({mode:?})");
            assert_eq!(peek("key0"), 3);
            // Then the new client, the only count of 1 left.
            let d = ask(t, "newer", recent + 2_000, 100, FailPolicy::Open);
            assert!(d.events.evicted_live);
            assert_eq!((peek("new"), peek("newer"), peek("key0")), (0, 1, 3));
        });
    }
}

#[test]
fn when_every_candidate_is_at_its_limit_fail_decides() {
    for mode in MODES {
        with_table(16, mode, |t| {
            for i in 0..16 {
                abuse(t, &format!("abuser{i}"), T0, 2);
            }
            // fail=closed: the new client is refused, no abuser is forgotten.
            let d = ask(t, "new", T0 + 10, 2, FailPolicy::Closed);
            assert_eq!(d.outcome, Outcome::FailClosed);
            // fail=open: today's behaviour, one is evicted and it shows.
            let d = ask(t, "new", T0 + 10, 2, FailPolicy::Open);
            assert_eq!(d.outcome, Outcome::Admitted);
            assert!(d.events.evicted_live && d.events.evicted_over_limit);
            let kept = (0..16)
                .filter(|i| {
                    t.peek(t.hash_key(format!("abuser{i}").as_bytes()), T0 + 10)
                        .current
                        == 2
                })
                .count();
            assert_eq!(kept, 15, "{mode:?}");
        });
    }
}

#[test]
fn an_admission_clears_the_mark() {
    for mode in MODES {
        with_table(16, mode, |t| {
            // Estimate: in the next window the abuser's previous 2 have
            // decayed enough. Strict: its sub-window has left the span, the
            // others' later one has not.
            let (others_at, later) = match mode {
                Mode::Estimate => (T0, T0 + W + W / 2 + 1),
                Mode::Strict => (T0 + W / 2, T0 + 7 * W / 6),
            };
            abuse(t, "was_abuser", T0, 2);
            for i in 0..15 {
                for _ in 0..5 {
                    ask(t, &format!("key{i}"), others_at, 100, FailPolicy::Open);
                }
            }
            // Admitted again (no longer marked), so it is the victim of
            // the others' 5.
            assert_eq!(
                ask(t, "was_abuser", later, 2, FailPolicy::Open).outcome,
                Outcome::Admitted
            );
            let d = ask(t, "new", later, 100, FailPolicy::Open);
            assert!(d.events.evicted_live && !d.events.evicted_over_limit);
            assert_eq!(
                t.peek(t.hash_key(b"was_abuser"), later).current,
                0,
                "{mode:?}"
            );
        });
    }
}
