//! Arguments from Python: unsigned 64-bit integers, arrays of them, texts
//! and names. A value of the wrong type is a `TypeError` and one out of range
//! a `ValueError`; both messages name the argument and show the value.

use numpy::{PyArray1, PyArrayDescrMethods, PyArrayMethods, PyReadonlyArray1, PyUntypedArray};
use numpy::{PyUntypedArrayMethods, dtype};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBool, PyBytes, PyDelta, PyFloat, PyInt, PyList, PyString, PyTuple};
use rayon::prelude::*;
use std::time::Duration;

/// At most this many characters of a value's `repr` go into a message.
const MAX_REPR: usize = 80;

/// `repr(value)`, cut to a readable length.
pub fn show(value: &Bound<'_, PyAny>) -> String {
    let text = value
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "<unprintable>".to_string());
    if text.chars().count() > MAX_REPR {
        let cut: String = text.chars().take(MAX_REPR).collect();
        format!("{cut}...")
    } else {
        text
    }
}

/// The name of a value's type.
pub fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_string())
}

/// A `u64` argument (an `int`, or an integer scalar such as `numpy.uint64`).
pub fn u64_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int in [0, 2**64), got bool {}",
            show(value)
        )));
    }
    value.extract::<u64>().map_err(|e| {
        if conversion_error(value.py(), &e) {
            u64_error(value, what)
        } else {
            e
        }
    })
}

/// Whether `e`, raised while converting a value to an integer, says the
/// value is not one (or out of range), rather than something that must go
/// on up: a `KeyboardInterrupt` or `MemoryError` raised in its `__index__`.
fn conversion_error(py: Python<'_>, e: &PyErr) -> bool {
    e.is_instance_of::<pyo3::exceptions::PyTypeError>(py)
        || e.is_instance_of::<PyValueError>(py)
        || e.is_instance_of::<pyo3::exceptions::PyOverflowError>(py)
}

fn u64_error(value: &Bound<'_, PyAny>, what: &str) -> PyErr {
    if value.is_instance_of::<PyInt>() || value.hasattr("__index__").unwrap_or(false) {
        PyValueError::new_err(format!("{what} must be in [0, 2**64), got {}", show(value)))
    } else {
        PyTypeError::new_err(format!(
            "{what} must be an int in [0, 2**64), got {} {}",
            type_name(value),
            show(value)
        ))
    }
}

/// A small non-negative integer argument (a distance, a block count).
pub fn u32_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<u32> {
    if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, got bool {}",
            show(value)
        )));
    }
    match value.extract::<i64>() {
        Err(e) if !conversion_error(value.py(), &e) => Err(e),
        Ok(n) => u32::try_from(n).map_err(|_| {
            PyValueError::new_err(format!(
                "{what} must be a non-negative int below 2**32, got {n}"
            ))
        }),
        Err(_) if value.is_instance_of::<PyInt>() => Err(PyValueError::new_err(format!(
            "{what} must be a non-negative int below 2**32, got {}",
            show(value)
        ))),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{what} must be an int, got {} {}",
            type_name(value),
            show(value)
        ))),
    }
}

/// An optional distance: `None` gives `default`.
pub fn k_arg(value: Option<&Bound<'_, PyAny>>, default: u32) -> PyResult<u32> {
    match value {
        Some(v) if !v.is_none() => u32_arg(v, "k"),
        _ => Ok(default),
    }
}

/// A `str` argument, held without the GIL.
pub fn str_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<PyBackedStr> {
    match value.cast::<PyString>() {
        Ok(s) => s.clone().try_into(),
        Err(_) => Err(not_a_str(value, what)),
    }
}

fn not_a_str(value: &Bound<'_, PyAny>, what: &str) -> PyErr {
    let hint = if value.is_instance_of::<PyBytes>() {
        " (decode bytes first)"
    } else {
        ""
    };
    PyTypeError::new_err(format!(
        "{what} must be a str, got {} {}{hint}",
        type_name(value),
        show(value)
    ))
}

