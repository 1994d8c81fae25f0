//! How many keys a 1 MiB region remembers.

use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::*;

use rate_limit_window_core::testing::Region;

const T0: u64 = 1_767_225_600_000;

#[test]
fn one_mib_remembers_50k_keys() {
    let mut buf = Region::new(1 << 20);
    let t = buf.table(3_600_000, [5, 6], Mode::Estimate);
    assert_eq!(t.capacity(), 65_264);
    let n = 50_000u32;
    let keys: Vec<KeyHash> = (0..n)
        .map(|i| t.hash_key(format!("client-{i}").as_bytes()))
        .collect();
    for &k in &keys {
        assert_eq!(
            t.acquire(k, T0, 1, FailPolicy::Open, 0).outcome,
            Outcome::Admitted
        );
    }
    assert_eq!(t.counter(Counter::EvictLive), 0);
    let remembered = keys
        .iter()
        .rev()
        .filter(|&&k| t.acquire(k, T0, 1, FailPolicy::Open, 0).outcome == Outcome::Rejected)
        .count();
    assert!(
        remembered >= 50_000,
        "only {remembered} of 50000 remembered"
    );
    assert_eq!(t.slots_used(T0), u64::from(n));

    // Keep going until the first live eviction, to report the headroom.
    let mut i = n;
    while t.counter(Counter::EvictLive) == 0 {
        t.acquire(
            t.hash_key(format!("client-{i}").as_bytes()),
            T0,
            1,
            FailPolicy::Open,
            0,
        );
        i += 1;
    }
    eprintln!(
        "capacity: 1 MiB = {} slots; first live eviction at key {} ({:.1}% load)",
        t.capacity(),
        i,
        f64::from(i) * 100.0 / t.capacity() as f64
    );
    assert!(i > 52_000);
}
