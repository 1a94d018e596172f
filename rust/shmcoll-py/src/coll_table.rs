//! Selection tables of the collectives other than Alltoall, as Python sees them: per
//! family, rows `(max_bytes or None for inf, [algorithm names])`, first row that covers a
//! call's largest contribution wins, first algorithm that can serve it within the row. In
//! Rust they are the one table type of every collective (shmcoll_coll::Table), each row a
//! range from the previous row's bound.

use pyo3::prelude::*;

use shmcoll_coll::{
    model_coll_table, select::select, Algo, CallFacts, Candidate, CollOp, Error, Forced, Selection,
    Table,
};

use crate::errors::{to_py, IntoPyResult};

/// `(max bytes or None, [algorithm, ...])`
pub type CollRowPy = (Option<usize>, Vec<String>);

/// The family an operation name belongs to ("Allreduce", "Reduce_scatter", ...).
pub fn family(py: Python<'_>, op: &str) -> PyResult<CollOp> {
    CollOp::parse_collective(op)
        .map(CollOp::family)
        .ok_or_else(|| {
            to_py(
                py,
                Error::InvalidArgument(format!("unknown collective {op:?}")),
            )
        })
}

pub fn to_rows(t: &Table) -> Vec<CollRowPy> {
    t.ranges()
        .iter()
        .map(|r| {
            (
                (r.max_bytes != usize::MAX).then_some(r.max_bytes),
                r.candidates
                    .iter()
                    .map(|c| c.algo.name().to_string())
                    .collect(),
            )
        })
        .collect()
}

pub fn from_rows(py: Python<'_>, family: CollOp, rows: Vec<CollRowPy>) -> PyResult<Table> {
    let mut out = Vec::with_capacity(rows.len());
    for (max, names) in rows {
        let candidates = names
            .iter()
            .map(|n| {
                Algo::parse_or_err(family, n)
                    .map(Candidate::of)
                    .map_err(|e| to_py(py, e))
            })
            .collect::<PyResult<Vec<_>>>()?;
        if candidates.is_empty() {
            return Err(to_py(
                py,
                Error::InvalidArgument("a row without candidates".into()),
            ));
        }
        out.push((max.unwrap_or(usize::MAX), candidates));
    }
    Ok(Table::from_upper_bounds(family, out))
}

/// The model table of a collective family for `nranks` ranks (the embedded default), with
/// private contributions taking CMA from `cma_from` bytes (None: the value in force here).
#[pyfunction]
#[pyo3(signature = (op, nranks, inline_bytes=None, staging_bytes=None, cma_from=None))]
pub fn coll_model_table(
    py: Python<'_>,
    op: &str,
    nranks: usize,
    inline_bytes: Option<usize>,
    staging_bytes: Option<usize>,
    cma_from: Option<usize>,
) -> PyResult<Vec<CollRowPy>> {
    let fam = family(py, op)?;
    let cma_from = crate::table::cma_from_or_in_force(py, cma_from)?;
    // Unset: the sizes a communicator of `nranks` would get from this environment.
    let (inline_bytes, staging_bytes) = match (inline_bytes, staging_bytes) {
        (Some(i), Some(s)) => (i, s),
        (i, s) => {
            let cfg = shmcoll_coll::config::Config::from_env(nranks).py_err(py)?;
            (
                i.unwrap_or(cfg.inline_bytes),
                s.unwrap_or(cfg.staging_bytes),
            )
        }
    };
    Ok(to_rows(&model_coll_table(
        fam,
        shmcoll_kernels::hw::machine(),
        nranks,
        inline_bytes,
        staging_bytes,
        cma_from,
    )))
}

/// What `rows` select for a call whose largest contribution is `bytes`, every rank's
/// buffers in the heap (`in_heap`) or not, the payload fitting the inline area
/// (`inline_fits`) or not: (algorithm, whether ranks write their inline payload before
/// arriving). The tuner checks its rows with it. Every collective but Alltoall has the
/// same algorithms, restrictions and last resorts: Allreduce stands for them.
#[pyfunction]
#[pyo3(signature = (rows, bytes, in_heap, inline_fits, cma_ok=true))]
pub fn coll_resolve(
    py: Python<'_>,
    rows: Vec<CollRowPy>,
    bytes: usize,
    in_heap: bool,
    inline_fits: bool,
    cma_ok: bool,
) -> PyResult<(String, bool)> {
    let op = CollOp::Allreduce;
    let sel = Selection::model(from_rows(py, op, rows)?, false);
    let wants_inline = sel.wants_inline(bytes, in_heap);
    let facts = CallFacts {
        bytes,
        all_inline_written: wants_inline && inline_fits,
        first_outside_heap: (!in_heap).then_some(0),
        cma_ok,
        ..CallFacts::default()
    };
    let c = select(&sel, op, &facts, Forced::default(), 0, 0).map_err(|e| to_py(py, e))?;
    Ok((c.algo.name().to_string(), wants_inline))
}

/// Names and descriptions of the collectives' algorithms (every collective but Alltoall
/// has the same).
#[pyfunction]
pub fn coll_algorithms() -> Vec<(String, String)> {
    Algo::serving(CollOp::Allreduce)
        .map(|a| {
            (
                a.name().to_string(),
                a.describe(CollOp::Allreduce).to_string(),
            )
        })
        .collect()
}
