//! Verified answers: queries by text that accept a candidate on its
//! sketch (docs/QUALITY.md, "Verified answers: the verification value";
//! docs/ARCHITECTURE.md, "Each document's sketch lives in its doc map
//! entry").

use crate::error::{Error, Result};
use crate::sketch::{Sketch, TextValues};

use super::index::Index;
use super::types::Match;

/// Which rule accepted a [`VerifiedMatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum Rule {
    /// Both texts have a sketch, and their estimated similarity reaches
    /// the threshold.
    Sketch,
    /// The document has no sketch: its fingerprint is within the query's
    /// `k`.
    Fingerprint,
}

/// A document accepted by a verified query.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct VerifiedMatch {
    /// The document, as [`Index::query`] returns it.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub doc: Match,
    /// The estimated Jaccard similarity of the two texts' shingles
    /// ([`Sketch::similarity`]) when the document has a sketch.
    pub similarity: Option<f64>,
    /// The rule that accepted it.
    pub rule: Rule,
}

impl Index {
    /// The live documents that are near-duplicates of `text`, fingerprinted
    /// and sketched with the index's own [`Simhasher`](crate::Simhasher)
    /// ([`query_verified`](Self::query_verified) of
    /// [`TextValues::of`]`(text)`).
    pub fn query_text(&self, text: &str, k: u32) -> Result<Vec<VerifiedMatch>> {
        let hasher = self
            .simhasher()
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        self.query_verified(&TextValues::of(&hasher, text), k)
    }

    /// The live documents that are near-duplicates of the text of
    /// `values`, sorted by (distance, id):
    ///
    /// - candidates are the documents within `max(k, min(values.candidate_k(),
    ///   plan k))` of its fingerprint (a wider search for shorter texts, as
    ///   far as the index's plan allows);
    /// - a candidate with a sketch is accepted when its estimated
    ///   similarity to `values.sketch` is at least `values.threshold`
    ///   ([`Rule::Sketch`]), whatever its distance;
    /// - a candidate without a sketch (inserted by fingerprint, or by a
    ///   build of format version 3) is accepted when it lies within `k`
    ///   ([`Rule::Fingerprint`]), as [`query`](Self::query) would.
    ///
    /// A text without tokens has no fingerprint and no match. `k` above
    /// the plan's `k` is refused.
    pub fn query_verified(&self, values: &TextValues, k: u32) -> Result<Vec<VerifiedMatch>> {
        let plan_k = self.plan().k();
        if k > plan_k {
            return Err(Error::DistanceTooLarge {
                requested: k,
                plan_k,
            });
        }
        let Some(fingerprint) = values.fingerprint else {
            return Ok(Vec::new());
        };
        let search_k = values.candidate_k().min(plan_k).max(k);
        let candidates = self.query(fingerprint, search_k)?;
        Ok(candidates
            .into_iter()
            .filter_map(|m| verify(m, &values.sketch, values.threshold, k))
            .collect())
    }
}

/// The rule applied to one candidate.
fn verify(candidate: Match, sketch: &Sketch, threshold: f64, k: u32) -> Option<VerifiedMatch> {
    match candidate.sketch {
        Some(theirs) => {
            let similarity = theirs.similarity(sketch);
            (similarity >= threshold).then_some(VerifiedMatch {
                doc: candidate,
                similarity: Some(similarity),
                rule: Rule::Sketch,
            })
        }
        None => (candidate.distance <= k).then_some(VerifiedMatch {
            doc: candidate,
            similarity: None,
            rule: Rule::Fingerprint,
        }),
    }
}

impl Index {
    /// Inserts document `id` with the fingerprint and the sketch of `text`
    /// (computed with the index's own [`Simhasher`](crate::Simhasher)) and
    /// an optional name ([`insert_sketched`](Self::insert_sketched)). A
    /// text without tokens has no fingerprint and is refused.
    pub fn insert_text(&self, id: u64, text: &str, name: Option<String>) -> Result<()> {
        let hasher = self
            .simhasher()
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let (fingerprint, sketch) = Sketch::with_fingerprint(&hasher, text);
        let fingerprint = fingerprint.ok_or_else(|| {
            Error::InvalidArgument(format!(
                "document {id}: the text has no tokens, so no fingerprint"
            ))
        })?;
        self.insert_sketched(id, fingerprint, sketch, name)
    }
}
