//! Argument parsing and subcommand dispatch.

mod bench;
mod chart;
mod compare;
mod concurrent;
mod demo;
mod embed;
mod info;
mod op;

use npurt::{Error, Result, Runtime, RuntimeConfig, Tier};

pub const USAGE: &str = "\
usage: npurt <command> [options]

commands:
  info                      backends, devices, memory, units, build facts, CPU features
  demo                      walk through the runtime's features with measured values
  op <OP> --input A.npy [--input B.npy ...] --output C.npy [--attr key=value ...]
                            run one op on .npy files
  bench gemm [--peer numpy] [--runs N] [--all-tiers]
                            f32 GEMM at the BERT shapes vs OpenBLAS through NumPy
  bench bert [--model bert-large|bert-base|minilm-l6|DIR] [--seq 512] [--batch 1]
             [--ablation] [--runs 5] [--json FILE] [--trace FILE] [--profile]
                            BERT latency, memory and utilisation (the ablation: none,
                            +pool, +reuse, +parallel, +mapping)
  bench bert --concurrent N [--model M] [--seq S] [--runs R] [--json FILE]
                            N threads run one compiled graph at once (R runs each);
                            every output checked against a serial run of its input
  bench bert --accuracy [--model M] [--seq S]
                            final hidden states with bf16 weights against f32
  bench bert --compare-ort [--pairs bert-large:512,bert-large:128,bert-base:128]
             [--runs 5] [--precisions f32,bf16] [--ort-variants unfused,fused]
             [--ort-threads 2] [--json FILE]
                            npurt and ONNX Runtime (bench/peers/ort_bert.py) timed
                            alternately on the same models; ratio per pair
  embed --model-dir DIR [--batch N] [--stats] [TEXT ...]   sentence embeddings (texts from args or stdin lines)
options (all commands):
  --backend cpu|cuda|acl|auto   backend to use (default: best present; env NPURT_BACKEND)
  --impl reference|generic|fast force an implementation tier (env NPURT_IMPL)
  --devices N                   logical CPU devices (env NPURT_CPU_DEVICES)
  --precision f32|bf16          compiled graphs' matrix products: bf16 stores Linear weights
                                in bf16 and runs them on the bf16 unit (env NPURT_PRECISION)
  -h, --help                    this text";

/// Options shared by every subcommand, plus what is left for it.
pub struct Common {
    pub config: RuntimeConfig,
    pub rest: Vec<String>,
}

fn parse_common(args: &[String]) -> Result<Common> {
    let mut config = RuntimeConfig::default().with_env()?;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or_else(|| Error::Config(format!("{name} needs a value")));
        match a.as_str() {
            "--backend" => {
                let v = value("--backend")?;
                config.backend = if v == "auto" { None } else { Some(v) };
            }
            "--impl" => {
                let v = value("--impl")?;
                config.forced_tier = match v.as_str() {
                    "auto" => None,
                    _ => Some(Tier::parse(&v).ok_or_else(|| {
                        Error::Config(format!("--impl {v:?}: expected reference, generic, fast or auto"))
                    })?),
                };
            }
            "--precision" => {
                let v = value("--precision")?;
                config.precision = npurt::Precision::parse(&v)
                    .ok_or_else(|| Error::Config(format!("--precision {v:?}: expected f32 or bf16")))?;
            }
            "--devices" => {
                let v = value("--devices")?;
                config.cpu_devices = v.parse().map_err(|_| Error::Config(format!("--devices {v:?}: not a count")))?;
            }
            _ => rest.push(a.clone()),
        }
    }
    config.validate()?;
    Ok(Common { config, rest })
}

pub fn run(args: &[String]) -> Result<()> {
    let Some(cmd) = args.first() else {
        println!("{USAGE}");
        return Ok(());
    };
    if cmd == "-h" || cmd == "--help" || cmd == "help" {
        println!("{USAGE}");
        return Ok(());
    }
    let common = parse_common(&args[1..])?;
    match cmd.as_str() {
        "info" => info::run(&Runtime::with_config(common.config)?),
        "demo" => demo::run(&Runtime::with_config(common.config)?),
        "op" => op::run(common),
        "bench" => bench::run(common),
        "embed" => embed::run(common),
        other => Err(Error::Config(format!("unknown command {other:?}\n\n{USAGE}"))),
    }
}
