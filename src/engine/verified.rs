//! Verified answers: queries and check-and-insert by text that accept a
//! candidate on its sketch (docs/QUALITY.md, "Verified answers: the
//! verification value"; docs/ARCHITECTURE.md, "Each document's sketch lives
//! in its doc map entry" and "Verified check-and-insert").

use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::fingerprint::Simhasher;
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

impl Rule {
    /// `"sketch"` or `"fingerprint"`, as the command line, the server and
    /// the Python package print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Sketch => "sketch",
            Rule::Fingerprint => "fingerprint",
        }
    }
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

/// A document to check with
/// [`Index::insert_if_new_many_verified`]: a text's values (checked by the
/// verified rule, stored with its sketch), or a bare fingerprint (checked as
/// [`Index::insert_if_new_many`] checks it, stored without a sketch).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Checked {
    /// A text's values ([`Index::text_values`]).
    Text(TextValues),
    /// A fingerprint without a text: every document within `k` is a
    /// duplicate ([`Rule::Fingerprint`]).
    Fingerprint(u64),
}

impl From<TextValues> for Checked {
    fn from(values: TextValues) -> Checked {
        Checked::Text(values)
    }
}

/// What one query accepts: the rule of [`Index::query_verified`].
#[derive(Debug, Clone, Copy)]
struct Criterion {
    /// `None` for a bare fingerprint: the plain rule.
    sketch: Option<Sketch>,
    threshold: f64,
    /// Documents without a sketch: within this distance.
    k: u32,
    /// Documents with one: within this distance.
    search_k: u32,
}

impl Criterion {
    /// The criterion of `values` for a query at `k` in an index of plan
    /// `plan_k` (`k <= plan_k`).
    fn of(values: &TextValues, k: u32, plan_k: u32) -> Criterion {
        Criterion {
            sketch: Some(values.sketch),
            threshold: values.threshold,
            k,
            search_k: values.candidate_k().min(plan_k).max(k),
        }
    }

    /// The plain rule: within `k`.
    fn plain(k: u32) -> Criterion {
        Criterion {
            sketch: None,
            threshold: 0.0,
            k,
            search_k: k,
        }
    }

    fn accepts(&self, distance: u32, sketch: Option<Sketch>) -> bool {
        match (self.sketch, sketch) {
            (Some(mine), Some(theirs)) => {
                distance <= self.search_k && theirs.similarity(&mine) >= self.threshold
            }
            _ => distance <= self.k,
        }
    }

    /// `candidate`, accepted, with its similarity and rule.
    fn verified(&self, candidate: Match) -> VerifiedMatch {
        match (self.sketch, candidate.sketch) {
            (Some(mine), Some(theirs)) => VerifiedMatch {
                similarity: Some(theirs.similarity(&mine)),
                doc: candidate,
                rule: Rule::Sketch,
            },
            _ => VerifiedMatch {
                doc: candidate,
                similarity: None,
                rule: Rule::Fingerprint,
            },
        }
    }
}

/// The order of verified matches: by similarity, highest first, then by id;
/// documents matched by their fingerprint (no similarity) after those, by
/// (distance, id).
fn verified_order(a: &VerifiedMatch, b: &VerifiedMatch) -> Ordering {
    match (a.similarity, b.similarity) {
        (Some(x), Some(y)) => y.total_cmp(&x).then(a.doc.id.cmp(&b.doc.id)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => (a.doc.distance, a.doc.id).cmp(&(b.doc.distance, b.doc.id)),
    }
}

/// `Ok` for a threshold in [0, 1].
fn check_threshold(threshold: f64) -> Result<()> {
    if (0.0..=1.0).contains(&threshold) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "a similarity threshold must lie between 0 and 1, not {threshold}"
        )))
    }
}

impl Index {
    /// The index's own [`Simhasher`] (for its recorded configuration), built
    /// once and kept: [`text_values`](Self::text_values) and every call by
    /// text use it.
    fn text_hasher(&self) -> Result<&Simhasher> {
        self.text_hasher
            .get_or_init(|| self.simhasher())
            .as_ref()
            .map_err(|e| Error::InvalidArgument(e.to_string()))
    }

