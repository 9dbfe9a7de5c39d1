//! The checker on small crates written to a temporary folder.

use super::*;

/// Writes `files` (path, text) under a new temporary folder.
fn package(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

/// The library crate of a package made of `files`.
fn lib(files: &[(&str, &str)]) -> CrateGraph {
    let dir = package(files);
    CrateGraph::read(&dir.path().join("src/lib.rs"), "src/lib.rs").unwrap()
}

fn cycles(graph: &CrateGraph) -> Vec<String> {
    graph.cycles().iter().map(|c| format_cycle(c)).collect()
}

fn has_edge(graph: &CrateGraph, from: &str, to: &str) -> bool {
    graph.edges.contains(&(from.to_string(), to.to_string()))
}

#[test]
fn a_cycle_through_use_and_expression_paths_is_found() {
    let g = lib(&[
        ("src/lib.rs", "mod a; mod b; mod c;"),
        ("src/a.rs", "use crate::b::B; pub struct A;"),
        ("src/b.rs", "pub struct B; fn f() -> u8 { crate::c::C }"),
        ("src/c.rs", "pub const C: u8 = 1; fn g(_: crate::a::A) {}"),
    ]);
    assert_eq!(cycles(&g), ["crate::a -> crate::b -> crate::c -> crate::a"]);
    assert_eq!(g.modules.len(), 4);
}

#[test]
fn a_chain_is_not_a_cycle_and_root_items_are_edges_to_the_root() {
    let g = lib(&[
        ("src/lib.rs", "mod a; mod b; pub struct Top;"),
        ("src/a.rs", "use crate::b::B; use crate::Top; pub struct A;"),
        ("src/b.rs", "/// Not an edge: [crate::a::A].\npub struct B(crate::Top);"),
    ]);
    assert!(cycles(&g).is_empty());
    assert!(has_edge(&g, "crate::a", "crate::b"));
    assert!(has_edge(&g, "crate::a", "crate"), "an item the root defines");
    assert!(has_edge(&g, "crate::b", "crate"));
    assert_eq!(g.edges.len(), 3, "{:?}", g.edges);
}

#[test]
fn a_name_the_root_re_exports_is_an_edge_to_the_module_that_holds_it() {
    let g = lib(&[
        (
            "src/lib.rs",
            "mod backend; mod launch; mod memory; mod util;\n\
             pub use backend::Backend;\n\
             pub use launch::{Fault, plan::{Plan as LaunchPlan}};\n\
             pub use self::memory::*;\n\
             use std::sync::Arc;\n\
             pub struct Config;",
        ),
        ("src/backend.rs", "pub struct Backend; fn f(_: crate::Fault, _: crate::Alloc, _: crate::Config) {}"),
        ("src/launch/mod.rs", "pub mod plan; pub struct Fault; fn g(_: &crate::Backend) {}"),
        ("src/launch/plan.rs", "pub struct Plan;"),
        ("src/memory.rs", "pub struct Alloc; fn h() { let _ = super::Backend; }"),
        ("src/util.rs", "fn k(_: crate::LaunchPlan, _: crate::Arc<u8>) {}"),
    ]);
    assert!(has_edge(&g, "crate::backend", "crate::launch"), "pub use launch::Fault");
    assert!(has_edge(&g, "crate::backend", "crate::memory"), "pub use self::memory::*");
    assert!(has_edge(&g, "crate::backend", "crate"), "Config is defined in the root");
    assert!(has_edge(&g, "crate::launch", "crate::backend"));
    assert!(has_edge(&g, "crate::memory", "crate::backend"), "super:: reaching the root");
    assert!(has_edge(&g, "crate::util", "crate::launch::plan"), "a renamed re-export in a group");
    assert!(!has_edge(&g, "crate::util", "crate"), "Arc is another crate's item");
    assert_eq!(
        cycles(&g),
        [
            "crate -> crate::backend -> crate",
            "crate -> crate::launch -> crate::backend -> crate",
            "crate -> crate::memory -> crate::backend -> crate",
            "crate::backend -> crate::launch -> crate::backend",
            "crate::backend -> crate::memory -> crate::backend",
        ]
    );
}

#[test]
fn re_exports_are_followed_through_chains_and_globs() {
    let g = lib(&[
        (
            "src/lib.rs",
            "mod a; mod b; mod c;\n\
             pub use a::*;\n\
             pub use crate::X as Y;\n\
             pub use Y as Z;\n\
             pub use b::inner;",
        ),
        ("src/a/mod.rs", "mod deep; pub use deep::*;"),
        ("src/a/deep.rs", "pub struct X;"),
        ("src/b/mod.rs", "pub mod inner;"),
        ("src/b/inner.rs", "pub struct I;"),
        ("src/c.rs", "fn f(_: crate::Z, _: crate::inner::I, _: crate::Nowhere) {}"),
    ]);
    assert!(has_edge(&g, "crate::c", "crate::a"), "Z -> Y -> X through the glob of a (a holds it by its own glob)");
    assert!(has_edge(&g, "crate::c", "crate::b::inner"), "a re-exported module");
    assert!(has_edge(&g, "crate::c", "crate"), "a name found nowhere stays an edge to the root");
    assert!(!has_edge(&g, "crate::c", "crate::a::deep"));
}

#[test]
fn a_re_export_loop_ends() {
    let g = lib(&[
        ("src/lib.rs", "mod a; pub use self::X as Y; pub use self::Y as X;"),
        ("src/a.rs", "fn f(_: crate::X) {}"),
    ]);
    assert!(has_edge(&g, "crate::a", "crate"));
}

#[test]
fn super_and_self_resolve_against_the_current_module() {
    let g = lib(&[
        ("src/lib.rs", "mod p;"),
        ("src/p/mod.rs", "mod q; mod r; pub use self::q::Q; pub struct P;"),
        ("src/p/q.rs", "use super::r::{self, R}; pub struct Q(super::P);"),
        ("src/p/r.rs", "pub struct R; fn f() { let _ = super::super::p::q::Q; }"),
    ]);
    assert!(has_edge(&g, "crate::p::q", "crate::p::r"));
    assert!(has_edge(&g, "crate::p::r", "crate::p::q"));
    assert_eq!(cycles(&g), ["crate::p -> crate::p::q -> crate::p", "crate::p::q -> crate::p::r -> crate::p::q"]);
}

#[test]
fn cfg_test_modules_and_items_are_skipped() {
    let g = lib(&[
        ("src/lib.rs", "mod a; mod b; #[cfg(test)] mod not_there;"),
        ("src/a.rs", "use crate::b::B; pub struct A;"),
        (
            "src/b.rs",
            "pub struct B;\n#[cfg(test)] mod tests { use crate::a::A; }\n#[cfg(test)] fn helper(_: crate::a::A) {}\n\
             impl B { #[cfg(test)] fn h(&self) -> crate::a::A { crate::a::A } }",
        ),
    ]);
    assert!(cycles(&g).is_empty());
    assert!(!g.modules.contains("crate::b::tests"));
}

#[test]
fn inline_modules_are_modules_and_hold_file_modules() {
    let g = lib(&[
        ("src/lib.rs", "mod outer { pub mod inner { pub fn f() { super::g() } } pub fn g() { inner::f() } mod deep; }"),
        ("src/outer/deep.rs", "fn h() { crate::outer::inner::f() }"),
    ]);
    assert_eq!(cycles(&g), ["crate::outer -> crate::outer::inner -> crate::outer"]);
    assert!(has_edge(&g, "crate::outer::deep", "crate::outer::inner"));
}

#[test]
fn non_mod_rs_files_and_path_attributes_find_their_children() {
    let g = lib(&[
        ("src/lib.rs", "mod a; #[path = \"elsewhere/z.rs\"] mod z;"),
        ("src/a.rs", "mod b; pub use b::B;"),
        ("src/a/b.rs", "pub struct B; fn f() { println!(\"{}\", crate::z::NAME); }"),
        ("src/elsewhere/z.rs", "mod y; pub const NAME: &str = \"z\"; fn g(_: crate::a::B) {}"),
        ("src/elsewhere/y.rs", ""),
    ]);
    assert!(g.modules.contains("crate::a::b") && g.modules.contains("crate::z::y"));
    assert!(has_edge(&g, "crate::a", "crate::a::b"), "a child named without self::");
    assert!(has_edge(&g, "crate::a::b", "crate::z"), "a path inside a macro call");
    assert_eq!(cycles(&g), ["crate::a -> crate::a::b -> crate::z -> crate::a"]);
}

#[test]
fn bad_sources_are_errors() {
    let dir = package(&[("src/lib.rs", "mod gone;")]);
    let e = CrateGraph::read(&dir.path().join("src/lib.rs"), "x").unwrap_err();
    assert!(matches!(e, Error::MissingModule { ref module, .. } if module == "crate::gone"), "{e}");
    let dir = package(&[("src/lib.rs", "fn (")]);
    let e = CrateGraph::read(&dir.path().join("src/lib.rs"), "x").unwrap_err();
    assert!(matches!(e, Error::Parse { .. }) && std::error::Error::source(&e).is_some());
    let e = read_package(&dir.path().join("src"), "src").unwrap_err();
    assert!(matches!(e, Error::NoCrate { .. }), "{e}");
}

#[test]
fn the_workspace_lists_the_root_package_and_its_members() {
    let dir = package(&[
        ("Cargo.toml", "[workspace]\nmembers = [\"one\"]\n[package]\nname = \"top\""),
        ("src/lib.rs", ""),
        ("src/main.rs", "mod cli;"),
        ("src/cli.rs", ""),
        ("one/src/lib.rs", ""),
    ]);
    assert_eq!(workspace_packages(dir.path()).unwrap(), [".", "one"]);
    let labels: Vec<String> = read_workspace(dir.path()).unwrap().into_iter().map(|c| c.label).collect();
    assert_eq!(labels, ["src/lib.rs", "src/main.rs", "one/src/lib.rs"]);
}

#[test]
fn excluded_packages_with_a_crate_are_read_and_found_by_name() {
    let dir = package(&[
        ("Cargo.toml", "[workspace]\nmembers = [\"one\"]\nexclude = [\"py\", \"fuzz\"]"),
        ("one/Cargo.toml", "[package]\nname = \"npurt-one\""),
        ("one/src/lib.rs", ""),
        ("py/Cargo.toml", "[package]\nname = \"npurt-py\"\n[workspace]"),
        ("py/src/lib.rs", "mod a;"),
        ("py/src/a.rs", ""),
        ("fuzz/Cargo.toml", "[package]\nname = \"fuzz\""),
        ("fuzz/fuzz_targets/x.rs", ""),
    ]);
    assert_eq!(workspace_packages(dir.path()).unwrap(), ["one", "py"]);
    let labels: Vec<String> = read_workspace(dir.path()).unwrap().into_iter().map(|c| c.label).collect();
    assert_eq!(labels, ["one/src/lib.rs", "py/src/lib.rs"]);
    assert_eq!(find_package(dir.path(), "npurt-py").unwrap().as_deref(), Some("py"));
    assert_eq!(find_package(dir.path(), "npurt-one").unwrap().as_deref(), Some("one"));
    assert_eq!(find_package(dir.path(), "nothing").unwrap(), None);
}
