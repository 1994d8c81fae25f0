//! ns per decision: the lock-free table against a `Mutex<HashMap>` baseline
//! implementing the same rule on the same prehashed `u64` keys,
//! single-threaded at 1, 10k and 1M keys and across 2 threads (one shared
//! key, and distinct keys).
//!
//! Table sizes: `load75` gives the table 4/3 slot per key (a zone sized to
//! be 75% full, the realistic worst case of a full zone), `load40` 5/2 slots
//! per key (the ~40% load an operator sizing the zone per the README,
//! 1 MB for about 65k clients, typically sees).
//!
//! `between_requests` puts 64 KiB of writes to other memory before each
//! decision, as the rest of an nginx request (and whatever else runs on the
//! core) does: the key's slot, and the page-table entries that locate it,
//! are then no longer cached. Only the decision is timed (a clock read
//! before and after it, about 20 ns of which are the clock itself).
//!
//! Baselines: `mutex_siphash` is `Mutex<HashMap<u64, _>>` with std's default
//! SipHash-1-3 (what a typical implementation uses); `mutex_fxhash` uses a
//! one-multiply hasher for the u64 keys (the strongest single-lock
//! baseline). `mutex_siphash_with_hashing` is the pair of
//! `table_with_hashing`: both are given the same raw 8-byte keys, which
//! the baseline keeps as `[u8; 8]` (std hashes them as a byte string: a
//! length, then the bytes), as a limiter keyed by request bytes (an
//! address, a header) would.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rate_limit_window_core::*;

mod support;
use rate_limit_window_core::rule::mode::Mode;
use support::{heap_table, HeapTable};

const W: u64 = 60_000;
const T0: u64 = 1_767_225_600_000;

/// A table with `num / den` slots per key (at least 64 slots).
fn table_for(keys: usize, num: usize, den: usize) -> HeapTable {
    heap_table((keys * num / den).max(64) + 64, W, [9, 9], Mode::Estimate)
}

/// A one-multiply hasher for u64 keys (FxHash-like).
#[derive(Default)]
struct FxU64(u64);

impl Hasher for FxU64 {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// The same rule behind one mutex: key -> (window index, current, previous).
struct MutexBaseline<S, K = u64> {
    map: Mutex<HashMap<K, (u64, u32, u32), S>>,
}

impl<S: BuildHasher + Default, K: Hash + Eq> MutexBaseline<S, K> {
    fn new(keys: usize) -> Self {
        MutexBaseline {
            map: Mutex::new(HashMap::with_capacity_and_hasher(keys, S::default())),
        }
    }