/// An optional name: `None` or a `str`.
pub fn name_arg(value: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<String>> {
    match value {
        Some(v) if !v.is_none() => Ok(Some(str_arg(v, what)?.to_string())),
        _ => Ok(None),
    }
}

/// The items of a list, a tuple or any other iterable (not a `str` or
/// `bytes`, which would be taken apart character by character).
fn items<'py>(value: &Bound<'py, PyAny>, what: &str, of: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if let Ok(list) = value.cast::<PyList>() {
        return Ok(list.iter().collect());
    }
    if let Ok(tuple) = value.cast::<PyTuple>() {
        return Ok(tuple.iter().collect());
    }
    let not_iterable = || {
        PyTypeError::new_err(format!(
            "{what} must be a sequence of {of}, got {} {}",
            type_name(value),
            show(value)
        ))
    };
    if value.is_instance_of::<PyString>() || value.is_instance_of::<PyBytes>() {
        return Err(not_iterable());
    }
    let iter = value.try_iter().map_err(|_| not_iterable())?;
    iter.collect()
}

/// Texts read in place from Python `str` objects (their UTF-8 form, which
/// CPython keeps inside each object) or from the buffers of Arrow string
/// arrays, usable without the GIL.
pub struct Texts {
    /// Keeps every `str` (or Arrow array) alive, and with it the bytes
    /// `spans` point into.
    owners: Vec<Py<PyAny>>,
    /// Address and length of each text's UTF-8 bytes.
    spans: Vec<(usize, usize)>,
}

impl Texts {
    /// The number of texts.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Text `i` (not a deferred one: [`texts_arg_deferred`]).
    pub fn get(&self, i: usize) -> &str {
        let (address, len) = self.spans[i];
        assert!(address != DEFERRED, "text {i} is read through a TextsChunk");
        // SAFETY: `address` and `len` are either the UTF-8 buffer that
        // `PyUnicode_AsUTF8AndSize` returned for a `str` of `self.owners`:
        // valid UTF-8 (CPython encodes it, refusing lone surrogates), owned by
        // that `str` (cached in the object, freed only when it is
        // deallocated), and never modified (`str` is immutable); or a range
        // of the data buffer of an Arrow array of `self.owners`, checked to
        // lie inside it and to be UTF-8 when it was read (`arrow_chunk`);
        // Arrow arrays are immutable and their buffers live as long as the
        // array. `self.owners` holds a strong reference to each owner for as
        // long as `self` lives, and `&self` bounds the returned lifetime.
        unsafe {
            std::str::from_utf8_unchecked(std::slice::from_raw_parts(address as *const u8, len))
        }
    }

    /// Every text, in order.
    pub fn iter(&self) -> impl IndexedParallelIterator<Item = &str> + '_ {
        self.slice(0..self.len())
    }

    /// The texts of positions `range`, in order.
    pub fn slice(
        &self,
        range: std::ops::Range<usize>,
    ) -> impl IndexedParallelIterator<Item = &str> + '_ {
        range.into_par_iter().map(|i| self.get(i))
    }
}

unsafe extern "C" {
    // In every CPython 3 (and in the limited API from 3.10); pyo3 declares
    // it only for builds that target 3.10 or later, and this package's abi3
    // wheel targets 3.9. The extension resolves it from the interpreter.
    fn PyUnicode_AsUTF8AndSize(
        unicode: *mut pyo3::ffi::PyObject,
        size: *mut pyo3::ffi::Py_ssize_t,
    ) -> *const std::os::raw::c_char;
}

