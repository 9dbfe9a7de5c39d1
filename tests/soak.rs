//! Soak and concurrency: 8 threads mix eager op chains (default and user streams), runs of
//! shared compiled graphs, fresh compile/run/drop cycles, sentence embeddings and work on a
//! runtime with a tiny pool limit, over two logical devices, with drops at random points
//! and (on the Ascend backend over acl-emu) injected driver failures. Every result is
//! checked against a serial computation; a failure is accepted only when it is one of the
//! injected kinds and typed as such. At the end the pools hold no live block and the
//! emulator no live object.
//!
//! `NPURT_SOAK_SECS` sets the mixed phase's length per backend (default 4 s); run longer by
//! hand, e.g. `NPURT_SOAK_SECS=600 cargo test --release --test soak -- --nocapture`.

use npurt::embed::Embedder;
use npurt::models::bert::{self, BertConfig, Weights};
use npurt::{Backend, Error, Op, PoolConfig, RuntimeConfig, Tensor};
use npurt_test_support::emu::{Emu, emu_lib, fake_toolkit, serial};
use npurt_test_support::rng::Rng;
use runtime::Runtime;
use runtime::graph::{CompileOptions, CompiledGraph, Graph};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const THREADS: usize = 8;
/// The code acl-emu returns for injected faults; an error that carries it is expected.
const FAULT_CODE: &str = "507899";

fn host(t: &Tensor) -> npurt::Result<Vec<f32>> {
    Ok(t.to_ndarray::<f32>()?.iter().copied().collect())
}

fn close(got: &[f32], want: &[f32], tol: f32) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(a, b)| (a - b).abs() <= tol * (1.0 + b.abs()))
}

/// Counts of what the mixed phase did.
#[derive(Default)]
struct Tally {
    checked: AtomicUsize,
    wrong: AtomicUsize,
    injected: AtomicUsize,
    out_of_memory: AtomicUsize,
    dropped: AtomicUsize,
    unexpected: Mutex<Vec<String>>,
}

impl Tally {
    fn verdict(&self, what: &str, ok: bool) {
        self.checked.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.wrong.fetch_add(1, Ordering::Relaxed);
            eprintln!("WRONG result: {what}");
        }
    }
    /// An error is fine when it is an injected fault (faults armed, the code in the
    /// message) or an out-of-memory on the runtime with the tiny pool.
    fn error(&self, what: &str, e: &Error, faults: bool, tiny_pool: bool) {
        if faults && e.to_string().contains(FAULT_CODE) {
            self.injected.fetch_add(1, Ordering::Relaxed);
        } else if tiny_pool && matches!(e, Error::OutOfMemory { .. }) {
            self.out_of_memory.fetch_add(1, Ordering::Relaxed);
        } else {
            self.unexpected.lock().unwrap().push(format!("{what}: {e}"));
        }
    }
}

/// (m, k, n) -> relu(a @ b + bias) computed on the host in f64.
fn eager_want(a: &[f32], b: &[f32], bias: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k).map(|p| a[i * k + p] as f64 * b[p * n + j] as f64).sum::<f64>() + bias[j] as f64;
            out[i * n + j] = s.max(0.0) as f32;
        }
    }
    out
}

