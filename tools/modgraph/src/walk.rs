//! Reading a crate's module tree from its sources, and the paths each module names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::visit::{self, Visit};
use syn::{Attribute, Item, ItemMod, Meta, UseTree};

use crate::error::Error;

/// Every module of a crate, as segments (`["crate", "pool", "stats"]`).
pub(crate) type Uses = BTreeMap<Vec<String>, Module>;

/// What one module names and what it holds.
#[derive(Debug, Default)]
pub(crate) struct Module {
    /// The absolute paths, as segments, that its code names through `crate::`, `super::`,
    /// `self::` or a child module's name.
    pub(crate) paths: Vec<Vec<String>>,
    /// The names of the items it defines (not its modules): `struct`, `enum`, `union`,
    /// `trait`, `fn`, `const`, `static`, `type`, `macro_rules!`, foreign items.
    pub(crate) defines: BTreeSet<String>,
    /// The names its `use` items bring in (`use a::B as C` brings in `C`), each with the
    /// absolute path it stands for, or `None` for an item of another crate.
    pub(crate) imports: BTreeMap<String, Option<Vec<String>>>,
    /// The absolute paths of its glob imports (`use a::*`); `None` for another crate's.
    pub(crate) globs: Vec<Option<Vec<String>>>,
}

/// Where the `mod x;` declarations of a piece of code find their files.
struct Dirs {
    /// The directory of `x.rs` / `x/mod.rs` for a `mod x;`.
    child: PathBuf,
    /// The directory a `#[path = "..."]` attribute is relative to.
    attr: PathBuf,
}

/// Reads the crate whose root file is `root` (a `lib.rs` or `main.rs`).
pub(crate) fn read_crate(root: &Path) -> Result<Uses, Error> {
    let mut uses = Uses::new();
    read_file(root, vec!["crate".to_string()], true, &mut uses)?;
    Ok(uses)
}

/// Reads the module `module` from `file`; `mod_rs` for a crate root, a `mod.rs` or a file
/// named by `#[path]`, whose child modules live next to it rather than in a folder of its name.
fn read_file(file: &Path, module: Vec<String>, mod_rs: bool, uses: &mut Uses) -> Result<(), Error> {
    let text = std::fs::read_to_string(file).map_err(|source| Error::Io { path: file.to_path_buf(), source })?;
    let ast = syn::parse_file(&text).map_err(|source| Error::Parse { path: file.to_path_buf(), source })?;
    let dir = file.parent().unwrap_or(Path::new(".")).to_path_buf();
    let child = match file.file_stem() {
        Some(stem) if !mod_rs => dir.join(stem),
        _ => dir.clone(),
    };
    read_items(&ast.items, module, &Dirs { child, attr: dir }, uses)
}

/// Records the paths `items` name as uses of `module` and reads the modules they declare.
fn read_items(items: &[Item], module: Vec<String>, dirs: &Dirs, uses: &mut Uses) -> Result<(), Error> {
    let mods: Vec<&ItemMod> = items
        .iter()
        .filter_map(|i| match i {
            Item::Mod(m) if !is_cfg_test(&m.attrs) => Some(m),
            _ => None,
        })
        .collect();
    let children = mods.iter().map(|m| m.ident.unraw().to_string()).collect();
    let mut names = Names { module: &module, children, paths: Vec::new() };
    for item in items.iter().filter(|i| !matches!(i, Item::Mod(_))) {
        names.visit_item(item);
    }
    let mut held = Module::default();
    let mut raw = Vec::new();
    for item in items.iter().filter(|i| !is_cfg_test(item_attrs(i))) {
        held.defines.extend(defined_names(item));
        match item {
            Item::ExternCrate(e) => {
                held.imports.insert(e.rename.as_ref().map_or(&e.ident, |(_, r)| r).unraw().to_string(), None);
            }
            Item::Use(u) => {
                let mut imports = Vec::new();
                use_imports(&u.tree, &mut Vec::new(), &mut imports);
                // `as _` brings in no name (its path is still an edge, recorded by the visitor).
                let named = imports.into_iter().filter(|(name, _)| name.as_deref() != Some("_"));
                raw.extend(named.map(|(name, path)| (name, path, u.leading_colon.is_some())));
            }
            _ => {}
        }
    }
    // A `use` path may start with a name this module defines or imports (`use Y as Z;`).
    let local: BTreeSet<String> = held
        .defines
        .iter()
        .cloned()
        .chain(raw.iter().filter_map(|(name, _, _)| name.clone()))
        .chain(held.imports.keys().cloned())
        .collect();
    for (name, path, leading_colon) in raw {
        let path = match path.first() {
            _ if leading_colon => None,
            Some(first)
                if local.contains(first)
                    && (path.len() > 1 || name.as_deref() != Some(first))
                    && names.absolute(&path, true).is_none() =>
            {
                Some(module.iter().chain(&path).cloned().collect())
            }
            _ => names.absolute(&path, true),
        };
        match name {
            Some(name) => {
                held.imports.insert(name, path);
            }
            None => held.globs.push(path),
        }
    }
    held.paths = names.paths;
    let entry = uses.entry(module.clone()).or_default();
    entry.paths.extend(held.paths);
    entry.defines.extend(held.defines);
    entry.imports.extend(held.imports);
    entry.globs.extend(held.globs);
    for m in mods {
        read_mod(m, &module, dirs, uses)?;
    }
    Ok(())
}

