//! `simhashdb.Index`: the persistent index.

use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock, TryLockError};
use std::time::Duration;

use numpy::PyArray1;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDelta, PyDict, PyList, PyString, PyTuple};
use rayon::prelude::*;
use simhashdb::engine::policy::TieredMergePolicy;
use simhashdb::plan::Plan;
use simhashdb::sketch::{Sketch, TextValues};
use simhashdb::{Durability, Index, Options, Simhasher, VerifiedMatch, doc_id};

use crate::args::{
    MAX_RETENTION_DAYS, k_arg, name_arg, names_arg, retention_arg, show, str_arg, texts_arg,
    type_name, u32_arg, u64_arg, u64s_arg,
};
use crate::errors::{Failure, guard, mismatch};
use crate::hasher::{PySimhasher, hasher_from_args};
use crate::interrupt;
use crate::records::{PyDoc, PyMatch};

/// A persistent, exact near-duplicate index of 64-bit fingerprints.
///
/// Open one with `Index.open(path, ...)` (creates it if needed) or
/// `Index.open_read_only(path)`; use it in a `with` block, or call `close()`.
/// Documents are an id (int in [0, 2**64)), a fingerprint and an optional
/// name (a URL or path, at most 64 KiB). Queries find every document within
/// the distance asked for (at most the index's `k`), none missed.
///
/// An Index may be shared by Python threads: queries run at once, writes
/// one at a time, and calls that take time release the GIL.
///
/// A write returns once it is in the write-ahead log: with
/// durability="buffered" (the default) it survives the process being killed,
/// with "sync" also a power loss. One process may open an index for writing
/// at a time (LockedError otherwise).
///
/// An Index belongs to the process that opened it. In a process forked from
/// it (os.fork(), multiprocessing's "fork" start method) every method raises
/// ForkedError and writes nothing, and close() or garbage collection there
/// leaves the files and the lock to the process that opened it. With
/// multiprocessing: one process writes (send it the documents, or their
/// fingerprints computed in the workers); workers may each open the index
/// with Index.open_read_only, beside the writer, and refresh() to catch up;
/// for many writers at once, run `simhashdb serve` and call it over HTTP. An Index
/// cannot be pickled: open it by path in each process.
///
/// Ctrl-C (KeyboardInterrupt) stops a long call between chunks of its work;
/// see each method for what is then written.
#[pyclass(module = "simhashdb", name = "Index", frozen)]
pub struct PyIndex {
    /// `None` once closed. Calls hold the read lock (taken without waiting,
    /// with or without the GIL, so it never waits on the GIL); `close` takes
    /// the write lock without the GIL and so waits for calls in progress.
    inner: RwLock<Option<Index>>,
    path: String,
    read_only: bool,
    durability: Durability,
    k: u32,
    plan: String,
    config: String,
    /// The recorded retention window (`None`: forever).
    retention: Option<Duration>,
    /// The recorded configuration's hasher, or why it cannot be built.
    hasher: Result<Simhasher, String>,
    /// The process that opened the index: the only one that may use it.
    pid: u32,
}

impl Drop for PyIndex {
    fn drop(&mut self) {
        if self.forked() {
            // A copy of the opener's index in a forked process: dropping it
            // would release the opener's lock (the two share the lock's open
            // file) and could write or wait for threads the fork did not
            // copy. It is left alone; the process's exit frees it.
            let slot = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
            std::mem::forget(slot.take());
        }
    }
}

fn path_arg(path: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    path.extract::<PathBuf>().map_err(|_| {
        PyTypeError::new_err(format!(
            "path must be a str or os.PathLike, got {} {}",
            type_name(path),
            show(path)
        ))
    })
}

fn durability_arg(value: Option<&Bound<'_, PyAny>>) -> PyResult<Durability> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(Durability::Buffered);
    };
    let s = value.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!(
            "durability must be \"buffered\" or \"sync\", got {} {}",
            type_name(value),
            show(value)
        ))
    })?;
    match &*s.to_cow()? {
        "buffered" => Ok(Durability::Buffered),
        "sync" => Ok(Durability::Sync),
        _ => Err(PyValueError::new_err(format!(
            "durability must be \"buffered\" or \"sync\", got {}",
            show(value)
        ))),
    }
}

fn matches_list<'py>(
    py: Python<'py>,
    matches: Vec<simhashdb::Match>,
) -> PyResult<Bound<'py, PyList>> {
    let objects = matches
        .into_iter()
        .map(|m| Bound::new(py, PyMatch::from(m)))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, objects)
}