/// One eager chain MatMul -> Add (bias broadcast) -> Relu on `device`, on the default
/// stream or a user stream; sometimes everything is dropped before synchronising.
fn eager_chain(rt: &Runtime, device: usize, rng: &mut Rng, tally: &Tally) -> npurt::Result<()> {
    let (m, k, n) = (1 + rng.below(40), 1 + rng.below(40), 1 + rng.below(40));
    let (a, b, bias) = (rng.vec(m * k), rng.vec(k * n), rng.vec(n));
    let ta = rt.from_slice(&a, [m, k], device)?;
    let tb = rt.from_slice(&b, [k, n], device)?;
    let tbias = rt.from_slice(&bias, [n], device)?;
    let user = rng.below(2) == 0;
    let stream = if user { Some(rt.stream(device)?) } else { None };
    let y = {
        let _scope = stream.as_ref().map(|s| rt.stream_scope(s));
        let mm = rt.run(&Op::MatMul { trans_a: false, trans_b: false }, &[&ta, &tb])?.remove(0);
        let z = rt.run(&Op::Add, &[&mm, &tbias])?.remove(0);
        rt.run(&Op::Relu, &[&z])?.remove(0)
    };
    if rng.below(5) == 0 {
        // Drop inputs, output and stream with the work possibly still queued.
        drop((ta, tb, tbias, y, stream));
        tally.dropped.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    if let Some(s) = &stream {
        s.synchronize()?;
    }
    tally.verdict(
        &format!("eager {m}x{k}x{n} on device {device}"),
        close(&host(&y)?, &eager_want(&a, &b, &bias, m, k, n), 1e-4),
    );
    Ok(())
}

fn chain(w: &[f32]) -> Graph {
    npurt_test_support::graphs::live_chain(16, 8, w.to_vec())
}

fn options(device: usize) -> CompileOptions {
    CompileOptions { device, max_arenas: 3, ..CompileOptions::from_config(&RuntimeConfig::default(), device) }
}

/// A compiled graph shared by all threads, with the serial outputs of its seeded inputs.
struct Shared {
    device: usize,
    cg: CompiledGraph,
    inputs: Vec<Vec<Tensor>>,
    want: Vec<Vec<f32>>,
}

impl Shared {
    fn new(rt: &Runtime, device: usize, g: &Graph, inputs: Vec<Vec<Tensor>>) -> Shared {
        let cg = CompiledGraph::compile(rt, g, options(device)).unwrap();
        let want = inputs.iter().map(|i| host(&cg.run(&i.iter().collect::<Vec<_>>()).unwrap()[0]).unwrap()).collect();
        Shared { device, cg, inputs, want }
    }
    fn run(&self, rng: &mut Rng, tally: &Tally) -> npurt::Result<()> {
        let i = rng.below(self.inputs.len());
        let out = self.cg.run(&self.inputs[i].iter().collect::<Vec<_>>())?;
        tally.verdict(
            &format!("compiled graph on device {} input {i}", self.device),
            close(&host(&out[0])?, &self.want[i], 1e-5),
        );
        Ok(())
    }
}

fn bert_inputs(rt: &Runtime, device: usize, seed: usize, s: usize, vocab: usize) -> Vec<Tensor> {
    let ids: Vec<i64> = (0..s).map(|i| ((i * 7 + seed * 13 + 3) % vocab) as i64).collect();
    let tt: Vec<i64> = (0..s).map(|i| ((i + seed) % 2) as i64).collect();
    let mask: Vec<f32> = (0..s).map(|i| if i + seed % 3 >= s { 0.0 } else { 1.0 }).collect();
    vec![
        rt.from_slice(&ids, [1, s], device).unwrap(),
        rt.from_slice(&tt, [1, s], device).unwrap(),
        rt.from_slice(&mask, [1, s], device).unwrap(),
    ]
}

fn model_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("NPURT_TEST_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-assets/all-MiniLM-L6-v2"));
    dir.join("config.json").is_file().then_some(dir)
}

const TEXTS: &[&str] =
    &["A man is playing a guitar.", "The quick brown fox jumps over the lazy dog.", "Hello!", "Rust runtimes"];

fn soak_secs() -> f64 {
    std::env::var("NPURT_SOAK_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(4.0)
}

/// The compiled graphs every thread shares: per device a chain of weights `w` and a tiny
/// BERT, each with four seeded inputs and their serial outputs.
fn shared_graphs(rt: &Runtime, seed: &mut Rng, w: &[f32]) -> Vec<Shared> {
    let mut shared = Vec::new();
    let bc = BertConfig::tiny();
    let bg = bert::build(&bc, Weights::Random(7), 1, 16).unwrap();
    for d in 0..2 {
        let ins = (0..4).map(|_| vec![rt.from_slice(&seed.vec(256), [16, 16], d).unwrap()]).collect();
        shared.push(Shared::new(rt, d, &chain(w), ins));
        let ins = (0..4).map(|s| bert_inputs(rt, d, s, 16, bc.vocab_size)).collect();
        shared.push(Shared::new(rt, d, &bg.graph, ins));
    }
    shared
}

/// An embedder shared by the threads and the serial embeddings of [`TEXTS`] from a second
/// one, or `None` (that leg skipped) without the model.
type SharedEmbedder = Option<(Mutex<Embedder>, Vec<Vec<f32>>)>;

fn shared_embedder(rt: &Runtime, name: &str) -> SharedEmbedder {
    match model_dir() {
        Some(dir) => {
            let e = Embedder::from_dir(rt, &dir).expect("embedder");
            let mut e2 = Embedder::from_dir(rt, &dir).expect("embedder");
            let want: Vec<Vec<f32>> = TEXTS.iter().map(|t| e2.embed(&[t]).unwrap().remove(0)).collect();
            drop(e2);
            Some((Mutex::new(e), want))
        }
        None => {
            eprintln!("SKIP the embedding leg of the soak on {name}: no model (run scripts/fetch-test-assets.sh)");
            None
        }
    }
}

/// What the threads of the mixed phase share.
struct Mixed<'a> {
    rt: &'a Runtime,
    /// The runtime whose pool is far below one segment.
    tiny: &'a Runtime,
    shared: &'a [Shared],
    embedder: &'a SharedEmbedder,
    tally: &'a Tally,
    /// Set once thread 0 has armed a fault.
    faults: &'a AtomicBool,
    fresh_chain: &'a Graph,
    emu: Option<&'a Emu>,
    deadline: Instant,
}

