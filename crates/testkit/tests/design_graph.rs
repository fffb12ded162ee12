//! docs/DESIGN.md states the crate graph; this checks it against the workspace as it is
//! (`cargo metadata --no-deps`): the library stands on its own (no `clap`, no `rtloop-lab`),
//! DESIGN.md's table lists exactly the dependencies between the workspace's packages (dev-
//! dependencies left out), and the committed picture (docs/images/crates.svg, drawn by
//! `tools/crate-graph`) has exactly the arrows of that graph's transitive reduction.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// package → (workspace package it depends on → whether that dependency is optional).
type Graph = BTreeMap<String, BTreeMap<String, bool>>;

/// package → every package it depends on (normal and build dependencies), by package name.
type Dependencies = BTreeMap<String, BTreeMap<String, bool>>;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(workspace().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// cargo-hakari's package: every member depends on it so that each dependency is built with one
/// feature set whatever the cargo command; a build artifact, not part of the design.
const WORKSPACE_HACK: &str = "rtloop-workspace-hack";

/// Each workspace package's normal and build dependencies, from `cargo metadata --no-deps`
/// (cargo-hakari's package left out).
fn dependencies() -> Dependencies {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--no-deps", "--format-version", "1", "--manifest-path"])
        .arg(workspace().join("Cargo.toml"))
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let mut all = Dependencies::new();
    for package in metadata["packages"].as_array().expect("packages") {
        if package["name"].as_str() == Some(WORKSPACE_HACK) {
            continue;
        }
        let deps = all.entry(package["name"].as_str().expect("a name").to_string()).or_default();
        for dep in package["dependencies"].as_array().expect("dependencies") {
            if dep["kind"].as_str() == Some("dev") || dep["name"].as_str() == Some(WORKSPACE_HACK) {
                continue;
            }
            let optional = dep["optional"].as_bool().unwrap_or(false);
            // Listed twice (say, normal and build): optional only if optional both times.
            let o = deps.entry(dep["name"].as_str().expect("a name").to_string()).or_insert(true);
            *o = *o && optional;
        }
    }
    all
}

/// The dependencies between the workspace's own packages.
fn workspace_graph(deps: &Dependencies) -> Graph {
    deps.iter()
        .map(|(name, d)| {
            let own = d.iter().filter(|(dep, _)| deps.contains_key(*dep)).map(|(k, v)| (k.clone(), *v)).collect();
            (name.clone(), own)
        })
        .collect()
}

/// The graph without the edges a longer path of non-optional edges already implies.
fn reduced(graph: &Graph) -> BTreeSet<(String, String)> {
    let reachable_without = |from: &str, skip: (&str, &str)| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(node) = todo.pop() {
            for (dep, optional) in graph.get(&node).into_iter().flatten() {
                if (node.as_str(), dep.as_str()) != skip && !optional && seen.insert(dep.clone()) {
                    todo.push(dep.clone());
                }
            }
        }
        seen
    };
    graph
        .iter()
        .flat_map(|(name, deps)| deps.keys().map(move |dep| (name.clone(), dep.clone())))
        .filter(|(name, dep)| !reachable_without(name, (name, dep)).contains(dep))
        .collect()
}

/// DESIGN.md's table after the `<!-- crate graph` marker: `| \`package\` | \`dep\`, … |`, a
/// dependency marked optional when `(optional` follows it.
fn design_table(design: &str) -> Graph {
    let start = design.find("<!-- crate graph").expect("docs/DESIGN.md has the crate graph table after its marker");
    let mut graph = Graph::new();
    for line in design[start..].lines().skip(1).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [package, deps] = cells[..] else { panic!("docs/DESIGN.md: a row of two cells: {line}") };
        let Some(package) = package.strip_prefix('`').and_then(|p| p.strip_suffix('`')) else {
            continue; // the header and its rule
        };
        let mut edges = BTreeMap::new();
        for (i, part) in deps.split('`').enumerate().skip(1) {
            if i % 2 == 1 {
                let after = deps.split('`').nth(i + 1).unwrap_or("");
                edges.insert(part.to_string(), after.trim_start().starts_with("(optional"));
            }
        }
        assert!(graph.insert(package.to_string(), edges).is_none(), "docs/DESIGN.md lists {package} twice");
    }
    graph
}

