//! The library's errors as the exceptions of `simhashdb/_errors.py`, and a
//! guard that turns a panic into `simhashdb.Error` instead of pyo3's
//! `PanicException`.

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use simhashdb::Error;

/// The exception classes, by name, from `simhashdb._errors`.
fn class<'py>(py: Python<'py>, name: &'static str) -> PyResult<Bound<'py, PyType>> {
    static CLASSES: [(&str, PyOnceLock<Py<PyType>>); 11] = [
        ("Error", PyOnceLock::new()),
        ("LockedError", PyOnceLock::new()),
        ("CorruptedError", PyOnceLock::new()),
        ("MismatchError", PyOnceLock::new()),
        ("DistanceError", PyOnceLock::new()),
        ("InvalidArgumentError", PyOnceLock::new()),
        ("PoisonedError", PyOnceLock::new()),
        ("ReadOnlyError", PyOnceLock::new()),
        ("ClosedError", PyOnceLock::new()),
        ("FileSystemError", PyOnceLock::new()),
        ("ForkedError", PyOnceLock::new()),
    ];
    let (_, cell) = CLASSES
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| PyValueError::new_err(format!("no exception class {name}")))?;
    Ok(cell.import(py, "simhashdb._errors", name)?.clone())
}

/// An instance of the class `name` called with `args`, as a `PyErr`.
fn raise<'py, A>(py: Python<'py>, name: &'static str, args: A) -> PyErr
where
    A: pyo3::call::PyCallArgs<'py>,
{
    match class(py, name).and_then(|ty| ty.call1(args)) {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    }
}

/// `simhashdb.Error(message)`.
pub fn error(py: Python<'_>, message: impl Into<String>) -> PyErr {
    raise(py, "Error", (message.into(),))
}

/// `simhashdb.ClosedError` for the index at `path`.
pub fn closed(py: Python<'_>, path: &str) -> PyErr {
    raise(
        py,
        "ClosedError",
        (format!("the index at {path} is closed"),),
    )
}

/// `simhashdb.ForkedError`: the index at `path`, opened by process
/// `opener`, used in process `current`, a fork of it.
pub fn forked(py: Python<'_>, path: &str, opener: u32, current: u32) -> PyErr {
    raise(
        py,
        "ForkedError",
        (
            format!(
                "the index at {path} was opened by process {opener}, and this process \
                 ({current}) is a fork of it (os.fork(), or multiprocessing's \"fork\" start \
                 method): an Index works only in the process that opened it, and nothing was \
                 done. Open the index in this process (Index.open_read_only while no process \
                 writes it), or send the work to the process that opened it"
            ),
            path.to_string(),
            opener,
        ),
    )
}

/// The exception for an error of the library.
pub fn to_py(py: Python<'_>, failure: Error) -> PyErr {
    let message = failure.to_string();
    match failure {
        Error::Io { path, op, source } => {
            let errno = source.raw_os_error();
            let made = class(py, "FileSystemError").and_then(|ty| {
                let instance = match errno {
                    Some(errno) => ty.call1((errno, &message))?,
                    None => ty.call1((&message,))?,
                };
                instance.setattr("path", path.display().to_string())?;
                instance.setattr("op", op)?;
                Ok(instance)
            });
            match made {
                Ok(instance) => PyErr::from_value(instance),
                Err(e) => e,
            }
        }
        Error::Corrupted {
            path,
            offset,
            reason,
        } => raise(
            py,
            "CorruptedError",
            (message, path.display().to_string(), offset, reason),
        ),
        Error::Locked { dir, .. } => raise(py, "LockedError", (message, dir.display().to_string())),
        Error::DistanceTooLarge { requested, plan_k } => {
            raise(py, "DistanceError", (message, requested, plan_k))
        }
        Error::Mismatch {
            what,
            recorded,
            given,
        } => raise(py, "MismatchError", (message, what, recorded, given)),
        Error::Plan(_) | Error::InvalidArgument(_) => raise(py, "InvalidArgumentError", (message,)),
        Error::Poisoned { .. } => raise(py, "PoisonedError", (message,)),
        Error::ReadOnly => raise(py, "ReadOnlyError", (message,)),
        _ => error(py, message),
    }
}

/// `simhashdb.MismatchError` raised by the package itself (a setting it
/// checks against the index).
pub fn mismatch(py: Python<'_>, what: &'static str, recorded: String, given: String) -> PyErr {
    let message = format!(
        "the index was created with {what} `{recorded}`, but `{given}` was given; \
         open it with its recorded settings (or none)"
    );
    raise(py, "MismatchError", (message, what, recorded, given))
}

/// What went wrong inside a call that runs without the GIL.
#[derive(Debug)]
pub enum Failure {
    /// The library's error.
    Library(Error),
    /// A panic (a bug): its message.
    Panic(String),
    /// The index was closed.
    Closed,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Library(e)
    }
}

impl Failure {
    /// The exception; `path` names the index for a closed one.
    pub fn into_py(self, py: Python<'_>, path: &str) -> PyErr {
        match self {
            Failure::Library(e) => to_py(py, e),
            Failure::Panic(message) => error(
                py,
                format!(
                    "internal error in simhashdb ({message}); please report it \
                     with the call that caused it"
                ),
            ),
            Failure::Closed => closed(py, path),
        }
    }
}

/// Runs `f`, turning a panic into [`Failure::Panic`]: a bug must reach
/// Python as `simhashdb.Error`, never as pyo3's `PanicException`.
pub fn guard<T>(f: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            Err(Failure::Panic(message))
        }
    }
}