/// Reads the module `m` declared in `parent`, inline or from its file.
fn read_mod(m: &ItemMod, parent: &[String], dirs: &Dirs, uses: &mut Uses) -> Result<(), Error> {
    let name = m.ident.unraw().to_string();
    let mut module = parent.to_vec();
    module.push(name.clone());
    let path_attr = path_attr(&m.attrs);
    if let Some((_, items)) = &m.content {
        let dir = dirs.child.join(path_attr.unwrap_or(name));
        return read_items(items, module, &Dirs { child: dir.clone(), attr: dir }, uses);
    }
    if let Some(p) = path_attr {
        return read_file(&dirs.attr.join(p), module, true, uses);
    }
    let flat = dirs.child.join(format!("{name}.rs"));
    let nested = dirs.child.join(&name).join("mod.rs");
    if flat.is_file() {
        read_file(&flat, module, false, uses)
    } else if nested.is_file() {
        read_file(&nested, module, true, uses)
    } else {
        Err(Error::MissingModule { module: module.join("::"), flat, nested })
    }
}

/// Whether `attrs` hold `#[cfg(test)]`.
fn is_cfg_test(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| match &a.meta {
        Meta::List(l) if l.path.is_ident("cfg") => l.tokens.to_string() == "test",
        _ => false,
    })
}

/// The value of a `#[path = "..."]` attribute.
fn path_attr(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// The attributes of an item.
fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// Collects the module-relative paths named by the code of one module.
struct Names<'m> {
    module: &'m [String],
    /// The module's child modules: a path may start with one of their names.
    children: BTreeSet<String>,
    paths: Vec<Vec<String>>,
}