/// A sequence of texts (`str`), read in place and held without the GIL:
/// no copy of each text, which would cost a tenth of the time of
/// fingerprinting it.
///
/// Also an Arrow column, read from its buffers without a copy per text: a
/// pyarrow `Array` or `ChunkedArray` of `string` or `large_string` (other
/// string types are cast to `large_string` first), a polars `Series`
/// (through `to_arrow`), a pandas `Series` backed by pyarrow, or a Hugging
/// Face `datasets` column (through its Arrow format). Null is refused,
/// naming its position.
pub fn texts_arg(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Texts> {
    texts_from(value, what, false)
}

/// Like [`texts_arg`], except that a `str` that is not ASCII is not encoded
/// here: [`Texts::chunk`] encodes it, a chunk at a time, into a UTF-8 copy
/// that lives only as long as the chunk. `PyUnicode_AsUTF8AndSize` would
/// keep a UTF-8 copy of every such text inside its `str` object, as long as
/// the object lives (an ASCII `str` is its own UTF-8, read in place).
pub fn texts_arg_deferred(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Texts> {
    texts_from(value, what, true)
}

/// The address of a deferred text's span (its length is its position).
const DEFERRED: usize = 0;

fn texts_from(value: &Bound<'_, PyAny>, what: &str, defer: bool) -> PyResult<Texts> {
    if let Some(texts) = arrow_texts(value, what)? {
        return Ok(texts);
    }
    let py = value.py();
    let items = items(value, what, "str")?;
    let mut owners = Vec::with_capacity(items.len());
    let mut spans = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        crate::interrupt::check_every(py, i)?;
        let text = item
            .cast_into::<PyString>()
            .map_err(|e| not_a_str(e.into_inner().as_any(), &format!("{what}[{i}]")))?;
        if defer
            && !text
                .call_method0(pyo3::intern!(py, "isascii"))?
                .is_truthy()?
        {
            spans.push((DEFERRED, i));
            owners.push(text.into_any().unbind());
            continue;
        }
        let mut len: pyo3::ffi::Py_ssize_t = 0;
        // SAFETY: `text` is a `str` and the GIL is held.
        let address = unsafe { PyUnicode_AsUTF8AndSize(text.as_ptr(), &mut len) };
        if address.is_null() {
            let cause = PyErr::take(py);
            return Err(not_unicode(py, &text, &format!("{what}[{i}]"), cause));
        }
        spans.push((address as usize, len as usize));
        owners.push(text.into_any().unbind());
    }
    Ok(Texts { owners, spans })
}

fn not_unicode(
    py: Python<'_>,
    text: &Bound<'_, PyString>,
    what: &str,
    cause: Option<PyErr>,
) -> PyErr {
    let error = PyValueError::new_err(format!(
        "{what} is not valid Unicode (a lone surrogate?): {}",
        show(text.as_any())
    ));
    error.set_cause(py, cause);
    error
}

/// Consecutive texts of a [`Texts`], readable without the GIL: those read
/// in place, and UTF-8 copies of the deferred ones, held by the chunk.
pub struct TextsChunk {
    /// Each text's position in the [`Texts`] and its address and length.
    spans: Vec<(u64, usize, usize)>,
    /// The UTF-8 copies (`bytes`) that deferred texts' spans point into.
    copies: Vec<Py<PyBytes>>,
}

impl TextsChunk {
    /// The chunk's texts, each with its position; `of` is the [`Texts`]
    /// it was made from ([`Texts::chunk`]), borrowed for as long as they are
    /// read.
    pub fn texts<'a>(&'a self, of: &'a Texts) -> Vec<(u64, &'a str)> {
        debug_assert!(self.spans.iter().all(|&(i, _, _)| (i as usize) < of.len()));
        self.spans
            .iter()
            .map(|&(i, address, len)| {
                // SAFETY: each span is either one of `of`'s, which `of`
                // keeps valid while it is borrowed (see `Texts::get`), or
                // lies inside one of `self.copies`: a `bytes` object that
                // `str.encode` made, valid UTF-8, immutable, and kept alive
                // by the strong reference held here while `self` is
                // borrowed.
                let text = unsafe {
                    std::str::from_utf8_unchecked(std::slice::from_raw_parts(
                        address as *const u8,
                        len,
                    ))
                };
                (i, text)
            })
            .collect()
    }

    /// The number of texts in the chunk.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Frees the chunk's copies (with the GIL).
    pub fn release(self, _py: Python<'_>) {
        drop(self.copies);
    }
}

