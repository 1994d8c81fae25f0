//! ns per decision: the lock-free table against a `Mutex<HashMap>` baseline
//! implementing the same rule, single-threaded at 1, 10k and 1M keys and
//! across 2 threads (one shared key, and distinct keys).

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rate_limit_window_core::*;

const W: u64 = 60_000;
const T0: u64 = 1_767_225_600_000;

#[repr(C, align(64))]
struct Line([u8; 64]);

struct Owned {
    _buf: Vec<Line>,
    table: Table<'static>,
}

fn table_for(keys: usize) -> Owned {
    let slots = (keys * 4 / 3).max(64) + 64;
    let bytes = Table::HEADER_BYTES + slots * SLOT_BYTES;
    let mut buf: Vec<Line> = (0..bytes.div_ceil(64)).map(|_| Line([0; 64])).collect();
    let len = buf.len() * 64;
    // SAFETY: the heap buffer never moves and lives as long as `Owned`,
    // which drops the table first (field order is irrelevant: Table has no
    // Drop and is never used after `_buf` is freed).
    let table = unsafe {
        Table::init(
            buf.as_mut_ptr().cast(),
            len,
            Window::from_ms(W).unwrap(),
            [9, 9],
        )
    }
    .unwrap();
    Owned { _buf: buf, table }
}

/// The same rule behind one mutex: key -> (window index, current, previous).
struct MutexBaseline {
    map: Mutex<HashMap<u64, (u64, u32, u32)>>,
}

impl MutexBaseline {
    fn new(keys: usize) -> Self {
        MutexBaseline {
            map: Mutex::new(HashMap::with_capacity(keys)),
        }
    }

    fn acquire(&self, key: u64, now_ms: u64, limit: u32) -> bool {
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

fn key_bytes(i: usize) -> [u8; 8] {
    (i as u64).to_le_bytes()
}

fn single_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("single_thread");
    for &n in &[1usize, 10_000, 1_000_000] {
        let owned = table_for(n);
        let t = &owned.table;
        let hashes: Vec<KeyHash> = (0..n).map(|i| t.hash_key(&key_bytes(i))).collect();
        let raw: Vec<[u8; 8]> = (0..n).map(key_bytes).collect();
        // Warm the table so that every key has its slot.
        for &h in &hashes {
            t.acquire(h, T0, MAX_LIMIT, FailPolicy::Open, 0);
        }
        let mut i = 0usize;
        let mut now = T0;
        g.bench_function(BenchmarkId::new("table_prehashed", n), |b| {
            b.iter(|| {
                i = if i + 1 == n { 0 } else { i + 1 };
                now += 1;
                black_box(t.acquire(hashes[i], now, MAX_LIMIT, FailPolicy::Open, 0))
            })
        });
        g.bench_function(BenchmarkId::new("table_with_hashing", n), |b| {
            b.iter(|| {
                i = if i + 1 == n { 0 } else { i + 1 };
                now += 1;
                let h = t.hash_key(black_box(&raw[i]));
                black_box(t.acquire(h, now, MAX_LIMIT, FailPolicy::Open, 0))
            })
        });
        let base = MutexBaseline::new(n);
        for &h in &hashes {
            base.acquire(h.0, T0, MAX_LIMIT);
        }
        g.bench_function(BenchmarkId::new("mutex_hashmap_prehashed", n), |b| {
            b.iter(|| {
                i = if i + 1 == n { 0 } else { i + 1 };
                now += 1;
                black_box(base.acquire(hashes[i].0, now, MAX_LIMIT))
            })
        });
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
    let owned = table_for(4_096);
    let t = &owned.table;
    let hashes: Vec<KeyHash> = (0..4_096).map(|i| t.hash_key(&key_bytes(i))).collect();
    let base = MutexBaseline::new(4_096);
    let hot = hashes[0];
    g.bench_function("table_contended_1_key", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|th, i| {
                black_box(t.acquire(hot, T0 + i, MAX_LIMIT, FailPolicy::Open, th));
            })
        })
    });
    g.bench_function("mutex_contended_1_key", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|_, i| {
                black_box(base.acquire(hot.0, T0 + i, MAX_LIMIT));
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
    g.bench_function("mutex_distinct_keys", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|th, i| {
                let k = hashes[th * 2_048 + (i as usize % 2_048)];
                black_box(base.acquire(k.0, T0 + i, MAX_LIMIT));
            })
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = single_thread, two_thread
}
criterion_main!(benches);
