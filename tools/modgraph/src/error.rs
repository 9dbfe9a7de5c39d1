//! What can stop a crate or workspace from being read.

use std::path::PathBuf;

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