    fn acquire(&self, key: K, now_ms: u64, limit: u32) -> bool {
        let idx = now_ms / W;
        let e = now_ms % W;
        let mut m = self.map.lock().unwrap();
        let slot = m.entry(key).or_insert((idx, 0, 0));
        if slot.0 + 1 == idx {
            *slot = (idx, 0, slot.1);
        } else if slot.0 != idx {
            *slot = (idx, 0, 0);
        }
        let c = Counts {
            current: slot.1,
            previous: slot.2,
        };
        if admits(c, e, W, limit) {
            slot.1 += 1;
            true
        } else {
            false
        }
    }
}

type SipBaseline = MutexBaseline<std::collections::hash_map::RandomState>;
type SipBytesBaseline = MutexBaseline<std::collections::hash_map::RandomState, [u8; 8]>;
type FxBaseline = MutexBaseline<BuildHasherDefault<FxU64>>;

fn key_bytes(i: usize) -> [u8; 8] {
    (i as u64).to_le_bytes()
}

fn single_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("single_thread");
    // (keys, slots per key as num / den, label)
    let cases: [(usize, usize, usize, &str); 5] = [
        (1, 4, 3, "1"),
        (10_000, 5, 2, "10k_load40"),
        (10_000, 4, 3, "10k_load75"),
        (1_000_000, 5, 2, "1M_load40"),
        (1_000_000, 4, 3, "1M_load75"),
    ];
    for &(n, num, den, label) in &cases {
        let owned = table_for(n, num, den);
        let t = &owned.table;
        let hashes: Vec<KeyHash> = (0..n).map(|i| t.hash_key(&key_bytes(i))).collect();
        let raw: Vec<[u8; 8]> = (0..n).map(key_bytes).collect();
        // Warm the table so that every key has its slot.
        for &h in &hashes {
            t.acquire(h, T0, MAX_LIMIT, FailPolicy::Open, 0);
        }
        assert_eq!(t.counter(Counter::EvictLive), 0);
        let mut i = 0usize;
        let mut now = T0;
        g.bench_function(BenchmarkId::new("table_prehashed", label), |b| {
            b.iter(|| {
                i = if i + 1 == n { 0 } else { i + 1 };
                now += 1;
                black_box(t.acquire(hashes[i], now, MAX_LIMIT, FailPolicy::Open, 0))
            })
        });
        g.bench_function(BenchmarkId::new("table_with_hashing", label), |b| {
            b.iter(|| {
                i = if i + 1 == n { 0 } else { i + 1 };
                now += 1;
                let h = t.hash_key(black_box(&raw[i]));
                black_box(t.acquire(h, now, MAX_LIMIT, FailPolicy::Open, 0))
            })
        });
        drop(owned);
        // The baselines' load factor is their own (std HashMap); one run
        // per key count is enough.
        if num == 4 {
            let sip = SipBaseline::new(n);
            let sip_bytes = SipBytesBaseline::new(n);
            let fx = FxBaseline::new(n);
            for (&h, &k) in hashes.iter().zip(&raw) {
                sip.acquire(h.0, T0, MAX_LIMIT);
                sip_bytes.acquire(k, T0, MAX_LIMIT);
                fx.acquire(h.0, T0, MAX_LIMIT);
            }
            let label = label.trim_end_matches("_load75");
            g.bench_function(BenchmarkId::new("mutex_siphash", label), |b| {
                b.iter(|| {
                    i = if i + 1 == n { 0 } else { i + 1 };
                    now += 1;
                    black_box(sip.acquire(hashes[i].0, now, MAX_LIMIT))
                })
            });
            g.bench_function(BenchmarkId::new("mutex_siphash_with_hashing", label), |b| {
                b.iter(|| {
                    i = if i + 1 == n { 0 } else { i + 1 };
                    now += 1;
                    black_box(sip_bytes.acquire(*black_box(&raw[i]), now, MAX_LIMIT))
                })
            });
            g.bench_function(BenchmarkId::new("mutex_fxhash", label), |b| {
                b.iter(|| {
                    i = if i + 1 == n { 0 } else { i + 1 };
                    now += 1;
                    black_box(fx.acquire(hashes[i].0, now, MAX_LIMIT))
                })
            });
        }
    }
    g.finish();
}

/// Runs `op(thread, i)` `iters` times on each of 2 threads; returns wall
/// time divided by 2, i.e. time per decision at full 2-thread throughput.
fn two_threads(iters: u64, op: &(dyn Fn(usize, u64) + Sync)) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for th in 0..2 {
            s.spawn(move || {
                for i in 0..iters {
                    op(th, i);
                }
            });
        }
    });
    start.elapsed() / 2
}

