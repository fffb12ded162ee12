//! With MuJoCo: the directory its library was linked from is where the executables look for
//! it at run time (an rpath), so nobody has to set a library path. Dependent packages read it
//! as `DEP_RTLOOP_MUJOCO_LIBDIR` (see `rpath.rs`, which their own build scripts include).
fn main() {
    println!("cargo::rerun-if-env-changed=MUJOCO_DYNAMIC_LINK_DIR");
    if std::env::var_os("CARGO_FEATURE_MUJOCO").is_none() {
        return;
    }
    if let Ok(dir) = std::env::var("MUJOCO_DYNAMIC_LINK_DIR") {
        println!("cargo::metadata=libdir={dir}");
        println!("cargo::rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
