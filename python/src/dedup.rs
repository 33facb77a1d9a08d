//! `simhashdb.dedup`: the verified deduplication of a column of texts, the
//! engine of `simhashdb dedup` on datasets (`simhashdb::dedup`).

use numpy::PyArray1;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString};
use simhashdb::Simhasher;
use simhashdb::dedup::{
    DedupError, Fate, Keep, Outcome, Settings, TextChunk, TextSource, keep_order,
};

use crate::args::{Texts, show, texts_arg_deferred, type_name, u32_arg};
use crate::errors::{guard, to_py};
use crate::fork::Signals;
use crate::hasher::hasher_from_args;

/// The answer of `dedup`: one entry per text, in the order given.
///
/// keep: numpy bool array, True for the texts kept (use it as a mask:
/// `df[result.keep]`, `ds.filter(result.keep)`). duplicate_of: numpy int64
/// array, the position of the kept text a dropped one matched, -1 for kept
/// texts. similarity: numpy float64 array, the Jaccard similarity of a
/// dropped text's shingle sets to that kept text, NaN for kept texts (and
/// for every text with verify=False, which compares fingerprints only).
#[pyclass(module = "simhashdb", name = "DedupResult", frozen)]
pub struct PyDedupResult {
    /// numpy bool array: True for the texts kept.
    #[pyo3(get)]
    keep: Py<PyArray1<bool>>,
    /// numpy int64 array: the position of the kept text a dropped one
    /// matched, -1 for kept texts.
    #[pyo3(get)]
    duplicate_of: Py<PyArray1<i64>>,
    /// numpy float64 array: the Jaccard similarity of a dropped text to the
    /// kept text it matched, NaN for kept texts (and with verify=False).
    #[pyo3(get)]
    similarity: Py<PyArray1<f64>>,
    /// Texts kept.
    #[pyo3(get)]
    kept: usize,
    /// Texts dropped.
    #[pyo3(get)]
    dropped: usize,
}

#[pymethods]
impl PyDedupResult {
    fn __len__(&self) -> usize {
        self.kept + self.dropped
    }

    fn __repr__(&self) -> String {
        format!(
            "DedupResult({} texts: {} kept, {} dropped)",
            self.kept + self.dropped,
            self.kept,
            self.dropped
        )
    }
}

fn float_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<f64> {
    if value.is_instance_of::<PyBool>()
        || !(value.is_instance_of::<PyFloat>() || value.is_instance_of::<PyInt>())
    {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a float, got {} {}",
            type_name(value),
            show(value)
        )));
    }
    value.extract()
}

fn invalid(py: Python<'_>, message: String) -> PyErr {
    to_py(py, simhashdb::Error::InvalidArgument(message))
}

