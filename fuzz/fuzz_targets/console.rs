#![no_main]
// The body lives in crates/fuzzing so that `cargo test` replays this target's corpus and
// crash files on stable (crates/fuzzing/tests/fuzzing/corpus.rs).
libfuzzer_sys::fuzz_target!(|data: &[u8]| rtloop_fuzzing::console(data));