/// A document found near a text by the verified rule: `id`,
/// `fingerprint`, `distance` (in bits) and `name` as for Match, with
/// `similarity` (the estimated Jaccard similarity of the two texts' word
/// 5-shingles, 0 to 1; None for a document stored without a sketch) and
/// `rule` ("sketch": the similarity reached the threshold; "fingerprint":
/// a document without a sketch within the distance k).
#[pyclass(module = "simhashdb", name = "VerifiedMatch", frozen)]
#[derive(Clone)]
pub struct PyVerifiedMatch {
    /// The document id.
    #[pyo3(get)]
    pub id: u64,
    /// Its fingerprint.
    #[pyo3(get)]
    pub fingerprint: u64,
    /// Hamming distance from the text's fingerprint.
    #[pyo3(get)]
    pub distance: u32,
    /// Its name, or None.
    #[pyo3(get)]
    pub name: Option<String>,
    /// The estimated similarity of the texts, or None without a sketch.
    #[pyo3(get)]
    pub similarity: Option<f64>,
    /// "sketch" or "fingerprint": the rule that accepted the document.
    #[pyo3(get)]
    pub rule: &'static str,
}

impl From<VerifiedMatch> for PyVerifiedMatch {
    fn from(m: VerifiedMatch) -> PyVerifiedMatch {
        PyVerifiedMatch {
            id: m.doc.id,
            fingerprint: m.doc.fingerprint,
            distance: m.doc.distance,
            name: m.doc.name,
            similarity: m.similarity,
            rule: m.rule.as_str(),
        }
    }
}

#[pymethods]
impl PyVerifiedMatch {
    fn __repr__(&self) -> String {
        format!(
            "VerifiedMatch(id={}, fingerprint={}, distance={}, name={}, similarity={}, rule={:?})",
            self.id,
            self.fingerprint,
            self.distance,
            self.name
                .as_deref()
                .map_or_else(|| "None".to_owned(), |n| format!("{n:?}")),
            self.similarity
                .map_or_else(|| "None".to_owned(), |s| format!("{s:.3}")),
            self.rule
        )
    }
}

/// A similarity threshold argument: None (the default for the text), or a
/// number in [0, 1].
fn threshold_arg(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<f64>> {
    match value {
        Some(v) if !v.is_none() => {
            let t: f64 = v.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "threshold must be a number between 0 and 1, got {}",
                    crate::args::type_name(v)
                ))
            })?;
            if (0.0..=1.0).contains(&t) {
                Ok(Some(t))
            } else {
                Err(PyValueError::new_err(format!(
                    "threshold must lie between 0 and 1, got {t}"
                )))
            }
        }
        _ => Ok(None),
    }
}

/// The values of `text` for a verified check or query, at `threshold` if
/// given.
fn text_values(hasher: &Simhasher, text: &str, threshold: Option<f64>) -> TextValues {
    let mut values = TextValues::of(hasher, text);
    if let Some(t) = threshold {
        values.threshold = t;
    }
    values
}

impl PyIndex {
    fn open_with(
        py: Python<'_>,
        path: PathBuf,
        options: Options,
        read_only: bool,
    ) -> PyResult<Self> {
        let durability = options.durability;
        let shown = path.display().to_string();
        let index = py
            .detach(|| {
                guard(|| {
                    Ok(if read_only {
                        Index::open_read_only(&path)?
                    } else {
                        Index::open(&path, options)?
                    })
                })
            })
            .map_err(|f| f.into_py(py, &shown))?;
        let stats = index.stats();
        Ok(PyIndex {
            path: shown,
            read_only,
            durability,
            k: index.plan().k(),
            plan: stats.plan.to_string(),
            config: stats.fingerprint_config.clone(),
            retention: index.retention(),
            hasher: index.simhasher().map_err(|e| {
                format!(
                    "the index records fingerprint config `{}`, which this version cannot use: {e}",
                    stats.fingerprint_config
                )
            }),
            inner: RwLock::new(Some(index)),
            pid: std::process::id(),
        })
    }

    /// Whether this is a process forked from the one that opened the index.
    fn forked(&self) -> bool {
        std::process::id() != self.pid
    }

    /// `ForkedError` in a process forked from the one that opened the index.
    fn check_process(&self, py: Python<'_>) -> PyResult<()> {
        if self.forked() {
            return Err(crate::errors::forked(
                py,
                &self.path,
                self.pid,
                std::process::id(),
            ));
        }
        Ok(())
    }

