//! `simhashdb.Simhasher`: texts to fingerprints.

use numpy::PyArray1;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};
use rayon::prelude::*;
use simhashdb::{FingerprintConfig, Simhasher, Tokenizer, Weighting};

use crate::args::{Texts, show, str_arg, texts_arg_deferred, type_name};
use crate::errors::guard;
use crate::interrupt;

/// Texts at least this long are fingerprinted without the GIL, so that other
/// Python threads run meanwhile (a shorter one takes about a microsecond).
const RELEASE_GIL_BYTES: usize = 16 * 1024;

/// Computes 64-bit simhash fingerprints of texts.
///
/// Simhasher(tokenizer="words", shingle=1, weighting="tf")
///
/// tokenizer: "words" (Unicode words, lower-cased; the default), "letters"
/// (runs of letters, as seomoz simhash-cpp), "chinese" (jieba word
/// segmentation), "chars" or "chars:N" (character n-grams, N = 3 by default,
/// for short texts). shingle: how many consecutive tokens form one feature
/// (1 = single tokens). weighting: "tf" (term frequency) or "binary".
///
/// Similar texts get fingerprints that differ in few bits; compare them with
/// `hamming`, or store them in an `Index`. The fingerprint of a given text
/// under a given `config` never changes between releases.
#[pyclass(module = "simhashdb", name = "Simhasher", frozen, eq, hash)]
pub struct PySimhasher {
    pub hasher: Simhasher,
}

impl PartialEq for PySimhasher {
    fn eq(&self, other: &Self) -> bool {
        self.hasher.config() == other.hasher.config()
    }
}

impl std::hash::Hash for PySimhasher {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.hasher.config().to_string().hash(state);
    }
}

impl PySimhasher {
    /// Fingerprints of `texts` (a sequence of `str`), in parallel without the GIL.
    pub fn fingerprints(
        &self,
        py: Python<'_>,
        texts: &Bound<'_, PyAny>,
        what: &str,
    ) -> PyResult<Vec<u64>> {
        let texts = texts_arg_deferred(texts, what)?;
        fingerprint_texts(py, &self.hasher, &texts, what)
    }
}

/// The fingerprints of `texts` under `hasher`, in parallel without the GIL,
/// a chunk at a time (Ctrl-C stops it between chunks). A `str` that is not
/// ASCII is encoded to UTF-8 for its chunk only ([`texts_arg_deferred`]):
/// nothing stays cached inside the caller's objects.
pub fn fingerprint_texts(
    py: Python<'_>,
    hasher: &Simhasher,
    texts: &Texts,
    what: &str,
) -> PyResult<Vec<u64>> {
    interrupt::in_chunks(py, texts.len(), interrupt::TEXT_CHUNK, |range| {
        let (chunk, end) =
            texts.chunk(py, range.start, &|_| true, range.len(), usize::MAX, what)?;
        debug_assert_eq!(end, range.end);
        let fingerprints = py
            .detach(|| {
                crate::fork::install(|| {
                    guard(|| {
                        Ok(chunk
                            .texts(texts)
                            .into_par_iter()
                            .map(|(_, text)| hasher.fingerprint(text))
                            .collect::<Vec<u64>>())
                    })
                })
            })
            .map_err(|f| f.into_py(py, ""));
        chunk.release(py);
        fingerprints
    })
}

fn parse_setting<T: std::str::FromStr<Err = simhashdb::FingerprintError>>(
    value: Option<&Bound<'_, PyAny>>,
    what: &str,
) -> PyResult<Option<T>> {
    match value {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => {
            let s = v.cast::<PyString>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "{what} must be a str, got {} {}",
                    type_name(v),
                    show(v)
                ))
            })?;
            let s = s.to_cow()?;
            s.parse()
                .map(Some)
                .map_err(|e: simhashdb::FingerprintError| PyValueError::new_err(e.to_string()))
        }
    }
}

