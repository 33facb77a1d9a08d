//! `plan`: the table plans for a corpus size and distance.

use std::fmt::Write as _;
use std::io::Write as _;

use simhashdb::plan::Plan;

use crate::error::CliError;
use crate::input::open_output;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Expected number of fingerprints in the index.
    #[arg(short, long, default_value_t = 10_000_000)]
    n: u64,
    /// Largest Hamming distance queries will ask for.
    #[arg(short, long, default_value_t = 3)]
    distance: u32,
}

pub fn run(args: &Args) -> Result<(), CliError> {
    let choice =
        Plan::alternatives(args.n, args.distance).map_err(|e| CliError::Input(e.to_string()))?;
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(
        text,
        "Plans for n = {}, k = {} (* = chosen):\n",
        args.n, args.distance
    );
    let _ = writeln!(
        text,
        "  {:<20} {:>6} {:>12} {:>18} {:>10} {:>12}",
        "blocks", "tables", "prefix bits", "candidates/query", "bytes/fp", "total size"
    );
    for (i, c) in choice.alternatives.iter().enumerate() {
        let prefix = if c.min_prefix_bits == c.max_prefix_bits {
            c.min_prefix_bits.to_string()
        } else {
            format!("{}-{}", c.min_prefix_bits, c.max_prefix_bits)
        };
        let _ = writeln!(
            text,
            "{} {:<20} {:>6} {:>12} {:>18} {:>10.1} {:>12}",
            if i == choice.chosen { "*" } else { " " },
            c.shape.to_string(),
            c.tables,
            prefix,
            format_count(c.expected_candidates),
            c.bytes_per_fingerprint,
            format_bytes(c.total_bytes),
        );
    }
    let _ = writeln!(text, "\n{}.", choice.reason());
    let _ = writeln!(
        text,
        "Sizes estimate the delta-compressed tables only, not the document map."
    );
    let mut out = open_output("-")?;
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::write("standard output", e))
}

fn format_count(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 0.01 {
        format!("{x:.2}")
    } else {
        format!("{x:.1e}")
    }
}

fn format_bytes(x: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = x;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}