/// Deduplicates texts, verified, with the rule and defaults of the
/// `simhashdb dedup` command on datasets.
///
/// dedup(texts, *, threshold=0.8, shingle=5, tokenizer="words",
///       keep="first", verify=True, distance=None)
///
/// texts: a list (or other sequence) of str, a numpy object array, a pandas
/// Series, a pyarrow Array or ChunkedArray of string or large_string (read
/// from its buffers, without a copy per text), a polars Series or a Hugging
/// Face `datasets` column. Null (None) is refused, naming its position.
///
/// Two texts are duplicates when the Jaccard similarity of their sets of
/// `shingle` consecutive tokens (tokens as `tokenizer` makes them) is at
/// least `threshold`. The pairs checked are those that share a MinHash band
/// of those shingles (or, with `distance=K`, those whose fingerprints are
/// within K bits). Texts are visited in `keep` order ("first": input order;
/// "longest": longest first, ties in input order) and one is dropped only
/// against an earlier visited text that is kept (the most similar).
/// Blank texts (no letter or digit) are always kept. verify=False is plain
/// simhash: texts whose fingerprints are within `distance` (default 3) bits
/// are duplicates, grouped by connected components, each group keeping its
/// first text in `keep` order.
///
/// Returns a DedupResult (keep, duplicate_of, similarity). Runs on all
/// cores without the GIL, reading the texts a chunk at a time (at most
/// 8,192 texts and 4 MiB, or 512 KiB per thread): Ctrl-C raises
/// KeyboardInterrupt between two chunks (it has no effect to undo). A `str`
/// that is not ASCII is encoded to UTF-8 for its chunk only; ASCII `str`
/// and Arrow buffers are read in place. Bad settings raise
/// InvalidArgumentError (a ValueError), arguments of the wrong type
/// TypeError.
#[pyfunction]
#[pyo3(signature = (texts, *, threshold=None, shingle=None, tokenizer=None, keep=None, verify=None, distance=None))]
#[allow(clippy::too_many_arguments)]
pub fn dedup<'py>(
    py: Python<'py>,
    texts: &Bound<'py, PyAny>,
    threshold: Option<&Bound<'py, PyAny>>,
    shingle: Option<&Bound<'py, PyAny>>,
    tokenizer: Option<&Bound<'py, PyAny>>,
    keep: Option<&Bound<'py, PyAny>>,
    verify: Option<&Bound<'py, PyAny>>,
    distance: Option<&Bound<'py, PyAny>>,
) -> PyResult<PyDedupResult> {
    fn given<'py>(v: Option<&Bound<'py, PyAny>>) -> Option<Bound<'py, PyAny>> {
        v.filter(|v| !v.is_none()).cloned()
    }
    let mut settings = Settings::default();
    if let Some(t) = given(threshold) {
        settings.threshold = float_arg(&t, "threshold")?;
    }
    if let Some(w) = given(shingle) {
        settings.width = u32_arg(&w, "shingle")? as usize;
    }
    if let Some(v) = given(verify) {
        settings.verify = v
            .cast::<PyBool>()
            .map_err(|_| {
                PyTypeError::new_err(format!(
                    "verify must be a bool, got {} {}",
                    type_name(&v),
                    show(&v)
                ))
            })?
            .is_true();
    }
    if let Some(d) = given(distance) {
        settings.distance = Some(u32_arg(&d, "distance")?);
    }
    let keep = match given(keep) {
        None => Keep::First,
        Some(k) => {
            let s = k.cast::<PyString>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "keep must be a str, got {} {}",
                    type_name(&k),
                    show(&k)
                ))
            })?;
            match &*s.to_cow()? {
                "first" => Keep::First,
                "longest" => Keep::Longest,
                other => {
                    return Err(invalid(
                        py,
                        format!("keep must be \"first\" or \"longest\", got {other:?}"),
                    ));
                }
            }
        }
    };
    settings
        .validate()
        .map_err(|e| invalid(py, e.to_string()))?;
    let hasher = hasher_from_args(tokenizer, None, None)?.unwrap_or_default();
    let texts = texts_arg_deferred(texts, "texts")?;
    let outcome = crate::fork::install_watched(py, |signals| {
        guard(|| Ok(run(&hasher, &texts, &settings, keep, signals)))
    })
    .map_err(|f| f.into_py(py, ""))?
    .map_err(|stop| match stop {
        Stop::Python(e) => e,
        Stop::Engine(e) => invalid(py, e.to_string()),
    })?;
    drop(texts);
    let n = outcome.fate.len();
    let mut kept_mask = Vec::with_capacity(n);
    let mut duplicate_of = Vec::with_capacity(n);
    let mut similarity = Vec::with_capacity(n);
    for f in &outcome.fate {
        match *f {
            Fate::Kept => {
                kept_mask.push(true);
                duplicate_of.push(-1i64);
                similarity.push(f64::NAN);
            }
            Fate::Duplicate { of } => {
                kept_mask.push(false);
                duplicate_of.push(i64::from(of));
                similarity.push(f64::NAN);
            }
        }
    }
    for &(r, s) in &outcome.similarities {
        similarity[r as usize] = s;
    }
    let dropped = outcome.dropped();
    Ok(PyDedupResult {
        keep: PyArray1::from_vec(py, kept_mask).unbind(),
        duplicate_of: PyArray1::from_vec(py, duplicate_of).unbind(),
        similarity: PyArray1::from_vec(py, similarity).unbind(),
        kept: n - dropped,
        dropped,
    })
}

