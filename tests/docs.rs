//! Every repository path that `README.md` and `docs/*.md` name exists in the repository.
//!
//! What counts as a path, and how it is looked up:
//!
//! * **Where.** Inline code spans (`` `like/this.rs` ``) and the targets of Markdown links
//!   (`[text](like/this.md)`). Fenced code blocks are left out: they hold command lines and
//!   program text, not references.
//! * **Skipped spans.** A span with white space (a command line or prose), a URL (`://`,
//!   `mailto:`, a link to an `#anchor` only), a path in another repository, written
//!   `owner/repo:path`, any other span with a `:` (Rust paths `a::b`, `KEY:value`), an
//!   assignment (`=`), a placeholder (`<profile>`, `$VAR`, `~`), an absolute path (`/usr/...`,
//!   the host's, not the repository's), and build outputs under `target/`.
//! * **A span is a path** when it has a `/` and ends with `/`, ends with one of
//!   [`EXTENSIONS`], or starts with the name of an entry at the repository's root
//!   (`runtime/src/op`); other spans with a `/` (`f32/f16`, `GB/s`) are prose. A span without
//!   a `/` is a path when it ends with one of [`OWN_EXTENSIONS`], the languages the repository
//!   is written in (`execute.rs`); other bare file names name files outside it (a model
//!   folder's `config.json`, CANN's `acl_mdl.h`). The names `x`, `y` and `z` (a folder, or a
//!   file's stem) are metavariables (`x/mod.rs`): such a span is not a path. A link target is
//!   always a path. A trailing `:12` or `:12-30` (a line) is dropped.
//! * **Expansion.** Brace groups expand (`runtime/src/op/{table,infer}.rs` is two paths,
//!   several groups multiply); `*` inside a component matches any name in that folder
//!   (`backend-*/src/lib.rs`: at least one match); a last component `…` or `...` stands for
//!   "something under this folder", which must exist.
//! * **Lookup.** A code span is read from the repository root; a link from the folder of the
//!   document holding it (Markdown's rule). A path whose first component is not an entry at the
//!   root is written relative to a folder the text has just named (`op/infer.rs` after
//!   `runtime/src/op/`, a bare `execute.rs`): it must then be the end of some path of the
//!   repository. `..` may not leave the repository.
//!
//! The tree is walked from the package root, leaving out `target/`, `.git/`, `__pycache__/`
//! and `.venv/` folders at any depth.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// File-name endings that make a span with a `/` a path.
const EXTENSIONS: &[&str] = &[
    ".rs", ".md", ".py", ".pyi", ".toml", ".sh", ".c", ".h", ".json", ".txt", ".supp", ".yml", ".yaml", ".lock",
    ".ini", ".cfg",
];

/// File-name endings that make a bare name (no `/`) a path.
const OWN_EXTENSIONS: &[&str] = &[".rs", ".md", ".py", ".pyi", ".toml"];

/// Folders that are never part of the repository's tree.
const SKIPPED_DIRS: &[&str] = &["target", ".git", "__pycache__", ".venv"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every file and folder of the repository, as `/`-separated paths relative to the root
/// (folders without a trailing `/`).
fn tree() -> BTreeSet<String> {
    fn walk(dir: &Path, rel: &str, out: &mut BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if is_dir && SKIPPED_DIRS.contains(&name.as_str()) {
                continue;
            }
            let path = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            out.insert(path.clone());
            if is_dir {
                walk(&e.path(), &path, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root(), "", &mut out);
    out
}

/// The documents checked: `README.md` and `docs/*.md`.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![root().join("README.md")];
    let mut in_docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    in_docs.sort();
    docs.extend(in_docs);
    docs
}

/// Where a reference was found, and how to resolve it.
#[derive(Debug, PartialEq)]
enum Kind {
    /// A code span: relative to the repository root.
    Code,
    /// A link target: relative to the document's folder.
    Link,
}

/// The code spans and link targets of `text` outside fenced code blocks, with their line.
fn references(text: &str) -> Vec<(usize, Kind, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        // Code spans: text between a run of backticks and the next run of the same length.
        while let Some(start) = rest.find('`') {
            let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
            let fence = "`".repeat(ticks);
            let after = &rest[start + ticks..];
            let Some(end) = after.find(&fence) else { break };
            out.push((n + 1, Kind::Code, after[..end].trim().to_string()));
            rest = &after[end + ticks..];
        }
        // Link targets, outside code spans: `](target)`.
        let no_code = strip_code_spans(line);
        let mut rest = no_code.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((n + 1, Kind::Link, after[..end].trim().to_string()));
            rest = &after[end..];
        }
    }
    out
}

