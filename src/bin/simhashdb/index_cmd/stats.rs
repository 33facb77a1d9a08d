//! `simhashdb stats`: counts, sizes and a histogram of distances between documents.

use serde_json::json;
use simhashdb::Index;

use super::{Db, dir_bytes, format_bytes, json_line, logged, print};
use crate::error::CliError;

#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    db: Db,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// Documents sampled for the distance histogram: all pairs of 2,000 are
/// about two million distances, enough to see the shape.
const HISTOGRAM_SAMPLE: usize = 2000;

/// A uniform sample of at most `size` live fingerprints (reservoir sampling
/// with a fixed seed, so the same index gives the same sample), and the
/// number of live documents.
fn sample_fingerprints(index: &Index, size: usize) -> Result<(Vec<u64>, u64), CliError> {
    let mut sample = Vec::with_capacity(size);
    let mut seen = 0u64;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    index.for_each_doc(|doc| {
        seen += 1;
        if sample.len() < size {
            sample.push(doc.fingerprint);
        } else {
            // splitmix64
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            let slot = (z % seen) as usize;
            if slot < size {
                sample[slot] = doc.fingerprint;
            }
        }
    })?;
    Ok((sample, seen))
}

/// Counts of the pairwise Hamming distances (0..=64) of `fps`.
fn distance_histogram(fps: &[u64]) -> [u64; 65] {
    let mut counts = [0u64; 65];
    for (i, &a) in fps.iter().enumerate() {
        for &b in &fps[i + 1..] {
            counts[(a ^ b).count_ones() as usize] += 1;
        }
    }
    counts
}

/// Distances up to this get a row each in the chart; above it, rows of
/// four (the far side of the histogram matters less when choosing k).
const CHART_SINGLE_ROWS: usize = 16;

/// A bar chart of the histogram up to the largest distance seen, bars on a
/// log scale so that the few close pairs show.
fn histogram_chart(counts: &[u64; 65]) -> String {
    const WIDTH: f64 = 50.0;
    let Some(last) = counts.iter().rposition(|&c| c > 0) else {
        return "  (fewer than two documents)\n".to_string();
    };
    let mut rows: Vec<(String, u64)> = Vec::new();
    let mut d = 0;
    while d <= last {
        let end = if d <= CHART_SINGLE_ROWS {
            d
        } else {
            (d + 3).min(64)
        };
        let label = if end == d {
            d.to_string()
        } else {
            format!("{d}-{end}")
        };
        rows.push((label, counts[d..=end].iter().sum()));
        d = end + 1;
    }
    let top = rows.iter().map(|r| r.1).max().unwrap_or(1).max(1) as f64;
    let mut text = String::new();
    for (label, c) in rows {
        let len = if c == 0 {
            0
        } else {
            (((c as f64).ln_1p() / top.ln_1p()) * WIDTH).ceil() as usize
        };
        text.push_str(&format!("  {label:>5} {c:>10} {}\n", "#".repeat(len)).replace(" \n", "\n"));
    }
    text
}

pub fn stats(args: &StatsArgs) -> Result<(), CliError> {
    let index = args.db.read_only()?;
    let s = index.stats();
    let (sample, live) = sample_fingerprints(&index, HISTOGRAM_SAMPLE)?;
    let counts = distance_histogram(&sample);
    let entries = s.segment_docs + logged(&s);
    let bytes_per_entry = if s.segment_docs > 0 {
        s.disk_bytes as f64 / s.segment_docs as f64
    } else {
        0.0
    };
    let total_bytes = dir_bytes(&args.db.db)?;
    let text = if args.json {
        json_line(&json!({
            "plan": &s.plan,
            "k": s.plan.k(),
            "tables": s.plan.tables().len(),
            "radius": s.plan.radius(),
            "fingerprint_config": s.fingerprint_config,
            "documents": live,
            "segments": s.segments,
            "segment_entries": s.segment_docs,
            "log_entries": logged(&s),
            "tombstones": s.tombstones,
            "directory_bytes": total_bytes,
            "segment_bytes": s.disk_bytes,
            "segment_bytes_per_entry": bytes_per_entry,
            "table_bytes_per_key": s.table_bytes_per_key,
            "histogram_sample": sample.len(),
            "distance_histogram": counts.to_vec(),
        }))
    } else {
        format!(
            "plan:          {}\n\
             fingerprint:   {}\n\
             documents:     {} live\n\
             entries:       {} ({} in {} segment(s), {} in the write-ahead log)\n\
             tombstones:    {}\n\
             disk:          {} in all ({} in segments, {:.1} bytes per segment entry)\n\
             tables:        {:.2} bytes per fingerprint per table (uncompressed: 8)\n\
             \n\
             Hamming distances between {} pairs of {} sampled documents (log scale):\n{}",
            s.plan,
            s.fingerprint_config,
            live,
            entries,
            s.segment_docs,
            s.segments,
            logged(&s),
            s.tombstones,
            format_bytes(total_bytes),
            format_bytes(s.disk_bytes),
            bytes_per_entry,
            s.table_bytes_per_key,
            counts.iter().sum::<u64>(),
            sample.len(),
            histogram_chart(&counts),
        )
    };
    print(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_counts_every_pair_once() {
        let counts = distance_histogram(&[0, 1, 3, 0]);
        assert_eq!(counts[0], 1);
        assert_eq!(counts[1], 3);
        assert_eq!(counts[2], 2);
        assert_eq!(counts.iter().sum::<u64>(), 6);
        let chart = histogram_chart(&counts);
        assert_eq!(chart.lines().count(), 3);
        assert!(chart.lines().nth(1).unwrap().ends_with(&"#".repeat(50)));
        let mut far = [0u64; 65];
        far[0] = 1;
        far[16] = 2;
        far[17] = 3;
        far[20] = 4;
        far[22] = 5;
        let chart = histogram_chart(&far);
        let rows: Vec<&str> = chart.lines().collect();
        assert_eq!(rows.len(), 19, "{chart}");
        assert!(
            rows[15].trim_start().starts_with("15          0"),
            "{chart}"
        );
        assert!(
            rows[17].trim_start().starts_with("17-20          7"),
            "{chart}"
        );
        assert!(
            rows[18].trim_start().starts_with("21-24          5"),
            "{chart}"
        );
    }
}
