//! The command line: one `clap` parser for every subcommand, and the dispatch.
//!
//! Options shared by every subcommand (`--backend`, `--impl`, `--devices`, `--precision`)
//! are global: they may stand before or after the subcommand, and override the `NPURT_*`
//! environment that [`RuntimeConfig::with_env`] reads.

use crate::{bench, demo, embed, generate, info, op};
use clap::{Args, CommandFactory, Parser, Subcommand};
use npurt::{Precision, Result, Runtime, RuntimeConfig, Tier};

/// Neural-network operator runtime for Ascend NPUs, NVIDIA GPUs and the CPU.
#[derive(Parser)]
#[command(name = "npurt", version)]
pub struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Option<Command>,
}

/// Runtime options, accepted before and after any subcommand.
#[derive(Args)]
#[command(next_help_heading = "Runtime options (before or after the subcommand)")]
struct Global {
    /// Backend to use (default: the best present; env NPURT_BACKEND)
    #[arg(long, global = true, value_name = "BACKEND",
          value_parser = ["cpu", "cuda", "acl", "ascend", "auto"])]
    backend: Option<String>,
    /// Force an implementation tier: reference, generic, fast or auto (env NPURT_IMPL)
    #[arg(long = "impl", global = true, value_name = "TIER", value_parser = parse_tier)]
    tier: Option<TierChoice>,
    /// Logical CPU devices (env NPURT_CPU_DEVICES)
    #[arg(long, global = true, value_name = "N")]
    devices: Option<usize>,
    /// Compiled graphs' matrix products: f32; f16 or bf16 (Linear weights stored in fp16 /
    /// bf16, f32 accumulation); auto (the device's own: f32 on the CPU) (env NPURT_PRECISION)
    #[arg(long, global = true, value_name = "f32|f16|bf16|int8|auto", value_parser = parse_precision)]
    precision: Option<Precision>,
}

/// `--impl`: a tier, or `auto` for the runtime's own choice.
#[derive(Clone, Copy)]
enum TierChoice {
    Auto,
    Forced(Tier),
}

fn parse_tier(s: &str) -> std::result::Result<TierChoice, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(TierChoice::Auto);
    }
    Tier::parse(s).map(TierChoice::Forced).ok_or_else(|| "expected reference, generic, fast or auto".into())
}

fn parse_precision(s: &str) -> std::result::Result<Precision, String> {
    Precision::parse(s).ok_or_else(|| "expected f32, f16, bf16, int8 or auto".into())
}

impl Global {
    /// The configuration: defaults, then the environment, then these options.
    fn config(&self) -> Result<RuntimeConfig> {
        let mut config = RuntimeConfig::default().with_env()?;
        if let Some(b) = &self.backend {
            config.backend = if b == "auto" { None } else { Some(b.clone()) };
        }
        match self.tier {
            Some(TierChoice::Auto) => config.forced_tier = None,
            Some(TierChoice::Forced(t)) => config.forced_tier = Some(t),
            None => {}
        }
        if let Some(p) = self.precision {
            config.precision = p;
        }
        if let Some(d) = self.devices {
            config.cpu_devices = d;
        }
        config.validate()?;
        Ok(config)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Backends, devices, memory, units, build facts, CPU features
    Info,
    /// Walk through the runtime's features with measured values
    Demo,
    /// Run one op on .npy files
    Op(op::OpArgs),
    /// Benchmarks: GEMM, and BERT latency, memory, utilisation and more
    Bench(bench::BenchArgs),
    /// Sentence embeddings from a sentence-transformers model directory (texts from the
    /// arguments, or one per line of standard input)
    Embed(embed::EmbedArgs),
    /// Text from a Llama, Qwen2 or Qwen3 model directory, streamed to standard output
    Generate(generate::GenerateArgs),
}

/// Runs the parsed command line; without a subcommand, prints the help.
pub fn run(cli: Cli) -> Result<()> {
    let Some(command) = cli.command else {
        println!("{}", Cli::command().render_help());
        return Ok(());
    };
    let config = cli.global.config()?;
    match command {
        Command::Info => info::run(&Runtime::with_config(config)?),
        Command::Demo => demo::run(&Runtime::with_config(config)?),
        Command::Op(args) => op::run(config, args),
        Command::Bench(args) => bench::run(config, args),
        Command::Embed(args) => embed::run(config, args),
        Command::Generate(args) => generate::run(config, args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
