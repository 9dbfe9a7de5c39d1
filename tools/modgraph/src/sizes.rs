//! The size limits on the repository's Rust sources: no file over [`MAX_FILE_LINES`] lines
//! outside the folders that hold generated or table-like code (see [`file_is_checked`]), and
//! no function over [`MAX_FN_LINES`] lines outside kernels.

use std::fmt;
use std::path::Path;

use syn::spanned::Spanned;
use syn::visit::{self, Visit};

use crate::error::Error;

/// The most lines a checked `.rs` file may have.
pub const MAX_FILE_LINES: usize = 800;

/// The most lines a function with a body may have, from `fn` to its closing brace
/// (attributes and doc comments not counted).
pub const MAX_FN_LINES: usize = 120;

/// A file or function over its limit.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Oversize {
    /// The file, relative to the repository root, with `/` separators.
    pub path: String,
    /// The function, `None` for the file itself: `name`, `Type::name`, `<Type as Trait>::name`,
    /// prefixed by the inline modules and functions it sits in (`tests::helper`).
    pub function: Option<String>,
    /// Its length in lines.
    pub lines: usize,
}

impl Oversize {
    /// The line that names it in an allow-list: `file <path>` or `fn <path>: <function>`.
    pub fn key(&self) -> String {
        match &self.function {
            None => format!("file {}", self.path),
            Some(f) => format!("fn {}: {f}", self.path),
        }
    }
}

impl fmt::Display for Oversize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = if self.function.is_some() { MAX_FN_LINES } else { MAX_FILE_LINES };
        write!(f, "{} ({} lines, limit {limit})", self.key(), self.lines)
    }
}

/// The keys (see [`Oversize::key`]) an allow-list's text holds: its lines, trimmed, but
/// for blank ones and `#` comments.
pub fn allow_list(text: &str) -> std::collections::BTreeSet<String> {
    text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_string).collect()
}

/// Whether `path` (relative, `/`-separated) is in a `kernels/` folder.
fn in_kernels(path: &str) -> bool {
    path.split('/').rev().skip(1).any(|c| c == "kernels")
}

/// Whether the file limit applies to `path`: not under a `kernels/` or `tests/` folder, not
/// `acl-sys/src/fns.rs` (the symbol table) nor under `acl-sys/src/sys/` (bindings).
pub fn file_is_checked(path: &str) -> bool {
    let in_tests = path.split('/').rev().skip(1).any(|c| c == "tests");
    !(in_kernels(path) || in_tests || path == "acl-sys/src/fns.rs" || path.starts_with("acl-sys/src/sys/"))
}

/// Whether the function limit applies to the functions of `path`: not under `kernels/`.
pub fn functions_are_checked(path: &str) -> bool {
    !in_kernels(path)
}

/// Every `.rs` file under `root`, relative and sorted, leaving out folders named `target`
/// and those whose name starts with `.`.
pub fn rust_files(root: &Path) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    collect(root, "", &mut out)?;
    out.sort();
    Ok(out)
}

fn collect(dir: &Path, rel: &str, out: &mut Vec<String>) -> Result<(), Error> {
    let io = |source| Error::Io { path: dir.to_path_buf(), source };
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
        let kind = entry.file_type().map_err(io)?;
        if kind.is_dir() {
            if name != "target" && !name.starts_with('.') {
                collect(&entry.path(), &path, out)?;
            }
        } else if kind.is_file() && name.ends_with(".rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The files and functions of the repository at `root` over their limits, sorted.
pub fn oversized(root: &Path) -> Result<Vec<Oversize>, Error> {
    let mut out = Vec::new();
    for path in rust_files(root)? {
        let (check_file, check_fns) = (file_is_checked(&path), functions_are_checked(&path));
        if !check_file && !check_fns {
            continue;
        }
        let file = root.join(&path);
        let text = std::fs::read_to_string(&file).map_err(|source| Error::Io { path: file.clone(), source })?;
        out.extend(
            oversized_in(&path, &text, check_file, check_fns).map_err(|source| Error::Parse { path: file, source })?,
        );
    }
    out.sort();
    Ok(out)
}

/// The file `path` with contents `text` and its functions, where over their limits.
pub fn oversized_in(path: &str, text: &str, check_file: bool, check_fns: bool) -> Result<Vec<Oversize>, syn::Error> {
    let mut out = Vec::new();
    let lines = text.lines().count();
    if check_file && lines > MAX_FILE_LINES {
        out.push(Oversize { path: path.to_string(), function: None, lines });
    }
    if check_fns {
        let ast = syn::parse_file(text)?;
        let mut fns = Functions { path, scope: Vec::new(), out: &mut out };
        fns.visit_file(&ast);
    }
    Ok(out)
}

/// Finds the functions over [`MAX_FN_LINES`] lines in one file.
struct Functions<'a> {
    path: &'a str,
    /// The inline modules, impl types and functions around the current item.
    scope: Vec<String>,
    out: &'a mut Vec<Oversize>,
}

impl Functions<'_> {
    /// Checks the function `name` spanning `first..=last`, then visits its body with `name`
    /// in scope.
    fn function(&mut self, name: String, first: usize, last: usize, visit_body: impl FnOnce(&mut Self)) {
        let lines = last.saturating_sub(first) + 1;
        self.scope.push(name);
        if lines > MAX_FN_LINES {
            let function = Some(self.scope.join("::"));
            self.out.push(Oversize { path: self.path.to_string(), function, lines });
        }
        visit_body(self);
        self.scope.pop();
    }
}

