//! The exact re-check helpers of `simhashdb::recheck` and `simhashdb::sketch`
//! for Python: shingle sets, their Jaccard similarity, banded MinHash keys
//! and the 16-byte sketch, for users who build their own deduplication
//! rules (and for `simhashdb.spark.dedup`, which runs them on executors).
//! Batch forms take many texts at once and run in parallel without the GIL.

use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};
use rayon::prelude::*;
use simhashdb::Simhasher;
use simhashdb::recheck::{MinHashBands, ShingleSet};
use simhashdb::sketch::Sketch;

use crate::args::{Texts, show, str_arg, texts_arg, type_name, u64s_arg};
use crate::errors::guard;
use crate::hasher::PySimhasher;
use crate::interrupt;

/// The largest shingle width accepted (a run of more tokens than this is
/// not a near-duplicate rule anyone measured; the bound keeps the hashing
/// of one shingle cheap).
const MAX_WIDTH: usize = 1024;

fn width_arg(width: i64) -> PyResult<usize> {
    if !(1..=MAX_WIDTH as i64).contains(&width) {
        return Err(PyValueError::new_err(format!(
            "width must be an integer from 1 to {MAX_WIDTH} (tokens per shingle), got {width}"
        )));
    }
    Ok(width as usize)
}

fn hasher_of(hasher: Option<&Bound<'_, PyAny>>) -> PyResult<Simhasher> {
    match hasher {
        None => Ok(Simhasher::default()),
        Some(h) if h.is_none() => Ok(Simhasher::default()),
        Some(h) => match h.cast::<PySimhasher>() {
            Ok(h) => Ok(h.get().hasher.clone()),
            Err(_) => Err(PyTypeError::new_err(format!(
                "hasher must be a Simhasher or None, got {} {}",
                type_name(h),
                show(h)
            ))),
        },
    }
}

/// `f` over every text, in parallel without the GIL, a chunk at a time
/// (Ctrl-C stops it between chunks).
fn over_texts<R: Send>(
    py: Python<'_>,
    texts: &Texts,
    f: impl Fn(&str) -> R + Sync,
) -> PyResult<Vec<R>> {
    interrupt::in_chunks(py, texts.len(), interrupt::TEXT_CHUNK, |range| {
        py.detach(|| {
            crate::fork::install(|| guard(|| Ok(texts.slice(range).map(&f).collect::<Vec<R>>())))
        })
        .map_err(|f| f.into_py(py, ""))
    })
}

/// The distinct shingles of `text` (runs of `width` consecutive tokens, as
/// `hasher` tokenizes; default `Simhasher()`), as a sorted `numpy.ndarray`
/// of `uint64` hashes. A text with fewer than `width` tokens has one
/// shingle, all of its tokens; a text without tokens has none.
///
/// Two such arrays compare with `jaccard`; `simhashdb dedup` checks
/// candidates with word 5-shingles (the default width).
#[pyfunction]
#[pyo3(signature = (text, width = 5, hasher = None))]
pub fn shingles<'py>(
    py: Python<'py>,
    text: &Bound<'py, PyAny>,
    width: i64,
    hasher: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArray1<u64>>> {
    let width = width_arg(width)?;
    let hasher = hasher_of(hasher)?;
    let text = str_arg(text, "text")?;
    let set = ShingleSet::from_text(&hasher, &text, width);
    Ok(PyArray1::from_slice(py, set.hashes()))
}

/// The shingle sets of many texts (a list or other sequence of `str`), as
/// `shingles` gives them, one array per text, computed in parallel without
/// the GIL.
#[pyfunction]
#[pyo3(signature = (texts, width = 5, hasher = None))]
pub fn shingles_many<'py>(
    py: Python<'py>,
    texts: &Bound<'py, PyAny>,
    width: i64,
    hasher: Option<&Bound<'py, PyAny>>,
) -> PyResult<Vec<Bound<'py, PyArray1<u64>>>> {
    let width = width_arg(width)?;
    let hasher = hasher_of(hasher)?;
    let texts = texts_arg(texts, "texts")?;
    let sets = over_texts(py, &texts, |t| ShingleSet::from_text(&hasher, t, width))?;
    Ok(sets
        .iter()
        .map(|s| PyArray1::from_slice(py, s.hashes()))
        .collect())
}