impl Texts {
    /// The next chunk of texts at or after position `from` that `want`
    /// asks for: at most `max_texts` of them, and no more once they hold
    /// `max_bytes` bytes; and the position after its last text (`len()`
    /// when it reached the end). Deferred texts are encoded here (a `str`
    /// with a lone surrogate is refused, naming its position as `what[i]`).
    pub fn chunk(
        &self,
        py: Python<'_>,
        from: usize,
        want: &dyn Fn(u64) -> bool,
        max_texts: usize,
        max_bytes: usize,
        what: &str,
    ) -> PyResult<(TextsChunk, usize)> {
        let mut chunk = TextsChunk {
            spans: Vec::new(),
            copies: Vec::new(),
        };
        let mut bytes = 0usize;
        let mut at = from;
        while at < self.len() && chunk.spans.len() < max_texts && bytes < max_bytes {
            let i = at;
            at += 1;
            if !want(i as u64) {
                continue;
            }
            let (address, len) = self.spans[i];
            if address != DEFERRED {
                chunk.spans.push((i as u64, address, len));
                bytes += len;
                continue;
            }
            let text = self.owners[len].bind(py).cast::<PyString>()?;
            let copy = text
                .encode_utf8()
                .map_err(|cause| not_unicode(py, text, &format!("{what}[{i}]"), Some(cause)))?;
            let utf8 = copy.as_bytes();
            chunk
                .spans
                .push((i as u64, utf8.as_ptr() as usize, utf8.len()));
            bytes += utf8.len();
            chunk.copies.push(copy.unbind());
        }
        Ok((chunk, at))
    }
}

/// The module and class name of `value`'s type.
fn type_path(value: &Bound<'_, PyAny>) -> (String, String) {
    let ty = value.get_type();
    let module = ty
        .getattr("__module__")
        .and_then(|m| m.extract::<String>())
        .unwrap_or_default();
    let name = ty.name().map(|n| n.to_string()).unwrap_or_default();
    (module, name)
}

/// The pyarrow array (or chunked array) behind an Arrow-backed column of
/// polars, pandas or `datasets`, or `value` itself when it is pyarrow's;
/// `None` for anything else.
fn as_pyarrow<'py>(value: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let (module, name) = type_path(value);
    let root = module.split('.').next().unwrap_or("");
    match root {
        "pyarrow"
            if value.hasattr("type")?
                && (value.hasattr("buffers")? || value.hasattr("chunks")?) =>
        {
            Ok(Some(value.clone()))
        }
        "polars" if name == "Series" => Ok(Some(value.call_method0("to_arrow")?)),
        "pandas" if name == "Series" => {
            // `string[pyarrow]`, `ArrowDtype` and pandas 3's `str`: an
            // `Arrow...Array` holding a pyarrow `ChunkedArray`.
            let array = value.getattr("array")?;
            let (_, kind) = type_path(&array);
            if kind.starts_with("Arrow") && array.hasattr("__arrow_array__")? {
                Ok(Some(array.call_method0("__arrow_array__")?))
            } else {
                Ok(None)
            }
        }
        "datasets" if name == "Column" => {
            // The column of the dataset in Arrow format: its rows in the
            // dataset's order (after `select`, `shuffle`, `filter`).
            let source = value.getattr("source")?;
            let column = value.getattr("column_name")?;
            if !source.hasattr("with_format")? {
                return Ok(None);
            }
            let arrow = source.call_method1("with_format", ("arrow",))?;
            Ok(Some(arrow.get_item(column)?))
        }
        _ => Ok(None),
    }
}