    /// Runs `f` on the open index without the GIL.
    pub fn run<T, F>(&self, py: Python<'_>, f: F) -> PyResult<T>
    where
        T: Send,
        F: FnOnce(&Index) -> Result<T, Failure> + Send,
    {
        self.check_process(py)?;
        let result = {
            let state = match self.inner.try_read() {
                Ok(state) => state,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                // `close` is waiting for calls in progress.
                Err(TryLockError::WouldBlock) => {
                    return Err(Failure::Closed.into_py(py, &self.path));
                }
            };
            let Some(index) = state.as_ref() else {
                return Err(Failure::Closed.into_py(py, &self.path));
            };
            py.detach(|| crate::fork::install(|| guard(|| f(index))))
        };
        result.map_err(|f| f.into_py(py, &self.path))
    }

    /// The index's k.
    pub fn k_value(&self) -> u32 {
        self.k
    }

    fn hasher(&self, py: Python<'_>) -> PyResult<&Simhasher> {
        self.hasher
            .as_ref()
            .map_err(|why| crate::errors::error(py, why.clone()))
    }
}

#[pymethods]
impl PyIndex {
    /// Opens the index in directory `path`, creating it (and the directory)
    /// if it holds none.
    ///
    /// Settings of a new index, recorded in it: k (the largest distance
    /// queries may ask for; default 3; for an index of texts, 6 lets
    /// `check` and `query_text` search short texts at their own candidate
    /// distance, as the command line's indexes of texts do), expected_n (the number of documents
    /// the table plan is sized for; default 50 million), blocks (a fixed
    /// plan of that many blocks instead of the cost model's choice),
    /// retention (seconds or a datetime.timedelta: older documents stop
    /// being returned and are dropped by compaction; default: forever), and
    /// the fingerprint configuration used by `add` and `check` (tokenizer,
    /// shingle, weighting as for `Simhasher`; default: Simhasher()'s).
    ///
    /// An existing index keeps its recorded settings: k, blocks and the
    /// fingerprint configuration, when given, must equal them
    /// (MismatchError otherwise); expected_n and retention are then not used.
    ///
    /// Per open: durability ("buffered", the default: an acknowledged write
    /// survives the process being killed; "sync": it also survives power
    /// loss, each write or batch is synced), memtable_bytes (documents
    /// are written to a new segment when the in-memory table holds about
    /// this many bytes; default 48 MiB) and merge_fan_in (segments of one
    /// size merged together at a time, 2 to 64; default 16, which suits
    /// bulk loading: every query, and so every check, searches every
    /// segment, and an index that mostly checks is faster at 3).
    #[staticmethod]
    #[pyo3(signature = (
        path, k = None, expected_n = None, durability = None, retention = None,
        tokenizer = None, shingle = None, weighting = None, blocks = None, memtable_bytes = None,
        merge_fan_in = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn open(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        k: Option<&Bound<'_, PyAny>>,
        expected_n: Option<&Bound<'_, PyAny>>,
        durability: Option<&Bound<'_, PyAny>>,
        retention: Option<&Bound<'_, PyAny>>,
        tokenizer: Option<&Bound<'_, PyAny>>,
        shingle: Option<&Bound<'_, PyAny>>,
        weighting: Option<&Bound<'_, PyAny>>,
        blocks: Option<&Bound<'_, PyAny>>,
        memtable_bytes: Option<&Bound<'_, PyAny>>,
        merge_fan_in: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let path = path_arg(path)?;
        let given_k = match k {
            Some(v) if !v.is_none() => Some(u32_arg(v, "k")?),
            _ => None,
        };
        let mut options = Options::new()
            .k(given_k.unwrap_or(3))
            .durability(durability_arg(durability)?);
        if let Some(n) = expected_n.filter(|v| !v.is_none()) {
            options.expected_n = u64_arg(n, "expected_n")?;
        }
        // A k no plan can serve is refused before anything is created.
        Plan::auto(options.expected_n, options.k)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        if let Some(r) = retention.filter(|v| !v.is_none()) {
            options.retention = Some(retention_arg(r)?);
        }
        if let Some(b) = blocks.filter(|v| !v.is_none()) {
            let plan = Plan::new(u32_arg(b, "blocks")?, options.k)
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
            options.plan = Some(plan);
        }
        if let Some(m) = memtable_bytes.filter(|v| !v.is_none()) {
            let bytes = u64_arg(m, "memtable_bytes")?;
            if bytes == 0 {
                return Err(PyValueError::new_err(
                    "memtable_bytes must be at least 1, got 0",
                ));
            }
            options.memtable_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        }
        if let Some(f) = merge_fan_in.filter(|v| !v.is_none()) {
            let fan_in = u32_arg(f, "merge_fan_in")?;
            if !(2..=64).contains(&fan_in) {
                return Err(PyValueError::new_err(format!(
                    "merge_fan_in must be between 2 and 64, got {fan_in}"
                )));
            }
            options.merge_policy = Some(Arc::new(TieredMergePolicy {
                fan_in: fan_in as usize,
            }));
        }
        options.fingerprint = hasher_from_args(tokenizer, shingle, weighting)?.map(|h| h.config());
        let opened = PyIndex::open_with(py, path, options, false)?;
        if let Some(k) = given_k
            && k != opened.k
        {
            let recorded = opened.k.to_string();
            opened.close(py)?;
            return Err(mismatch(py, "k", recorded, k.to_string()));
        }
        Ok(opened)
    }

