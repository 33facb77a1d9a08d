//! The Python package `simhashdb`: the extension module `simhashdb._simhashdb`,
//! which `simhashdb/__init__.py` re-exports. It uses the library's public API
//! only; argument checking and conversion live here, behaviour in the library.

mod args;
#[cfg(feature = "rust-baselines")]
mod baselines;
mod batch;
mod dedup;
mod errors;
mod fork;
mod hasher;
mod index;
mod interrupt;
mod plan;
mod recheck;
mod records;

use pyo3::prelude::*;

/// Exact near-duplicate search over 64-bit SimHash fingerprints: Simhasher
/// (texts to fingerprints), hamming, find_all and clusters (in memory), and
/// Index (persistent, crash-safe).
#[pymodule]
mod _simhashdb {
    use pyo3::prelude::*;

    #[pymodule_export]
    use crate::batch::{clusters, find_all, hamming};
    #[pymodule_export]
    use crate::dedup::{PyDedupResult, dedup};
    #[pymodule_export]
    use crate::hasher::PySimhasher;
    #[pymodule_export]
    use crate::index::{PyIndex, PyVerifiedMatch};
    #[pymodule_export]
    use crate::plan::PyPlan;
    #[pymodule_export]
    use crate::recheck::{
        PyMinHashBands, jaccard, jaccard_many, shingles, shingles_many, sketch, sketch_many,
        sketch_similarity,
    };
    #[pymodule_export]
    use crate::records::{PyDoc, PyMatch};

    /// The id of the document named `name` (a URL or path): FNV-1a 64 of its
    /// UTF-8 bytes, the rule `Index.add`, `Index.check` and the command line
    /// use.
    #[pyfunction]
    fn doc_id(name: &Bound<'_, PyAny>) -> PyResult<u64> {
        Ok(simhashdb::doc_id(&crate::args::str_arg(name, "name")?))
    }

    #[pymodule_init]
    fn init(module: &Bound<'_, PyModule>) -> PyResult<()> {
        crate::fork::record_home();
        module.add("MAX_NAME_BYTES", simhashdb::format::MAX_NAME_LEN)?;
        #[cfg(feature = "rust-baselines")]
        crate::baselines::register(module)?;
        Ok(())
    }
}
