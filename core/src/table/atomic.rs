//! The two 16-byte atomic operations the table's hot path uses: load and
//! compare-and-swap of one slot.
//!
//! `portable-atomic` (without `-C target-feature=+cmpxchg16b,+avx` at build
//! time) picks its 128-bit load and CAS at run time and calls them through a
//! function pointer: one indirect call per slot read, which was most of the
//! cost of a decision. [`Ops`] makes the same run-time choice once, when a
//! [`Table`](crate::Table) is made, and then inlines the very instructions
//! `portable-atomic` would have called:
//!
//! * load: `vmovdqa` on CPUs with AVX (enabled by the OS), on which Intel
//!   and AMD guarantee that an aligned 16-byte `vmovdqa` is a single atomic
//!   access (Intel SDM vol. 3A §9.1.1, AMD APM vol. 2 §7.3.2; LLVM, GCC's
//!   libatomic and `portable-atomic` rely on it);
//! * CAS: `lock cmpxchg16b`.
//!
//! Both are SeqCst, so they are at least as strong as the orderings the
//! table asks for. Every access to a slot is one of these 16-byte atomic
//! instructions (or `portable-atomic`'s, which are the same instructions):
//! no mixed-size or non-atomic access ever touches a slot.
//!
//! Everywhere else (no AVX, another architecture, Miri) [`Ops`] calls
//! `portable-atomic`.

use portable_atomic::{AtomicU128, Ordering};

/// The chosen implementation of slot loads and CASes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ops {
    /// Inline `vmovdqa` / `lock cmpxchg16b` (x86_64 with AVX and CMPXCHG16B).
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    inline: bool,
    /// `inline`, and the CPU has AVX2 (for [`crate::table::scan`]).
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    avx2: bool,
}

impl Ops {
    /// Detects the CPU's features (once per table; `std` caches them).
    pub(crate) fn detect() -> Ops {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        let inline = std::arch::is_x86_feature_detected!("avx")
            && std::arch::is_x86_feature_detected!("cmpxchg16b");
        Ops {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            inline,
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            avx2: inline && std::arch::is_x86_feature_detected!("avx2"),
        }
    }

    /// The same operations without the AVX2 group scan (tests compare the
    /// two scans).
    #[cfg(test)]
    pub(crate) fn without_avx2(self) -> Ops {
        Ops {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            avx2: false,
            ..self
        }
    }

    /// Whether [`crate::table::scan`] may use its AVX2 code (x86_64 only).
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    #[inline(always)]
    pub(crate) fn avx2(self) -> bool {
        self.avx2
    }

    /// Atomic (SeqCst) load of a slot.
    #[inline(always)]
    pub(crate) fn load(self, a: &AtomicU128) -> u128 {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        if self.inline {
            // SAFETY: `a` is a valid, 16-byte aligned AtomicU128 only ever
            // accessed atomically; `inline` implies AVX is available.
            return unsafe { x86::load_vmovdqa(a.as_ptr()) };
        }
        a.load(Ordering::Acquire)
    }

    /// Atomic (SeqCst) load of a slot into an SSE register, for the AVX2
    /// group scan.
    ///
    /// # Safety
    /// Only when [`Ops::avx2`] is true.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    #[inline(always)]
    pub(crate) unsafe fn load_m128(self, a: &AtomicU128) -> core::arch::x86_64::__m128i {
        debug_assert!(self.avx2);
        // SAFETY: as in `load`; the caller guarantees AVX.
        unsafe { x86::load_m128(a.as_ptr()) }
    }

    /// Atomic (SeqCst) compare-and-swap of a slot; true if it held `old` and
    /// now holds `new`.
    #[inline(always)]
    pub(crate) fn cas(self, a: &AtomicU128, old: u128, new: u128) -> bool {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        if self.inline {
            // SAFETY: as in `load`; `inline` implies CMPXCHG16B.
            return unsafe { x86::cmpxchg16b(a.as_ptr(), old, new) };
        }
        a.compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod x86 {
    use core::arch::asm;
    use core::arch::x86_64::__m128i;

    /// # Safety
    /// As [`load_vmovdqa`].
    #[inline(always)]
    pub(super) unsafe fn load_m128(src: *mut u128) -> __m128i {
        debug_assert!((src as usize).is_multiple_of(16));
        let out: __m128i;
        // SAFETY: per the contract. No `readonly`/`nomem`: the asm is also
        // a compiler barrier (the load is SeqCst).
        unsafe {
            asm!(
                "vmovdqa {out}, xmmword ptr [{src}]",
                src = in(reg) src,
                out = out(xmm_reg) out,
                options(nostack, preserves_flags),
            );
        }
        out
    }

    /// # Safety
    /// `src` is valid, 16-byte aligned, only accessed atomically, and the
    /// CPU has AVX enabled.
    #[inline(always)]
    pub(super) unsafe fn load_vmovdqa(src: *mut u128) -> u128 {
        debug_assert!((src as usize).is_multiple_of(16));
        let (lo, hi): (u64, u64);
        // SAFETY: per the contract. One 16-byte load; the two halves are
        // then copied out of the register (VEX `vmovq`/`vpextrq`, AVX
        // implies them). No `readonly`/`nomem`: the asm is also a compiler
        // barrier (the load is SeqCst).
        unsafe {
            asm!(
                "vmovdqa {x}, xmmword ptr [{src}]",
                "vmovq {lo}, {x}",
                "vpextrq {hi}, {x}, 1",
                src = in(reg) src,
                x = out(xmm_reg) _,
                lo = out(reg) lo,
                hi = out(reg) hi,
                options(nostack, preserves_flags),
            );
        }
        u128::from(lo) | u128::from(hi) << 64
    }

    /// # Safety
    /// `dst` is valid for reads and writes, 16-byte aligned, only accessed
    /// atomically, and the CPU has CMPXCHG16B.
    #[inline(always)]
    pub(super) unsafe fn cmpxchg16b(dst: *mut u128, old: u128, new: u128) -> bool {
        debug_assert!((dst as usize).is_multiple_of(16));
        let failed: u8;
        // SAFETY: per the contract. rbx is reserved by LLVM, so the low half
        // of `new` goes through r8 and rbx is restored afterwards.
        // `lock cmpxchg16b` compares rdx:rax with [dst] and stores rcx:rbx
        // there if equal (ZF = 1), atomically.
        unsafe {
            asm!(
                "xchg r8, rbx",
                "lock cmpxchg16b xmmword ptr [rsi]",
                "setne cl",
                "mov rbx, r8",
                inout("r8") new as u64 => _,
                in("rcx") (new >> 64) as u64,
                inout("rax") old as u64 => _,
                inout("rdx") (old >> 64) as u64 => _,
                in("rsi") dst,
                lateout("cl") failed,
                // Not `preserves_flags`: cmpxchg16b sets ZF.
                options(nostack),
            );
        }
        failed == 0
    }
}