    /// Opens an existing index for queries only: any number of readers (in
    /// any process) may open it at once, beside the process that writes it,
    /// which they never hold up. It sees every write acknowledged before the
    /// open; refresh() catches up with later ones.
    #[staticmethod]
    fn open_read_only(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<Self> {
        let path = path_arg(path)?;
        PyIndex::open_with(py, path, Options::default(), true)
    }

    /// Closes the index: waits for calls in progress in other threads,
    /// finishes a background flush or merge, and releases the lock. Every
    /// acknowledged write is already in the write-ahead log. Later calls
    /// raise ClosedError; closing again does nothing.
    ///
    /// Raises PoisonedError (after closing all the same) if a write, a sync
    /// or a background flush or merge failed since the index was opened
    /// (a full disk, say): what was acknowledged is in the write-ahead log,
    /// and the next open recovers it. In a process forked from the one that
    /// opened the index, closes nothing: the files and the lock stay with
    /// that process.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.forked() {
            let state = match self.inner.try_write() {
                Ok(state) => Some(state),
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            };
            if let Some(mut state) = state {
                std::mem::forget(state.take());
            }
            return Ok(());
        }
        let index = py.detach(|| {
            self.inner
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        });
        match index {
            None => Ok(()),
            Some(index) => py
                .detach(|| guard(|| Ok(index.close()?)))
                .map_err(|f| f.into_py(py, &self.path)),
        }
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    /// An Index cannot be pickled (it holds the index's lock and open
    /// files): open it by path in each process.
    fn __reduce__(&self) -> PyResult<()> {
        Err(PyTypeError::new_err(format!(
            "an Index cannot be pickled (it holds the lock and open files of {}): pass the \
             path and open the index in each process (Index.open_read_only while no process \
             writes it), or send the work to the process that opened it",
            self.path
        )))
    }

    /// Inserts document `id` with `fingerprint` (and `name`, a str of at most
    /// 64 KiB, returned with matches), replacing any earlier version of `id`.
    #[pyo3(signature = (id, fingerprint, name = None))]
    fn insert(
        &self,
        py: Python<'_>,
        id: &Bound<'_, PyAny>,
        fingerprint: &Bound<'_, PyAny>,
        name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let id = u64_arg(id, "id")?;
        let fingerprint = u64_arg(fingerprint, "fingerprint")?;
        let name = name_arg(name, "name")?;
        self.run(py, |index| {
            Ok(index.insert_batch([(id, fingerprint, name)])?)
        })
    }

    /// Inserts many documents as one write: all or none survive a crash, and
    /// with durability="sync" they share one sync. ids and fingerprints: 1-D
    /// array-likes of uint64 of one length (contiguous uint64 arrays are read
    /// in place); names: None, or a sequence of str or None of that length.
    /// A batch must fit one write-ahead log frame (256 MiB: about 8 million
    /// documents without names); InvalidArgumentError otherwise, and nothing
    /// is written. Ctrl-C while the arguments are read raises
    /// KeyboardInterrupt and writes nothing; once the write has started, it
    /// completes (the whole batch) and KeyboardInterrupt follows.
    #[pyo3(signature = (ids, fingerprints, names = None))]
    fn insert_many(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        fingerprints: &Bound<'_, PyAny>,
        names: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let ids = u64s_arg(ids, "ids")?;
        let fps = u64s_arg(fingerprints, "fingerprints")?;
        let (ids, fps) = (ids.as_slice(), fps.as_slice());
        if ids.len() != fps.len() {
            return Err(PyValueError::new_err(format!(
                "ids has {} values but fingerprints has {}",
                ids.len(),
                fps.len()
            )));
        }
        match names.filter(|n| !n.is_none()) {
            None => self.run(py, |index| {
                Ok(index.insert_batch(
                    ids.iter()
                        .zip(fps)
                        .map(|(&id, &fp)| (id, fp, None::<String>)),
                )?)
            }),
            Some(names) => {
                let names = names_arg(names, ids.len())?;
                self.run(py, |index| {
                    Ok(index.insert_batch(
                        ids.iter()
                            .zip(fps)
                            .zip(names)
                            .map(|((&id, &fp), name)| (id, fp, name)),
                    )?)
                })
            }
        }
    }

