//! The module graph of every workspace crate (and of the Python extension, which the
//! workspace excludes) has no import cycle beyond those listed in
//! `known-cycles.txt`, and every listed cycle still exists (so the list only shrinks).

use std::collections::BTreeSet;
use std::path::Path;

use npurt_modgraph::{format_cycle, read_workspace};

#[test]
fn no_import_cycles_beyond_the_known_ones() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let crates = read_workspace(&here.join("../..")).unwrap();
    assert!(crates.iter().any(|c| c.label == "runtime/src/lib.rs"), "the workspace has runtime");
    assert!(crates.iter().any(|c| c.label == "python/src/lib.rs"), "the Python extension is read too");
    let found: BTreeSet<String> = crates
        .iter()
        .flat_map(|c| c.cycles().into_iter().map(move |cycle| format!("{}: {}", c.label, format_cycle(&cycle))))
        .collect();
    found.iter().for_each(|c| println!("cycle {c}"));

    let list = std::fs::read_to_string(here.join("known-cycles.txt")).unwrap();
    let known: BTreeSet<String> =
        list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_string).collect();
    let new: Vec<&String> = found.difference(&known).collect();
    let gone: Vec<&String> = known.difference(&found).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "import cycles not in known-cycles.txt (break them):\n{}\n\
         cycles in known-cycles.txt that no longer exist (delete their lines):\n{}",
        new.iter().map(|c| format!("  {c}\n")).collect::<String>(),
        gone.iter().map(|c| format!("  {c}\n")).collect::<String>(),
    );
}
