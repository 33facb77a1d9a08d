//! `plan`: the table plans for a corpus size and distance.

use std::fmt::Write as _;
use std::io::Write as _;

use simhashdb::plan::{Budget, Plan};

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
    /// Choose within a space budget: at most this many tables, then the
    /// lowest expected cost per query.
    #[arg(long, value_name = "TABLES", conflicts_with_all = ["max_cost", "unprobed"])]
    max_tables: Option<usize>,
    /// Choose within a latency budget: the fewest tables whose expected cost
    /// per query (candidates + 32 per probe) is at most this [default: the
    /// default budget, as `create` uses].
    #[arg(long, value_name = "COST", conflicts_with = "unprobed")]
    max_cost: Option<f64>,
    /// Only plans without probing (what find-all and clusters use).
    #[arg(long)]
    unprobed: bool,
    /// List every plan considered, not only the space/time frontier.
    #[arg(long)]
    all: bool,
}

pub fn run(args: &Args) -> Result<(), CliError> {
    let budget = match (args.max_tables, args.max_cost, args.unprobed) {
        (Some(t), _, _) => Budget::Space(t),
        (_, Some(c), _) if c.is_finite() && c > 0.0 => Budget::Latency(c),
        (_, Some(c), _) => {
            return Err(CliError::Input(format!(
                "--max-cost must be a positive number, got {c}"
            )));
        }
        (_, _, true) => Budget::Unprobed,
        _ => Budget::default(),
    };
    let choice = Plan::alternatives(args.n, args.distance, budget)
        .map_err(|e| CliError::Input(e.to_string()))?;
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(
        text,
        "Plans for n = {}, k = {}, budget {} (* = chosen):\n",
        args.n, args.distance, budget
    );
    let _ = writeln!(
        text,
        "  {:<22} {:>6} {:>6} {:>12} {:>8} {:>12} {:>10} {:>10} {:>12}",
        "plan",
        "tables",
        "radius",
        "prefix bits",
        "probes",
        "candidates",
        "cost",
        "bytes/fp",
        "total size"
    );
    let shown: Vec<usize> = if args.all {
        (0..choice.alternatives.len()).collect()
    } else {
        choice.frontier()
    };
    for i in shown {
        let c = &choice.alternatives[i];
        let prefix = if c.min_prefix_bits == c.max_prefix_bits {
            c.min_prefix_bits.to_string()
        } else {
            format!("{}-{}", c.min_prefix_bits, c.max_prefix_bits)
        };
        let _ = writeln!(
            text,
            "{} {:<22} {:>6} {:>6} {:>12} {:>8} {:>12} {:>10} {:>10.1} {:>12}",
            if i == choice.chosen { "*" } else { " " },
            c.shape.to_string(),
            c.tables,
            c.radius,
            prefix,
            c.probes,
            format_count(c.expected_candidates),
            format_count(c.expected_cost),
            c.bytes_per_fingerprint,
            format_bytes(c.total_bytes),
        );
    }
    let _ = writeln!(text, "\n{}.", choice.reason());
    let _ = writeln!(
        text,
        "Probes: prefix values looked up per query (each table at every prefix within the radius \
         of the query's that can find a match the table reports). Cost: candidates + 32 per probe. Sizes estimate the delta-compressed \
         tables only, not the document map.{}",
        if args.all {
            ""
        } else {
            " Shown: the plans no other beats on both tables and cost (--all lists every plan)."
        }
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
