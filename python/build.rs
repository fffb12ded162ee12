//! With the `physics` feature, the extension module finds MuJoCo's library where it was linked from.
include!("../crates/physics/rpath.rs");

fn main() {
    mujoco_rpath();
}
