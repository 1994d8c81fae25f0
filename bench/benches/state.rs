//! The cost of a zone's state file (`state=`): snapshotting a 10 MiB zone
//! (655,104 slots) holding 300,000 live clients and encoding the file
//! (what worker 0 does every 5 s, before the write and fsync), and
//! decoding and restoring it (what the master does at start).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use rate_limit_window_core::rule::mode::Mode;
use rate_limit_window_core::state::{decode, encode, Identity, StateFile};
use rate_limit_window_core::*;

mod support;
use support::heap_table;

const W: u64 = 3_600_000;
const T0: u64 = 1_767_225_600_000;
const SLOTS: usize = 10 * 1024 * 1024 / SLOT_BYTES;
const CLIENTS: u64 = 300_000;

fn file(t: &Table<'_>) -> StateFile {
    StateFile {
        identity: Identity {
            zone: b"per_ip".to_vec(),
            key: b"$binary_remote_addr".to_vec(),
            window_ms: W,
            strict: false,
        },
        seed: t.seed(),
        saved_ms: T0,
        table: t.save(T0 + 1),
        overrides: vec![],
        other: vec![],
    }
}

fn bench(c: &mut Criterion) {
    let full = heap_table(SLOTS, W, [3, 4], Mode::Estimate);
    for i in 0..CLIENTS {
        let h = full.table.hash_key(&i.to_le_bytes());
        full.table.acquire(h, T0, 100, FailPolicy::Open, 0);
    }
    let bytes = encode(&file(&full.table));
    export();
    eprintln!(
        "state file of {CLIENTS} live clients in {} slots: {} bytes",
        full.table.capacity(),
        bytes.len()
    );
    let mut g = c.benchmark_group("state_10MiB_300k_clients");
    g.sample_size(10);
    g.bench_function("save_and_encode", |b| {
        b.iter(|| black_box(encode(&file(&full.table))).len())
    });
    g.bench_function("decode_and_restore", |b| {
        b.iter(|| {
            let fresh = heap_table(SLOTS, W, [3, 4], Mode::Estimate);
            let f = decode(black_box(&bytes)).unwrap();
            fresh.table.restore(&f.table, T0 + 2).unwrap().live
        })
    });
    g.finish();
}

/// With `RLW_STATE_OUT=FILE`, also writes a state file of zone `per_ip`
/// (key `$http_x_key`, `window=1h`, `zone=per_ip:10m`) holding the same
/// 300,000 clients counted now, to measure nginx's restore and writes of
/// a full zone end to end.
fn export() {
    let Some(path) = std::env::var_os("RLW_STATE_OUT") else {
        return;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    // The slots of a 10m nginx zone: its pages less the slab pool's and
    // the zone header's (what Table::capacity_for gives nginx).
    let t = heap_table(655_104 - 256, W, [3, 4], Mode::Estimate);
    for i in 0..CLIENTS {
        t.table.acquire(
            t.table.hash_key(format!("c{i}").as_bytes()),
            now,
            100,
            FailPolicy::Open,
            0,
        );
    }
    let mut f = file(&t.table);
    f.identity.key = b"$http_x_key".to_vec();
    f.saved_ms = now;
    f.table = t.table.save(now);
    std::fs::write(path, encode(&f)).unwrap();
}

criterion_group!(benches, bench);
criterion_main!(benches);