/// Texts from an Arrow column (see [`texts_arg`]), or `None` when `value`
/// is not one.
fn arrow_texts(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<Texts>> {
    let Some(array) = as_pyarrow(value)? else {
        return Ok(None);
    };
    let chunks: Vec<Bound<'_, PyAny>> = if array.hasattr("chunks")? {
        array
            .getattr("chunks")?
            .try_iter()?
            .collect::<PyResult<_>>()?
    } else {
        vec![array]
    };
    let mut texts = Texts {
        owners: Vec::new(),
        spans: Vec::new(),
    };
    for chunk in chunks {
        arrow_chunk(&chunk, what, &mut texts)?;
    }
    Ok(Some(texts))
}

/// Where an empty text with no data buffer points.
static EMPTY: [u8; 1] = [0];

/// Appends the texts of one pyarrow `Array` to `texts`.
fn arrow_chunk(chunk: &Bound<'_, PyAny>, what: &str, texts: &mut Texts) -> PyResult<()> {
    let ty = chunk.getattr("type")?.str()?.to_string();
    let chunk = match ty.as_str() {
        "string" | "utf8" | "large_string" | "large_utf8" => chunk.clone(),
        "string_view" | "utf8_view" => chunk.call_method1("cast", ("large_string",))?,
        t if t.starts_with("dictionary<values=string")
            || t.starts_with("dictionary<values=large_string") =>
        {
            chunk
                .call_method0("dictionary_decode")?
                .call_method1("cast", ("large_string",))?
        }
        _ => {
            return Err(PyTypeError::new_err(format!(
                "{what} must hold strings, got an Arrow array of type {ty}"
            )));
        }
    };
    let ty = chunk.getattr("type")?.str()?.to_string();
    let wide = ty.starts_with("large");
    let base = texts.spans.len();
    let len: usize = chunk.len()?;
    let offset: usize = chunk.getattr("offset")?.extract()?;
    let null_count: usize = chunk.getattr("null_count")?.extract()?;
    if null_count > 0 {
        let nulls = chunk.call_method0("is_null")?;
        for i in 0..len {
            if nulls.get_item(i)?.call_method0("as_py")?.is_truthy()? {
                return Err(PyValueError::new_err(format!(
                    "{what}[{}] is null: every text must be a str",
                    base + i
                )));
            }
        }
    }
    let buffers: Vec<Bound<'_, PyAny>> = chunk
        .call_method0("buffers")?
        .try_iter()?
        .collect::<PyResult<_>>()?;
    let buffer = |b: Option<&Bound<'_, PyAny>>| -> PyResult<(usize, usize)> {
        match b {
            Some(b) if !b.is_none() => Ok((
                b.getattr("address")?.extract()?,
                b.getattr("size")?.extract()?,
            )),
            _ => Ok((0, 0)),
        }
    };
    let (offsets_at, offsets_size) = buffer(buffers.get(1))?;
    let (data_at, data_size) = buffer(buffers.get(2))?;
    let width = if wide { 8 } else { 4 };
    let bad = |why: &str| {
        PyValueError::new_err(format!("{what}: a malformed Arrow string array ({why})"))
    };
    if len > 0 && (offsets_at == 0 || (offset + len + 1) * width > offsets_size) {
        return Err(bad("its offsets buffer is too short"));
    }
    let read = |i: usize| -> i64 {
        // SAFETY: `i <= offset + len`, inside the offsets buffer (checked
        // above), which the array (kept alive by the caller) owns.
        unsafe {
            let at = (offsets_at + i * width) as *const u8;
            if wide {
                std::ptr::read_unaligned(at as *const i64)
            } else {
                i64::from(std::ptr::read_unaligned(at as *const i32))
            }
        }
    };
    texts.spans.reserve(len);
    let mut start = if len > 0 { read(offset) } else { 0 };
    for i in 0..len {
        let end = read(offset + i + 1);
        if start < 0 || end < start || end as usize > data_size {
            return Err(bad("its offsets leave the data buffer"));
        }
        let (start_u, n) = (start as usize, (end - start) as usize);
        let address = if n == 0 {
            EMPTY.as_ptr() as usize
        } else {
            data_at + start_u
        };
        // SAFETY: `start..end` lies inside the data buffer (checked just
        // above), which the array owns.
        let bytes = unsafe { std::slice::from_raw_parts(address as *const u8, n) };
        if std::str::from_utf8(bytes).is_err() {
            return Err(PyValueError::new_err(format!(
                "{what}[{}] is not valid UTF-8",
                base + i
            )));
        }
        texts.spans.push((address, n));
        start = end;
        if i % CONVERT_CHECK == CONVERT_CHECK - 1 {
            crate::interrupt::check(chunk.py())?;
        }
    }
    texts.owners.push(chunk.unbind());
    Ok(())
}

