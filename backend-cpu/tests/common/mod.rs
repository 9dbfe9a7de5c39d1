//! Set-up shared by the precision tests: a logger that keeps every warning of the process,
//! and a graph compiled in one precision on a CPU backend forced to one ISA, with the
//! warnings about precision that its compile logged.

use backend_cpu::{CpuBackend, CpuConfig, CpuError, Isa};
use runtime::graph::{CompileOptions, CompiledGraph, Graph};
use runtime::{Precision, Runtime, RuntimeConfig};
use std::sync::{Arc, Mutex, Once};

/// Every warning logged in this process (after [`capture_warnings`]).
static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if r.level() <= log::Level::Warn {
            WARNINGS.lock().unwrap_or_else(|p| p.into_inner()).push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

/// Installs the capturing logger (once per process; later calls do nothing).
pub fn capture_warnings() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_logger(&Capture).expect("no other logger in the test process");
        log::set_max_level(log::LevelFilter::Warn);
    });
}

/// A graph compiled on a CPU backend, with the runtime it runs on.
pub struct Compiled {
    /// Not every test binary that includes this module reads it.
    #[allow(dead_code)]
    pub rt: Runtime,
    pub cg: CompiledGraph,
    /// The warnings about precision that the compile logged.
    pub warned: Vec<String>,
}

/// `graph` compiled in `precision` on the CPU backend forced to `isa` (with `threads`
/// where given); `None`, with the reason printed, where this CPU cannot run `isa`.
pub fn compile(isa: Isa, threads: Option<usize>, precision: Precision, graph: &Graph) -> Option<Compiled> {
    capture_warnings();
    let b = match CpuBackend::new(CpuConfig { threads, isa: Some(isa), ..CpuConfig::default() }) {
        Ok(b) => b,
        Err(CpuError::Isa(e)) => {
            println!("SKIP {isa}: {e}");
            return None;
        }
        Err(e) => panic!("{isa}: {e}"),
    };
    let rt = Runtime::with_backend(Arc::new(b), RuntimeConfig::default()).unwrap();
    let options = CompileOptions { precision, ..CompileOptions::from_config(&RuntimeConfig::default(), 0) };
    // One compile at a time: another test's compile logging meanwhile would land in this
    // one's window of the log.
    static COMPILING: Mutex<()> = Mutex::new(());
    let _one = COMPILING.lock().unwrap_or_else(|p| p.into_inner());
    let before = WARNINGS.lock().unwrap().len();
    let cg = CompiledGraph::compile(&rt, graph, options).unwrap();
    let warned = WARNINGS.lock().unwrap()[before..].iter().filter(|w| w.contains("precision")).cloned().collect();
    Some(Compiled { rt, cg, warned })
}
