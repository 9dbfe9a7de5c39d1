//! The `npurt` command-line tool: `info`, `demo`, `op`, `bench` and `embed`.
//!
//! `cli` holds the `clap` parser and the dispatch; one module per subcommand, one per
//! benchmark under `bench`; `chart`, `outputs`, `progress` and `values` are what they
//! share.

mod bench;
mod build_info;
mod chart;
mod cli;
mod demo;
mod embed;
mod generate;
mod info;
mod op;
mod outputs;
mod progress;
mod values;

use clap::Parser;
use std::io::Write;

/// Exit status when output went to a closed pipe: what a shell reports for a process
/// ended by SIGPIPE (128 + 13), as `npurt info | head -1` expects of a command-line tool.
const BROKEN_PIPE_STATUS: i32 = 141;

/// The Rust runtime ignores SIGPIPE, so a write to a closed stdout or stderr fails and
/// `println!` / `eprintln!` panic. Such a panic ends the process quietly with
/// [`BROKEN_PIPE_STATUS`]; every other panic keeps the default report.
fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to std") && msg.contains("Broken pipe") {
            std::process::exit(BROKEN_PIPE_STATUS);
        }
        default(info);
    }));
}

fn main() {
    quiet_on_broken_pipe();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    // A usage error ends the process here, with clap's message naming the argument.
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => {}
        Err(e) => {
            // A failed write of the message (stderr closed) must not turn into a panic.
            let _ = writeln!(std::io::stderr(), "npurt: {e}");
            std::process::exit(1);
        }
    }
}
