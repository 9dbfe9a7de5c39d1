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
//! `crate::pool::stats`). `mod` declarations are not edges, nor are attributes, doc
//! comments or `pub(super)`; edges to the crate root are dropped, as the root is the
//! crate's facade of re-exports. Names imported without such a prefix (a `use`d module's
//! name, a glob import's items) are not followed.

mod walk;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What can stop a crate or workspace from being read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A source or manifest file could not be read.
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A source file is not valid Rust.
    #[error("cannot parse {path}")]
    Parse {
        path: PathBuf,
        #[source]
        source: syn::Error,
    },
    /// A `mod x;` has neither of its files.
    #[error("module {module} has no file: neither {flat} nor {nested} exists", flat = .flat.display(), nested = .nested.display())]
    MissingModule { module: String, flat: PathBuf, nested: PathBuf },
    /// A package folder has neither `src/lib.rs` nor `src/main.rs`.
    #[error("{} has neither src/lib.rs nor src/main.rs", .dir.display())]
    NoCrate { dir: PathBuf },
    /// The workspace's Cargo.toml is not valid TOML.
    #[error("cannot parse the workspace manifest {path}")]
    Manifest {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
}

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
        for (module, paths) in &uses {
            let from = module.join("::");
            for path in paths {
                let to = (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|p| modules.contains(p));
                if let Some(to) = to.filter(|to| *to != from && to != "crate") {
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
/// expanded).
pub fn workspace_packages(root: &Path) -> Result<Vec<String>, Error> {
    let path = root.join("Cargo.toml");
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
    let manifest: toml::Table = text.parse().map_err(|source| Error::Manifest { path, source })?;
    let mut dirs = Vec::new();
    if manifest.contains_key("package") {
        dirs.push(".".to_string());
    }
    let members = manifest.get("workspace").and_then(|w| w.get("members")).and_then(|m| m.as_array());
    dirs.extend(members.into_iter().flatten().filter_map(|m| m.as_str()).map(str::to_string));
    Ok(dirs)
}

/// Every crate of the workspace at `root`.
pub fn read_workspace(root: &Path) -> Result<Vec<CrateGraph>, Error> {
    let mut crates = Vec::new();
    for dir in workspace_packages(root)? {
        crates.extend(read_package(&root.join(&dir), &dir)?);
    }
    Ok(crates)
}

#[cfg(test)]
mod tests;
