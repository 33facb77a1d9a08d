//! `simhashdb.Plan`: a block split and its permuted tables, for jobs that
//! partition fingerprints by table themselves (`simhashdb.spark`).

use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use simhashdb::plan::{Budget, Plan, Shape};

use crate::args::{u32_arg, u64_arg, u64s_arg};
use crate::errors::guard;

/// How the 64 bits are split into permuted tables (Manku, Jain and Das
/// Sarma's blocks), and the largest distance k it answers exactly.
///
/// Plan(blocks, k=3): blocks near-equal blocks, one table per choice of
/// blocks - k of them. Plan.nested(outer, inner, k=3): the two-level split
/// (Plan.nested(4, 4, 3) is the paper's 16 tables). Plan.auto(expected_n,
/// k=3): the cost model's choice for about expected_n fingerprints.
///
/// Table t keeps every fingerprint with its bits permuted (`permute`) so that
/// its prefix (`prefix_bits(t)` leading bits) comes first; two fingerprints
/// within k bits share the whole prefix of at least one table. A job that
/// sends each fingerprint to one group per table, keyed by (t, leading bits
/// of permute(fp, t)), and searches each group with `find_all_in_table`
/// finds every pair exactly once. Plans compare equal by shape and k, and
/// pickle (so Spark ships them to executors).
#[pyclass(module = "simhashdb", name = "Plan", frozen, eq)]
pub struct PyPlan {
    pub plan: Plan,
}

impl PartialEq for PyPlan {
    fn eq(&self, other: &Self) -> bool {
        (self.plan.shape(), self.plan.k()) == (other.plan.shape(), other.plan.k())
    }
}

