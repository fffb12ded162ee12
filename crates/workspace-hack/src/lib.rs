//! # rtloop-workspace-hack — one feature set for every dependency, whatever the cargo command
//!
//! Generated and kept by `cargo hakari` (`cargo install cargo-hakari`): every workspace member
//! but the no_std protocol crate and the Python package depends on this empty crate, whose own dependencies ask for the union of the features the
//! workspace asks for. Without it, `cargo test -p rtloop-tlog` resolves serde, syn, rand, … with
//! other features than `cargo test --workspace` and rebuilds them and everything above them
//! each time one switches. After changing a dependency: `cargo hakari generate && cargo hakari
//! manage-deps` (`.ci/run` checks it when cargo-hakari is installed).
//!
//! Must never: hold code, or be a dependency of `rtloop-proto` (no_std: its std dependencies
//! would break an embedded build) or of the Python package's own manifest (maturin builds it
//! alone); `.config/hakari.toml` leaves both out.
