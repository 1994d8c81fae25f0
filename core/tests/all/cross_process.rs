//! Several processes (fork) on one MAP_SHARED region, as nginx workers are.
//!
//! The region is a memmap2 mapping of a temporary file, which memmap2 maps
//! MAP_SHARED (its `map_anon` would be MAP_PRIVATE: copy-on-write after
//! fork), so writes by one child are seen by all, as in an nginx zone.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use memmap2::MmapMut;
use rate_limit_window_core::*;

const T0: u64 = 1_767_225_600_000;
const CHILDREN: usize = 4;
const LEN: usize = 1 << 20;

/// A MAP_SHARED mapping of an unlinked temporary file.
struct Shared {
    /// Keeps the mapping alive (unmapped on drop).
    _map: MmapMut,
    ptr: *mut u8,
}

impl Shared {
    fn new(len: usize) -> Shared {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "rlw-cross-process-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .expect("temporary file");
        file.set_len(len as u64).expect("size the file");
        // SAFETY: the file was created above and is unlinked right after
        // mapping, so nothing else can change its size or contents.
        let mut map = unsafe { MmapMut::map_mut(&file) }.expect("MAP_SHARED mapping");
        std::fs::remove_file(&path).expect("unlink");
        let ptr = map.as_mut_ptr();
        Shared { _map: map, ptr }
    }
}

/// Forks `CHILDREN` children running `work(child)` after a common start
/// signal, waits for them and asserts they all exited 0.
fn run_children(start: &AtomicU32, work: impl Fn(usize)) {
    let mut pids = vec![];
    for child in 0..CHILDREN {
        // SAFETY: the child only touches the shared mapping and memory
        // prepared before the fork (no allocation), then calls _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            while start.load(Ordering::Acquire) == 0 {
                core::hint::spin_loop();
            }
            work(child);
            // SAFETY: leaves the child without running the parent's
            // destructors or test harness.
            unsafe { libc::_exit(0) };
        }
        pids.push(pid);
    }
    start.store(1, Ordering::Release);
    for pid in pids {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(r, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child failed: {status}"
        );
    }
    start.store(0, Ordering::Release);
}

#[test]
fn processes_share_one_table() {
    let shm = Shared::new(LEN + 64);
    // SAFETY: the first 64 bytes hold the start flag (mmap is page aligned).
    let start = unsafe { &*shm.ptr.cast::<AtomicU32>() };
    // SAFETY: the rest of the mapping is the table region, valid until `shm`
    // is dropped at the end of this test.
    let table = unsafe {
        Table::init(
            shm.ptr.add(64),
            LEN,
            Window::from_ms(60_000).unwrap(),
            [11, 22],
        )
    }
    .unwrap();

    // (a) One hot key, limit 1000, 4 x 2000 attempts at once: exactly 1000.
    let hot = table.hash_key(b"hot");
    run_children(start, |child| {
        let mut admitted = 0;
        for i in 0..2_000u64 {
            let d = table.acquire(hot, T0 + 1_000 + i % 7, 1_000, FailPolicy::Closed, child);
            if d.outcome == Outcome::Admitted {
                admitted += 1;
            }
        }
        table.add(child, Counter::Passed, admitted);
        table.add(child, Counter::Rejected, 2_000 - admitted);
    });
    assert_eq!(table.counter(Counter::Passed), 1_000);
    assert_eq!(table.counter(Counter::Rejected), 7_000);
    assert_eq!(table.peek(hot, T0 + 1_000).current, 1_000);

    // (b) Many keys, high limit, all processes on all keys: no lost count.
    let keys: Vec<KeyHash> = (0..2_000u32)
        .map(|i| table.hash_key(&i.to_le_bytes()))
        .collect();
    let keys = &keys;
    let per_child = 50_000u64;
    run_children(start, |child| {
        let mut admitted = 0;
        for i in 0..per_child {
            let k = keys[((i * 7 + child as u64 * 13) % keys.len() as u64) as usize];
            let d = table.acquire(k, T0 + 2_000, 1_000_000, FailPolicy::Closed, child);
            if d.outcome == Outcome::Admitted {
                admitted += 1;
            }
        }
        table.add(child, Counter::Exempt, admitted);
    });
    assert_eq!(table.counter(Counter::Exempt), per_child * CHILDREN as u64);
    let sum: u64 = keys
        .iter()
        .map(|&k| u64::from(table.peek(k, T0 + 2_000).current))
        .sum();
    assert_eq!(sum, per_child * CHILDREN as u64);
    assert_eq!(table.counter(Counter::FailClosed), 0);
    assert_eq!(table.slots_used(T0 + 2_000), keys.len() as u64 + 1);

    // A second "process" attaching to the region sees everything.
    // SAFETY: same region, still mapped.
    let again =
        unsafe { Table::attach(shm.ptr.add(64), LEN, Window::from_ms(60_000).unwrap()) }.unwrap();
    assert_eq!(again.peek(hot, T0 + 1_000).current, 1_000);
    assert_eq!(again.counter(Counter::Passed), 1_000);

    // (c) Two windows later, one process sweeps while three count new
    // keys: the sweep clears stale slots only, and no count of the new
    // window is lost to it (a slot claimed meanwhile fails the sweep's CAS,
    // a slot cleared first makes the claimer retry).
    let later = T0 + 120_000 + 500;
    // SAFETY: bytes 8..24 of the flag area, 8-byte aligned, zeroed.
    let (admitted_all, swept) = unsafe {
        (
            &*shm.ptr.add(8).cast::<AtomicU64>(),
            &*shm.ptr.add(16).cast::<AtomicU64>(),
        )
    };
    let fresh: Vec<KeyHash> = (0..1_000u32)
        .map(|i| table.hash_key(&(i + 1_000_000).to_le_bytes()))
        .collect();
    let fresh = &fresh;
    let per_child = 30_000u64;
    run_children(start, |child| {
        if child == 0 {
            let (mut at, mut n) = (0, 0);
            for _ in 0..2_000 {
                let (next, c) = table.sweep(later, at, 512);
                at = next;
                n += c as u64;
            }
            swept.store(n, Ordering::Relaxed);
            return;
        }
        let mut admitted = 0;
        for i in 0..per_child {
            let k = fresh[((i * 7 + child as u64 * 13) % fresh.len() as u64) as usize];
            let d = table.acquire(k, later, 1_000_000, FailPolicy::Closed, child);
            if d.outcome == Outcome::Admitted {
                admitted += 1;
            }
        }
        admitted_all.fetch_add(admitted, Ordering::Relaxed);
    });
    let expected = per_child * (CHILDREN as u64 - 1);
    assert_eq!(admitted_all.load(Ordering::Relaxed), expected);
    let sum: u64 = fresh
        .iter()
        .map(|&k| u64::from(table.peek(k, later).current))
        .sum();
    assert_eq!(sum, expected);
    // The sweep cleared the stale slots the new keys did not take over, and
    // nothing is left for another pass.
    let n = swept.load(Ordering::Relaxed);
    assert!(n > 0 && n <= keys.len() as u64 + 1, "swept {n}");
    assert_eq!(table.sweep(later, 0, table.capacity()).1, 0);
    assert_eq!(table.slots_used(later), fresh.len() as u64);
}
