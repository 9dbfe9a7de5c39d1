//! Progress bars for long benchmarks: drawn on standard error while both standard output
//! and standard error are terminals, hidden otherwise (tests, pipes, JSON consumers).

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// Whether progress is shown at all.
fn interactive() -> bool {
    std::io::stdout().is_terminal() && std::io::stderr().is_terminal()
}

/// A bar of `len` steps titled `msg`; hidden when not [`interactive`].
pub fn bar(len: u64, msg: impl Into<String>) -> ProgressBar {
    if !interactive() {
        return ProgressBar::hidden();
    }
    let style = ProgressStyle::with_template("{spinner} {msg:<28} [{bar:32}] {pos}/{len} {elapsed}")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    let pb = ProgressBar::new(len).with_style(style).with_message(msg.into());
    // A step can take minutes (a BERT-Large configuration): keep the spinner moving.
    pb.enable_steady_tick(Duration::from_millis(250));
    pb
}