    /// The fingerprint, sketch, token count and default threshold of
    /// `text`, computed with the index's own [`Simhasher`] (built at the
    /// first call and kept). Set [`TextValues::threshold`] to ask for
    /// another threshold than [`Sketch::threshold_for`] the text.
    pub fn text_values(&self, text: &str) -> Result<TextValues> {
        Ok(TextValues::of(self.text_hasher()?, text))
    }

    /// The live documents that are near-duplicates of `text`
    /// ([`query_verified`](Self::query_verified) of
    /// [`text_values`](Self::text_values)`(text)`, at the default threshold).
    pub fn query_text(&self, text: &str, k: u32) -> Result<Vec<VerifiedMatch>> {
        self.query_verified(&self.text_values(text)?, k)
    }

    /// The live documents that are near-duplicates of the text of
    /// `values`, sorted by estimated similarity, highest first, then id
    /// (documents matched by their fingerprint last, by distance, then id):
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
    /// the plan's `k`, or a threshold outside [0, 1], is refused.
    pub fn query_verified(&self, values: &TextValues, k: u32) -> Result<Vec<VerifiedMatch>> {
        let plan_k = self.plan().k();
        if k > plan_k {
            return Err(Error::DistanceTooLarge {
                requested: k,
                plan_k,
            });
        }
        check_threshold(values.threshold)?;
        let Some(fingerprint) = values.fingerprint else {
            return Ok(Vec::new());
        };
        let criterion = Criterion::of(values, k, plan_k);
        let candidates = self.query(fingerprint, criterion.search_k)?;
        let mut matches: Vec<VerifiedMatch> = candidates
            .into_iter()
            .filter(|m| criterion.accepts(m.distance, m.sketch))
            .map(|m| criterion.verified(m))
            .collect();
        matches.sort_by(verified_order);
        Ok(matches)
    }

    /// [`query_verified`](Self::query_verified), keeping only the `limit`
    /// nearest (by distance, then id) of the documents it accepts, sorted
    /// as there: the memory a query takes is bounded by `limit` (at least
    /// 1), however many documents lie near.
    pub fn query_verified_nearest(
        &self,
        values: &TextValues,
        k: u32,
        limit: usize,
    ) -> Result<Vec<VerifiedMatch>> {
        let plan_k = self.plan().k();
        if k > plan_k {
            return Err(Error::DistanceTooLarge {
                requested: k,
                plan_k,
            });
        }
        check_threshold(values.threshold)?;
        if limit == 0 {
            return Err(Error::InvalidArgument(
                "a query's limit on its matches must be at least 1".into(),
            ));
        }
        let Some(fingerprint) = values.fingerprint else {
            return Ok(Vec::new());
        };
        let criterion = Criterion::of(values, k, plan_k);
        let accept = |_, distance, sketch| criterion.accepts(distance, sketch);
        let mut matches: Vec<VerifiedMatch> = self
            .query_batch_filtered(&[fingerprint], criterion.search_k, limit, &accept)?
            .pop()
            .unwrap_or_default()
            .into_iter()
            .map(|m| criterion.verified(m))
            .collect();
        matches.sort_by(verified_order);
        Ok(matches)
    }

    /// Inserts document `id` with the fingerprint and the sketch of `text`
    /// (computed with the index's own [`Simhasher`](crate::Simhasher)) and
    /// an optional name ([`insert_sketched`](Self::insert_sketched)). A
    /// text without tokens has no fingerprint and is refused.
    pub fn insert_text(&self, id: u64, text: &str, name: Option<String>) -> Result<()> {
        let (fingerprint, sketch) = Sketch::with_fingerprint(self.text_hasher()?, text);
        let fingerprint = fingerprint.ok_or_else(|| no_tokens(id))?;
        self.insert_sketched(id, fingerprint, sketch, name)
    }

