//! Selection tables across the boundary, one row format for every operation: Python holds
//! a table as plain tuples `(min_bytes, max_bytes or None for inf, [(algorithm, order,
//! store, nt_threshold, chunk_bytes), ...])`, the engine's one `Table` of size ranges with
//! ordered candidates. Only Alltoall's candidates take parameters: its rows carry the
//! order and store in force (the defaults filled in) and the thresholds it sets (None:
//! the communicator's); the other operations' carry None for all four. Every function
//! here is keyed by the operation (mpi4py's name, e.g. "Alltoall", "Allreduce"; a member
//! of a family names its family's table). The tuning file's one reader is
//! shmcoll_coll::tuning_file, bound in `tuning_file.rs`; Python writes the files
//! (shmcoll.tuning).

use pyo3::prelude::*;

use shmcoll_coll::{
    model_coll_table, select::select, CallFacts, Candidate, CollOp, Config, Error, Forced, Range,
    Selection, Table,
};

use crate::errors::{to_py, IntoPyResult};

/// (algorithm, order, store, nt_threshold, chunk_bytes); None where the operation takes
/// no such parameter or the candidate leaves it to the communicator.
pub type CandidateRow = (
    String,
    Option<String>,
    Option<String>,
    Option<usize>,
    Option<usize>,
);
/// (min bytes, max bytes or None for inf, candidates)
pub type RangeRow = (usize, Option<usize>, Vec<CandidateRow>);
/// What selection picks for a call: a candidate row, then whether ranks write their
/// inline payload before arriving.
pub type PickRow = (
    String,
    Option<String>,
    Option<String>,
    Option<usize>,
    Option<usize>,
    bool,
);

/// The family whose table serves operation `op` (Barrier has none).
pub fn family(py: Python<'_>, op: &str) -> PyResult<CollOp> {
    CollOp::parse(op)
        .filter(|o| *o != CollOp::Barrier)
        .map(CollOp::family)
        .ok_or_else(|| {
            to_py(
                py,
                Error::InvalidArgument(format!("no selection table for {op:?}")),
            )
        })
}

fn takes_parameters(op: CollOp) -> bool {
    op.family() == CollOp::Alltoall
}