/// The arrows of the committed picture: each edge's SVG title is `a&#45;&gt;b`, node ids
/// being package names with `-` spelled `_` (tools/crate-graph).
fn svg_edges(svg: &str) -> (BTreeSet<String>, BTreeSet<(String, String)>) {
    let mut nodes = BTreeSet::new();
    let mut edges = BTreeSet::new();
    for title in svg.split("<title>").skip(1).filter_map(|t| t.split_once("</title>")).map(|(t, _)| t) {
        match title.split_once("&#45;&gt;") {
            Some((a, b)) => edges.insert((a.replace('_', "-"), b.replace('_', "-"))),
            None => nodes.insert(title.replace('_', "-")),
        };
    }
    nodes.remove("crates"); // the graph's own title
    (nodes, edges)
}

#[test]
fn the_rtloop_library_depends_on_neither_clap_nor_the_lab_and_the_command_does() {
    let deps = dependencies();
    let library = deps.get("rtloop").expect("a package named rtloop");
    let cli_only: Vec<&str> = ["clap", "rtloop-lab"].into_iter().filter(|d| library.contains_key(*d)).collect();
    assert!(
        cli_only.is_empty(),
        "the rtloop library depends on {}: the command's parser (clap) and the latency lab (rtloop-lab) \
         belong to the rtloop-cli package, the program that uses the library (docs/DESIGN.md)",
        cli_only.join(" and ")
    );
    let cli = deps.get("rtloop-cli").expect("a package named rtloop-cli (the rtloop command)");
    for dep in ["rtloop", "rtloop-lab", "clap"] {
        assert!(cli.contains_key(dep), "rtloop-cli does not depend on {dep}");
    }
}

#[test]
fn design_md_lists_every_dependency_between_the_workspace_packages() {
    let actual = workspace_graph(&dependencies());
    let stated = design_table(&read("docs/DESIGN.md"));
    let describe = |edges: Option<&BTreeMap<String, bool>>| match edges {
        None => "nothing (no row)".to_string(),
        Some(e) if e.is_empty() => "—".to_string(),
        Some(e) => {
            e.iter().map(|(d, o)| if *o { format!("{d} (optional)") } else { d.clone() }).collect::<Vec<_>>().join(", ")
        }
    };
    let mut wrong = Vec::new();
    for name in actual.keys().chain(stated.keys()).collect::<BTreeSet<_>>() {
        let (a, s) = (actual.get(name), stated.get(name));
        if a != s {
            let a = if a.is_none() { "no such package".to_string() } else { describe(a) };
            wrong.push(format!("  {name}: DESIGN.md says {}; cargo metadata says {a}", describe(s)));
        }
    }
    assert!(wrong.is_empty(), "docs/DESIGN.md's crate graph is not the workspace's:\n{}", wrong.join("\n"));
}

#[test]
fn the_crate_graph_picture_draws_the_workspace_graph() {
    let actual = workspace_graph(&dependencies());
    let (nodes, edges) = svg_edges(&read("docs/images/crates.svg"));
    let want_nodes: BTreeSet<String> = actual.keys().cloned().collect();
    let want_edges = reduced(&actual);
    assert!(
        nodes == want_nodes && edges == want_edges,
        "docs/images/crates.svg is not the workspace's graph (redraw it: tools/crate-graph --svg \
         docs/images/crates.svg):\n  packages drawn but gone: {:?}\n  packages missing: {:?}\n  arrows \
         drawn but not in the graph: {:?}\n  arrows missing: {:?}",
        nodes.difference(&want_nodes).collect::<Vec<_>>(),
        want_nodes.difference(&nodes).collect::<Vec<_>>(),
        edges.difference(&want_edges).collect::<Vec<_>>(),
        want_edges.difference(&edges).collect::<Vec<_>>()
    );
}

#[test]
fn the_picture_is_the_transitive_reduction_and_the_table_parser_reads_optional_edges() {
    // c -> b -> a and c -> a: the picture drops c -> a; an optional path implies nothing.
    let g = |edges: &[(&str, &str, bool)]| {
        let mut graph = Graph::new();
        for (a, b, o) in edges {
            graph.entry(a.to_string()).or_default().insert(b.to_string(), *o);
            graph.entry(b.to_string()).or_default();
        }
        graph
    };
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    let graph = g(&[("c", "b", false), ("b", "a", false), ("c", "a", false)]);
    assert_eq!(reduced(&graph), [pair("b", "a"), pair("c", "b")].into_iter().collect());
    let graph = g(&[("c", "b", false), ("b", "a", true), ("c", "a", false)]);
    assert_eq!(reduced(&graph).len(), 3);
    let table = "<!-- crate graph -->\n| package | depends on |\n|---|---|\n| `x` | — |\n| `y` | `x`, `z` (optional, feature f) |\n\ntext";
    let parsed = design_table(table);
    assert_eq!(parsed["x"], BTreeMap::new());
    assert_eq!(parsed["y"], [("x".to_string(), false), ("z".to_string(), true)].into_iter().collect());
}
