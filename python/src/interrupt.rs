//! Long calls in chunks: between two chunks the GIL is taken back and
//! Python's signal handlers run, so that Ctrl-C (`KeyboardInterrupt`) stops a
//! long call within a chunk's time rather than when it ends. A call that
//! writes is cut only before its write starts: what each call has done when
//! it raises `KeyboardInterrupt` is stated in its documentation.

use std::ops::Range;

use pyo3::prelude::*;

/// Items converted from Python objects (with the GIL) between two checks.
pub const CONVERT_CHUNK: usize = 1 << 16;

/// Texts fingerprinted (in parallel, without the GIL) between two checks.
pub const TEXT_CHUNK: usize = 4096;

/// Queries answered (in parallel, without the GIL) between two checks.
pub const QUERY_CHUNK: usize = 4096;

/// Runs Python's signal handlers: `Err(KeyboardInterrupt)` after Ctrl-C
/// (or whatever a handler raised).
pub fn check(py: Python<'_>) -> PyResult<()> {
    py.check_signals()
}

/// `check` every [`CONVERT_CHUNK`] items of a loop, at item `i`.
pub fn check_every(py: Python<'_>, i: usize) -> PyResult<()> {
    if i % CONVERT_CHUNK == CONVERT_CHUNK - 1 {
        check(py)?;
    }
    Ok(())
}

/// The results of `f` over `0..len` in consecutive ranges of `chunk`
/// items, concatenated, with signals checked after each range: `f` runs
/// without the GIL itself when it takes time.
pub fn in_chunks<R>(
    py: Python<'_>,
    len: usize,
    chunk: usize,
    mut f: impl FnMut(Range<usize>) -> PyResult<Vec<R>>,
) -> PyResult<Vec<R>> {
    let mut all = Vec::with_capacity(len);
    let mut start = 0;
    while start < len {
        let end = len.min(start + chunk);
        all.extend(f(start..end)?);
        check(py)?;
        start = end;
    }
    Ok(all)
}
