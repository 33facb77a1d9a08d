//! `hamming`, `find_all` and `clusters`: in-memory work on arrays.

use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rayon::prelude::*;
use simhashdb::plan::{Budget, Plan};

use crate::args::{U64s, u32_arg, u64_arg, u64s_arg};
use crate::errors::guard;

/// Number of bit positions in which fingerprints `a` and `b` differ (0 to 64).
#[pyfunction]
pub fn hamming(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<u32> {
    Ok(simhashdb::hamming(u64_arg(a, "a")?, u64_arg(b, "b")?))
}

/// The plan for `n` fingerprints: `blocks` blocks if given, else the cost
/// model's choice.
fn plan_for(n: usize, k: u32, blocks: Option<&Bound<'_, PyAny>>) -> PyResult<Plan> {
    let plan = match blocks {
        Some(b) if !b.is_none() => Plan::new(u32_arg(b, "blocks")?, k),
        // Batch search sorts tables; it cannot probe.
        _ => Plan::choose(n as u64, k, Budget::Unprobed),
    };
    plan.map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The fingerprints argument of `find_all` and `clusters`, checked.
pub fn batch_input<'py>(fingerprints: &Bound<'py, PyAny>) -> PyResult<U64s<'py>> {
    let fps = u64s_arg(fingerprints, "fingerprints")?;
    let n = fps.as_slice().len();
    if u32::try_from(n).is_err() {
        return Err(PyValueError::new_err(format!(
            "fingerprints holds {n} values; at most 2**32 - 1 are supported"
        )));
    }
    Ok(fps)
}

/// Every pair of positions (i, j), i < j, whose fingerprints differ in at
/// most k bits, exactly (none missed), as a numpy int64 array of shape
/// (m, 2) sorted by (i, j). Identical fingerprints at different positions
/// are a pair.
///
/// fingerprints: a 1-D array-like of uint64 (a contiguous uint64 array is
/// read in place). k: the largest distance (0 finds exact duplicates).
/// blocks: how many blocks the 64 bits are split into (more blocks: more
/// tables, fewer candidates); by default the cost model chooses. Runs
/// without the GIL, one table of the plan at a time: Ctrl-C raises
/// KeyboardInterrupt between two of them.
#[pyfunction]
#[pyo3(
    signature = (fingerprints, k = None, blocks = None),
    text_signature = "(fingerprints, k=3, blocks=None)"
)]
pub fn find_all<'py>(
    py: Python<'py>,
    fingerprints: &Bound<'py, PyAny>,
    k: Option<&Bound<'py, PyAny>>,
    blocks: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArray2<i64>>> {
    let fps = batch_input(fingerprints)?;
    let k = crate::args::k_arg(k, 3)?;
    let plan = plan_for(fps.as_slice().len(), k, blocks)?;
    let slice = fps.as_slice();
    // find_all's answer is the union of the tables' answers, without
    // overlap (`find_all_in_table`): one table at a time, then sorted.
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for t in 0..plan.tables().len() {
        let part = py
            .detach(|| {
                crate::fork::install(|| {
                    guard(|| Ok(simhashdb::batch::find_all_in_table(slice, &plan, t)))
                })
            })
            .map_err(|f| f.into_py(py, ""))?;
        if pairs.is_empty() {
            pairs = part;
        } else {
            pairs.extend_from_slice(&part);
        }
        crate::interrupt::check(py)?;
    }
    let flat = py.detach(|| {
        crate::fork::install(|| pairs.par_sort_unstable());
        let mut flat = Vec::with_capacity(pairs.len() * 2);
        for (i, j) in pairs {
            flat.push(i as i64);
            flat.push(j as i64);
        }
        flat
    });
    let m = flat.len() / 2;
    PyArray1::from_vec(py, flat).reshape([m, 2])
}

/// A cluster label for each fingerprint, as a numpy int64 array: the
/// position of the first member of its cluster, where clusters are the
/// connected components of the pairs `find_all` returns. A fingerprint
/// without near-duplicates is labelled with its own position, so
/// `labels == numpy.arange(len(labels))` keeps one document of each cluster.
///
/// Arguments as for `find_all`. Runs without the GIL.
#[pyfunction]
#[pyo3(
    signature = (fingerprints, k = None, blocks = None),
    text_signature = "(fingerprints, k=3, blocks=None)"
)]
pub fn clusters<'py>(
    py: Python<'py>,
    fingerprints: &Bound<'py, PyAny>,
    k: Option<&Bound<'py, PyAny>>,
    blocks: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let fps = batch_input(fingerprints)?;
    let k = crate::args::k_arg(k, 3)?;
    let plan = plan_for(fps.as_slice().len(), k, blocks)?;
    let slice = fps.as_slice();
    let labels = py
        .detach(|| {
            crate::fork::install(|| {
                guard(|| {
                    let mut labels: Vec<i64> = (0..slice.len() as i64).collect();
                    for cluster in simhashdb::batch::clusters(slice, &plan) {
                        let first = cluster[0] as i64;
                        for member in cluster {
                            labels[member] = first;
                        }
                    }
                    Ok(labels)
                })
            })
        })
        .map_err(|f| f.into_py(py, ""))?;
    Ok(PyArray1::from_vec(py, labels))
}
