//! Rust loops over the same index and arrays as a Python call, timed in
//! the same process: the baselines of python/benches. Built only with the
//! feature `rust-baselines`, never in the package users install.

use std::time::Instant;

use pyo3::prelude::*;
use rayon::prelude::*;

use crate::args::{k_arg, u64s_arg};
use crate::hasher::PySimhasher;
use crate::index::PyIndex;

/// Seconds for `index.query(fp, k)` over every fingerprint, one after the
/// other, and the number of matches found.
#[pyfunction]
#[pyo3(signature = (index, fingerprints, k = None))]
fn query_loop(
    py: Python<'_>,
    index: &Bound<'_, PyIndex>,
    fingerprints: &Bound<'_, PyAny>,
    k: Option<&Bound<'_, PyAny>>,
) -> PyResult<(f64, usize)> {
    let fps = u64s_arg(fingerprints, "fingerprints")?;
    let k = k_arg(k, index.get().k_value())?;
    let slice = fps.as_slice();
    index.get().run(py, |index| {
        let start = Instant::now();
        let mut found = 0;
        for &fp in slice {
            found += index.query(fp, k)?.len();
        }
        Ok((start.elapsed().as_secs_f64(), found))
    })
}

/// Seconds for one `insert_batch` of (id, fingerprint) pairs without names.
#[pyfunction]
fn insert_batch(
    py: Python<'_>,
    index: &Bound<'_, PyIndex>,
    ids: &Bound<'_, PyAny>,
    fingerprints: &Bound<'_, PyAny>,
) -> PyResult<f64> {
    let ids = u64s_arg(ids, "ids")?;
    let fps = u64s_arg(fingerprints, "fingerprints")?;
    let (ids, fps) = (ids.as_slice(), fps.as_slice());
    index.get().run(py, |index| {
        let start = Instant::now();
        index.insert_batch(
            ids.iter()
                .zip(fps)
                .map(|(&id, &fp)| (id, fp, None::<String>)),
        )?;
        Ok(start.elapsed().as_secs_f64())
    })
}

/// Seconds for fingerprinting `texts` (already Rust `String`s) on the rayon
/// pool, as a Rust program holding them would.
#[pyfunction]
fn fingerprint_many(
    py: Python<'_>,
    hasher: &Bound<'_, PySimhasher>,
    texts: Vec<String>,
) -> PyResult<f64> {
    let hasher = &hasher.get().hasher;
    Ok(py.detach(|| {
        let start = Instant::now();
        let fps: Vec<u64> = texts.par_iter().map(|t| hasher.fingerprint(t)).collect();
        std::hint::black_box(fps);
        start.elapsed().as_secs_f64()
    }))
}

/// Seconds for `batch::find_all` over a `Vec<u64>` copy of `fingerprints`
/// with `blocks` blocks (or the cost model's plan), and the pair count.
#[pyfunction]
#[pyo3(signature = (fingerprints, k = 3, blocks = None))]
fn find_all(
    py: Python<'_>,
    fingerprints: &Bound<'_, PyAny>,
    k: u32,
    blocks: Option<u32>,
) -> PyResult<(f64, usize)> {
    let fps: Vec<u64> = u64s_arg(fingerprints, "fingerprints")?.as_slice().to_vec();
    let plan = match blocks {
        Some(b) => simhashdb::plan::Plan::new(b, k),
        None => {
            simhashdb::plan::Plan::choose(fps.len() as u64, k, simhashdb::plan::Budget::Unprobed)
        }
    }
    .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    Ok(py.detach(|| {
        let start = Instant::now();
        let pairs = simhashdb::batch::find_all(&fps, &plan);
        (start.elapsed().as_secs_f64(), pairs.len())
    }))
}

/// Adds the submodule `_baselines`.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let baselines = PyModule::new(module.py(), "_baselines")?;
    baselines.add_function(wrap_pyfunction!(query_loop, &baselines)?)?;
    baselines.add_function(wrap_pyfunction!(insert_batch, &baselines)?)?;
    baselines.add_function(wrap_pyfunction!(fingerprint_many, &baselines)?)?;
    baselines.add_function(wrap_pyfunction!(find_all, &baselines)?)?;
    module.add_submodule(&baselines)
}