/// A shingle set given as a `str` (its shingles are taken) or as an array
/// of sorted distinct hashes (from `shingles`).
enum SetArg {
    Set(ShingleSet),
    Hashes(Vec<u64>),
}

impl SetArg {
    fn read(
        value: &Bound<'_, PyAny>,
        what: &str,
        hasher: &Simhasher,
        width: usize,
    ) -> PyResult<SetArg> {
        if let Ok(text) = value.cast::<PyString>() {
            let text = text.to_cow()?;
            return Ok(SetArg::Set(ShingleSet::from_text(hasher, &text, width)));
        }
        let hashes = u64s_arg(value, what)
            .map_err(|_| {
                PyTypeError::new_err(format!(
                    "{what} must be a str or an array of shingle hashes (from shingles()), \
                     got {} {}",
                    type_name(value),
                    show(value)
                ))
            })?
            .as_slice()
            .to_vec();
        if let Some(i) = hashes.windows(2).position(|w| w[0] >= w[1]) {
            return Err(PyValueError::new_err(format!(
                "{what} must be sorted and without repeats, as shingles() returns it: \
                 {what}[{}] = {} is not below {what}[{}] = {}",
                i,
                hashes[i],
                i + 1,
                hashes[i + 1]
            )));
        }
        Ok(SetArg::Hashes(hashes))
    }

    fn hashes(&self) -> &[u64] {
        match self {
            SetArg::Set(s) => s.hashes(),
            SetArg::Hashes(h) => h,
        }
    }
}

/// |A ∩ B| / |A ∪ B| of two sorted lists without repeats; two empty sets
/// are identical (1.0), as `ShingleSet::jaccard` has it.
fn jaccard_of_sorted(a: &[u64], b: &[u64]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
        }
    }
    common as f64 / (a.len() + b.len() - common) as f64
}

/// The exact Jaccard similarity |A ∩ B| / |A ∪ B| of two shingle sets:
/// each of `a` and `b` is a text (`str`, whose `width`-token shingles are
/// taken as `shingles` takes them) or an array from `shingles`. Two sets
/// without shingles are identical (1.0).
#[pyfunction]
#[pyo3(signature = (a, b, width = 5, hasher = None))]
pub fn jaccard(
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    width: i64,
    hasher: Option<&Bound<'_, PyAny>>,
) -> PyResult<f64> {
    let width = width_arg(width)?;
    let hasher = hasher_of(hasher)?;
    let a = SetArg::read(a, "a", &hasher, width)?;
    let b = SetArg::read(b, "b", &hasher, width)?;
    Ok(jaccard_of_sorted(a.hashes(), b.hashes()))
}

/// The exact Jaccard similarity of `a[i]` and `b[i]` for every `i` (two
/// sequences of `str` of the same length), as `jaccard` gives it, as a
/// `numpy.ndarray` of `float64`: in parallel, without the GIL.
#[pyfunction]
#[pyo3(signature = (a, b, width = 5, hasher = None))]
pub fn jaccard_many<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    width: i64,
    hasher: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let width = width_arg(width)?;
    let hasher = hasher_of(hasher)?;
    let a = texts_arg(a, "a")?;
    let b = texts_arg(b, "b")?;
    if a.len() != b.len() {
        return Err(PyValueError::new_err(format!(
            "a and b must have the same length, got {} and {}",
            a.len(),
            b.len()
        )));
    }
    let js = interrupt::in_chunks(py, a.len(), interrupt::TEXT_CHUNK, |range| {
        py.detach(|| {
            crate::fork::install(|| {
                guard(|| {
                    Ok(range
                        .into_par_iter()
                        .map(|i| {
                            ShingleSet::from_text(&hasher, a.get(i), width)
                                .jaccard(&ShingleSet::from_text(&hasher, b.get(i), width))
                        })
                        .collect::<Vec<f64>>())
                })
            })
        })
        .map_err(|f| f.into_py(py, ""))
    })?;
    Ok(PyArray1::from_vec(py, js))
}

/// Whether a text has no letter or digit: such a text takes no part in
/// `simhashdb dedup`'s candidate search.
fn is_blank_text(text: &str) -> bool {
    !text.chars().any(char::is_alphanumeric)
}

