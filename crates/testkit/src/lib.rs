//! # rtloop-testkit — proof that hot paths never touch the allocator
//!
//! A global allocator that counts the allocator calls (alloc, alloc_zeroed, realloc and
//! dealloc) made by the *calling thread* while counting is switched on. Both the switch and
//! the count are per thread: the test harness allocates on its own threads at any time, and
//! tests run in parallel, so a shared counter would blame one test for another's work.
//!
//! Use it from a test binary:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: testkit::CountingAllocator = testkit::CountingAllocator;
//!
//! let (calls, ()) = testkit::count_allocations(|| hot_path());
//! assert_eq!(calls, 0);
//! ```
//!
//! Must never: allocate itself, or change what the system allocator returns.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The counting allocator; install it with `#[global_allocator]` in a test binary.
pub struct CountingAllocator;

thread_local! {
    // Const initialisers without destructors: reading them from inside the allocator never
    // allocates or registers anything.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = CALLS.try_with(|c| c.set(c.get() + 1));
    }
}

// SAFETY: every method forwards to the system allocator with the caller's arguments
// unchanged; counting touches only const thread-locals and has no effect on the memory.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Start counting this thread's allocator calls (from zero).
pub fn start_counting() {
    CALLS.with(|c| c.set(0));
    COUNTING.with(|c| c.set(true));
}

/// Stop counting; returns this thread's calls since [`start_counting`].
pub fn stop_counting() -> u64 {
    COUNTING.with(|c| c.set(false));
    CALLS.with(Cell::get)
}

/// Run `f` and return the allocator calls it made on this thread, with its result.
pub fn count_allocations<R>(f: impl FnOnce() -> R) -> (u64, R) {
    start_counting();
    let r = f();
    (stop_counting(), r)
}
