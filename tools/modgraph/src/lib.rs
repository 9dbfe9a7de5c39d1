//! The module-level import graph of a Rust crate, read from its sources with `syn`, and
//! the import cycles in it.
//!
//! A crate is one root file (`src/lib.rs` or `src/main.rs`) and the modules it reaches
//! through `mod x;` (as `x.rs` or `x/mod.rs`, or a `#[path]`) and inline `mod x { .. }`.
//! Modules marked `#[cfg(test)]`, and other `#[cfg(test)]` items, are left out: test code
//! may import freely.
//!
//! An edge `a -> b` means that code in module `a` names a path into module `b`: a `use`, or
//! any path in an expression, type, pattern or macro call, that starts with `crate::`,
//! `super::`, `self::` or the name of one of `a`'s child modules. The path is mapped to the
//! longest module prefix it has (`crate::pool::stats::PoolStats` is module
//! `crate::pool::stats`), except at the crate root: a name the root re-exports
//! (`crate::X` after `pub use a::b::X`, `pub use a::b::Y as X` or `pub use a::b::*`) is
//! followed to the path its `use` names (`crate::a::b`), and only an item the root itself
//! defines (or a name found nowhere) is an edge to the root; an item of another crate is no
//! edge. `mod` declarations are not edges, nor are attributes, doc comments or
//! `pub(super)`. Names imported without such a prefix (a `use`d module's name, a glob
//! import's items) are not followed.

mod error;
pub mod sizes;
mod walk;

pub use error::Error;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The module graph of one crate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrateGraph {
    /// The crate's name in reports: its root file, as given (`runtime/src/lib.rs`).
    pub label: String,
    /// Every module, `crate` and `crate::a::b` style.
    pub modules: BTreeSet<String>,
    /// Every edge `(from, to)`: `from` names a path into `to`.
    pub edges: BTreeSet<(String, String)>,
}

impl CrateGraph {
    /// Reads the crate whose root file is `root`, naming it `label`.
    pub fn read(root: &Path, label: impl Into<String>) -> Result<CrateGraph, Error> {
        let uses = walk::read_crate(root)?;
        let modules: BTreeSet<String> = uses.keys().map(|m| m.join("::")).collect();
        let mut edges = BTreeSet::new();
        for (module, held) in &uses {
            let from = module.join("::");
            for path in &held.paths {
                if let Some(to) = target(&uses, path, 0).filter(|to| *to != from) {
                    edges.insert((from.clone(), to));
                }
            }
        }
        Ok(CrateGraph { label: label.into(), modules, edges })
    }

    /// Every elementary cycle, each rotated to start at its smallest module and sorted;
    /// a cycle `[a, b]` stands for `a -> b -> a`.
    pub fn cycles(&self) -> Vec<Vec<String>> {
        let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (from, to) in &self.edges {
            next.entry(from).or_default().push(to);
        }
        let mut out = Vec::new();
        for start in self.modules.iter() {
            let mut stack = vec![start.as_str()];
            cycles_from(start, &next, &mut stack, &mut out);
        }
        out.sort();
        out
    }
}

/// How many `use`s deep [`target`] follows a name through the crate root before it stops.
const MAX_HOPS: usize = 16;

/// The module an absolute path names: its longest module prefix, except that a name the
/// crate root only re-exports (`crate::X` after `pub use a::b::X`, renamed or through a glob)
/// is followed to the path the `use` names, so the module is the one that holds `X`. An
/// item the root defines, or a name found nowhere, is the root; an item another crate
/// defines is `None` (no edge).
fn target(uses: &walk::Uses, path: &[String], hops: usize) -> Option<String> {
    let n = (1..=path.len()).rev().find(|&n| uses.contains_key(&path[..n]))?;
    if n > 1 || path.len() == 1 || hops > MAX_HOPS {
        return Some(path[..n].join("::"));
    }
    let (root, name, rest) = (&uses[&path[..1]], &path[1], &path[2..]);
    if root.defines.contains(name) {
        return Some("crate".to_string());
    }
    if let Some(source) = root.imports.get(name) {
        let mut source = source.clone()?;
        source.extend_from_slice(rest);
        return target(uses, &source, hops + 1);
    }
    if let Some(module) = root.globs.iter().flatten().find(|g| provides(uses, g, name, hops)) {
        let mut source = module.clone();
        source.extend_from_slice(&path[1..]);
        return target(uses, &source, hops + 1);
    }
    if root.globs.iter().any(Option::is_none) {
        return None;
    }
    Some("crate".to_string())
}

