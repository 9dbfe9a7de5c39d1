//! Finding and opening the CANN libraries ([`Api::load`], [`search_dirs`]), resolving
//! their symbols, and the calls every checked function shares.

use crate::elf;
use crate::error::{AclError, LoadError};
use crate::fns::{self, Api, LibKind, Loaded, SYMBOLS};
use crate::result;
use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

/// Where to look for the CANN libraries.
#[derive(Clone, Debug, Default)]
pub struct LoadConfig {
    /// A directory holding `libascendcl.so` (or `libacl_rt.so`), `libnnopbase.so` and
    /// `libopapi.so` (or the split `libopapi_*.so`). When set, it is the only place
    /// searched: a configured path that does not work is an error, not a hint.
    pub lib_dir: Option<PathBuf>,
    /// Skip the system loader (bare `dlopen("libascendcl.so")`) as the last resort.
    pub no_system_loader: bool,
}

/// The runtime libraries, in order of preference.
pub const RUNTIME_LIBS: [&str; 2] = ["libacl_rt.so", "libascendcl.so"];
pub const NNOPBASE_LIB: &str = "libnnopbase.so";
pub const OPAPI_LIB: &str = "libopapi.so";
/// The split operator libraries (newest layout); never loaded together with `libopapi.so`.
pub const OPAPI_SPLIT_LIBS: [&str; 4] =
    ["libopapi_math.so", "libopapi_nn.so", "libopapi_cv.so", "libopapi_transformer.so"];
/// Driver directories searched for dependencies (relative to `/usr/local/Ascend/driver`).
const DRIVER_DIRS: [&str; 3] = [
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/lib64/common",
    "/usr/local/Ascend/driver/lib64/driver",
];

impl fmt::Debug for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Api").field("origin", &self.origin).field("runtime", &self.runtime.label).finish()
    }
}

fn open(path: &Path) -> Result<libloading::Library, LoadError> {
    // SAFETY: loading a shared object runs its initialisers. The CANN libraries (and the
    // emulator standing in for them) are ordinary C/C++ libraries whose initialisers do
    // not rely on anything from this process; that is the documented way to use them.
    unsafe { libloading::Library::new(path) }
        .map_err(|e| LoadError::LibraryOpen { path: path.display().to_string(), reason: e.to_string() })
}

fn open_name(name: &str) -> Result<libloading::Library, LoadError> {
    // SAFETY: as in `open`; the system loader resolves the name.
    unsafe { libloading::Library::new(OsStr::new(name)) }
        .map_err(|e| LoadError::LibraryOpen { path: name.to_string(), reason: e.to_string() })
}

/// The directories searched, in order, with where each came from.
pub fn search_dirs(cfg: &LoadConfig) -> Vec<(PathBuf, String)> {
    if let Some(d) = &cfg.lib_dir {
        return vec![(d.clone(), "configured lib_dir".into())];
    }
    let mut v = Vec::new();
    for var in ["ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"] {
        if let Some(root) = std::env::var_os(var).filter(|r| !r.is_empty()) {
            v.push((PathBuf::from(root).join("lib64"), format!("${var}/lib64")));
        }
    }
    v.push((PathBuf::from("/usr/local/Ascend/ascend-toolkit/latest/lib64"), "default install".into()));
    v
}

impl Api {
    /// Finds and opens the libraries (see [`search_dirs`] for the order); in the chosen
    /// directory the dependencies of each library that live there (or in the driver
    /// directories) are opened first by absolute path.
    pub fn load(cfg: &LoadConfig) -> Result<Api, LoadError> {
        let dirs = search_dirs(cfg);
        let mut searched = Vec::new();
        for (dir, why) in &dirs {
            let Some(rt_name) = RUNTIME_LIBS.iter().find(|n| dir.join(n).is_file()) else {
                searched.push(format!("{} ({why})", dir.display()));
                continue;
            };
            return Self::load_dir(dir, rt_name);
        }
        if cfg.lib_dir.is_none() && !cfg.no_system_loader {
            let mut last = None;
            for name in RUNTIME_LIBS {
                match open_name(name) {
                    Ok(lib) => return Ok(Self::load_system(name, lib)),
                    Err(e) => last = Some(e),
                }
            }
            searched.push(format!("system loader ({})", last.map_or_else(String::new, |e| e.to_string())));
        }
        Err(LoadError::LibraryNotFound { library: RUNTIME_LIBS.join(" or "), searched })
    }