/// A `Simhasher` from `Simhasher(...)`'s arguments, or `None` when none is
/// given.
pub fn hasher_from_args(
    tokenizer: Option<&Bound<'_, PyAny>>,
    shingle: Option<&Bound<'_, PyAny>>,
    weighting: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Simhasher>> {
    let tokenizer: Option<Tokenizer> = parse_setting(tokenizer, "tokenizer")?;
    let weighting: Option<Weighting> = parse_setting(weighting, "weighting")?;
    let shingle = match shingle {
        Some(v) if !v.is_none() => Some(crate::args::u32_arg(v, "shingle")? as usize),
        _ => None,
    };
    if tokenizer.is_none() && weighting.is_none() && shingle.is_none() {
        return Ok(None);
    }
    let mut builder = Simhasher::builder();
    if let Some(t) = tokenizer {
        builder = builder.tokenizer(t);
    }
    if let Some(w) = weighting {
        builder = builder.weighting(w);
    }
    if let Some(s) = shingle {
        builder = builder.shingle(s);
    }
    builder
        .build()
        .map(Some)
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

#[pymethods]
impl PySimhasher {
    #[new]
    #[pyo3(
        signature = (tokenizer = None, shingle = None, weighting = None),
        text_signature = "(tokenizer='words', shingle=1, weighting='tf')"
    )]
    fn new(
        tokenizer: Option<&Bound<'_, PyAny>>,
        shingle: Option<&Bound<'_, PyAny>>,
        weighting: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let hasher = hasher_from_args(tokenizer, shingle, weighting)?.unwrap_or_default();
        Ok(PySimhasher { hasher })
    }

    /// The Simhasher of a configuration line, as `config` returns it (and as
    /// an index records it).
    #[staticmethod]
    fn from_config(config: &Bound<'_, PyAny>) -> PyResult<Self> {
        let line = str_arg(config, "config")?;
        let parsed: FingerprintConfig = line
            .parse()
            .map_err(|e: simhashdb::FingerprintError| PyValueError::new_err(e.to_string()))?;
        let hasher =
            Simhasher::from_config(&parsed).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PySimhasher { hasher })
    }

    /// The fingerprint of `text` (a `str`), as an int in [0, 2**64).
    fn fingerprint(&self, py: Python<'_>, text: &Bound<'_, PyAny>) -> PyResult<u64> {
        let text = str_arg(text, "text")?;
        if text.len() < RELEASE_GIL_BYTES {
            return Ok(self.hasher.fingerprint(&text));
        }
        let hasher = &self.hasher;
        py.detach(|| guard(|| Ok(hasher.fingerprint(&text))))
            .map_err(|f| f.into_py(py, ""))
    }

    /// The fingerprints of `texts` (a list, tuple or other iterable of
    /// `str`, a numpy object array, a pandas Series, a pyarrow string
    /// Array/ChunkedArray read without a copy per text, a polars Series or a
    /// `datasets` column), as a `numpy.ndarray` of `uint64` in the same order. Runs in
    /// parallel on all cores, without the GIL, a few thousand texts at a
    /// time: Ctrl-C raises KeyboardInterrupt between two of them.
    fn fingerprint_many<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let fps = self.fingerprints(py, texts, "texts")?;
        Ok(PyArray1::from_vec(py, fps))
    }

    /// Pickles as its configuration line (`Simhasher.from_config(config)`),
    /// so it can be sent to other processes (multiprocessing).
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let from_config = py.get_type::<PySimhasher>().getattr("from_config")?;
        (from_config, (self.hasher.config().to_string(),)).into_pyobject(py)
    }

    /// The tokens of `text` before shingling and hashing (for looking into
    /// why two texts differ).
    fn tokens(&self, text: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let text = str_arg(text, "text")?;
        Ok(self.hasher.tokens(&text))
    }

    /// The versioned configuration line, e.g.
    /// "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64".
    #[getter]
    fn config(&self) -> String {
        self.hasher.config().to_string()
    }

    fn __repr__(&self) -> String {
        let config = self.hasher.config();
        format!(
            "Simhasher(tokenizer='{}', shingle={}, weighting='{}')",
            config.tokenizer(),
            config.shingle(),
            config.weighting()
        )
    }
}
