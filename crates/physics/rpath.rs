// Included by the build scripts of packages whose executables link MuJoCo through
// rtloop-physics (`include!("../physics/rpath.rs")`): records the library's directory as the
// executables' run-time search path, so they start without a library path being set.
fn mujoco_rpath() {
    if let Ok(dir) = std::env::var("DEP_RTLOOP_MUJOCO_LIBDIR") {
        println!("cargo::rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