    /// Inserts document `id` with the fingerprint and sketch of `text`
    /// unless a live document is a near-duplicate of it by the rule of
    /// [`query_verified`](Self::query_verified) (at the default threshold,
    /// [`Sketch::threshold_for`] the text); then returns those instead,
    /// sorted as there, and writes nothing. Atomic as
    /// [`insert_if_new`](Self::insert_if_new) is
    /// ([`insert_if_new_many_verified`](Self::insert_if_new_many_verified)
    /// of one document). A text without tokens is refused.
    pub fn insert_text_if_new(
        &self,
        id: u64,
        text: &str,
        name: Option<String>,
        k: u32,
    ) -> Result<std::result::Result<(), Vec<VerifiedMatch>>> {
        let values = self.text_values(text)?;
        let mut answers = self.insert_if_new_many_verified([(id, values, name)], k, usize::MAX)?;
        Ok(answers.pop().unwrap_or(Ok(())))
    }

    /// [`insert_if_new_many`](Self::insert_if_new_many) for texts, checked
    /// by the rule of [`query_verified`](Self::query_verified): each
    /// document (id, [`TextValues`], name) is inserted with its fingerprint
    /// and sketch unless a live document of the index, or one of the batch
    /// inserted before it, is accepted by that rule for its values (its own
    /// [`TextValues::threshold`] and candidate distance, `k` for documents
    /// without a sketch); then it is answered with them, sorted as there,
    /// and not inserted. A document given as [`Checked::Fingerprint`] (no
    /// text) is checked as `insert_if_new_many` checks it, every document
    /// within `k` a duplicate ([`Rule::Fingerprint`]), and stored without a
    /// sketch.
    ///
    /// With a `limit`, a duplicate is answered with the `limit` nearest (by
    /// distance, then id) of the documents accepted, sorted as above: the
    /// memory of the call is bounded by the batch's length times `limit`
    /// however many documents lie near each one, and the verdict is the
    /// same as without it.
    ///
    /// The same design as `insert_if_new_many`: the batch is searched
    /// before the writer lock is taken and settled under it, so the call
    /// may be made from any thread, rayon's pool included. `k` above the
    /// plan's `k`, a threshold outside [0, 1], a text without a fingerprint
    /// (no tokens) or a name over the limit is refused, naming the
    /// document, and nothing is written.
    pub fn insert_if_new_many_verified<I, C, S>(
        &self,
        docs: I,
        k: u32,
        limit: usize,
    ) -> Result<Vec<std::result::Result<(), Vec<VerifiedMatch>>>>
    where
        I: IntoIterator<Item = (u64, C, Option<S>)>,
        C: Into<Checked>,
        S: Into<String>,
    {
        let plan_k = self.plan().k();
        if k > plan_k {
            return Err(Error::DistanceTooLarge {
                requested: k,
                plan_k,
            });
        }
        let mut batch = Vec::new();
        let mut criteria = Vec::new();
        for (id, checked, name) in docs {
            let name = name.map(Into::into);
            match checked.into() {
                Checked::Text(values) => {
                    check_threshold(values.threshold)
                        .map_err(|e| Error::InvalidArgument(format!("document {id}: {e}")))?;
                    let fingerprint = values.fingerprint.ok_or_else(|| no_tokens(id))?;
                    criteria.push(Criterion::of(&values, k, plan_k));
                    batch.push((id, fingerprint, Some(values.sketch), name));
                }
                Checked::Fingerprint(fingerprint) => {
                    criteria.push(Criterion::plain(k));
                    batch.push((id, fingerprint, None, name));
                }
            }
        }
        let search_k = criteria.iter().map(|c| c.search_k).max().unwrap_or(k);
        let accept = |i: usize, distance: u32, sketch: Option<Sketch>| {
            criteria.get(i).is_some_and(|c| c.accepts(distance, sketch))
        };
        let answers = self.check_and_insert(batch, search_k, limit, &accept)?;
        Ok(answers
            .into_iter()
            .zip(&criteria)
            .map(|(answer, criterion)| {
                answer.map_err(|matches| {
                    let mut matches: Vec<VerifiedMatch> =
                        matches.into_iter().map(|m| criterion.verified(m)).collect();
                    matches.sort_by(verified_order);
                    matches
                })
            })
            .collect())
    }
}

fn no_tokens(id: u64) -> Error {
    Error::InvalidArgument(format!(
        "document {id}: the text has no tokens, so no fingerprint"
    ))
}
