//! The integration tests of `rtloop-fuzzing`, one module per area, in one test binary: one link
//! for all of them instead of one per file. One area: `cargo test -p rtloop-fuzzing --test fuzzing <module>::`.

#![forbid(unsafe_code)]

mod corpus;