    /// Deletes document `id` (nothing happens if there is none).
    fn delete(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<()> {
        let id = u64_arg(id, "id")?;
        self.run(py, |index| Ok(index.delete(id)?))
    }

    /// The fingerprint of document `id`, or None if it does not exist.
    fn get(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
        let id = u64_arg(id, "id")?;
        self.run(py, |index| Ok(index.get(id)?))
    }

    /// Document `id` (a Doc: fingerprint, name, insertion time), or None.
    fn get_doc(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<Option<PyDoc>> {
        let id = u64_arg(id, "id")?;
        self.run(py, |index| Ok(index.get_doc(id)?.map(PyDoc::from)))
    }

    fn __contains__(&self, py: Python<'_>, id: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.get(py, id)?.is_some())
    }

    /// Every live document within distance k (default and maximum: the
    /// index's k; DistanceError above it) of `fingerprint`, as a list of
    /// Match, nearest first (ties by id).
    #[pyo3(signature = (fingerprint, k = None))]
    fn query<'py>(
        &self,
        py: Python<'py>,
        fingerprint: &Bound<'py, PyAny>,
        k: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let fingerprint = u64_arg(fingerprint, "fingerprint")?;
        let k = k_arg(k, self.k)?;
        let matches = self.run(py, |index| Ok(index.query(fingerprint, k)?))?;
        matches_list(py, matches)
    }

    /// `query` for each of `fingerprints` (a 1-D array-like of uint64), in
    /// parallel without the GIL: a list of lists of Match. Runs a few
    /// thousand queries at a time: Ctrl-C raises KeyboardInterrupt between
    /// two of them (a query writes nothing).
    #[pyo3(signature = (fingerprints, k = None))]
    fn query_many<'py>(
        &self,
        py: Python<'py>,
        fingerprints: &Bound<'py, PyAny>,
        k: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let fps = u64s_arg(fingerprints, "fingerprints")?;
        let k = k_arg(k, self.k)?;
        let slice = fps.as_slice();
        let all = interrupt::in_chunks(py, slice.len(), interrupt::QUERY_CHUNK, |range| {
            let chunk = &slice[range];
            self.run(py, |index| Ok(index.query_batch(chunk, k)?))
        })?;
        let lists = all
            .into_iter()
            .map(|matches| matches_list(py, matches))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, lists)
    }

