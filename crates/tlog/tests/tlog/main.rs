//! The integration tests of `rtloop-tlog`, one module per area, in one test binary: one link
//! for all of them instead of one per file. One area: `cargo test -p rtloop-tlog --test tlog <module>::`.

#![warn(clippy::undocumented_unsafe_blocks)]

// The no-allocation checks count the calls of their own thread only (testkit), so the
// other tests of this binary, running alongside, cannot disturb them.
#[global_allocator]
static ALLOCATOR: rtloop_testkit::CountingAllocator = rtloop_testkit::CountingAllocator;

mod causes;
mod columns;
mod durability;
mod export;
mod full_disk;
mod golden;
mod hostile;
mod reader;
mod realtime;
mod recovery;
mod special_files;
mod writer;
