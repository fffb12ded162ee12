//! The rtloop library without its command: runs through [`rtloop::Runtime`], the live
//! publishers, the examples, the encoder against the moteus Python client, and the rule
//! that the real-time section never allocates. One test binary, one module per subject.

/// The examples and the no-allocation tests count the cycle thread's allocations. Counting is
/// per thread (on only where a test turned it on), so the other tests are not disturbed.
#[global_allocator]
static ALLOCATOR: rtloop_testkit::CountingAllocator = rtloop_testkit::CountingAllocator;

#[path = "../../../rtloop-cli/tests/cli/support/mod.rs"]
mod support;

mod causes;
mod control_failure;
mod examples;
mod fault_seeds;
mod foxglove_server;
mod live_publish;
mod python_encoder;
mod rt_no_alloc;