impl Mixed<'_> {
    /// Compile, run, check against the shared graph's serial answer, drop.
    fn fresh_compile(&self, rng: &mut Rng, device: usize, what: &str) -> npurt::Result<()> {
        let sh = &self.shared[2 * device];
        let cg = CompiledGraph::compile(self.rt, self.fresh_chain, options(device))?;
        let k = rng.below(sh.inputs.len());
        let out = cg.run(&sh.inputs[k].iter().collect::<Vec<_>>())?;
        self.tally.verdict(what, close(&host(&out[0])?, &sh.want[k], 1e-5));
        Ok(())
    }

    /// One text through the shared embedder, checked against its serial embedding.
    fn embed(&self, rng: &mut Rng, what: &str) -> npurt::Result<()> {
        let Some((e, want)) = self.embedder else { return Ok(()) };
        let k = rng.below(TEXTS.len());
        let got = e.lock().unwrap_or_else(|p| p.into_inner()).embed(&[TEXTS[k]])?.remove(0);
        self.tally.verdict(what, close(&got, &want[k], 1e-4));
        Ok(())
    }

    /// The tiny pool: up to 2 MiB per request, often over its limit.
    fn tiny_pool(&self, rng: &mut Rng, device: usize, what: &str) -> npurt::Result<()> {
        let n = 1 + rng.below(1 << 19);
        let v = rng.vec(n);
        let x = self.tiny.from_slice(&v, [n], device)?;
        let y = self.tiny.run(&Op::Relu, &[&x])?.remove(0);
        let want: Vec<f32> = v.iter().map(|a| a.max(0.0)).collect();
        self.tally.verdict(what, close(&host(&y)?, &want, 0.0));
        Ok(())
    }

    /// Thread `t`'s loop until the deadline: a random action on a random device per step.
    fn worker(&self, t: usize) {
        let mut rng = Rng(0x1234_5678 + t as u64 * 0x9E37_79B9);
        let mut i = 0usize;
        while Instant::now() < self.deadline {
            i += 1;
            let device = rng.below(2);
            let action = rng.below(7);
            let what = format!("thread {t} step {i} action {action}");
            let r: npurt::Result<()> = match action {
                0 | 1 => eager_chain(self.rt, device, &mut rng, self.tally),
                2 | 3 => self.shared[rng.below(self.shared.len())].run(&mut rng, self.tally),
                4 => self.fresh_compile(&mut rng, device, &what),
                5 => self.embed(&mut rng, &what),
                _ => self.tiny_pool(&mut rng, device, &what),
            };
            if let Err(e) = r {
                self.tally.error(&what, &e, self.faults.load(Ordering::Relaxed), action == 6);
            }
            // Thread 0 arms a fault every 4 steps: one of the next few aclnn calls
            // of a kind fails in whichever thread makes it.
            if let (Some(emu), 0, 0) = (self.emu, t, i % 4) {
                self.faults.store(true, Ordering::Relaxed);
                let sym =
                    ["aclnnAdd", "aclnnRelu", "aclnnMatmul", "aclnnAddGetWorkspaceSize", "aclrtMemcpy"][rng.below(5)];
                let rule = format!("fail={sym}:{}:{FAULT_CODE}", 1 + rng.below(5));
                assert_eq!(emu.configure(&rule), 0, "{rule}");
            }
        }
    }
}

