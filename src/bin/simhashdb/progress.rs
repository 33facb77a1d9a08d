//! Progress bars on standard error, drawn only when it is a terminal.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar counting bytes up to `total`, labelled `what`; hidden unless
/// standard error is a terminal (so pipes and logs get no control codes).
pub fn bytes(total: u64, what: &'static str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), target());
    if let Ok(style) =
        ProgressStyle::with_template("{prefix} [{bar:40}] {bytes}/{total_bytes} ({eta} left)")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(what);
    bar
}

/// A spinner for work of unknown length, labelled `what`; hidden unless
/// standard error is a terminal.
pub fn spinner(what: &'static str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, target());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {prefix} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_prefix(what);
    if !bar.is_hidden() {
        bar.enable_steady_tick(Duration::from_millis(120));
    }
    bar
}

fn target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}
