//! With the `physics` feature, the tests and examples find MuJoCo's library where it was linked from.
include!("../physics/rpath.rs");

fn main() {
    mujoco_rpath();
}
