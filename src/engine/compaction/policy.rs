//! Which segments to merge, decided from their metadata alone.

use std::fmt;
use std::ops::Range;

use crate::format::SegmentMeta;

/// Chooses merges. The engine consults it after every flush, and merges the
/// chosen run of segments (repeatedly, while it chooses one); the offline
/// `compact()` merges everything regardless.
///
/// A merge takes a contiguous run of segments (in the order of their
/// writes): a run that ends before the oldest segment keeps its tombstones
/// (older segments may hold what they hide), one that includes the oldest
/// drops them.
///
/// While the merge thread merges a long run, a flush that leaves more than
/// `Options::max_segments` segments may merge on the writing thread: the
/// run this policy chooses among the segments newer than the merge
/// thread's, or, if it chooses none, the newest run of one level or else
/// the two newest segments (docs/ARCHITECTURE.md, "Merges beside the merge
/// thread").
pub trait MergePolicy: Send + Sync + fmt::Debug {
    /// `segments` is the metadata of the live segments, newest first.
    /// Returns how many of the newest to merge (at least 2), or `None`.
    fn merge_newest(&self, segments: &[SegmentMeta]) -> Option<usize>;

    /// The run to merge, as a range of `segments` (newest first) of at
    /// least 2, or `None`. `segments` may be a part of the live segments:
    /// those newer, or older, than a run being merged. Default: the
    /// [`merge_newest`](MergePolicy::merge_newest) newest.
    fn choose_run(&self, segments: &[SegmentMeta]) -> Option<Range<usize>> {
        self.merge_newest(segments).map(|n| 0..n)
    }
}

/// Size-tiered merging by level: a flush makes a level-0 segment, a merge of
/// level-`l` segments a level-`l + 1` one. Reading from the newest segment,
/// once a run of segments of one level holds `fan_in` segments, that run is
/// merged ([`choose_run`](MergePolicy::choose_run); as
/// [`merge_newest`](MergePolicy::merge_newest), together with the (smaller)
/// newer segments above it). So each document is rewritten about
/// `log_fan_in(N / memtable)` times, and at most about `fan_in` segments per
/// level are live, even when flushes keep landing on top while a background
/// merge runs (a policy that looked at the newest run only would then never
/// merge the runs below it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TieredMergePolicy {
    /// Segments of one level merged at a time (at least 2).
    pub fan_in: usize,
}

impl Default for TieredMergePolicy {
    fn default() -> TieredMergePolicy {
        TieredMergePolicy { fan_in: 16 }
    }
}

impl MergePolicy for TieredMergePolicy {
    fn merge_newest(&self, segments: &[SegmentMeta]) -> Option<usize> {
        self.choose_run(segments).map(|run| run.end)
    }

    fn choose_run(&self, segments: &[SegmentMeta]) -> Option<Range<usize>> {
        let mut start = 0;
        while let Some(first) = segments.get(start) {
            let run = segments[start..]
                .iter()
                .take_while(|s| s.level == first.level)
                .count();
            if run >= self.fan_in.max(2) {
                return Some(start..start + run);
            }
            start += run;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(level: u32) -> SegmentMeta {
        SegmentMeta {
            level,
            ..SegmentMeta::default()
        }
    }

    #[test]
    fn merges_a_full_run_of_the_newest_level() {
        let policy = TieredMergePolicy { fan_in: 3 };
        assert_eq!(policy.merge_newest(&[]), None);
        assert_eq!(policy.merge_newest(&[at(0), at(0), at(1)]), None);
        assert_eq!(policy.merge_newest(&[at(0), at(0), at(0), at(1)]), Some(3));
        assert_eq!(policy.merge_newest(&[at(1), at(1), at(1), at(2)]), Some(3));
        assert_eq!(
            TieredMergePolicy { fan_in: 0 }.merge_newest(&[at(0), at(0)]),
            Some(2)
        );
    }

    #[test]
    fn a_full_run_below_newer_segments_is_merged_with_them() {
        let policy = TieredMergePolicy { fan_in: 3 };
        // Two flushes landed on top of three level-1 segments.
        assert_eq!(
            policy.merge_newest(&[at(0), at(0), at(1), at(1), at(1), at(2)]),
            Some(5)
        );
        // No run is full.
        assert_eq!(
            policy.merge_newest(&[at(0), at(0), at(1), at(1), at(2), at(2)]),
            None
        );
        // The newest full run wins.
        assert_eq!(
            policy.merge_newest(&[at(0), at(1), at(1), at(1), at(2), at(2), at(2)]),
            Some(4)
        );
    }

    #[test]
    fn the_run_chosen_is_the_full_run_alone() {
        let policy = TieredMergePolicy { fan_in: 3 };
        let segments = [at(0), at(0), at(1), at(1), at(1), at(2)];
        assert_eq!(policy.choose_run(&segments), Some(2..5));
        assert_eq!(policy.choose_run(&[at(0), at(0), at(0)]), Some(0..3));
        assert_eq!(policy.choose_run(&segments[..4]), None);
        // A policy with only `merge_newest` merges the newest.
        #[derive(Debug)]
        struct Newest;
        impl MergePolicy for Newest {
            fn merge_newest(&self, segments: &[SegmentMeta]) -> Option<usize> {
                (segments.len() >= 2).then_some(segments.len())
            }
        }
        assert_eq!(Newest.choose_run(&segments), Some(0..6));
    }
}