    /// The crawler's check-and-insert: inserts document `id` unless a live
    /// document lies within distance k of `fingerprint`; then returns those
    /// (nearest first) and writes nothing. An empty list means it was
    /// inserted. Atomic: of two near-identical documents inserted at once
    /// from two threads, one is kept and the other gets it as its match.
    #[pyo3(signature = (id, fingerprint, name = None, k = None))]
    fn insert_if_new<'py>(
        &self,
        py: Python<'py>,
        id: &Bound<'py, PyAny>,
        fingerprint: &Bound<'py, PyAny>,
        name: Option<&Bound<'py, PyAny>>,
        k: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let id = u64_arg(id, "id")?;
        let fingerprint = u64_arg(fingerprint, "fingerprint")?;
        let name = name_arg(name, "name")?;
        let k = k_arg(k, self.k)?;
        let found = self.run(py, |index| {
            Ok(index.insert_if_new_named(id, fingerprint, name, k)?)
        })?;
        matches_list(py, found.err().unwrap_or_default())
    }

    /// insert_if_new for many documents, in order, as one write: each
    /// document is checked against the index and the documents of the batch
    /// inserted before it, exactly as the same insert_if_new calls one after
    /// another would be; the documents inserted are one atomic write (all or
    /// none survive a crash). Returns one list per document: empty if it was
    /// inserted, else its near-duplicates, nearest first. Ctrl-C while the
    /// arguments are read raises KeyboardInterrupt and writes nothing; once
    /// the search has started, the call completes (its answers are then
    /// lost, but the documents it inserted are written) and
    /// KeyboardInterrupt follows.
    #[pyo3(signature = (ids, fingerprints, names = None, k = None))]
    fn insert_if_new_many<'py>(
        &self,
        py: Python<'py>,
        ids: &Bound<'py, PyAny>,
        fingerprints: &Bound<'py, PyAny>,
        names: Option<&Bound<'py, PyAny>>,
        k: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let ids = u64s_arg(ids, "ids")?;
        let fps = u64s_arg(fingerprints, "fingerprints")?;
        let (ids, fps) = (ids.as_slice(), fps.as_slice());
        if ids.len() != fps.len() {
            return Err(PyValueError::new_err(format!(
                "ids has {} values but fingerprints has {}",
                ids.len(),
                fps.len()
            )));
        }
        let names = match names.filter(|n| !n.is_none()) {
            None => vec![None; ids.len()],
            Some(names) => names_arg(names, ids.len())?,
        };
        let k = k_arg(k, self.k)?;
        let answers = self.run(py, |index| {
            Ok(index.insert_if_new_many(
                ids.iter()
                    .zip(fps)
                    .zip(names)
                    .map(|((&id, &fp), name)| (id, fp, name)),
                k,
            )?)
        })?;
        let lists = answers
            .into_iter()
            .map(|answer| matches_list(py, answer.err().unwrap_or_default()))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, lists)
    }

    /// Inserts the document `name` (a URL or path) with the fingerprint and
    /// the sketch of `text` under the index's recorded configuration, as the
    /// command line's `simhashdb add` does: its id is `doc_id(name)`.
    /// Returns the id.
    fn add(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        text: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let name = str_arg(name, "name")?;
        let text = str_arg(text, "text")?;
        let hasher = self.hasher(py)?;
        self.run(py, |index| {
            let id = doc_id(&name);
            let (fingerprint, sketch) = Sketch::with_fingerprint(hasher, &text);
            let fingerprint = fingerprint.unwrap_or_else(|| hasher.fingerprint(&text));
            index.insert_sketched(id, fingerprint, sketch, Some(name.to_string()))?;
            Ok(id)
        })
    }

    /// `add` for many documents as one write (names and texts: sequences of
    /// str of one length), fingerprinted in parallel without the GIL.
    /// Returns their ids as a numpy uint64 array. Ctrl-C while the texts are
    /// fingerprinted (a few thousand at a time) raises KeyboardInterrupt and
    /// writes nothing; once the write has started, it completes (all the
    /// documents) and KeyboardInterrupt follows.
    fn add_many<'py>(
        &self,
        py: Python<'py>,
        names: &Bound<'py, PyAny>,
        texts: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let names = texts_arg(names, "names")?;
        let texts = texts_arg(texts, "texts")?;
        if names.len() != texts.len() {
            return Err(PyValueError::new_err(format!(
                "names has {} items but texts has {}",
                names.len(),
                texts.len()
            )));
        }
        let hasher = self.hasher(py)?;
        self.check_process(py)?;
        let values = sketch_texts(py, hasher, &texts)?;
        let ids = self.run(py, |index| {
            let docs: Vec<(u64, u64, Option<Sketch>, Option<String>)> = names
                .iter()
                .zip(values)
                .map(|(name, (fingerprint, sketch))| {
                    (
                        doc_id(name),
                        fingerprint,
                        Some(sketch),
                        Some(name.to_string()),
                    )
                })
                .collect();
            let ids = docs.iter().map(|d| d.0).collect();
            index.insert_batch_sketched(docs)?;
            Ok(ids)
        })?;
        Ok(PyArray1::from_vec(py, ids))
    }

    /// The crawler's check-and-insert by name and text, as the command
    /// line's `simhashdb check`: fingerprints and sketches `text` under the
    /// index's recorded configuration and inserts it (with its sketch) as
    /// `doc_id(name)` unless a stored document is a near-duplicate by the
    /// verified rule; returns None when inserted, else the most similar such
    /// document as a VerifiedMatch (and writes nothing).
    ///
    /// The verified rule: a document with a sketch is a near-duplicate when
    /// the estimated similarity of the texts is at least `threshold`
    /// (default 0.7, or 0.6 for a text mostly of Han characters), searched
    /// within the text's candidate distance (8 bits below 50 tokens, 6 up
    /// to 499, 4 from 500; at most the index's k, at least `k`); a document
    /// without a sketch (inserted by fingerprint, or by an older version)
    /// when it lies within distance `k` (default: the index's k). A text
    /// without a word raises InvalidArgumentError.
    #[pyo3(signature = (name, text, k = None, threshold = None))]
    fn check(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        text: &Bound<'_, PyAny>,
        k: Option<&Bound<'_, PyAny>>,
        threshold: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<PyVerifiedMatch>> {
        let name = str_arg(name, "name")?;
        let text = str_arg(text, "text")?;
        let k = k_arg(k, self.k)?;
        let threshold = threshold_arg(threshold)?;
        let hasher = self.hasher(py)?;
        self.run(py, |index| {
            let values = text_values(hasher, &text, threshold);
            let found = index
                .insert_if_new_many_verified(
                    [(doc_id(&name), values, Some(name.to_string()))],
                    k,
                    usize::MAX,
                )?
                .pop();
            Ok(match found {
                Some(Err(matches)) => matches.into_iter().next().map(PyVerifiedMatch::from),
                _ => None,
            })
        })
    }

    /// The stored documents that are near-duplicates of `text` by the
    /// verified rule of `check` (same `k` and `threshold`), as a list of
    /// VerifiedMatch, most similar first (then by id; documents matched by
    /// their fingerprint last, by distance). Never inserts. A text without
    /// a word has no match.
    #[pyo3(signature = (text, k = None, threshold = None))]
    fn query_text<'py>(
        &self,
        py: Python<'py>,
        text: &Bound<'py, PyAny>,
        k: Option<&Bound<'py, PyAny>>,
        threshold: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let text = str_arg(text, "text")?;
        let k = k_arg(k, self.k)?;
        let threshold = threshold_arg(threshold)?;
        let hasher = self.hasher(py)?;
        let found = self.run(py, |index| {
            Ok(index.query_verified(&text_values(hasher, &text, threshold), k)?)
        })?;
        let objects = found
            .into_iter()
            .map(|m| Bound::new(py, PyVerifiedMatch::from(m)))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, objects)
    }

    /// Writes the in-memory documents to a new segment (they are in the
    /// write-ahead log already); returns once it is committed.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |index| Ok(index.flush()?))
    }

    /// Brings a read-only index up to date: afterwards it answers with every
    /// write the writer had acknowledged when the call began. Does nothing
    /// on an index open for writing.
    fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |index| Ok(index.refresh()?))
    }

    /// Syncs the write-ahead log: every acknowledged write survives a power
    /// loss afterwards (with durability="sync" every write already does).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |index| Ok(index.sync()?))
    }

    /// Merges every segment into one, dropping replaced, deleted and expired
    /// documents.
    fn compact(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |index| Ok(index.compact()?))
    }

    /// Writes a consistent copy of the index into `path` (a new path, or an
    /// empty directory; anything else raises InvalidArgumentError and writes
    /// nothing): every write acknowledged before the call is in it, and it
    /// opens and verifies on its own. Segment files are hard-linked where the file
    /// system allows. Returns {"path", "linked", "copied", "bytes",
    /// "copied_bytes", "next_seq", "generation"}.
    fn backup<'py>(&self, py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
        let report = self.run(py, |index| Ok(index.backup(&path)?))?;
        let dict = PyDict::new(py);
        dict.set_item("path", report.dest.to_string_lossy())?;
        dict.set_item("linked", report.linked)?;
        dict.set_item("copied", report.copied)?;
        dict.set_item("bytes", report.bytes)?;
        dict.set_item("copied_bytes", report.copied_bytes)?;
        dict.set_item("next_seq", report.next_seq)?;
        dict.set_item("generation", report.generation)?;
        Ok(dict)
    }

    /// Reads every file of the index and checks every checksum; raises
    /// CorruptedError (with the file and offset) at the first damage.
    /// Returns {"files": n, "bytes": n, "wal_tails": [...]}: what was
    /// checked, and each WAL's end that recovery drops (a crash in the middle
    /// of an append, or damage to the last frame), as a dict {"path",
    /// "offset", "bytes", "unsynced_appends", "complete_frame"}. A
    /// complete_frame tail in a WAL without unsynced_appends (durability
    /// "sync") that was not just through a power cut is a lost acknowledged
    /// write.
    fn verify<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let report = self.run(py, |index| Ok(index.verify()?))?;
        let dict = PyDict::new(py);
        dict.set_item("files", report.files)?;
        dict.set_item("bytes", report.bytes)?;
        let tails = PyList::empty(py);
        for tail in &report.wal_tails {
            let t = PyDict::new(py);
            t.set_item("path", tail.path.to_string_lossy())?;
            t.set_item("offset", tail.offset)?;
            t.set_item("bytes", tail.bytes)?;
            t.set_item("unsynced_appends", tail.unsynced_appends)?;
            t.set_item("complete_frame", tail.complete_frame)?;
            tails.append(t)?;
        }
        dict.set_item("wal_tails", tails)?;
        Ok(dict)
    }

    /// Shape and size: the plan, k, fingerprint configuration, segments,
    /// entries in segments and in memory, tombstones, bytes on disk and of
    /// the small segments' decoded tables in memory; and the background
    /// flushes and merges since the open ("flushes", "flush_failures",
    /// "merges", "merge_failures": a failure poisons the index, see close).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.run(py, |index| Ok(index.stats()))?;
        let dict = PyDict::new(py);
        dict.set_item("path", &self.path)?;
        dict.set_item("read_only", self.read_only)?;
        dict.set_item("plan", s.plan.to_string())?;
        dict.set_item("k", s.plan.k())?;
        dict.set_item("tables", s.plan.tables().len())?;
        dict.set_item("fingerprint_config", &s.fingerprint_config)?;
        dict.set_item("segments", s.segments)?;
        dict.set_item("segment_docs", s.segment_docs)?;
        dict.set_item("segment_keys", s.segment_keys)?;
        dict.set_item("tombstones", s.tombstones)?;
        dict.set_item("table_bytes_per_key", s.table_bytes_per_key)?;
        dict.set_item("decoded_table_bytes", s.decoded_table_bytes)?;
        dict.set_item("disk_bytes", s.disk_bytes)?;
        dict.set_item("memtable_docs", s.memtable_docs)?;
        dict.set_item("memtable_bytes", s.memtable_bytes)?;
        dict.set_item("flushing_docs", s.flushing_docs)?;
        dict.set_item("flushes", s.flushes)?;
        dict.set_item("flush_failures", s.flush_failures)?;
        dict.set_item("merges", s.merges)?;
        dict.set_item("merge_failures", s.merge_failures)?;
        Ok(dict)
    }

    /// The number of live documents (`Index::len`: a walk over all of them,
    /// without the GIL).
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.run(py, |index| {
            Ok(usize::try_from(index.len()?).unwrap_or(usize::MAX))
        })
    }

    /// The index directory.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// The largest distance queries may ask for (fixed when the index was created).
    #[getter]
    fn k(&self) -> u32 {
        self.k
    }

    /// The table plan, e.g. "5 blocks, k = 3, 10 tables".
    #[getter]
    fn plan(&self) -> &str {
        &self.plan
    }

    /// The recorded fingerprint configuration line (that of `simhasher`).
    #[getter]
    fn config(&self) -> &str {
        &self.config
    }

    /// A Simhasher of the recorded configuration: fingerprints comparable
    /// with the index's (the ones `add` and `check` compute).
    #[getter]
    fn simhasher(&self, py: Python<'_>) -> PyResult<PySimhasher> {
        Ok(PySimhasher {
            hasher: self.hasher(py)?.clone(),
        })
    }

    /// How long documents are kept (a datetime.timedelta), as recorded in
    /// the index when it was created; None: forever. A longer retention than
    /// a timedelta holds (the command line accepts one) is returned as
    /// datetime.timedelta.max.
    #[getter]
    fn retention<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDelta>>> {
        self.retention
            .map(|r| {
                let days = r.as_secs() / 86_400;
                if days > MAX_RETENTION_DAYS {
                    return PyDelta::new(py, MAX_RETENTION_DAYS as i32, 86_399, 999_999, true);
                }
                let seconds = (r.as_secs() % 86_400) as i32;
                PyDelta::new(py, days as i32, seconds, r.subsec_micros() as i32, true)
            })
            .transpose()
    }

    /// Whether the index was opened with `open_read_only`.
    #[getter]
    fn read_only(&self) -> bool {
        self.read_only
    }

    /// "buffered" or "sync".
    #[getter]
    fn durability(&self) -> &'static str {
        match self.durability {
            Durability::Sync => "sync",
            _ => "buffered",
        }
    }

    /// Whether the index was closed.
    #[getter]
    fn closed(&self) -> bool {
        match self.inner.try_read() {
            Ok(state) => state.is_none(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().is_none(),
            Err(TryLockError::WouldBlock) => true,
        }
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() {
            " closed"
        } else if self.read_only {
            " read-only"
        } else {
            ""
        };
        format!("<simhashdb.Index '{}' k={}{state}>", self.path, self.k)
    }
}

/// Each text's fingerprint and sketch (one tokenization), in parallel
/// without the GIL, as `fingerprint_texts` computes fingerprints: a few
/// thousand at a time, Ctrl-C between them. A text without a word gets the
/// fingerprint `Simhasher::fingerprint` gives it.
fn sketch_texts(
    py: Python<'_>,
    hasher: &Simhasher,
    texts: &crate::args::Texts,
) -> PyResult<Vec<(u64, Sketch)>> {
    interrupt::in_chunks(py, texts.len(), interrupt::TEXT_CHUNK, |range| {
        py.detach(|| {
            crate::fork::install(|| {
                guard(|| {
                    Ok(texts
                        .slice(range)
                        .map(|text| {
                            let (fp, sketch) = Sketch::with_fingerprint(hasher, text);
                            (fp.unwrap_or_else(|| hasher.fingerprint(text)), sketch)
                        })
                        .collect::<Vec<_>>())
                })
            })
        })
        .map_err(|f| f.into_py(py, ""))
    })
}
