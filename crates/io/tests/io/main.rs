//! The integration tests of `rtloop-io`, one module per area, in one test binary: one link
//! for all of them instead of one per file. One area: `cargo test -p rtloop-io --test io <module>::`.

#![warn(clippy::undocumented_unsafe_blocks)]

// The no-allocation checks count the calls of their own thread only (testkit), so the
// other tests of this binary, running alongside, cannot disturb them.
#[global_allocator]
static ALLOCATOR: rtloop_testkit::CountingAllocator = rtloop_testkit::CountingAllocator;

mod cycle;
mod fdcanusb;
mod late_replies;
mod no_alloc;
mod pi3hat;
mod pi3hat_hardware;
mod serve_console;
mod serve_pty;
mod socketcan;
mod udp;
