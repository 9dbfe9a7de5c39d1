//! `modgraph [--edges] [<package>...]`: prints the import cycles between the modules of
//! each crate (`src/lib.rs`, `src/main.rs`) of the packages named (by folder, or by
//! `[package] name` among the workspace's packages), or of every package of the workspace
//! around the current directory and those it excludes (the Python extension); with
//! `--edges`, every edge too. Exits 1 when there is a cycle, 2 when a crate cannot be read.
//!
//! `modgraph --sizes`: prints instead every `.rs` file of the repository over 800 lines and
//! every function over 120 lines, where the limits apply (see `npurt_modgraph::sizes`),
//! those listed in `tools/modgraph/known-oversize.txt` marked `(known)`. Exits 1 when there
//! is one, listed or not.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use npurt_modgraph::{CrateGraph, Error, find_package, format_cycle, read_package, read_workspace, sizes};

const USAGE: &str = "usage: modgraph [--edges] [<package-dir or name>...] | modgraph --sizes";

/// The nearest folder at or above `dir` whose Cargo.toml has a `[workspace]` table.
fn workspace_root(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| {
            std::fs::read_to_string(d.join("Cargo.toml"))
                .is_ok_and(|t| t.parse::<toml::Table>().is_ok_and(|m| m.contains_key("workspace")))
        })
        .map(Path::to_path_buf)
}

/// The folder of the workspace around the current directory (else the current directory).
fn root() -> Result<PathBuf, Error> {
    let cwd = std::env::current_dir().map_err(|source| Error::Io { path: ".".into(), source })?;
    Ok(workspace_root(&cwd).unwrap_or(cwd))
}

fn read(packages: &[String]) -> Result<Vec<CrateGraph>, Error> {
    let root = root()?;
    if packages.is_empty() {
        return read_workspace(&root);
    }
    let mut crates = Vec::new();
    for package in packages {
        match find_package(&root, package)? {
            Some(dir) if !Path::new(package).join("Cargo.toml").is_file() => {
                crates.extend(read_package(&root.join(&dir), &dir)?)
            }
            _ => crates.extend(read_package(Path::new(package), package)?),
        }
    }
    Ok(crates)
}

/// The error and its sources, on one line.
fn report(e: &Error) -> String {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg += &format!(": {s}");
        source = s.source();
    }
    msg
}

/// `--sizes`: the files and functions over their limits.
fn check_sizes() -> Result<ExitCode, Error> {
    let root = root()?;
    let found = sizes::oversized(&root)?;
    let list_path = root.join("tools/modgraph/known-oversize.txt");
    let known = std::fs::read_to_string(&list_path).map_err(|source| Error::Io { path: list_path, source })?;
    let known = sizes::allow_list(&known);
    for o in &found {
        let mark = if known.contains(&o.key()) { " (known)" } else { "" };
        println!("{o}{mark}");
    }
    let (files, fns) =
        found.iter().fold((0, 0), |(f, n), o| if o.function.is_some() { (f, n + 1) } else { (f + 1, n) });
    println!("{files} files over {} lines, {fns} functions over {} lines", sizes::MAX_FILE_LINES, sizes::MAX_FN_LINES);
    Ok(if found.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn main() -> ExitCode {
    let mut edges = false;
    let mut size_check = false;
    let mut dirs = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--edges" => edges = true,
            "--sizes" => size_check = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            a if a.starts_with('-') => {
                eprintln!("modgraph: unknown option {a}\n{USAGE}");
                return ExitCode::from(2);
            }
            _ => dirs.push(arg),
        }
    }
    if size_check {
        return check_sizes().unwrap_or_else(|e| {
            eprintln!("modgraph: {}", report(&e));
            ExitCode::from(2)
        });
    }
    let crates = match read(&dirs) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("modgraph: {}", report(&e));
            return ExitCode::from(2);
        }
    };
    let mut total = 0;
    for c in &crates {
        let cycles = c.cycles();
        total += cycles.len();
        println!("{}: {} modules, {} edges, {} cycles", c.label, c.modules.len(), c.edges.len(), cycles.len());
        if edges {
            c.edges.iter().for_each(|(from, to)| println!("  edge  {from} -> {to}"));
        }
        cycles.iter().for_each(|cycle| println!("  cycle {}", format_cycle(cycle)));
    }
    println!("{total} cycles in {} crates", crates.len());
    if total == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