/// Texts read from an Arrow array between two signal checks.
const CONVERT_CHECK: usize = 1 << 20;

/// A sequence of optional names (`str` or `None`) of length `len`.
pub fn names_arg(value: &Bound<'_, PyAny>, len: usize) -> PyResult<Vec<Option<String>>> {
    let items = items(value, "names", "str or None")?;
    if items.len() != len {
        return Err(PyValueError::new_err(format!(
            "names has {} items, but there are {len} ids",
            items.len()
        )));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            crate::interrupt::check_every(value.py(), i)?;
            name_arg(Some(item), &format!("names[{i}]"))
        })
        .collect()
}

/// A 1-D sequence of `u64`: borrowed from a contiguous `uint64` array (no
/// copy), or converted.
pub enum U64s<'py> {
    /// A contiguous `uint64` array, read in place.
    Borrowed(PyReadonlyArray1<'py, u64>),
    /// Values converted from anything else.
    Owned(Vec<u64>),
}

impl U64s<'_> {
    /// The values.
    pub fn as_slice(&self) -> &[u64] {
        match self {
            U64s::Borrowed(array) => array.as_slice().unwrap_or(&[]),
            U64s::Owned(values) => values,
        }
    }
}

/// A 1-D array-like of `u64` named `what`: a numpy array of unsigned or
/// non-negative signed integers, or a sequence of ints.
pub fn u64s_arg<'py>(value: &Bound<'py, PyAny>, what: &str) -> PyResult<U64s<'py>> {
    if let Ok(array) = value.cast::<PyArray1<u64>>()
        && let Ok(readonly) = array.try_readonly()
    {
        if readonly.as_slice().is_ok() {
            return Ok(U64s::Borrowed(readonly));
        }
        return Ok(U64s::Owned(readonly.as_array().iter().copied().collect()));
    }
    let py = value.py();
    if let Ok(array) = value.cast::<PyUntypedArray>() {
        return array_u64s(array, what);
    }
    if value.hasattr("__array__").unwrap_or(false)
        && !value.is_instance_of::<PyList>()
        && !value.is_instance_of::<PyTuple>()
    {
        // pandas, Arrow, ...: numpy's view of it.
        let array = py.import("numpy")?.call_method1("asarray", (value,))?;
        if let Ok(array) = array.cast::<PyUntypedArray>() {
            return array_u64s(array, what);
        }
    }
    let items = items(value, what, "ints")?;
    let mut values = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        values.push(u64_arg(item, &format!("{what}[{i}]"))?);
        crate::interrupt::check_every(py, i)?;
    }
    Ok(U64s::Owned(values))
}