    fn load_dir(dir: &Path, rt_name: &str) -> Result<Api, LoadError> {
        let mut dep_dirs = vec![dir.to_path_buf()];
        if let Some(parent) = dir.parent() {
            dep_dirs.push(parent.join("runtime/lib64"));
        }
        dep_dirs.extend(DRIVER_DIRS.iter().map(PathBuf::from));
        let mut deps = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let rt_path = dir.join(rt_name);
        preload_deps(&rt_path, &dep_dirs, &mut seen, &mut deps);
        let runtime = Loaded { label: rt_path.display().to_string(), lib: open(&rt_path)? };
        let nn_path = dir.join(NNOPBASE_LIB);
        let nnopbase = if nn_path.is_file() {
            preload_deps(&nn_path, &dep_dirs, &mut seen, &mut deps);
            open(&nn_path).map(|lib| Loaded { label: nn_path.display().to_string(), lib })
        } else {
            Err(LoadError::LibraryNotFound { library: NNOPBASE_LIB.into(), searched: vec![dir.display().to_string()] })
        };
        let agg = dir.join(OPAPI_LIB);
        let opapi = if agg.is_file() {
            preload_deps(&agg, &dep_dirs, &mut seen, &mut deps);
            open(&agg).map(|lib| vec![Loaded { label: agg.display().to_string(), lib }])
        } else {
            let split: Vec<PathBuf> = OPAPI_SPLIT_LIBS.iter().map(|n| dir.join(n)).filter(|p| p.is_file()).collect();
            if split.is_empty() {
                Err(LoadError::LibraryNotFound {
                    library: format!("{OPAPI_LIB} or {}", OPAPI_SPLIT_LIBS.join("/")),
                    searched: vec![dir.display().to_string()],
                })
            } else {
                split
                    .iter()
                    .map(|p| {
                        preload_deps(p, &dep_dirs, &mut seen, &mut deps);
                        open(p).map(|lib| Loaded { label: p.display().to_string(), lib })
                    })
                    .collect()
            }
        };
        log::debug!("acl-sys: loaded {} from {}", rt_name, dir.display());
        Ok(Api { runtime, nnopbase, opapi, _deps: deps, origin: dir.display().to_string(), slots: fns::Slots::new() })
    }

    fn load_system(rt_name: &str, lib: libloading::Library) -> Api {
        let nnopbase = open_name(NNOPBASE_LIB).map(|lib| Loaded { label: NNOPBASE_LIB.into(), lib });
        let opapi = match open_name(OPAPI_LIB) {
            Ok(lib) => Ok(vec![Loaded { label: OPAPI_LIB.into(), lib }]),
            Err(agg_err) => {
                let split: Vec<Loaded> = OPAPI_SPLIT_LIBS
                    .iter()
                    .filter_map(|n| open_name(n).ok().map(|lib| Loaded { label: n.to_string(), lib }))
                    .collect();
                if split.is_empty() { Err(agg_err) } else { Ok(split) }
            }
        };
        log::debug!("acl-sys: loaded {rt_name} through the system loader");
        Api {
            runtime: Loaded { label: rt_name.into(), lib },
            nnopbase,
            opapi,
            _deps: Vec::new(),
            origin: "system loader".into(),
            slots: fns::Slots::new(),
        }
    }

    /// Where the libraries were found.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Paths (or names) of the loaded libraries.
    pub fn libraries(&self) -> Vec<String> {
        let mut v = vec![self.runtime.label.clone()];
        if let Ok(n) = &self.nnopbase {
            v.push(n.label.clone());
        }
        if let Ok(o) = &self.opapi {
            v.extend(o.iter().map(|l| l.label.clone()));
        }
        v
    }

    /// Whether a library kind is loaded; its load error otherwise.
    pub fn library_status(&self, kind: LibKind) -> Result<(), LoadError> {
        match kind {
            LibKind::Runtime => Ok(()),
            LibKind::NnOpBase => self.nnopbase.as_ref().map(|_| ()).map_err(Clone::clone),
            LibKind::OpApi => self.opapi.as_ref().map(|_| ()).map_err(Clone::clone),
        }
    }

