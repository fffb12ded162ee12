//! The integration tests of `rtloop-simrobot`: rtloop-io's cycle, pi3hat driver and
//! diagnostic client against the simulated robot, and the simulator served behind a pty and
//! UDP. One test binary, one link; one area: `cargo test -p rtloop-simrobot --test simrobot <module>::`.

#![warn(clippy::undocumented_unsafe_blocks)]

// The no-allocation checks count the calls of their own thread only (testkit), so the
// other tests of this binary, running alongside, cannot disturb them.
#[global_allocator]
static ALLOCATOR: rtloop_testkit::CountingAllocator = rtloop_testkit::CountingAllocator;

mod cycle;
mod diagnostic;
mod late_replies;
mod no_alloc;
mod pi3hat;
mod serve_console;
mod serve_pty;
mod udp;