/// The values of a numpy array of another dtype than `uint64`.
fn array_u64s<'py>(array: &Bound<'py, PyUntypedArray>, what: &str) -> PyResult<U64s<'py>> {
    let py = array.py();
    if array.ndim() != 1 {
        return Err(PyValueError::new_err(format!(
            "{what} must be 1-D, got an array of shape {:?}",
            array.shape()
        )));
    }
    let dtype_of = array.dtype();
    match dtype_of.kind() {
        b'u' => {
            let converted = array.call_method1("astype", (dtype::<u64>(py),))?;
            u64s_arg(&converted, what)
        }
        b'i' => {
            let converted = array.call_method1("astype", (dtype::<i64>(py),))?;
            let signed = converted.cast::<PyArray1<i64>>()?.readonly();
            let view = signed.as_array();
            let mut values = Vec::with_capacity(view.len());
            for (i, &v) in view.iter().enumerate() {
                let v = u64::try_from(v).map_err(|_| {
                    PyValueError::new_err(format!("{what}[{i}] must be in [0, 2**64), got {v}"))
                })?;
                values.push(v);
            }
            Ok(U64s::Owned(values))
        }
        b'O' => {
            let mut values = Vec::with_capacity(array.len());
            for (i, item) in array.try_iter()?.enumerate() {
                values.push(u64_arg(&item?, &format!("{what}[{i}]"))?);
                crate::interrupt::check_every(py, i)?;
            }
            Ok(U64s::Owned(values))
        }
        // An empty list becomes float64 in numpy; nothing to convert.
        _ if array.len() == 0 => Ok(U64s::Owned(Vec::new())),
        _ => Err(PyTypeError::new_err(format!(
            "{what} must hold unsigned 64-bit integers, got an array of {}",
            dtype_of.str().map(|s| s.to_string()).unwrap_or_default()
        ))),
    }
}

/// The longest retention, in days: `datetime.timedelta.max`'s (999,999,999
/// days and a fraction, about 2.7 million years), so that `Index.retention`
/// can return it as a `timedelta`.
pub const MAX_RETENTION_DAYS: u64 = 999_999_999;

/// A retention window: positive seconds (int or float) or a
/// `datetime.timedelta` (read exactly, from its days, seconds and
/// microseconds), at most [`MAX_RETENTION_DAYS`].
pub fn retention_arg(value: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let what = "retention";
    let too_long = || {
        PyValueError::new_err(format!(
            "{what} must be at most {MAX_RETENTION_DAYS} days (datetime.timedelta.max, about \
             2.7 million years), got {}",
            show(value)
        ))
    };
    let not_positive = || {
        PyValueError::new_err(format!(
            "{what} must be a positive duration, got {}",
            show(value)
        ))
    };
    if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be seconds (int or float) or a datetime.timedelta, got bool {}",
            show(value)
        )));
    }
    if value.is_instance_of::<PyDelta>() {
        // Exact: days in [-999999999, 999999999], seconds in [0, 86400),
        // microseconds in [0, 10**6).
        let days: i64 = value.getattr("days")?.extract()?;
        let seconds: u64 = value.getattr("seconds")?.extract()?;
        let micros: u32 = value.getattr("microseconds")?.extract()?;
        let days = u64::try_from(days).map_err(|_| not_positive())?;
        if days > MAX_RETENTION_DAYS {
            return Err(too_long());
        }
        let duration = Duration::new(days * 86_400 + seconds, micros * 1_000);
        if duration.is_zero() {
            return Err(not_positive());
        }
        return Ok(duration);
    }
    let seconds = if value.hasattr("total_seconds").unwrap_or(false) {
        value.call_method0("total_seconds")?.extract::<f64>()?
    } else if value.is_instance_of::<PyFloat>()
        || value.is_instance_of::<PyInt>()
        || value.hasattr("__index__").unwrap_or(false)
    {
        // An int (or numpy integer) too large for a float is too long a
        // retention too.
        value.extract::<f64>().map_err(|_| too_long())?
    } else if value.hasattr("__float__").unwrap_or(false) {
        // numpy floating scalars of other widths than float64.
        value.call_method0("__float__")?.extract::<f64>()?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what} must be seconds (int or float) or a datetime.timedelta, got {} {}",
            type_name(value),
            show(value)
        )));
    };
    if seconds.is_nan() || seconds <= 0.0 {
        return Err(not_positive());
    }
    // Below MAX_RETENTION_DAYS + 1 days: at most timedelta.max, once
    // recorded in whole milliseconds.
    if seconds >= ((MAX_RETENTION_DAYS + 1) * 86_400) as f64 {
        return Err(too_long());
    }
    Ok(Duration::from_secs_f64(seconds))
}