/// Banded MinHash: keys that make two shingle sets a candidate pair with a
/// probability set by their Jaccard similarity, found by equal keys rather
/// than a search.
///
/// MinHashBands(bands, rows)
///
/// A set gets `bands * rows` minima of its hashed shingles (one permutation
/// hashing with optimal densification) and one 32-bit key per band of
/// `rows` minima. Two sets of Jaccard `j` share some band's key with
/// probability `1 - (1 - j**rows)**bands` (`probability`). The keys depend
/// on the shingle hashes only: the same text, width and hasher give the same
/// keys in every process, on every platform. `MinHashBands.for_threshold(t)`
/// gives the bands `simhashdb dedup` uses for a Jaccard threshold `t`.
#[pyclass(module = "simhashdb", name = "MinHashBands", frozen, eq)]
#[derive(PartialEq)]
pub struct PyMinHashBands {
    bands: MinHashBands,
}

/// The most rows per band accepted.
const MAX_ROWS: i64 = 64;

#[pymethods]
impl PyMinHashBands {
    #[new]
    fn new(bands: i64, rows: i64) -> PyResult<Self> {
        let max_bands = MinHashBands::MAX_BANDS as i64;
        if !(1..=max_bands).contains(&bands) {
            return Err(PyValueError::new_err(format!(
                "bands must be an integer from 1 to {max_bands}, got {bands}"
            )));
        }
        if !(1..=MAX_ROWS).contains(&rows) {
            return Err(PyValueError::new_err(format!(
                "rows must be an integer from 1 to {MAX_ROWS}, got {rows}"
            )));
        }
        Ok(PyMinHashBands {
            bands: MinHashBands {
                bands: bands as usize,
                rows: rows as usize,
            },
        })
    }

    /// The bands that make a pair at Jaccard `threshold` (0 to 1) a
    /// candidate with probability at least 0.999, with as many rows (as
    /// rarely a candidate below it) as that allows: `simhashdb dedup`'s
    /// choice (20 bands of 5 rows at its default threshold, 0.8).
    #[staticmethod]
    fn for_threshold(threshold: f64) -> PyResult<Self> {
        if !(0.0..=1.0).contains(&threshold) {
            return Err(PyValueError::new_err(format!(
                "threshold must be a number from 0 to 1, got {threshold}"
            )));
        }
        Ok(PyMinHashBands {
            bands: MinHashBands::for_threshold(threshold),
        })
    }

    /// Number of keys per set.
    #[getter]
    fn bands(&self) -> usize {
        self.bands.bands
    }

    /// Minima combined into one key.
    #[getter]
    fn rows(&self) -> usize {
        self.bands.rows
    }

    /// The probability that two sets of Jaccard similarity `jaccard` share at
    /// least one key (chance collisions of the 32-bit keys aside).
    fn probability(&self, jaccard: f64) -> f64 {
        self.bands.probability(jaccard)
    }

    /// The `bands` keys of `text`'s `width`-token shingles, as a
    /// `numpy.ndarray` of `uint32`; empty for a text without shingles.
    #[pyo3(signature = (text, width = 5, hasher = None))]
    fn keys<'py>(
        &self,
        py: Python<'py>,
        text: &Bound<'py, PyAny>,
        width: i64,
        hasher: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let width = width_arg(width)?;
        let hasher = hasher_of(hasher)?;
        let text = str_arg(text, "text")?;
        let set = ShingleSet::from_text(&hasher, &text, width);
        Ok(PyArray1::from_vec(py, self.bands.keys(&set)))
    }

    /// What `simhashdb dedup`'s first pass keeps of each of `texts` (a
    /// sequence of `str`), computed in parallel without the GIL, as a tuple
    /// of `numpy.ndarray`s, one row per text:
    ///
    /// - `fingerprints` (`uint64`): the text's fingerprint under `hasher`,
    ///   0 for a blank text or one without features;
    /// - `keys` (`uint32`, shape `(len(texts), bands)`): the band keys, as
    ///   `keys` gives them; zeros for a blank text;
    /// - `shingles` (`uint32`): the number of distinct shingles;
    /// - `blank` (`bool`): the text has no letter or digit, or no shingle:
    ///   it takes no part in the candidate search (and is never dropped).
    #[pyo3(signature = (texts, width = 5, hasher = None))]
    #[allow(clippy::type_complexity)]
    fn sketch_many<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        width: i64,
        hasher: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let width = width_arg(width)?;
        let hasher = hasher_of(hasher)?;
        let texts = texts_arg(texts, "texts")?;
        let bands = self.bands;
        let done = over_texts(py, &texts, |t| {
            if is_blank_text(t) {
                return (0u64, Vec::new(), 0u32, true);
            }
            let s = bands.sketch(&hasher, t, width);
            let blank = s.keys.is_empty();
            (
                s.fingerprint.unwrap_or(0),
                s.keys,
                s.shingles.min(u32::MAX as usize) as u32,
                blank,
            )
        })?;
        let n = done.len();
        let mut fps = Vec::with_capacity(n);
        let mut keys = Vec::with_capacity(n * bands.bands);
        let mut sizes = Vec::with_capacity(n);
        let mut blank = Vec::with_capacity(n);
        for (fp, k, size, b) in done {
            fps.push(fp);
            keys.extend(
                k.iter()
                    .copied()
                    .chain(std::iter::repeat(0))
                    .take(bands.bands),
            );
            sizes.push(size);
            blank.push(b);
        }
        let keys = PyArray1::from_vec(py, keys).reshape([n, bands.bands])?;
        let keys: Bound<'py, PyArray2<u32>> = keys;
        (
            PyArray1::from_vec(py, fps),
            keys,
            PyArray1::from_vec(py, sizes),
            PyArray1::from_vec(py, blank),
        )
            .into_pyobject(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "MinHashBands(bands={}, rows={})",
            self.bands.bands, self.bands.rows
        )
    }

    /// Pickles as its bands and rows.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let class = py.get_type::<PyMinHashBands>();
        (class, (self.bands.bands, self.bands.rows)).into_pyobject(py)
    }
}

