//! `npurt bench`: one module per benchmark, and the pieces they share in `common`.

mod accuracy;
mod bert;
mod common;
mod compare_ort;
mod concurrent;
mod emulator;
mod gemm;
mod gemm_i8;
mod llm;
mod peak;
mod serve;

use clap::{Args, Subcommand};
use npurt::{Result, RuntimeConfig};

/// `npurt bench gemm|peak|bert [options]`
#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    which: Which,
}

#[derive(Subcommand)]
enum Which {
    /// f32 GEMM at the BERT shapes, as GFLOP/s and % of the FMA peak, optionally against
    /// OpenBLAS through NumPy
    Gemm(gemm::GemmArgs),
    /// The machine's FMA peak (GFLOP/s) on 1 thread and on all threads, per ISA path
    Peak(peak::PeakArgs),
    /// BERT latency, memory and utilisation (--ablation: none, +pool, +reuse, +parallel,
    /// +mapping); or --concurrent, --accuracy, --compare-ort
    Bert(Box<bert::BertArgs>),
    /// A decoder LLM (model directory or preset): prefill ms, decode ms per token,
    /// tokens/s, KV-cache MiB and the share of memory bandwidth
    Llm(llm::LlmArgs),
}

pub fn run(config: RuntimeConfig, args: BenchArgs) -> Result<()> {
    match args.which {
        Which::Gemm(a) => gemm::run(config, a),
        Which::Peak(a) => peak::run(config, a),
        Which::Bert(a) => bert::run(config, *a),
        Which::Llm(a) => llm::run(config, a),
    }
}