impl Names<'_> {
    /// Records `segments` as an absolute path when it is one (see [`Names::absolute`]).
    fn record(&mut self, segments: &[String], in_use: bool) {
        if let Some(path) = self.absolute(segments, in_use) {
            self.paths.push(path);
        }
    }

    /// `segments` as an absolute path (`["crate", ..]`) when it starts with `crate`, `self`,
    /// `super` or (when it is more than a bare name, or part of a `use`) a child module's
    /// name; `None` for any other path.
    fn absolute(&self, segments: &[String], in_use: bool) -> Option<Vec<String>> {
        let first = segments.first()?;
        let mut path = match first.as_str() {
            "crate" => vec![],
            "self" | "super" => self.module.to_vec(),
            name if self.children.contains(name) && (in_use || segments.len() > 1) => self.module.to_vec(),
            _ => return None,
        };
        let mut rest = segments;
        while let Some((s, tail)) = rest.split_first() {
            match s.as_str() {
                "self" => {}
                "super" if path.len() > 1 => {
                    path.pop();
                }
                _ => break,
            }
            rest = tail;
        }
        path.extend(rest.iter().cloned());
        Some(path)
    }

    /// Records the paths written inside a macro call, read as tokens: every `a::b::c` run.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => self.scan_tokens(g.stream()),
                TokenTree::Ident(id) => {
                    let mut segments = vec![id.unraw().to_string()];
                    while let (true, Some(TokenTree::Ident(next))) = (is_path_sep(&tokens, i + 1), tokens.get(i + 3)) {
                        segments.push(next.unraw().to_string());
                        i += 3;
                    }
                    // A lone `crate`, `super` or `self` names no item (`pub(crate)` in a
                    // macro body, `self` as a receiver): only a path through it is an edge.
                    let lone_keyword =
                        segments.len() == 1 && matches!(segments[0].as_str(), "crate" | "super" | "self");
                    if !lone_keyword {
                        self.record(&segments, false);
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
}

/// Whether `tokens[i..]` starts with `::`.
fn is_path_sep(tokens: &[TokenTree], i: usize) -> bool {
    matches!((tokens.get(i), tokens.get(i + 1)),
        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
            if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':')
}

/// What a `use` tree brings in: `(Some(name), path)` for each name (its `as` name when
/// renamed, `_` for `as _`; `use a::{self}` brings in `a`), `(None, path)` for each glob
/// `path::*`. The paths are the tree's paths as segments (`use a::{b, c::*}` gives `a::b`
/// and `a::c`).
fn use_imports(tree: &UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Option<String>, Vec<String>)>) {
    let named = |prefix: &Vec<String>, name: String| {
        let mut p = prefix.clone();
        if name != "self" || p.is_empty() {
            p.push(name);
        }
        p
    };
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.unraw().to_string());
            use_imports(&p.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(n) => {
            let path = named(prefix, n.ident.unraw().to_string());
            if let Some(name) = path.last().cloned() {
                out.push((Some(name), path));
            }
        }
        UseTree::Rename(r) => {
            out.push((Some(r.rename.unraw().to_string()), named(prefix, r.ident.unraw().to_string())));
        }
        UseTree::Glob(_) => out.push((None, prefix.clone())),
        UseTree::Group(g) => g.items.iter().for_each(|t| use_imports(t, prefix, out)),
    }
}

/// The names an item defines in its module's namespace (none for `use`, `mod`, `impl`).
fn defined_names(item: &Item) -> Vec<String> {
    let one = |id: &syn::Ident| vec![id.unraw().to_string()];
    match item {
        Item::Const(i) => one(&i.ident),
        Item::Enum(i) => one(&i.ident),
        Item::Fn(i) => one(&i.sig.ident),
        Item::Macro(i) => i.ident.as_ref().map(one).unwrap_or_default(),
        Item::Static(i) => one(&i.ident),
        Item::Struct(i) => one(&i.ident),
        Item::Trait(i) => one(&i.ident),
        Item::TraitAlias(i) => one(&i.ident),
        Item::Type(i) => one(&i.ident),
        Item::Union(i) => one(&i.ident),
        Item::ForeignMod(f) => f
            .items
            .iter()
            .filter_map(|fi| match fi {
                syn::ForeignItem::Fn(f) => Some(f.sig.ident.unraw().to_string()),
                syn::ForeignItem::Static(s) => Some(s.ident.unraw().to_string()),
                syn::ForeignItem::Type(t) => Some(t.ident.unraw().to_string()),
                _ => None,
            })
            .collect(),
        _ => vec![],
    }
}

impl<'ast> Visit<'ast> for Names<'_> {
    fn visit_item(&mut self, item: &'ast Item) {
        if !is_cfg_test(item_attrs(item)) {
            visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_cfg_test(&f.attrs) {
            visit::visit_impl_item_fn(self, f);
        }
    }

    /// Modules inside function bodies are not followed.
    fn visit_item_mod(&mut self, _: &'ast ItemMod) {}

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if u.leading_colon.is_none() {
            let mut imports = Vec::new();
            use_imports(&u.tree, &mut Vec::new(), &mut imports);
            imports.iter().for_each(|(_, p)| self.record(p, true));
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() {
            let segments: Vec<String> = p.segments.iter().map(|s| s.ident.unraw().to_string()).collect();
            self.record(&segments, false);
        }
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.scan_tokens(m.tokens.clone());
    }

    /// Attributes (doc comments among them) and `pub(super)`-style visibilities are not uses.
    fn visit_attribute(&mut self, _: &'ast Attribute) {}

    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}
}