fn two_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("two_threads");
    let owned = table_for(4_096, 4, 3);
    let t = &owned.table;
    let hashes: Vec<KeyHash> = (0..4_096).map(|i| t.hash_key(&key_bytes(i))).collect();
    let sip = SipBaseline::new(4_096);
    let fx = FxBaseline::new(4_096);
    let hot = hashes[0];
    g.bench_function("table_contended_1_key", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|th, i| {
                black_box(t.acquire(hot, T0 + i, MAX_LIMIT, FailPolicy::Open, th));
            })
        })
    });
    g.bench_function("mutex_siphash_contended_1_key", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|_, i| {
                black_box(sip.acquire(hot.0, T0 + i, MAX_LIMIT));
            })
        })
    });
    g.bench_function("mutex_fxhash_contended_1_key", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|_, i| {
                black_box(fx.acquire(hot.0, T0 + i, MAX_LIMIT));
            })
        })
    });
    g.bench_function("table_distinct_keys", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|th, i| {
                let k = hashes[th * 2_048 + (i as usize % 2_048)];
                black_box(t.acquire(k, T0 + i, MAX_LIMIT, FailPolicy::Open, th));
            })
        })
    });
    g.bench_function("mutex_siphash_distinct_keys", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|th, i| {
                let k = hashes[th * 2_048 + (i as usize % 2_048)];
                black_box(sip.acquire(k.0, T0 + i, MAX_LIMIT));
            })
        })
    });
    g.bench_function("mutex_fxhash_distinct_keys", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|th, i| {
                let k = hashes[th * 2_048 + (i as usize % 2_048)];
                black_box(fx.acquire(k.0, T0 + i, MAX_LIMIT));
            })
        })
    });
    g.finish();
}

/// Bytes of other memory written before each decision in `between_requests`
/// (one byte per 64-byte line, continuing through a 16 MiB buffer).
const OTHER_WORK_BYTES: usize = 64 << 10;

/// Writes one byte in each of the next `OTHER_WORK_BYTES / 64` lines of `buf`
/// from `*at`, wrapping around.
fn other_work(buf: &mut [u8], at: &mut usize) {
    for _ in 0..OTHER_WORK_BYTES / 64 {
        // SAFETY: `*at` < buf.len() (wrapped below); a volatile write so that
        // the loop is not optimised away.
        unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(*at), 1) };
        *at += 64;
        if *at >= buf.len() {
            *at = 0;
        }
    }
}

/// `iters` decisions `decide(i, now)`, each after `other_work`, with `i`
/// stepping through `0..n` in a scattered order and `now` advancing 1 ms;
/// returns the time of the decisions alone. `pos` is `(i, now)`, kept from
/// one call to the next.
fn timed_after_other_work(
    iters: u64,
    buf: &mut [u8],
    at: &mut usize,
    pos: &mut (usize, u64),
    n: usize,
    decide: impl Fn(usize, u64),
) -> Duration {
    let step = 7_919 % n;
    let mut spent = Duration::ZERO;
    for _ in 0..iters {
        other_work(buf, at);
        pos.0 = (pos.0 + step) % n;
        pos.1 += 1;
        let start = Instant::now();
        decide(pos.0, pos.1);
        spent += start.elapsed();
    }
    spent
}

fn between_requests(c: &mut Criterion) {
    let mut g = c.benchmark_group("between_requests");
    let mut buf = vec![0u8; 16 << 20];
    let mut at = 0usize;
    for &(n, label) in &[(10_000usize, "10k"), (1_000_000, "1M")] {
        let owned = table_for(n, 5, 2);
        let t = &owned.table;
        let raw: Vec<[u8; 8]> = (0..n).map(key_bytes).collect();
        for k in &raw {
            t.acquire(t.hash_key(k), T0, MAX_LIMIT, FailPolicy::Open, 0);
        }
        let sip_bytes = SipBytesBaseline::new(n);
        for &k in &raw {
            sip_bytes.acquire(k, T0, MAX_LIMIT);
        }
        // Keys in a scattered order, the same for both.
        let mut pos = (0usize, T0);
        g.bench_function(BenchmarkId::new("table_with_hashing", label), |b| {
            b.iter_custom(|iters| {
                timed_after_other_work(iters, &mut buf, &mut at, &mut pos, n, |i, now| {
                    let h = t.hash_key(black_box(&raw[i]));
                    black_box(t.acquire(h, now, MAX_LIMIT, FailPolicy::Open, 0));
                })
            })
        });
        g.bench_function(BenchmarkId::new("mutex_siphash_with_hashing", label), |b| {
            b.iter_custom(|iters| {
                timed_after_other_work(iters, &mut buf, &mut at, &mut pos, n, |i, now| {
                    black_box(sip_bytes.acquire(*black_box(&raw[i]), now, MAX_LIMIT));
                })
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = single_thread, two_thread, between_requests
}
criterion_main!(benches);
