//! Which segments to merge, decided from their metadata alone.

use std::fmt;

use crate::format::SegmentMeta;

/// Chooses merges. The engine consults it after every flush, and merges the
/// chosen run of newest segments (repeatedly, while it chooses one); the
/// offline `compact()` merges everything regardless.
///
/// Merges are always of the *newest* segments: a run that ends before the
/// oldest segment keeps its tombstones (older segments may hold what they
/// hide), one that includes the oldest drops them.
pub trait MergePolicy: Send + Sync + fmt::Debug {
    /// `segments` is the metadata of the live segments, newest first.
    /// Returns how many of the newest to merge (at least 2), or `None`.
    fn merge_newest(&self, segments: &[SegmentMeta]) -> Option<usize>;
}

/// Size-tiered merging by level: a flush makes a level-0 segment, a merge of
/// level-`l` segments a level-`l + 1` one. Reading from the newest segment,
/// once a run of segments of one level holds `fan_in` segments, that run is
/// merged together with the (smaller) newer segments above it, since a merge
/// takes the newest segments. So each document is rewritten about
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
        let mut start = 0;
        while let Some(first) = segments.get(start) {
            let run = segments[start..]
                .iter()
                .take_while(|s| s.level == first.level)
                .count();
            if run >= self.fan_in.max(2) {
                return Some(start + run);
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
}
