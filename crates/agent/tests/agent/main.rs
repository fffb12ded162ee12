//! The integration tests of `rtloop-agent`, one module per area, in one test binary: one link
//! for all of them instead of one per file. One area: `cargo test -p rtloop-agent --test agent <module>::`.

#![warn(clippy::undocumented_unsafe_blocks)]

// The no-allocation checks count the calls of their own thread only (testkit), so the
// other tests of this binary, running alongside, cannot disturb them.
#[global_allocator]
static ALLOCATOR: rtloop_testkit::CountingAllocator = rtloop_testkit::CountingAllocator;

mod common;

mod c_agent;
mod causes;
mod hostile;
mod layout_docs;
mod no_alloc;
mod segment;
mod shrink;
mod spine_agent;