/// Whether the module `module` defines or imports `name`, or has it through its own globs.
fn provides(uses: &walk::Uses, module: &[String], name: &str, hops: usize) -> bool {
    let Some(m) = uses.get(module) else { return false };
    m.defines.contains(name)
        || m.imports.contains_key(name)
        || (hops < MAX_HOPS && m.globs.iter().flatten().any(|g| provides(uses, g, name, hops + 1)))
}

/// Extends the path `stack` (which starts at `start`) through modules greater than `start`,
/// pushing each cycle that returns to `start`: so each cycle is found once, from its
/// smallest module.
fn cycles_from<'g>(
    start: &str,
    next: &BTreeMap<&'g str, Vec<&'g str>>,
    stack: &mut Vec<&'g str>,
    out: &mut Vec<Vec<String>>,
) {
    let last = stack[stack.len() - 1];
    for &to in next.get(last).into_iter().flatten() {
        if to == start {
            out.push(stack.iter().map(|m| m.to_string()).collect());
        } else if to > start && !stack.contains(&to) {
            stack.push(to);
            cycles_from(start, next, stack, out);
            stack.pop();
        }
    }
}

/// A cycle as text: `crate::a -> crate::b -> crate::a`.
pub fn format_cycle(cycle: &[String]) -> String {
    let mut parts: Vec<&str> = cycle.iter().map(String::as_str).collect();
    parts.extend(cycle.first().map(String::as_str));
    parts.join(" -> ")
}

/// The crates of the package in `dir`: `src/lib.rs` and `src/main.rs`, those that exist (one
/// at least), each read as a crate of its own and labelled `<label_dir>/src/...`.
pub fn read_package(dir: &Path, label_dir: &str) -> Result<Vec<CrateGraph>, Error> {
    let mut crates = Vec::new();
    for root in ["src/lib.rs", "src/main.rs"] {
        let file = dir.join(root);
        if file.is_file() {
            let label = match label_dir.trim_end_matches('/') {
                "" | "." => root.to_string(),
                d => format!("{d}/{root}"),
            };
            crates.push(CrateGraph::read(&file, label)?);
        }
    }
    if crates.is_empty() {
        return Err(Error::NoCrate { dir: dir.to_path_buf() });
    }
    Ok(crates)
}

/// The package folders of the workspace at `root`, relative to it: `.` when the root
/// manifest has a `[package]`, then the `[workspace] members` in order (globs are not
/// expanded), then the `[workspace] exclude` folders that hold a crate (`src/lib.rs` or
/// `src/main.rs`): packages of the repository built on their own, as the Python extension.
pub fn workspace_packages(root: &Path) -> Result<Vec<String>, Error> {
    let manifest = read_manifest(&root.join("Cargo.toml"))?;
    let mut dirs = Vec::new();
    if manifest.contains_key("package") {
        dirs.push(".".to_string());
    }
    let list = |key: &str| -> Vec<String> {
        let values = manifest.get("workspace").and_then(|w| w.get(key)).and_then(|m| m.as_array());
        values.into_iter().flatten().filter_map(|m| m.as_str()).map(str::to_string).collect()
    };
    dirs.extend(list("members"));
    let has_crate = |d: &String| ["src/lib.rs", "src/main.rs"].iter().any(|f| root.join(d).join(f).is_file());
    dirs.extend(list("exclude").into_iter().filter(has_crate));
    Ok(dirs)
}

/// The `[package] name` in `dir/Cargo.toml`, if it has one.
pub fn package_name(dir: &Path) -> Result<Option<String>, Error> {
    let manifest = read_manifest(&dir.join("Cargo.toml"))?;
    let name = manifest.get("package").and_then(|p| p.get("name")).and_then(|n| n.as_str());
    Ok(name.map(str::to_string))
}

/// The folder, relative to the workspace at `root`, of the package named `name` (its
/// `[package] name`) among [`workspace_packages`].
pub fn find_package(root: &Path, name: &str) -> Result<Option<String>, Error> {
    for dir in workspace_packages(root)? {
        if package_name(&root.join(&dir))?.as_deref() == Some(name) {
            return Ok(Some(dir));
        }
    }
    Ok(None)
}

/// A Cargo manifest as a TOML table.
fn read_manifest(path: &Path) -> Result<toml::Table, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    text.parse().map_err(|source| Error::Manifest { path: path.to_path_buf(), source })
}

/// Every crate of the workspace at `root` and of the packages it excludes
/// (see [`workspace_packages`]).
pub fn read_workspace(root: &Path) -> Result<Vec<CrateGraph>, Error> {
    let mut crates = Vec::new();
    for dir in workspace_packages(root)? {
        crates.extend(read_package(&root.join(&dir), &dir)?);
    }
    Ok(crates)
}

#[cfg(test)]
mod tests;