fn strip_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for c in line.chars() {
        if c == '`' {
            inside = !inside;
        } else if !inside {
            out.push(c);
        }
    }
    out
}

/// `a{b,c}d{e,f}` → `abde`, `abdf`, `acde`, `acdf`.
fn expand_braces(s: &str) -> Vec<String> {
    let Some(open) = s.find('{') else { return vec![s.to_string()] };
    let Some(close) = s[open..].find('}').map(|i| open + i) else { return vec![s.to_string()] };
    let (head, body, tail) = (&s[..open], &s[open + 1..close], &s[close + 1..]);
    body.split(',').flat_map(|alt| expand_braces(&format!("{head}{alt}{tail}"))).collect()
}

/// The span as a repository path to check, or `None` when it is not one (the rules of the
/// module comment).
fn as_path(span: &str, kind: &Kind, top: &BTreeSet<String>) -> Option<String> {
    let s = span.trim_matches(|c| c == '"' || c == '\'');
    if s.is_empty() || s.chars().any(char::is_whitespace) {
        return None;
    }
    if s.contains("://") || s.starts_with("mailto:") || s.starts_with('#') {
        return None;
    }
    let s = s.split('#').next().unwrap_or(s);
    // A trailing line number or range: `file.rs:12`, `file.rs:12-30`.
    let s = match s.rsplit_once(':') {
        Some((p, line)) if !line.is_empty() && line.chars().all(|c| c.is_ascii_digit() || c == '-') => p,
        _ => s,
    };
    if s.contains(':') || s.contains('=') || s.contains('<') || s.contains('$') || s.starts_with('~') {
        return None;
    }
    if s.starts_with('/') || s.starts_with('-') || s == "target" || s.starts_with("target/") {
        return None;
    }
    let metavariable = s.trim_end_matches('/').split('/').any(|c| matches!(c.split('.').next(), Some("x" | "y" | "z")));
    if metavariable {
        return None;
    }
    let first = s.split('/').next().unwrap_or("");
    let looks_like_path = if *kind == Kind::Link {
        !s.is_empty()
    } else if s.contains('/') {
        s.ends_with('/') || EXTENSIONS.iter().any(|x| s.ends_with(x)) || top.contains(first)
    } else {
        OWN_EXTENSIONS.iter().any(|x| s.ends_with(x))
    };
    looks_like_path.then(|| s.to_string())
}

/// Normalises `a/./b/../c` to `a/c`; `None` when `..` leaves the base.
fn normalise(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

/// `pattern` (one component, `*` wildcards) matches `name`.
fn glob_match(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || !name[first.len()..].ends_with(last) || name.len() < first.len() + last.len() {
        return false;
    }
    let mut at = first.len();
    let end = name.len() - last.len();
    for mid in &parts[1..parts.len() - 1] {
        match name[at..end].find(mid) {
            Some(i) => at += i + mid.len(),
            None => return false,
        }
    }
    true
}

/// Whether `path` (relative to the root, `/`-separated, maybe with `*` and a final `…`)
/// names something in `tree`, from the root when `anchored`, else as the end of some path.
fn exists(path: &str, tree: &BTreeSet<String>, anchored: bool) -> bool {
    let path = path.trim_end_matches('/');
    let (path, under) = match path.strip_suffix("/…").or_else(|| path.strip_suffix("/...")) {
        Some(p) => (p, true),
        None => (path, false),
    };
    let want: Vec<&str> = path.split('/').collect();
    tree.iter().any(|t| {
        let have: Vec<&str> = t.split('/').collect();
        let tail = if anchored {
            if have.len() != want.len() {
                return false;
            }
            &have[..]
        } else {
            if have.len() < want.len() {
                return false;
            }
            &have[have.len() - want.len()..]
        };
        let matched = want.iter().zip(tail).all(|(w, h)| glob_match(w, h));
        matched
            && (!under
                || tree.iter().any(|c| c.len() > t.len() && c.starts_with(t.as_str()) && c[t.len()..].starts_with('/')))
    })
}

/// The missing paths of one document, as `file:line: span`.
fn missing_in(doc: &Path, tree: &BTreeSet<String>, top: &BTreeSet<String>) -> Vec<String> {
    let text = std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
    let rel_doc = doc.strip_prefix(root()).expect("under the root").to_string_lossy().replace('\\', "/");
    let doc_dir = rel_doc.rsplit_once('/').map(|(d, _)| d.to_string()).unwrap_or_default();
    let mut out = Vec::new();
    for (line, kind, span) in references(&text) {
        let Some(path) = as_path(&span, &kind, top) else { continue };
        for p in expand_braces(&path) {
            let (full, anchored) = match kind {
                Kind::Link => (normalise(&format!("{doc_dir}/{p}")), true),
                Kind::Code => {
                    let first = p.split('/').next().unwrap_or("");
                    let anchored = top.contains(first) || p.starts_with("..") || first.contains('*');
                    (normalise(&p), anchored)
                }
            };
            let found = match full {
                Some(f) if f.is_empty() => true,
                Some(f) => exists(&f, tree, anchored),
                None => false,
            };
            if !found {
                out.push(format!("{rel_doc}:{line}: `{span}` ({p} not found)"));
            }
        }
    }
    out
}

#[test]
fn every_path_the_documents_name_exists() {
    let tree = tree();
    let top: BTreeSet<String> = tree.iter().filter(|p| !p.contains('/')).cloned().collect();
    assert!(top.contains("runtime") && top.contains("docs"), "the walk found the repository: {top:?}");
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        checked += 1;
        missing.extend(missing_in(&doc, &tree, &top));
    }
    assert!(checked >= 2, "README.md and docs/*.md");
    assert!(missing.is_empty(), "{} path(s) the documents name do not exist:\n{}", missing.len(), missing.join("\n"));
}

