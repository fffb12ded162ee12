//! The seqlock both blocks use: one writer, any number of readers, readers never block the
//! writer.
//!
//! Word 0 of a block is its sequence `seq`, even when the block is stable. The writer:
//!
//! 1. `seq = s + 1` (relaxed store; odd: writing), then a **release fence**;
//! 2. the payload, word by word (relaxed atomic stores);
//! 3. `seq = s + 2` (release store).
//!
//! The reader:
//!
//! 1. `s1 = seq` (acquire load); odd: the writer is busy, try again;
//! 2. copy the payload word by word (relaxed atomic loads) into private memory;
//! 3. an **acquire fence**, then `s2 = seq` (relaxed load);
//! 4. `s1 == s2`: the copy is one whole write; otherwise try again.
//!
//! Why this is enough (Boehm, "Can seqlocks get along with programming language memory
//! models?", 2012): if the reader's step-1 load sees `s + 2`, the writer's release store
//! makes every payload store of that write visible to the copy. If the copy saw any word
//! of a *later* write, that word was stored after the later write's release fence, so the
//! fence pair (writer's release fence, reader's acquire fence) makes the later write's odd
//! `seq` store happen before the reader's step-3 load, which then cannot return `s1`. Every
//! shared access is atomic, so there is no data race in the Rust (C11) memory model even
//! while a hostile peer writes at will; on x86-64 and AArch64 the relaxed word accesses
//! compile to plain loads and stores, so the copy costs what `memcpy` would.
//!
//! The sequence a reader trusts is only compared for equality, never used as an index, and
//! the writer keeps its own count: a peer that scribbles on `seq` can make reads fail
//! (reported as torn), never make them return memory outside the block.

use crate::layout::Plain;
use core::sync::atomic::{fence, AtomicU64, Ordering};

/// The reader gave up: the writer was mid-write (or left `seq` odd) on every try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Torn;

/// Words of `T` (8 bytes each).
const fn words<T: Plain>() -> usize {
    size_of::<T>() / 8
}

/// Copy a block out of shared memory under the seqlock, trying at most `tries` times.
/// On success `dst` holds one whole write (its `seq` word included) and the sequence is
/// returned.
///
/// # Safety
/// `src` must point to `size_of::<T>()` readable bytes, 8-byte aligned, that stay mapped for
/// the call and are only ever accessed atomically by anyone else in this process.
pub(crate) unsafe fn read<T: Plain>(src: *const u8, dst: &mut T, tries: u32) -> Result<u64, Torn> {
    let src = src.cast::<AtomicU64>();
    let dst = (dst as *mut T).cast::<u64>();
    for _ in 0..tries {
        // SAFETY: word 0 of the block is in bounds and aligned (caller's contract).
        let s1 = unsafe { &*src }.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            core::hint::spin_loop();
            continue;
        }
        for i in 1..words::<T>() {
            // SAFETY: `i < words::<T>()`, so both words are inside their blocks; `src` is
            // accessed atomically, `dst` is our exclusive `&mut T` seen as words (`T: Plain`
            // is 8-aligned, a whole number of words, any bit pattern valid).
            unsafe { dst.add(i).write((*src.add(i)).load(Ordering::Relaxed)) };
        }
        fence(Ordering::Acquire);
        // SAFETY: as above.
        let s2 = unsafe { &*src }.load(Ordering::Relaxed);
        if s1 == s2 {
            // SAFETY: word 0 of our own block.
            unsafe { dst.write(s1) };
            return Ok(s1);
        }
        core::hint::spin_loop();
    }
    Err(Torn)
}

/// The block's sequence word as it is now (one acquire load): a reader that saw this even
/// value at its last consistent read knows nothing changed since, without copying.
///
/// # Safety
/// `src` points at the first (8-aligned) word of a mapped block.
pub(crate) unsafe fn sequence(src: *const u8) -> u64 {
    // SAFETY: the caller's contract: word 0 is in bounds and aligned.
    unsafe { &*src.cast::<AtomicU64>() }.load(Ordering::Acquire)
}

/// Write a block into shared memory under the seqlock. `seq` is the writer's own count (an
/// even number, the block's current sequence); it is advanced by 2. `src`'s own `seq` word is
/// not copied.
///
/// # Safety
/// `dst` must point to `size_of::<T>()` writable bytes, 8-byte aligned, that stay mapped for
/// the call and are only ever accessed atomically by anyone else in this process; the caller
/// must be the block's only writer.
pub(crate) unsafe fn write<T: Plain>(dst: *mut u8, src: &T, seq: &mut u64) {
    let dst = dst.cast::<AtomicU64>();
    let src = (src as *const T).cast::<u64>();
    let s = *seq & !1;
    // SAFETY: word 0 is in bounds and aligned (caller's contract).
    let seq_word = unsafe { &*dst };
    seq_word.store(s.wrapping_add(1), Ordering::Relaxed);
    fence(Ordering::Release);
    for i in 1..words::<T>() {
        // SAFETY: `i < words::<T>()`: in bounds of both blocks; `src` is a `Plain` value
        // (no uninitialised padding) read as words.
        unsafe { (*dst.add(i)).store(src.add(i).read(), Ordering::Relaxed) };
    }
    let next = s.wrapping_add(2);
    seq_word.store(next, Ordering::Release);
    *seq = next;
}
