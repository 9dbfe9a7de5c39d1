//! Finding aclnn headers and the symbols they declare: plain text work, no bindgen, so
//! that `tests/aclnn_header_scan.rs` can test it too.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Directories of a repository checkout that hold no shipped API: operators still in
/// incubation (their headers are not installed and may differ), samples and tests.
const SKIPPED_DIRS: &[&str] = &["experimental", "example", "examples", "test", "tests"];

/// How deep below each given directory headers are searched for.
pub const MAX_DEPTH: usize = 8;

/// Collects `aclnn_*.h` and `acl_meta.h` below `dir` (sorted, symlinks followed, each
/// directory once).
pub fn scan(dir: &Path, depth: usize, seen: &mut HashSet<PathBuf>, out: &mut Vec<PathBuf>) {
    let Ok(canon) = dir.canonicalize() else { return };
    if !seen.insert(canon) {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue;
        }
        if p.is_dir() {
            if SKIPPED_DIRS.contains(&name) {
                continue;
            }
            if depth > 0 {
                scan(&p, depth - 1, seen, out);
            }
        } else if name.ends_with(".h") && (name.starts_with("aclnn_") || name == "acl_meta.h") {
            out.push(p);
        }
    }
}

/// `file` as `<last component of the include directory>/<path below it>`, e.g.
/// `ops-nn/aclnn_matmul.h` or `aclnnop/aclnn_matmul.h`: short enough to be read in a
/// compiler error.
pub fn short_name(file: &Path, dirs: &[PathBuf]) -> String {
    for d in dirs {
        if let Ok(rel) = file.strip_prefix(d) {
            let top = d.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            return Path::new(&top).join(rel).display().to_string();
        }
    }
    file.display().to_string()
}

/// C/C++ source with comments replaced by spaces (string literals are not special-cased:
/// headers of declarations have none that matter here).
pub fn strip_comments(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let mut start = 0;
    while i < b.len() {
        if b[i] == b'/' && i + 1 < b.len() && (b[i + 1] == b'/' || b[i + 1] == b'*') {
            out.push_str(&src[start..i]);
            let end = if b[i + 1] == b'/' {
                src[i..].find('\n').map_or(b.len(), |k| i + k)
            } else {
                src[i + 2..].find("*/").map_or(b.len(), |k| i + 2 + k + 2)
            };
            out.push(' ');
            i = end;
            start = end;
        } else {
            i += 1;
        }
    }
    out.push_str(&src[start..]);
    out
}

/// The identifiers of `wanted` that `src` declares: `NAME (...) ;` preceded by a type
/// (an identifier other than a keyword, or `*` / `&`), outside comments. Calls (after
/// `=`, `(`, `return`, at the start of a statement) and definitions (`{` after the
/// parameters) do not count, so examples and wrappers that use the API are not read.
pub fn declared_in<'a>(src: &str, wanted: &'a HashSet<&'a str>) -> Vec<&'a str> {
    const NOT_TYPES: &[&str] = &["return", "sizeof", "if", "while", "for", "switch", "else", "case", "decltype"];
    let code = strip_comments(src);
    let b = code.as_bytes();
    let mut found = Vec::new();
    // The previous significant token: Some(identifier) or the punctuation byte.
    let mut prev_ident: Option<&str> = None;
    let mut prev_punct: u8 = b';';
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let ident = &code[s..i];
            if let Some(w) = wanted.get(ident) {
                let typed = match prev_ident {
                    Some(p) => !NOT_TYPES.contains(&p),
                    None => prev_punct == b'*' || prev_punct == b'&',
                };
                if typed && declaration_follows(b, i) {
                    found.push(*w);
                }
            }
            prev_ident = Some(ident);
        } else {
            if c.is_ascii_digit() {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                    i += 1;
                }
                prev_ident = Some("0");
                continue;
            }
            prev_ident = None;
            prev_punct = c;
            i += 1;
        }
    }
    found
}

/// Whether `b[i..]` is `(...)` (balanced) followed by `;`.
fn declaration_follows(b: &[u8], mut i: usize) -> bool {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    if i >= b.len() || b[i] != b'(' {
        return false;
    }
    let mut depth = 0usize;
    while i < b.len() {
        match b[i] {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    i += 1;
                    break;
                }
            }
            _ => {}
        }
        i += 1;
    }
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i < b.len() && b[i] == b';'
}
