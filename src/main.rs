//! The `npurt` command-line tool: `info`, `demo`, `op` and `bench`.

mod cli;

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match cli::run(&args) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("npurt: {e}");
            std::process::exit(1);
        }
    }
}
