//! `Table::slots_used_in`: the count the sweep spreads over its ticks adds
//! up to the full scan's.

use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::*;

use rate_limit_window_core::testing::Region;

const T0: u64 = 1_767_225_600_000;

#[test]
fn chunked_count_adds_up_to_the_full_scan() {
    let mut buf = Region::new(1 << 18);
    let t = buf.table(60_000, [7, 8], Mode::Estimate);
    for i in 0..3_000u32 {
        let k = t.hash_key(format!("client-{i}").as_bytes());
        assert_eq!(
            t.acquire(k, T0, 10, FailPolicy::Open, 0).outcome,
            Outcome::Admitted
        );
    }
    let full = t.slots_used(T0);
    assert!(
        full > 2_900,
        "{full} of 3000 clients in {} slots",
        t.capacity()
    );
    for chunk in [1, 1_000, 4_096, t.capacity() - 1, t.capacity(), usize::MAX] {
        let (mut at, mut sum, mut calls) = (0, 0, 0);
        loop {
            let (next, used) = t.slots_used_in(T0, at, chunk);
            sum += used;
            calls += 1;
            if next == 0 {
                break;
            }
            assert!(next > at, "the cursor moves forward");
            at = next;
        }
        assert_eq!(sum, full, "chunk {chunk}");
        assert_eq!(calls, t.capacity().div_ceil(chunk), "chunk {chunk}");
    }
    // Two windows later every client is idle.
    assert_eq!(t.slots_used_in(T0 + 120_000, 0, usize::MAX), (0, 0));
    // A start past the end wraps around.
    assert_eq!(t.slots_used_in(T0, t.capacity() + 5, 10).0, 15);
}