/// Prints the tally; no unexpected error, no wrong result, enough work checked.
fn check_tally(name: &str, tally: &Tally) {
    let unexpected = tally.unexpected.lock().unwrap().clone();
    eprintln!(
        "soak on {name}: {:.1} s, {} results checked, {} wrong, {} injected faults surfaced, {} out-of-memory on the 1 MiB pool, {} chains dropped unsynchronised, {} unexpected errors",
        soak_secs(),
        tally.checked.load(Ordering::Relaxed),
        tally.wrong.load(Ordering::Relaxed),
        tally.injected.load(Ordering::Relaxed),
        tally.out_of_memory.load(Ordering::Relaxed),
        tally.dropped.load(Ordering::Relaxed),
        unexpected.len()
    );
    assert!(unexpected.is_empty(), "{name}: unexpected errors: {unexpected:#?}");
    assert_eq!(tally.wrong.load(Ordering::Relaxed), 0, "{name}: wrong results");
    assert!(tally.checked.load(Ordering::Relaxed) >= THREADS, "{name}: too little work checked");
}

/// Everything is released: no block in use in either pool once all is dropped.
fn check_released(name: &str, rt: &Runtime, tiny: &Runtime) {
    rt.synchronize_all().unwrap();
    tiny.synchronize_all().unwrap();
    for (label, r) in [("pool", rt), ("1 MiB pool", tiny)] {
        for d in 0..r.device_count() {
            let st = r.pool_stats(d).unwrap();
            assert_eq!(st.in_use_bytes, 0, "{name}: {label} of device {d} still has blocks in use: {st}");
            r.release_cached(d).unwrap();
        }
    }
}

/// The mixed phase on `backend` (two devices); `emu` arms injected faults when given.
fn soak(name: &str, backend: Arc<dyn Backend>, emu: Option<&Emu>) {
    let rt = Runtime::with_backend(backend.clone(), RuntimeConfig { max_streams: 16, ..RuntimeConfig::default() })
        .expect("runtime");
    assert!(rt.device_count() >= 2, "{name}: two logical devices");
    // A second runtime on the same backend whose pool is far below one segment.
    let tiny_cfg = RuntimeConfig {
        pool: PoolConfig { limit_bytes: Some(1 << 20), ..PoolConfig::default() },
        ..RuntimeConfig::default()
    };
    let tiny = Runtime::with_backend(backend, tiny_cfg).expect("runtime with a 1 MiB pool");
    let mut seed = Rng(0x9E37_79B9_7F4A_7C15);
    let w = seed.vec(256);
    let shared = shared_graphs(&rt, &mut seed, &w);
    let embedder = shared_embedder(&rt, name);
    let tally = Tally::default();
    let faults = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs_f64(soak_secs());
    let fresh_chain = chain(&w);
    let mixed = Mixed {
        rt: &rt,
        tiny: &tiny,
        shared: &shared,
        embedder: &embedder,
        tally: &tally,
        faults: &faults,
        fresh_chain: &fresh_chain,
        emu,
        deadline,
    };
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let mixed = &mixed;
            s.spawn(move || mixed.worker(t));
        }
    });
    if let Some(emu) = emu {
        assert_eq!(emu.configure("fail="), 0);
    }
    check_tally(name, &tally);
    drop((shared, embedder, fresh_chain));
    check_released(name, &rt, &tiny);
}

#[test]
fn soak_cpu() {
    let _turn = serial();
    let b = npurt::cpu_backend(&RuntimeConfig { cpu_devices: 2, ..RuntimeConfig::default() }).expect("cpu backend");
    soak("cpu", b, None);
}

#[test]
fn soak_acl_emu() {
    let _turn = serial();
    let Some(lib) = emu_lib() else {
        eprintln!("SKIP soak on acl-emu: libacl_emu.so not found next to the test binary (or set ACL_EMU_LIB)");
        return;
    };
    let emu = Emu::open(&lib);
    assert_eq!(emu.configure("devices=2;fail="), 0);
    let tk = fake_toolkit("soak", &lib);
    {
        let cfg =
            backend_acl::AclConfig { lib_dir: Some(tk.join("lib64")), fp32_matmul: backend_acl::Fp32Matmul::Exact };
        let b: Arc<dyn Backend> = Arc::new(backend_acl::AclBackend::new(cfg).expect("acl backend over acl-emu"));
        soak("acl-emu", b, Some(&emu));
    }
    let c = emu.counters();
    assert_eq!(
        (c.device_allocations, c.host_allocations, c.streams, c.events, c.executors, c.descriptors, c.device_refs),
        (0, 0, 0, 0, 0, 0, 0),
        "acl-emu objects still alive after the soak: {c:?}"
    );
}
