//! ns per override lookup (criterion): the request path's question "has
//! this client an override?" in a zone that holds one live override, for a
//! client without one (every request but the overridden client's) and for
//! the overridden client, in a fresh table and in one after 1,000,000
//! overrides with a ttl came and went (`history_1M`: the lookups' cost must
//! not follow the table's history; the bound is 2x of fresh).
//! `interleaved` first measures the same lookups of both tables in
//! alternating batches (so that a machine shared with other work slows
//! both alike) and prints the medians and their ratio, the bound's
//! judge. Then `ranges`: the cost of the range lookup of an address (the most
//! specific `cidr=` holding it) with N range overrides at 1 or 3 prefix
//! lengths: it follows the lengths in use, not N.

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rate_limit_window_core::overrides::range::{Addr, Range};
use rate_limit_window_core::overrides::{Action, Entry, Overrides};
use rate_limit_window_core::testing::Region;
use rate_limit_window_core::{hash_with_seed, KeyHash};

const T0: u64 = 1_767_225_600_000;
const STAYS: u64 = 0x00ab_cdef_0123_4567;
/// Distinct clients looked up in turn.
const PROBES: u64 = 4096;

struct Heap {
    _buf: Region,
    o: Overrides<'static>,
}

fn table(cap: usize) -> Heap {
    let mut buf = Region::new(Overrides::bytes_for(cap));
    let len = buf.len();
    // SAFETY: the heap region never moves and lives as long as `Heap`;
    // nothing else accesses it.
    let o = unsafe { Overrides::init(buf.ptr(), len, cap) }.unwrap();
    Heap { _buf: buf, o }
}

fn fp(i: u64) -> u64 {
    ((i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 8) | 1
}

fn block(fp: u64, expires_ms: u64) -> Entry {
    Entry {
        fp,
        action: Action::Block,
        expires_ms,
    }
}

/// One live override that stays; with `history`, 1,000,000 others with a
/// ttl of 1 s set before it, in batches of a quarter of the capacity, each
/// batch a second after the last: all expired by the returned time.
fn zone(cap: usize, history: bool) -> (Heap, u64) {
    let h = table(cap);
    let mut now = T0;
    h.o.set(block(STAYS, 0), now).unwrap();
    if history {
        let batch = (cap as u64 / 4).max(1);
        for i in 0..1_000_000u64 {
            if i % batch == 0 {
                now += 1_000;
            }
            h.o.set(block(fp(i + 1_000_000), now + 1_000), now).unwrap();
        }
    }
    (h, now + 2_000)
}

/// ns per lookup of `keys` in `h` (one batch of `BATCH` lookups).
fn batch(h: &Heap, now: u64, keys: &[u64]) -> f64 {
    const BATCH: usize = 20_000;
    let t0 = Instant::now();
    for i in 0..BATCH {
        black_box(h.o.get(black_box(keys[i % keys.len()]), now));
    }
    t0.elapsed().as_nanos() as f64 / BATCH as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Fresh and history tables of each size, their lookups timed in
/// alternating batches (201 each): prints `overrides_interleaved/KIND/CAP:
/// fresh F ns, history H ns, ratio R`.
fn interleaved(_c: &mut Criterion) {
    for cap in [1024usize, 16384] {
        let (fresh, now_f) = zone(cap, false);
        let (hist, now_h) = zone(cap, true);
        let misses: Vec<u64> = (0..PROBES).map(fp).collect();
        for (kind, keys) in [("miss", misses), ("hit", vec![STAYS])] {
            let (mut f, mut h) = (Vec::new(), Vec::new());
            for _ in 0..201 {
                f.push(batch(&fresh, now_f, &keys));
                h.push(batch(&hist, now_h, &keys));
            }
            let (f, h) = (median(f), median(h));
            println!(
                "overrides_interleaved/{kind}/{cap}: fresh {f:.2} ns, history {h:.2} ns, ratio {:.3}",
                h / f
            );
        }
    }
}

fn lookups(c: &mut Criterion) {
    let mut g = c.benchmark_group("overrides_lookup");
    for cap in [1024usize, 16384] {
        for (name, history) in [("fresh", false), ("history_1M", true)] {
            let (h, now) = zone(cap, history);
            let mut i = 0u64;
            g.bench_function(BenchmarkId::new(format!("miss_{name}"), cap), |b| {
                b.iter(|| {
                    i = (i + 1) % PROBES;
                    black_box(h.o.get(black_box(fp(i)), now))
                })
            });
            g.bench_function(BenchmarkId::new(format!("hit_{name}"), cap), |b| {
                b.iter(|| black_box(h.o.get(black_box(STAYS), now)))
            });
        }
    }
    g.finish();
}

fn hash(k: &[u8]) -> KeyHash {
    hash_with_seed([7, 7], k)
}

fn ranges(c: &mut Criterion) {
    let mut g = c.benchmark_group("overrides_ranges");
    for (n, lens) in [
        (1u32, &[24u8][..]),
        (10_000, &[24]),
        (1, &[16, 24, 28]),
        (10_000, &[16, 24, 28]),
    ] {
        let h = table(16384);
        h.o.set(block(STAYS, 0), T0).unwrap();
        for i in 0..n {
            let len = lens[i as usize % lens.len()];
            let a = Addr::of_key(&(0x0a00_0000u32 | (i << 8)).to_be_bytes()).unwrap();
            h.o.set(block(Range::new(a, len).id(hash), 0), T0).unwrap();
        }
        let mut i = 0u32;
        let id = format!("{n}_ranges_{}_lengths", lens.len());
        g.bench_function(BenchmarkId::new("outside_every_range", &id), |b| {
            b.iter(|| {
                i = i.wrapping_add(1);
                let a = Addr::of_key(&(0xc000_0000u32 | (i & 0xffff)).to_be_bytes()).unwrap();
                black_box(h.o.range_get(black_box(a), hash, T0))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, interleaved, lookups, ranges);
criterion_main!(benches);
