//! With the `physics` feature, the `rtloop` program and its tests find MuJoCo's library where it was linked from.
include!("../physics/rpath.rs");

fn main() {
    mujoco_rpath();
}
