//! Property tests ("fuzzing") of everything that reads untrusted input: the `.npy` parser,
//! the safetensors loader, the model directory's JSON files, op validation and graph
//! building. Each target runs a fixed number of generated cases (see [`cases`]; set
//! `PROPTEST_CASES` for longer runs by hand) and asserts that the code under test returns
//! `Ok` or a typed error: never a panic, a hang or an allocation out of proportion to its
//! input.
//!
//! The modules live in `tests/fuzz/`; the figures are in docs/RELIABILITY.md ("Fuzzing").

#[path = "fuzz/alloc.rs"]
mod alloc;
#[path = "fuzz/files.rs"]
mod files;
#[path = "fuzz/graph.rs"]
mod graph;
#[path = "fuzz/json.rs"]
mod json;
#[path = "fuzz/npy.rs"]
mod npy;
#[path = "fuzz/ops.rs"]
mod ops;
#[path = "fuzz/safetensors.rs"]
mod safetensors;
#[path = "fuzz/special_files.rs"]
mod special_files;

use proptest::test_runner::Config;

/// Cases per target: `PROPTEST_CASES` when set, else `default`.
pub fn cases(default: u32) -> u32 {
    match std::env::var("PROPTEST_CASES") {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("PROPTEST_CASES={v:?} is not a number")),
        Err(_) => default,
    }
}

/// The proptest configuration of a target: [`cases`] cases, no regression files written
/// into the source tree (the cases found so far are spelt out in each module instead).
pub fn config(default_cases: u32) -> Config {
    Config { cases: cases(default_cases), failure_persistence: None, ..Config::default() }
}

/// A CPU runtime with the default configuration (no environment overrides).
pub fn cpu_runtime() -> npurt::Runtime {
    let cfg = npurt::RuntimeConfig { backend: Some("cpu".into()), ..npurt::RuntimeConfig::default() };
    npurt::Runtime::with_config(cfg).expect("the CPU backend is always present")
}

/// One CPU runtime for what only validates or uploads (kernel selection, constants). A
/// target that runs work has a runtime of its own: `Runtime::synchronize` answers for
/// every stream of the device, other tests' included (see `graph::STOLEN_ERRORS`).
pub fn runtime() -> &'static npurt::Runtime {
    static RT: std::sync::OnceLock<npurt::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(cpu_runtime)
}

/// How many cases of a target reached each stage, for the report a target prints and for
/// its assertion that enough cases got past validation to test what lies behind it.
#[derive(Default)]
pub struct Counts(std::sync::Mutex<Vec<(&'static str, usize)>>);

impl Counts {
    pub fn add(&self, stage: &'static str) {
        let mut v = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match v.iter_mut().find(|(s, _)| *s == stage) {
            Some((_, n)) => *n += 1,
            None => v.push((stage, 1)),
        }
    }
    pub fn get(&self, stage: &str) -> usize {
        let v = self.0.lock().unwrap_or_else(|e| e.into_inner());
        v.iter().find(|(s, _)| *s == stage).map_or(0, |(_, n)| *n)
    }
}

/// Runs `test` on [`cases`]`(default_cases)` values of `strategy` (panicking with the
/// minimal failing input, as `proptest!` does); prints how many cases reached each stage
/// counted in `counts` and returns the number of cases.
pub fn run_cases<S: proptest::strategy::Strategy>(
    name: &str,
    default_cases: u32,
    strategy: S,
    counts: &Counts,
    test: impl Fn(S::Value) -> Result<(), proptest::test_runner::TestCaseError>,
) -> usize
where
    S::Value: std::fmt::Debug,
{
    let mut runner = proptest::test_runner::TestRunner::new(config(default_cases));
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{name}: {e}");
    }
    let n = cases(default_cases) as usize;
    let v = counts.0.lock().unwrap_or_else(|e| e.into_inner());
    let stages: Vec<String> = v.iter().map(|(s, k)| format!("{s} {k}")).collect();
    eprintln!("{name}: {n} cases; {}", stages.join(", "));
    n
}
