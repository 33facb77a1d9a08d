//! Reads over many documents or many queries, built on the façade's
//! per-document calls: [`Index::len`], [`Index::docs`], [`Index::query_batch`].

use rayon::prelude::*;

use crate::error::Result;

use super::{Doc, Index, Match};

impl Index {
    /// The number of live documents (deleted and expired ones are not
    /// counted).
    ///
    /// Cost: a walk of every document, as [`for_each_doc`](Self::for_each_doc)
    /// (each segment's doc map read from its mapped file), so O(documents):
    /// about the cost of reading the doc maps. The index does not keep an
    /// exact count, because a write cannot tell cheaply whether it replaces
    /// a document of a segment. [`stats`](Self::stats) gives O(1) figures
    /// that count replaced versions and tombstones separately.
    pub fn len(&self) -> Result<u64> {
        let mut n = 0u64;
        self.for_each_doc(|_| n += 1)?;
        Ok(n)
    }

    /// Whether the index holds no live document. Costs a walk, as
    /// [`len`](Self::len).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Every live document, from a consistent snapshot taken when the call
    /// starts, in [`for_each_doc`](Self::for_each_doc)'s order (the
    /// memtables' documents in id order, then each segment's in fingerprint
    /// order).
    ///
    /// The iterator owns its documents: it borrows nothing from the index,
    /// and writes made while it is consumed are not part of it. It holds
    /// every document (its id, fingerprint, timestamp and name) in memory;
    /// for an index larger than memory, use `for_each_doc`, which holds none.
    ///
    /// ```
    /// use simhashdb::{Index, Options};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let index = Index::open(dir.path(), Options::new())?;
    /// index.insert_named(1, 0xfeed, "a")?;
    /// index.insert(2, 0xbeef)?;
    /// let ids: Vec<u64> = index.docs()?.map(|doc| doc.id).collect();
    /// assert_eq!(ids, [1, 2]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn docs(&self) -> Result<Docs> {
        let mut docs = Vec::new();
        self.for_each_doc(|doc| docs.push(doc.clone()))?;
        Ok(Docs(docs.into_iter()))
    }

    /// [`query`](Self::query) for each of `fingerprints`, run in parallel
    /// on rayon's global pool (as [`find_all`](crate::batch::find_all) runs
    /// its tables): `result[i]` is the answer for
    /// `fingerprints[i]`. Each query sees the index as of its own start, so
    /// writes made during the batch may be seen by some queries and not by
    /// others. The first failing query's error is returned.
    pub fn query_batch(&self, fingerprints: &[u64], k: u32) -> Result<Vec<Vec<Match>>> {
        fingerprints
            .par_iter()
            .map(|&fp| self.query(fp, k))
            .collect()
    }
}

/// The documents of [`Index::docs`], owned.
#[derive(Debug, Clone)]
pub struct Docs(std::vec::IntoIter<Doc>);

impl Iterator for Docs {
    type Item = Doc;

    fn next(&mut self) -> Option<Doc> {
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for Docs {}

impl DoubleEndedIterator for Docs {
    fn next_back(&mut self) -> Option<Doc> {
        self.0.next_back()
    }
}

impl std::iter::FusedIterator for Docs {}