    /// Looks `name` (NUL-terminated) up in the libraries of `kind`.
    ///
    /// # Safety
    /// `T` must be the exact function-pointer type of the symbol.
    pub(crate) unsafe fn resolve<T: Copy>(&self, name: &'static str, kind: LibKind) -> Result<T, LoadError> {
        let mut libs: Vec<&Loaded> = Vec::new();
        let mut missing: Option<LoadError> = None;
        match kind {
            LibKind::Runtime => libs.push(&self.runtime),
            LibKind::NnOpBase => {
                match &self.nnopbase {
                    Ok(l) => libs.push(l),
                    Err(e) => missing = Some(e.clone()),
                }
                // libopapi links libnnopbase, so the basics resolve through it too.
                if let Ok(o) = &self.opapi {
                    libs.extend(o.iter());
                }
            }
            LibKind::OpApi => match &self.opapi {
                Ok(o) => libs.extend(o.iter()),
                Err(e) => missing = Some(e.clone()),
            },
        }
        if libs.is_empty() {
            return Err(missing.unwrap_or(LoadError::SymbolMissing {
                symbol: name.trim_end_matches('\0').into(),
                libraries: Vec::new(),
            }));
        }
        for l in &libs {
            // SAFETY: the caller guarantees `T` is the symbol's type; the symbol is only
            // used while `self` (which owns the library) is alive.
            if let Ok(sym) = unsafe { l.lib.get::<T>(name.as_bytes()) } {
                return Ok(*sym);
            }
        }
        Err(LoadError::SymbolMissing {
            symbol: name.trim_end_matches('\0').into(),
            libraries: libs.iter().map(|l| l.label.clone()).collect(),
        })
    }

    /// An optional symbol: `None` (logged at debug level) when this release lacks it.
    pub fn optional<T>(&self, r: Result<T, LoadError>) -> Option<T> {
        match r {
            Ok(f) => Some(f),
            Err(e) => {
                log::debug!("acl-sys: optional symbol unavailable: {e}");
                None
            }
        }
    }

    /// Resolves every symbol of `names`; the first failure.
    pub fn require(&self, names: &[&str]) -> Result<(), LoadError> {
        for &n in names {
            let kind = SYMBOLS.iter().find(|(s, _)| *s == n).map(|(_, k)| *k).ok_or_else(|| {
                LoadError::SymbolMissing { symbol: n.to_string(), libraries: vec!["<not declared by acl-sys>".into()] }
            })?;
            let mut name = n.to_string();
            name.push('\0');
            // SAFETY: only the presence of the symbol is checked; it is not called and
            // `*const ()` is never used as a function pointer.
            let r: Result<*const (), LoadError> = unsafe { self.resolve(leak_name(name), kind) };
            r?;
        }
        Ok(())
    }

    /// `aclGetRecentErrMsg()`, copied (see [`result::recent_error_message`]).
    pub fn recent_error_message(&self) -> Option<String> {
        result::recent_error_message(self)
    }

    /// `Ok` for status 0, else an [`AclError`] naming `call` with the recent message
    /// (see [`result::check`]).
    pub fn check(&self, call: &'static str, code: i32) -> Result<(), AclError> {
        result::check(self, call, code)
    }

    /// An `Api` over the running program itself (which exports no CANN symbol) whose
    /// entries the tests fill with fake functions.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Api {
        let lib = libloading::Library::from(libloading::os::unix::Library::this());
        let none = || LoadError::LibraryNotFound { library: "test".into(), searched: Vec::new() };
        Api {
            runtime: Loaded { label: "<test program>".into(), lib },
            nnopbase: Err(none()),
            opapi: Err(none()),
            _deps: Vec::new(),
            origin: "test".into(),
            slots: fns::Slots::new(),
        }
    }
}

/// `require` takes names at run time; symbol lookups need `&'static str`. The set of
/// names is bounded (declared symbols), so interning them is bounded too.
fn leak_name(n: String) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut set = NAMES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = set.get(n.as_str()) {
        return s;
    }
    let s: &'static str = Box::leak(n.into_boxed_str());
    set.insert(s);
    s
}

/// Opens, depth first, the dependencies of `lib` that live in `dirs`, so that they are
/// resident (by soname) before `lib` itself is opened.
fn preload_deps(
    lib: &Path,
    dirs: &[PathBuf],
    seen: &mut std::collections::HashSet<String>,
    out: &mut Vec<libloading::Library>,
) {
    let Some(needed) = elf::needed(lib) else { return };
    for so in needed {
        if !seen.insert(so.clone()) {
            continue;
        }
        let Some(path) = dirs.iter().map(|d| d.join(&so)).find(|p| p.is_file()) else { continue };
        preload_deps(&path, dirs, seen, out);
        match open(&path) {
            Ok(l) => {
                log::trace!("acl-sys: preloaded {}", path.display());
                out.push(l)
            }
            Err(e) => log::debug!("acl-sys: preloading a dependency failed (left to the loader): {e}"),
        }
    }
}