/// `t`, a table of `op`'s family, as rows.
pub fn to_rows(op: CollOp, t: &Table) -> Vec<RangeRow> {
    let params = takes_parameters(op);
    t.ranges()
        .iter()
        .map(|r| {
            let cands = r
                .candidates
                .iter()
                .map(|c| {
                    (
                        c.algo.name().to_string(),
                        params.then(|| c.order().name().to_string()),
                        params.then(|| c.store().name().to_string()),
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

/// Rows of `op`'s table, checked (names, parameters, overlaps).
pub fn from_rows(op: CollOp, rows: Vec<RangeRow>) -> Result<Table, Error> {
    let mut ranges = Vec::with_capacity(rows.len());
    for (min_bytes, max_bytes, cands) in rows {
        let candidates = cands
            .into_iter()
            .map(|(a, o, s, nt, chunk)| {
                Candidate::from_names(op, &a, o.as_deref(), s.as_deref(), nt, chunk)
            })
            .collect::<Result<Vec<_>, Error>>()?;
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
            .map_err(|e| to_py(py, e)),
    }
}

/// The model selection of `op`'s family for `nranks` ranks on this machine: the other
/// collectives' inline payloads bounded by `inline_bytes` and pipelines by
/// `staging_bytes` (None: what a communicator of `nranks` gets from this environment),
/// private buffers taking CMA from `cma_from` bytes (None: the value in force here).
fn model_selection(
    py: Python<'_>,
    fam: CollOp,
    nranks: usize,
    inline_bytes: Option<usize>,
    staging_bytes: Option<usize>,
    cma_from: Option<usize>,
) -> PyResult<Selection> {
    let m = shmcoll_kernels::hw::machine();
    let cma_from = cma_from_or_in_force(py, cma_from)?;
    if fam == CollOp::Alltoall {
        return Ok(Selection::alltoall_model(m, nranks, cma_from));
    }
    let (inline_bytes, staging_bytes) = match (inline_bytes, staging_bytes) {
        (Some(i), Some(s)) => (i, s),
        (i, s) => {
            let cfg = Config::from_env(nranks).py_err(py)?;
            (
                i.unwrap_or(cfg.inline_bytes),
                s.unwrap_or(cfg.staging_bytes),
            )
        }
    };
    Ok(Selection::model(
        model_coll_table(fam, m, nranks, inline_bytes, staging_bytes, cma_from),
        false,
    ))
}

/// The model table of operation `op` for `nranks` ranks (the embedded default).
#[pyfunction]
#[pyo3(signature = (op, nranks, inline_bytes=None, staging_bytes=None, cma_from=None))]
pub fn model_table(
    py: Python<'_>,
    op: &str,
    nranks: usize,
    inline_bytes: Option<usize>,
    staging_bytes: Option<usize>,
    cma_from: Option<usize>,
) -> PyResult<Vec<RangeRow>> {
    let fam = family(py, op)?;
    let sel = model_selection(py, fam, nranks, inline_bytes, staging_bytes, cma_from)?;
    Ok(to_rows(fam, &sel.table))
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
        Err(e) => Err(to_py(py, e)),
    }
}

/// Check a table of `op` (names, parameters, overlaps) without binding it; raises
/// ArgumentError.
#[pyfunction]
pub fn check_table(py: Python<'_>, op: &str, rows: Vec<RangeRow>) -> PyResult<()> {
    let fam = family(py, op)?;
    from_rows(fam, rows).map(|_| ()).py_err(py)
}

/// What `rows` select for a call of `op` on `nranks` ranks whose size is `bytes`
/// (Alltoall: the largest block; the others: the largest contribution), with send and
/// receive buffers in the heap or not, in place or not, CMA permitted or not; the payload
/// fits the inline area where `inline_fits` says so (None: where `bytes` times `nranks`
/// fits this environment's inline area). Returns the chosen candidate as a row (its
/// parameters resolved) and whether ranks write their inline payload before arriving.
/// For Alltoall the model, with the crossover in force here, fills the gaps of `rows`;
/// the other operations' last resorts serve past them, as in a communicator. For
/// `explain` and for the tuner, which checks its rows with it.
#[pyfunction]
#[pyo3(signature = (op, rows, nranks, bytes, heap_send, heap_recv, in_place, cma_ok=true, inline_fits=None))]
#[allow(clippy::too_many_arguments)]
pub fn resolve(
    py: Python<'_>,
    op: &str,
    rows: Vec<RangeRow>,
    nranks: usize,
    bytes: usize,
    heap_send: bool,
    heap_recv: bool,
    in_place: bool,
    cma_ok: bool,
    inline_fits: Option<bool>,
) -> PyResult<PickRow> {
    let fam = family(py, op)?;
    let mut sel = model_selection(py, fam, nranks, None, None, None)?;
    sel.table = from_rows(fam, rows).py_err(py)?;
    let cfg = Config::from_env(nranks).py_err(py)?;
    let inline_capacity = cfg.inline_bytes;
    let in_heap = heap_send && heap_recv;
    let wants_inline = sel.wants_inline(bytes, in_heap);
    let fits = inline_fits.unwrap_or_else(|| {
        bytes
            .checked_mul(nranks)
            .is_some_and(|b| b <= inline_capacity)
    });
    let facts = CallFacts {
        nranks,
        bytes,
        all_inline_written: wants_inline && fits,
        inline_capacity,
        all_send_in_heap: heap_send && !in_place,
        all_recv_in_heap: heap_recv,
        first_send_outside_heap: (!heap_send).then_some(0),
        first_recv_outside_heap: (!heap_recv).then_some(0),
        first_outside_heap: (!in_heap).then_some(0),
        in_place,
        cma_ok,
    };
    let c = select(
        &sel,
        fam,
        &facts,
        Forced::default(),
        cfg.nt_threshold,
        cfg.chunk_bytes,
    )
    .py_err(py)?;
    let params = takes_parameters(fam);
    Ok((
        c.algo.name().into(),
        params.then(|| c.order.name().into()),
        params.then(|| c.store.name().into()),
        params.then_some(c.nt_threshold),
        params.then_some(c.chunk_bytes),
        wants_inline,
    ))
}
