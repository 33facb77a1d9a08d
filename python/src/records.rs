//! `Match` and `Doc`: immutable results with attributes, `repr` and equality.

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::args::{name_arg, u32_arg, u64_arg};

/// `repr` of an optional name, as Python writes a `str` or `None`.
fn repr_name(py: Python<'_>, name: Option<&str>) -> String {
    match name {
        None => "None".to_string(),
        Some(name) => PyString::new(py, name)
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_default(),
    }
}

/// A document found by a query: its `id`, `fingerprint`, `distance` from the
/// query (in bits) and `name` (None if it was inserted without one).
///
/// Immutable; equal when all four attributes are equal; hashable.
#[pyclass(module = "simhashdb", name = "Match", frozen, eq, hash)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PyMatch {
    /// The document id.
    #[pyo3(get)]
    pub id: u64,
    /// Its fingerprint.
    #[pyo3(get)]
    pub fingerprint: u64,
    /// Hamming distance from the query.
    #[pyo3(get)]
    pub distance: u32,
    /// Its name, or None.
    #[pyo3(get)]
    pub name: Option<String>,
}

impl From<simhashdb::Match> for PyMatch {
    fn from(m: simhashdb::Match) -> PyMatch {
        PyMatch {
            id: m.id,
            fingerprint: m.fingerprint,
            distance: m.distance,
            name: m.name,
        }
    }
}

#[pymethods]
impl PyMatch {
    #[new]
    #[pyo3(signature = (id, fingerprint, distance, name = None))]
    fn new(
        id: &Bound<'_, PyAny>,
        fingerprint: &Bound<'_, PyAny>,
        distance: &Bound<'_, PyAny>,
        name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyMatch> {
        Ok(PyMatch {
            id: u64_arg(id, "id")?,
            fingerprint: u64_arg(fingerprint, "fingerprint")?,
            distance: u32_arg(distance, "distance")?,
            name: name_arg(name, "name")?,
        })
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Match(id={}, fingerprint={}, distance={}, name={})",
            self.id,
            self.fingerprint,
            self.distance,
            repr_name(py, self.name.as_deref())
        )
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let m = slf.get();
        let args = (m.id, m.fingerprint, m.distance, m.name.clone());
        (slf.get_type(), args).into_pyobject(py)
    }
}

/// A live document of an index, as `Index.get_doc` returns it: its `id`,
/// `fingerprint`, `name` (None if inserted without one) and insertion time
/// (`timestamp`, seconds since the Unix epoch like `time.time()`, and
/// `timestamp_ms`, milliseconds).
///
/// Immutable; equal when all attributes are equal; hashable.
#[pyclass(module = "simhashdb", name = "Doc", frozen, eq, hash)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PyDoc {
    /// The document id.
    #[pyo3(get)]
    pub id: u64,
    /// Its fingerprint.
    #[pyo3(get)]
    pub fingerprint: u64,
    /// Its name, or None.
    #[pyo3(get)]
    pub name: Option<String>,
    /// When it was inserted, in milliseconds since the Unix epoch.
    #[pyo3(get)]
    pub timestamp_ms: u64,
}

impl From<simhashdb::Doc> for PyDoc {
    fn from(d: simhashdb::Doc) -> PyDoc {
        PyDoc {
            id: d.id,
            fingerprint: d.fingerprint,
            name: d.name,
            timestamp_ms: d.timestamp_ms,
        }
    }
}

#[pymethods]
impl PyDoc {
    #[new]
    #[pyo3(signature = (id, fingerprint, name = None, timestamp_ms = None))]
    fn new(
        id: &Bound<'_, PyAny>,
        fingerprint: &Bound<'_, PyAny>,
        name: Option<&Bound<'_, PyAny>>,
        timestamp_ms: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyDoc> {
        Ok(PyDoc {
            id: u64_arg(id, "id")?,
            fingerprint: u64_arg(fingerprint, "fingerprint")?,
            name: name_arg(name, "name")?,
            timestamp_ms: match timestamp_ms {
                Some(t) if !t.is_none() => u64_arg(t, "timestamp_ms")?,
                _ => 0,
            },
        })
    }

    /// When it was inserted, in seconds since the Unix epoch (as `time.time()`).
    #[getter]
    fn timestamp(&self) -> f64 {
        self.timestamp_ms as f64 / 1000.0
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Doc(id={}, fingerprint={}, name={}, timestamp_ms={})",
            self.id,
            self.fingerprint,
            repr_name(py, self.name.as_deref()),
            self.timestamp_ms
        )
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let d = slf.get();
        let args = (d.id, d.fingerprint, d.name.clone(), d.timestamp_ms);
        (slf.get_type(), args).into_pyobject(py)
    }
}
