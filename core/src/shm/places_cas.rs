//! The places' 128-bit compare-and-swap on the request path: inline
//! `lock cmpxchg16b` on x86_64, where portable-atomic (built without
//! `-C target-feature=+cmpxchg16b`) calls through a function pointer it
//! picks at run time. Used only on places that [`Places::attach`] accepted,
//! which it does only where `AtomicU128::is_lock_free()`: on x86_64, a CPU
//! that has cmpxchg16b (portable-atomic's own run-time check).
//!
//! [`Places::attach`]: super::Places::attach

use portable_atomic::AtomicU128;

/// Replaces `a`'s value by `new` if it is `old`, sequentially consistent
/// (as `lock cmpxchg16b` always is): Ok(`old`), else Err(the value found).
#[inline(always)]
pub(super) fn compare_exchange(a: &AtomicU128, old: u128, new: u128) -> Result<u128, u128> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `a` is a live, 16-byte aligned atomic, only accessed
        // atomically; the CPU has cmpxchg16b (the module's doc).
        unsafe { cmpxchg16b(a.as_ptr(), old, new) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use core::sync::atomic::Ordering;
        a.compare_exchange(old, new, Ordering::SeqCst, Ordering::SeqCst)
    }
}

/// `lock cmpxchg16b` at `dst`.
///
/// # Safety
/// `dst` is valid for reads and writes, 16-byte aligned, only accessed
/// atomically meanwhile, and the CPU has cmpxchg16b.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn cmpxchg16b(dst: *mut u128, old: u128, new: u128) -> Result<u128, u128> {
    let (lo, hi): (u64, u64);
    let same: u8;
    // SAFETY: the caller's. cmpxchg16b compares rdx:rax with the 16 bytes
    // at `dst`: equal, it stores rcx:rbx there and sets ZF; else it loads
    // them into rdx:rax and clears ZF. rbx cannot be an operand (LLVM
    // may use it): the low half of `new` goes in through r8, swapped with
    // rbx around the instruction, and every operand has a fixed register
    // (a register of the `reg` class may be rbx itself).
    unsafe {
        core::arch::asm!(
            "xchg r8, rbx",
            "lock cmpxchg16b xmmword ptr [rsi]",
            "sete cl",
            "mov rbx, r8",
            inout("r8") new as u64 => _,
            in("rsi") dst,
            in("rcx") (new >> 64) as u64,
            lateout("cl") same,
            inout("rax") old as u64 => lo,
            inout("rdx") (old >> 64) as u64 => hi,
            options(nostack),
        );
    }
    let found = u128::from(lo) | (u128::from(hi) << 64);
    if same != 0 {
        Ok(found)
    } else {
        Err(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::Ordering;

    #[test]
    fn swaps_only_the_value_it_was_given() {
        let old = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210_u128;
        let new = 0xffff_0000_1111_2222_3333_4444_5555_6666_u128;
        let a = AtomicU128::new(old);
        assert_eq!(compare_exchange(&a, new, 7), Err(old), "not the value");
        assert_eq!(a.load(Ordering::SeqCst), old);
        assert_eq!(compare_exchange(&a, old, new), Ok(old));
        assert_eq!(a.load(Ordering::SeqCst), new);
        assert_eq!(compare_exchange(&a, old, 1), Err(new));
    }

    #[test]
    fn concurrent_increments_are_all_counted() {
        let a = AtomicU128::new(0);
        let one = (1u128 << 64) | 1;
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        let mut w = a.load(Ordering::Acquire);
                        while let Err(now) = compare_exchange(&a, w, w + one) {
                            w = now;
                        }
                    }
                });
            }
        });
        assert_eq!(a.load(Ordering::SeqCst), 40_000 * one);
    }
}
