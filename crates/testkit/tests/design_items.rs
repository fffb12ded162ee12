//! docs/DESIGN.md names the items each crate offers the others as paths in backticks
//! (`rtloop_io::Transport::send`, `rtloop_simrobot::SimRobot::advance_to`, …). Every such
//! path must name something the code defines: each segment after the crate is a module, type,
//! trait, function, constant, field or variant of that crate (a `pub use` counts), so the
//! document cannot keep naming what is gone. (The crate graph is checked by design_graph.rs.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Library name → the folder of its sources.
fn crates() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([
        ("rtloop_proto", "crates/proto/src"),
        ("rtloop_sim", "crates/sim/src"),
        ("rtloop_io", "crates/io/src"),
        ("rtloop_simrobot", "crates/simrobot/src"),
        ("rtloop_physics", "crates/physics/src"),
        ("rtloop_rt", "crates/rt/src"),
        ("rtloop_tlog", "crates/tlog/src"),
        ("rtloop_output", "crates/output/src"),
        ("rtloop_parquet", "crates/parquet/src"),
        ("rtloop_agent", "crates/agent/src"),
        ("rtloop_lab", "crates/lab/src"),
        ("rtloop_testkit", "crates/testkit/src"),
        ("rtloop_fuzzing", "crates/fuzzing/src"),
        ("rtloop", "crates/rtloop/src"),
    ])
}

/// Every `.rs` file under `dir`, read.
fn sources(dir: &Path) -> String {
    let mut out = String::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push_str(&std::fs::read_to_string(&p).unwrap());
                out.push('\n');
            }
        }
    }
    out
}

/// Whether `code` defines `name`: as an item (`fn`, `struct`, `mod`, …, or a `use … as name`
/// / a `use` list that names it), or as a field or enum variant (a line that starts with it).
fn defines(code: &str, name: &str) -> bool {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let word_after = |text: &str, kw: &str| {
        text.match_indices(kw).any(|(i, _)| {
            let rest = &text[i + kw.len()..];
            let before_ok = i == 0 || !text[..i].ends_with(is_ident);
            before_ok && rest.starts_with(name) && !rest[name.len()..].starts_with(is_ident)
        })
    };
    for kw in ["fn ", "struct ", "enum ", "trait ", "type ", "const ", "static ", "mod ", " as ", "macro_rules! "] {
        if word_after(code, kw) {
            return true;
        }
    }
    code.lines().any(|line| {
        let t = line.trim_start().trim_start_matches("pub ").trim_start_matches("pub(crate) ");
        let re_exported = t.starts_with("pub use") || line.trim_start().starts_with("pub use");
        (t.starts_with(name) && t[name.len()..].trim_start().starts_with([':', ',', '(', '{', '=']))
            || (re_exported && line.split(|c: char| !is_ident(c)).any(|w| w == name))
    })
}

/// The backticked `rtloop…::…` paths of `text`.
fn paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for chunk in text.split('`').skip(1).step_by(2) {
        let p = chunk.trim().trim_end_matches("()");
        if p.starts_with("rtloop") && p.contains("::") && p.chars().all(|c| c.is_alphanumeric() || c == '_' || c == ':')
        {
            out.push(p.to_string());
        }
    }
    out
}

#[test]
fn every_item_design_md_names_is_in_the_code() {
    let design = std::fs::read_to_string(workspace().join("docs/DESIGN.md")).unwrap();
    let crates = crates();
    let mut code_of: BTreeMap<&str, String> = BTreeMap::new();
    let mut missing = Vec::new();
    let found = paths(&design);
    assert!(found.len() > 80, "DESIGN.md names only {} items in `rtloop_…::…` form", found.len());
    for path in &found {
        let mut segments = path.split("::");
        let lib = segments.next().unwrap();
        let Some(dir) = crates.get(lib) else {
            missing.push(format!("{path}: no library {lib}"));
            continue;
        };
        let code = code_of.entry(lib).or_insert_with(|| sources(&workspace().join(dir)));
        for segment in segments {
            if !defines(code, segment) {
                missing.push(format!("{path}: `{segment}` is not defined in {dir}"));
                break;
            }
        }
    }
    assert!(missing.is_empty(), "docs/DESIGN.md names items the code does not have:\n  {}", missing.join("\n  "));
}

#[test]
fn the_checker_finds_what_is_defined_and_refuses_what_is_not() {
    let code = "pub struct Cycler {\n    clock: C,\n}\npub enum E {\n    QueueFull,\n    Os(i32),\n}\npub fn open_buses() {}\npub use a::{Thing, Other as Renamed};\n";
    for name in ["Cycler", "clock", "QueueFull", "Os", "open_buses", "Thing", "Renamed"] {
        assert!(defines(code, name), "{name}");
    }
    for name in ["Cycle", "open", "Missing", "Other2"] {
        assert!(!defines(code, name), "{name}");
    }
    assert_eq!(
        paths("a `rtloop_io::Transport::send` and `x::y` and `rtloop::Runtime::run()`"),
        ["rtloop_io::Transport::send", "rtloop::Runtime::run"]
    );
}