fn plan_error(e: simhashdb::plan::PlanError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

impl PyPlan {
    fn table_arg(&self, table: &Bound<'_, PyAny>) -> PyResult<usize> {
        let t = u32_arg(table, "table")? as usize;
        let count = self.plan.tables().len();
        if t >= count {
            return Err(PyValueError::new_err(format!(
                "table must be in [0, {count}) for this plan, got {t}"
            )));
        }
        Ok(t)
    }
}

#[pymethods]
impl PyPlan {
    #[new]
    #[pyo3(signature = (blocks, k = None), text_signature = "(blocks, k=3)")]
    fn new(blocks: &Bound<'_, PyAny>, k: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let k = crate::args::k_arg(k, 3)?;
        let plan = Plan::new(u32_arg(blocks, "blocks")?, k).map_err(plan_error)?;
        Ok(PyPlan { plan })
    }

    /// The two-level split: outer - k of outer blocks, then inner - k of the
    /// inner sub-blocks of the remaining bits.
    #[staticmethod]
    #[pyo3(signature = (outer, inner, k = None), text_signature = "(outer, inner, k=3)")]
    fn nested(
        outer: &Bound<'_, PyAny>,
        inner: &Bound<'_, PyAny>,
        k: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let k = crate::args::k_arg(k, 3)?;
        let plan = Plan::nested(u32_arg(outer, "outer")?, u32_arg(inner, "inner")?, k)
            .map_err(plan_error)?;
        Ok(PyPlan { plan })
    }

    /// Tables probed at every prefix within radius of the query's
    /// (multi-index hashing): for queries, not for `find_all_in_table`.
    #[staticmethod]
    #[pyo3(signature = (blocks, radius, k = None), text_signature = "(blocks, radius, k=3)")]
    fn probed(
        blocks: &Bound<'_, PyAny>,
        radius: &Bound<'_, PyAny>,
        k: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let k = crate::args::k_arg(k, 3)?;
        let plan = Plan::probed(u32_arg(blocks, "blocks")?, u32_arg(radius, "radius")?, k)
            .map_err(plan_error)?;
        Ok(PyPlan { plan })
    }

    /// The plan without probing that the cost model chooses for about
    /// expected_n fingerprints (the one `find_all` uses when blocks is not
    /// given; batch searches and their Spark partitions need unprobed tables).
    #[staticmethod]
    #[pyo3(signature = (expected_n, k = None), text_signature = "(expected_n, k=3)")]
    fn auto(expected_n: &Bound<'_, PyAny>, k: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let k = crate::args::k_arg(k, 3)?;
        let plan = Plan::choose(u64_arg(expected_n, "expected_n")?, k, Budget::Unprobed)
            .map_err(plan_error)?;
        Ok(PyPlan { plan })
    }

    /// The largest distance the plan answers exactly.
    #[getter]
    fn k(&self) -> u32 {
        self.plan.k()
    }

    /// The number of permuted tables.
    #[getter]
    fn table_count(&self) -> usize {
        self.plan.tables().len()
    }

    /// ("flat", blocks), ("nested", outer, inner) or ("probed", blocks, radius).
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        match self.plan.shape() {
            Shape::Flat { blocks } => ("flat", blocks).into_pyobject(py),
            Shape::Nested { outer, inner } => ("nested", outer, inner).into_pyobject(py),
            Shape::Probed { blocks, radius } => ("probed", blocks, radius).into_pyobject(py),
        }
    }

    /// How many leading bits of a permuted fingerprint form table `table`'s
    /// prefix.
    fn prefix_bits(&self, table: &Bound<'_, PyAny>) -> PyResult<u32> {
        Ok(self.plan.tables()[self.table_arg(table)?].prefix_bits())
    }

    /// The fingerprints with their bits in table `table`'s order (its prefix
    /// in the leading bits), as a numpy uint64 array. Runs without the GIL.
    fn permute<'py>(
        &self,
        py: Python<'py>,
        fingerprints: &Bound<'py, PyAny>,
        table: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let t = &self.plan.tables()[self.table_arg(table)?];
        let fps = u64s_arg(fingerprints, "fingerprints")?;
        let slice = fps.as_slice();
        let permuted: Vec<u64> = py.detach(|| slice.iter().map(|&fp| t.permute(fp)).collect());
        Ok(PyArray1::from_vec(py, permuted))
    }

    /// The pairs of positions (i, j), i < j, that table `table` reports: the
    /// fingerprints are within k bits, share the table's prefix, and share no
    /// earlier table's prefix. The union over the tables is `find_all`'s
    /// answer, without overlap; so a group holding every fingerprint that
    /// shares some leading bits of this table's prefix is searched alone.
    /// A numpy int64 array of shape (m, 2), sorted. Runs without the GIL.
    fn find_all_in_table<'py>(
        &self,
        py: Python<'py>,
        fingerprints: &Bound<'py, PyAny>,
        table: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray2<i64>>> {
        let t = self.table_arg(table)?;
        if self.plan.radius() > 0 {
            return Err(PyValueError::new_err(format!(
                "find_all_in_table needs a plan without probing, not {}: a batch search \
                 groups each table by exact prefix",
                self.plan
            )));
        }
        let fps = crate::batch::batch_input(fingerprints)?;
        let slice = fps.as_slice();
        let plan = &self.plan;
        let flat = py
            .detach(|| {
                crate::fork::install(|| {
                    guard(|| {
                        let pairs = simhashdb::batch::find_all_in_table(slice, plan, t);
                        let mut flat = Vec::with_capacity(pairs.len() * 2);
                        for (i, j) in pairs {
                            flat.push(i as i64);
                            flat.push(j as i64);
                        }
                        Ok(flat)
                    })
                })
            })
            .map_err(|f| f.into_py(py, ""))?;
        let m = flat.len() / 2;
        PyArray1::from_vec(py, flat).reshape([m, 2])
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let class = py.get_type::<PyPlan>();
        let k = self.plan.k();
        match self.plan.shape() {
            Shape::Flat { blocks } => (class, (blocks, k)).into_pyobject(py),
            Shape::Nested { outer, inner } => {
                (class.getattr("nested")?, (outer, inner, k)).into_pyobject(py)
            }
            Shape::Probed { blocks, radius } => {
                (class.getattr("probed")?, (blocks, radius, k)).into_pyobject(py)
            }
        }
    }

    fn __repr__(&self) -> String {
        match self.plan.shape() {
            Shape::Flat { blocks } => format!("Plan({blocks}, k={})", self.plan.k()),
            Shape::Nested { outer, inner } => {
                format!("Plan.nested({outer}, {inner}, k={})", self.plan.k())
            }
            Shape::Probed { blocks, radius } => {
                format!("Plan.probed({blocks}, {radius}, k={})", self.plan.k())
            }
        }
    }

    fn __str__(&self) -> String {
        self.plan.to_string()
    }
}
