//! The integration tests of `rtloop-sim`, one module per area, in one test binary: one link
//! for all of them instead of one per file. One area: `cargo test -p rtloop-sim --test sim <module>::`.

#![forbid(unsafe_code)]

// The no-allocation checks count the calls of their own thread only (testkit), so the
// other tests of this binary, running alongside, cannot disturb them.
#[global_allocator]
static ALLOCATOR: rtloop_testkit::CountingAllocator = rtloop_testkit::CountingAllocator;

mod common;

mod bus;
mod console;
mod faults;
mod model_sweep;
mod no_alloc;
mod pi3hat;
mod servo;
