//! When a build turns MuJoCo on (the workspace's test features unify rtloop-physics's
//! `mujoco` in), the fuzzing tests find its library where it was linked from.
include!("../physics/rpath.rs");

fn main() {
    mujoco_rpath();
}