/// Texts handed to the engine per chunk, at most.
const CHUNK_TEXTS: usize = 8192;
/// Bytes of text per chunk and thread of the pool, at most (a longer text
/// is a chunk of its own), and at least [`MIN_CHUNK_BYTES`] in all: what
/// bounds the chunk's shingle sets in the check, and the time between two
/// signal checks, while giving each thread enough of a chunk to work on.
const CHUNK_BYTES_PER_THREAD: usize = 512 << 10;
/// Bytes of text per chunk, at least (see [`CHUNK_BYTES_PER_THREAD`]).
const MIN_CHUNK_BYTES: usize = 4 << 20;

/// Why a run stopped early.
enum Stop {
    /// An exception: `KeyboardInterrupt` (or what a signal handler raised),
    /// or a text that cannot be encoded.
    Python(PyErr),
    /// The engine refused the run.
    Engine(DedupError),
}

/// The stages of `simhashdb::dedup::dedup`, with the texts read a chunk at a
/// time ([`Chunks`]): Ctrl-C is checked for between two chunks (`signals`,
/// also in a forked process), so that it stops the call within a chunk's
/// time, and only one chunk's UTF-8 copies of non-ASCII `str` exist at
/// once. Called without the GIL.
fn run(
    hasher: &Simhasher,
    texts: &Texts,
    settings: &Settings,
    keep: Keep,
    signals: &Signals,
) -> Result<Outcome, Stop> {
    let source = Chunks {
        texts,
        signals,
        bytes: MIN_CHUNK_BYTES.max(CHUNK_BYTES_PER_THREAD * rayon::current_num_threads()),
    };
    let mut sketches = settings.sketches(hasher, keep == Keep::Longest);
    source
        .scan("sketching", &|_| true, &mut |chunk| {
            let texts: Vec<&str> = chunk.iter().map(|&(_, t)| t).collect();
            sketches.push(&texts);
        })
        .map_err(Stop::Python)?;
    sketches.check_len().map_err(Stop::Engine)?;
    let n = sketches.len();
    let order = keep_order(n, keep, &sketches.chars);
    let candidates = sketches.candidates(&order);
    signals.check().map_err(Stop::Python)?;
    let checked = settings
        .check(hasher, &source, n, candidates.pairs)
        .map_err(Stop::Python)?;
    Ok(settings.keep(n, &checked, &order))
}

/// The texts of a call as the engine's [`TextSource`]: chunks of at most
/// [`CHUNK_TEXTS`] texts and `bytes` bytes, each made with the GIL (after
/// checking for Ctrl-C) and read without it.
struct Chunks<'a> {
    texts: &'a Texts,
    /// Where Ctrl-C is seen ([`crate::fork::install_watched`]).
    signals: &'a Signals,
    /// Bytes of text per chunk, at most.
    bytes: usize,
}

impl TextSource for Chunks<'_> {
    type Error = PyErr;

    fn scan(
        &self,
        _what: &'static str,
        want: &(dyn Fn(u64) -> bool + Sync),
        f: &mut dyn FnMut(&TextChunk<'_>),
    ) -> PyResult<()> {
        let mut from = 0;
        let mut done: Option<crate::args::TextsChunk> = None;
        while from < self.texts.len() {
            self.signals.check()?;
            let (chunk, next) = Python::attach(|py| {
                if let Some(chunk) = done.take() {
                    chunk.release(py);
                }
                self.texts
                    .chunk(py, from, want, CHUNK_TEXTS, self.bytes, "texts")
            })?;
            if chunk.len() > 0 {
                f(&chunk.texts(self.texts));
            }
            done = Some(chunk);
            from = next;
        }
        if let Some(chunk) = done {
            Python::attach(|py| chunk.release(py));
        }
        Ok(())
    }
}
