//! The integration tests of `rtloop-output`, one module per area, in one test binary: one link
//! for all of them instead of one per file. One area: `cargo test -p rtloop-output --test output <module>::`.

#![warn(clippy::undocumented_unsafe_blocks)]

mod causes;
mod destinations;
mod dir;
