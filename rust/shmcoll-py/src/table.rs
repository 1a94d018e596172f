//! Selection tables across the boundary: Python holds them as plain tuples
//! `(min_bytes, max_bytes or None for inf, [(algorithm, order, store, nt_threshold or None,
//! chunk_bytes or None), ...])`; the tuning file's one reader (its checks, lookup order
//! and rows per operation and process count) is shmcoll_coll::tuning_file, bound in
//! `tuning_file.rs`; Python writes the files (shmcoll.tuning).

use pyo3::prelude::*;

use shmcoll_coll::{Candidate, CollOp, Error, Range, Table};

/// (algorithm, order, store, nt_threshold, chunk_bytes)
pub type CandidateRow = (String, String, String, Option<usize>, Option<usize>);
/// (min bytes, max bytes or None for inf, candidates)
pub type RangeRow = (usize, Option<usize>, Vec<CandidateRow>);

pub fn to_rows(t: &Table) -> Vec<RangeRow> {
    t.ranges()
        .iter()
        .map(|r| {
            let cands = r
                .candidates
                .iter()
                .map(|c| {
                    (
                        c.algo.name().to_string(),
                        c.order().name().to_string(),
                        c.store().name().to_string(),
                        c.nt_threshold,
                        c.chunk_bytes,
                    )
                })
                .collect();
            (
                r.min_bytes,
                (r.max_bytes != usize::MAX).then_some(r.max_bytes),
                cands,
            )
        })
        .collect()
}

pub fn from_rows(rows: Vec<RangeRow>) -> Result<Table, Error> {
    let mut ranges = Vec::with_capacity(rows.len());
    for (min_bytes, max_bytes, cands) in rows {
        let mut candidates = Vec::with_capacity(cands.len());
        for (a, o, s, nt, chunk) in cands {
            candidates.push(Candidate::from_names(
                CollOp::Alltoall,
                &a,
                Some(&o),
                Some(&s),
                nt,
                chunk,
            )?);
        }
        ranges.push(Range {
            min_bytes,
            max_bytes: max_bytes.unwrap_or(usize::MAX),
            candidates,
        });
    }
    Table::new(ranges)
}

/// `cma_from`, or the value in force in this process (shmcoll_coll::cma_from::in_force).
pub fn cma_from_or_in_force(py: Python<'_>, cma_from: Option<usize>) -> PyResult<usize> {
    match cma_from {
        Some(v) => Ok(v),
        None => shmcoll_coll::cma_from::in_force()
            .map(|c| c.bytes)
            .map_err(|e| crate::errors::to_py(py, e)),
    }
}

/// The model table for `nranks` ranks on this machine (the embedded default), with
/// private blocks taking CMA from `cma_from` bytes (None: the value in force here).
#[pyfunction]
#[pyo3(signature = (nranks, cma_from=None))]
pub fn model_table(
    py: Python<'_>,
    nranks: usize,
    cma_from: Option<usize>,
) -> PyResult<Vec<RangeRow>> {
    let cma_from = cma_from_or_in_force(py, cma_from)?;
    Ok(to_rows(&shmcoll_coll::model_table(
        shmcoll_kernels::hw::machine(),
        nranks,
        cma_from,
    )))
}

/// The places a tuning table file is looked for after SHMCOLL_TUNING_FILE, in order:
/// (path, "user" or "system").
#[pyfunction]
pub fn tuning_file_places() -> Vec<(std::path::PathBuf, &'static str)> {
    shmcoll_coll::tuning_file::places()
        .into_iter()
        .map(|(p, o)| (p, o.name()))
        .collect()
}

/// The tuning table file in force and where it was found ("environment", "user",
/// "system"), or (None, "model"); ArgumentError when SHMCOLL_TUNING_FILE names a missing
/// file.
#[pyfunction]
pub fn find_tuning_file(py: Python<'_>) -> PyResult<(Option<std::path::PathBuf>, &'static str)> {
    match shmcoll_coll::tuning_file::find_file() {
        Ok(Some((p, o))) => Ok((Some(p), o.name())),
        Ok(None) => Ok((None, "model")),
        Err(e) => Err(crate::errors::to_py(py, e)),
    }
}

/// Check a table (names, overlaps) without binding it; raises ArgumentError.
#[pyfunction]
pub fn check_table(py: Python<'_>, rows: Vec<RangeRow>) -> PyResult<()> {
    from_rows(rows)
        .map(|_| ())
        .map_err(|e| crate::errors::to_py(py, e))
}

/// What `rows` selects for a call of `max_block` bytes per peer on `nranks` ranks with the
/// given buffers: (algorithm, order, store, nt_threshold, chunk_bytes). For `explain`.
/// The model, with the crossover in force here, fills the gaps of `rows`.
#[pyfunction]
#[pyo3(signature = (rows, nranks, max_block, heap_send, heap_recv, in_place, cma_ok=true))]
#[allow(clippy::too_many_arguments)]
pub fn resolve(
    py: Python<'_>,
    rows: Vec<RangeRow>,
    nranks: usize,
    max_block: usize,
    heap_send: bool,
    heap_recv: bool,
    in_place: bool,
    cma_ok: bool,
) -> PyResult<(String, String, String, usize, usize)> {
    let m = shmcoll_kernels::hw::machine();
    let table = from_rows(rows).map_err(|e| crate::errors::to_py(py, e))?;
    let mut sel =
        shmcoll_coll::Selection::alltoall_model(m, nranks, cma_from_or_in_force(py, None)?);
    sel.table = table;
    let cfg = shmcoll_coll::Config::from_env(nranks).map_err(|e| crate::errors::to_py(py, e))?;
    let inline_capacity = cfg.inline_bytes;
    let facts = shmcoll_coll::CallFacts {
        nranks,
        bytes: max_block,
        all_inline_written: sel.wants_inline(max_block, heap_send && heap_recv)
            && max_block.saturating_mul(nranks) <= inline_capacity,
        inline_capacity,
        all_send_in_heap: heap_send && !in_place,
        all_recv_in_heap: heap_recv,
        first_send_outside_heap: (!heap_send).then_some(0),
        first_recv_outside_heap: (!heap_recv).then_some(0),
        first_outside_heap: None,
        in_place,
        cma_ok,
    };
    let c = shmcoll_coll::select::select(
        &sel,
        CollOp::Alltoall,
        &facts,
        shmcoll_coll::Forced::default(),
        cfg.nt_threshold,
        cfg.chunk_bytes,
    )
    .map_err(|e| crate::errors::to_py(py, e))?;
    Ok((
        c.algo.name().into(),
        c.order.name().into(),
        c.store.name().into(),
        c.nt_threshold,
        c.chunk_bytes,
    ))
}

/// Whether ranks sending blocks of up to `max_block` bytes write their inline payload
/// before arriving under `rows` (the range holding the size lists `inline`; gaps fall
/// back to the model). The tuner checks its rows with it.
#[pyfunction]
pub fn wants_inline(
    py: Python<'_>,
    rows: Vec<RangeRow>,
    nranks: usize,
    max_block: usize,
) -> PyResult<bool> {
    let cma_from = cma_from_or_in_force(py, None)?;
    let mut sel =
        shmcoll_coll::Selection::alltoall_model(shmcoll_kernels::hw::machine(), nranks, cma_from);
    sel.table = from_rows(rows).map_err(|e| crate::errors::to_py(py, e))?;
    Ok(sel.wants_inline(max_block, false))
}