#[test]
fn the_matching_rules_hold() {
    let top: BTreeSet<String> = ["runtime", "docs", "backend-cpu", "backend-acl"].map(String::from).into();
    let tree: BTreeSet<String> = [
        "runtime",
        "runtime/src",
        "runtime/src/op",
        "runtime/src/op/table.rs",
        "runtime/src/op/infer.rs",
        "backend-cpu",
        "backend-cpu/src",
        "backend-cpu/src/lib.rs",
        "backend-acl",
        "backend-acl/src",
        "docs",
        "docs/OPS.md",
    ]
    .map(String::from)
    .into();
    let p = |s: &str| as_path(s, &Kind::Code, &top);
    assert_eq!(p("runtime/src/op/{table,infer}.rs").as_deref(), Some("runtime/src/op/{table,infer}.rs"));
    assert_eq!(
        expand_braces("runtime/src/op/{table,infer}.rs"),
        ["runtime/src/op/table.rs", "runtime/src/op/infer.rs"]
    );
    assert_eq!(expand_braces("a/{b,c}/{d,e}"), ["a/b/d", "a/b/e", "a/c/d", "a/c/e"]);
    assert_eq!(p("cargo test -p npurt"), None, "a command line");
    assert_eq!(p("https://example.com/a.md"), None, "a URL");
    assert_eq!(p("huggingface/optimum:docs/a.md"), None, "another repository");
    assert_eq!(p("runtime::reference"), None, "a Rust path");
    assert_eq!(p("f32/f16"), None, "prose with a slash");
    assert_eq!(p("target/release/npurt"), None, "a build output");
    assert_eq!(p("NPURT_X=a/b.rs"), None, "an assignment");
    assert_eq!(p("docs/OPS.md:12").as_deref(), Some("docs/OPS.md"), "a line number is dropped");
    assert_eq!(p("execute.rs").as_deref(), Some("execute.rs"));
    assert_eq!(p("config.json"), None, "a bare name of another kind: a file outside the repository");
    assert_eq!(p("x/mod.rs"), None, "a metavariable");
    assert_eq!(p("capi/tests/c/").as_deref(), Some("capi/tests/c/"));
    assert!(exists("backend-*/src/lib.rs", &tree, true));
    assert!(exists("backend-*/src/…", &tree, true));
    assert!(!exists("backend-acl/src/…", &tree, true), "an empty folder has nothing under it");
    assert!(exists("op/infer.rs", &tree, false), "the end of a path");
    assert!(!exists("op/mod.rs", &tree, false));
    assert!(!exists("op/infer.rs", &tree, true), "anchored at the root");
    assert_eq!(normalise("docs/../README.md").as_deref(), Some("README.md"));
    assert_eq!(normalise("docs/../../elsewhere/x"), None, "leaves the repository");
}