/// The name of a type in a function's name: the last segment of its path, else its tokens.
fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default(),
        syn::Type::Reference(r) => type_name(&r.elem),
        other => quote_free(other),
    }
}

/// A type's tokens without spaces, as a last resort (`[u8]`, `(A,B)`).
fn quote_free(ty: &syn::Type) -> String {
    ty.span().source_text().unwrap_or_default().split_whitespace().collect()
}

impl<'ast> Visit<'ast> for Functions<'_> {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        let (first, last) = (f.sig.fn_token.span.start().line, f.block.brace_token.span.close().end().line);
        self.function(f.sig.ident.to_string(), first, last, |s| visit::visit_block(s, &f.block));
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        let (first, last) = (f.sig.fn_token.span.start().line, f.block.brace_token.span.close().end().line);
        self.function(f.sig.ident.to_string(), first, last, |s| visit::visit_block(s, &f.block));
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(block) = &f.default {
            let (first, last) = (f.sig.fn_token.span.start().line, block.brace_token.span.close().end().line);
            self.function(f.sig.ident.to_string(), first, last, |s| visit::visit_block(s, block));
        }
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        let ty = type_name(&i.self_ty);
        let name = match &i.trait_ {
            Some((_, t, _)) => {
                format!("<{ty} as {}>", t.segments.last().map(|s| s.ident.to_string()).unwrap_or_default())
            }
            None => ty,
        };
        self.scope.push(name);
        visit::visit_item_impl(self, i);
        self.scope.pop();
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        self.scope.push(t.ident.to_string());
        visit::visit_item_trait(self, t);
        self.scope.pop();
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        self.scope.push(m.ident.to_string());
        visit::visit_item_mod(self, m);
        self.scope.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function of `body_lines` lines of body, `fn` line and closing brace added.
    fn function(name: &str, body_lines: usize) -> String {
        format!("fn {name}() {{\n{}}}\n", "    let _ = 1;\n".repeat(body_lines))
    }

    fn keys(found: &[Oversize]) -> Vec<String> {
        found.iter().map(Oversize::key).collect()
    }

    #[test]
    fn a_function_is_measured_from_fn_to_its_closing_brace() {
        let text = format!(
            "/// doc\n#[inline]\n{}{}",
            function("at_limit", MAX_FN_LINES - 2),
            function("over", MAX_FN_LINES - 1)
        );
        let found = oversized_in("a/src/x.rs", &text, true, true).unwrap();
        assert_eq!(keys(&found), ["fn a/src/x.rs: over"]);
        assert_eq!(found[0].lines, MAX_FN_LINES + 1);
    }

    #[test]
    fn methods_nested_functions_and_inline_modules_are_named_by_where_they_sit() {
        let long = |name: &str| function(name, MAX_FN_LINES);
        let text = format!(
            "struct S; trait T {{ {} fn no_body(); }}\nimpl S {{ {} }}\nimpl T for S {{ {} }}\nmod m {{ fn outer() {{ {} }} }}",
            long("provided"),
            long("method"),
            long("provided"),
            long("inner"),
        );
        let found = oversized_in("x.rs", &text, true, true).unwrap();
        assert_eq!(
            keys(&found),
            [
                "fn x.rs: T::provided",
                "fn x.rs: S::method",
                "fn x.rs: <S as T>::provided",
                "fn x.rs: m::outer",
                "fn x.rs: m::outer::inner"
            ],
            "the outer function holds the inner one's lines too"
        );
    }

    #[test]
    fn a_file_over_its_limit_is_reported_where_the_file_limit_applies() {
        let text = "// line\n".repeat(MAX_FILE_LINES + 1);
        assert_eq!(keys(&oversized_in("a/src/big.rs", &text, true, true).unwrap()), ["file a/src/big.rs"]);
        assert!(oversized_in("a/src/big.rs", &"// line\n".repeat(MAX_FILE_LINES), true, true).unwrap().is_empty());
        assert!(oversized_in("a/src/big.rs", &text, false, true).unwrap().is_empty());
    }

    #[test]
    fn kernels_tests_and_the_acl_tables_are_exempt_as_the_rules_say() {
        assert!(file_is_checked("runtime/src/graph/exec.rs") && file_is_checked("src/kernels.rs"));
        assert!(!file_is_checked("backend-cpu/src/kernels/gemm.rs"));
        assert!(!file_is_checked("tests/streams.rs") && !file_is_checked("runtime/tests/pool.rs"));
        assert!(!file_is_checked("acl-sys/src/fns.rs") && !file_is_checked("acl-sys/src/sys/types.rs"));
        assert!(functions_are_checked("tests/streams.rs") && functions_are_checked("acl-sys/src/fns.rs"));
        assert!(!functions_are_checked("backend-acl/src/kernels/aclnn.rs"));
    }

    #[test]
    fn the_allow_list_skips_comments_and_blank_lines() {
        let list = allow_list("# header\n\nfile a.rs\n  fn b.rs: f  \n");
        assert_eq!(list.into_iter().collect::<Vec<_>>(), ["file a.rs", "fn b.rs: f"]);
    }

    #[test]
    fn the_repository_walk_skips_target_and_hidden_folders() {
        let dir = tempfile::tempdir().unwrap();
        for path in ["src/lib.rs", "target/debug/x.rs", ".git/y.rs", "a/b/c.rs", "a/readme.md"] {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        assert_eq!(rust_files(dir.path()).unwrap(), ["a/b/c.rs", "src/lib.rs"]);
    }
}
