//! `find-all` and `clusters`: the simhash-cpp batch interface.

use std::io::Write;

use simhashdb::batch::{clusters, find_all};
use simhashdb::plan::{Budget, Plan};

use crate::error::CliError;
use crate::input::{display_name, open_output, parse_fingerprints, read_all};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Input: newline-separated decimal u64 fingerprints (`-` for standard input).
    #[arg(short, long, default_value = "-")]
    input: String,
    /// Output: one JSON array per line (`-` for standard output).
    #[arg(short, long, default_value = "-")]
    output: String,
    /// Number of blocks the 64 bits are split into (more than the distance);
    /// by default the plan is chosen for the input's size.
    #[arg(short, long)]
    blocks: Option<u32>,
    /// Largest Hamming distance that counts as a near-duplicate.
    #[arg(short, long, default_value_t = 3)]
    distance: u32,
    /// Print input line numbers (1-based) instead of fingerprint values.
    #[arg(long)]
    indices: bool,
}

pub enum Mode {
    Pairs,
    Clusters,
}

pub fn run(args: &Args, mode: Mode) -> Result<(), CliError> {
    let source = display_name(&args.input, "standard input");
    let fps = parse_fingerprints(&read_all(&args.input)?, &source)?;
    let plan = match args.blocks {
        Some(blocks) => Plan::new(blocks, args.distance),
        // Batch search sorts tables; it cannot probe.
        None => Plan::choose(fps.len() as u64, args.distance, Budget::Unprobed),
    }
    .map_err(|e| CliError::Input(e.to_string()))?;
    let show = |i: usize| if args.indices { i as u64 + 1 } else { fps[i] };

    let target = display_name(&args.output, "standard output");
    let write_err = |e| CliError::write(&target, e);
    match mode {
        Mode::Pairs => {
            let pairs = find_all(&fps, &plan);
            let mut out = open_output(&args.output)?;
            for (i, j) in pairs {
                writeln!(out, "[{},{}]", show(i), show(j)).map_err(write_err)?;
            }
            out.flush().map_err(write_err)?;
        }
        Mode::Clusters => {
            let groups = clusters(&fps, &plan);
            let mut out = open_output(&args.output)?;
            for group in groups {
                let members: Vec<String> = group.into_iter().map(|i| show(i).to_string()).collect();
                writeln!(out, "[{}]", members.join(",")).map_err(write_err)?;
            }
            out.flush().map_err(write_err)?;
        }
    }
    Ok(())
}