/// The 16-byte sketch of `text`'s word 5-shingles (128 one-bit minima), as
/// `bytes`: what an `Index` keeps next to each fingerprint to tell
/// near-duplicates from texts that merely share a vocabulary. Compare two
/// with `sketch_similarity`. A text without tokens gives 16 zero bytes.
#[pyfunction]
#[pyo3(signature = (text, hasher = None))]
pub fn sketch<'py>(
    py: Python<'py>,
    text: &Bound<'py, PyAny>,
    hasher: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let hasher = hasher_of(hasher)?;
    let text = str_arg(text, "text")?;
    Ok(PyBytes::new(
        py,
        &Sketch::from_text(&hasher, &text).to_bytes(),
    ))
}

/// The sketches of many texts (a sequence of `str`), as `sketch` gives
/// them, as a `numpy.ndarray` of `uint8` of shape `(len(texts), 16)`:
/// in parallel, without the GIL.
#[pyfunction]
#[pyo3(signature = (texts, hasher = None))]
pub fn sketch_many<'py>(
    py: Python<'py>,
    texts: &Bound<'py, PyAny>,
    hasher: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArray2<u8>>> {
    let hasher = hasher_of(hasher)?;
    let texts = texts_arg(texts, "texts")?;
    let sketches = over_texts(py, &texts, |t| Sketch::from_text(&hasher, t).to_bytes())?;
    let n = sketches.len();
    let flat: Vec<u8> = sketches.into_iter().flatten().collect();
    PyArray1::from_vec(py, flat).reshape([n, Sketch::BYTES])
}

fn sketch_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Sketch> {
    let bytes: Vec<u8> = if let Ok(b) = value.cast::<PyBytes>() {
        b.as_bytes().to_vec()
    } else if let Ok(a) = value.cast::<PyArray1<u8>>() {
        a.to_vec()?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what} must be 16 bytes (a sketch from sketch()), got {} {}",
            type_name(value),
            show(value)
        )));
    };
    let bytes: [u8; Sketch::BYTES] = bytes.as_slice().try_into().map_err(|_| {
        PyValueError::new_err(format!(
            "{what} must be {} bytes long (a sketch from sketch()), got {}",
            Sketch::BYTES,
            bytes.len()
        ))
    })?;
    Ok(Sketch::from_bytes(bytes))
}

/// The Jaccard similarity of two texts' word 5-shingles estimated from
/// their sketches (16 bytes each, from `sketch` or a row of
/// `sketch_many`), in [0, 1]: `max(0, 2E - 1)` with `E` the share of equal
/// bits. Its standard deviation is about `sqrt((1 - J**2) / 128)`.
#[pyfunction]
pub fn sketch_similarity(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<f64> {
    Ok(sketch_arg(a, "a")?.similarity(&sketch_arg(b, "b")?))
}
