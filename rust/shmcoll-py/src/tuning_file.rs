//! The tuning table file's one reader (shmcoll_coll::tuning_file) as Python sees it:
//! `TuningFile` checks a file (or a document's JSON text) whole and gives the rows of an
//! (operation, process count) in the one row format of `table.rs`, the ranges that list `compressed`, and how the file's hardware
//! differs from this machine; `tables_digest` is the digest ranks compare when they bind.
//! Python keeps what is Python's: raising TuningTableError and ForeignTableWarning,
//! writing files, the CLI's display. Messages quote names with Python's repr.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyString;

use shmcoll_coll::tuning_file::{self, CompressedRange, TableFile};

use crate::engine::CommBase;
use crate::errors::IntoPyResult;
use crate::table::RangeRow;

/// (min bytes, max bytes or None for inf, whether the range lists `compressed`)
pub type CompressionRowPy = (usize, Option<usize>, bool);

fn inf_to_none(n: usize) -> Option<usize> {
    (n != usize::MAX).then_some(n)
}

/// A tuning table file, read and checked whole (see shmcoll_coll::tuning_file).
#[pyclass(module = "shmcoll._core", frozen)]
#[derive(Debug)]
pub struct TuningFile {
    file: TableFile,
}

/// Python's repr of `s` (the quoting Python's messages always used), Rust's where that
/// fails.
fn py_quote(py: Python<'_>) -> impl Fn(&str) -> String + '_ {
    move |s: &str| {
        PyString::new(py, s)
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| tuning_file::quote(s))
    }
}

#[pymethods]
impl TuningFile {
    /// Read and check the file at `path`; ArgumentError naming the file and the entry.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<TuningFile> {
        let file = TableFile::load_quoting(&path, &py_quote(py)).py_err(py)?;
        Ok(TuningFile { file })
    }

    /// Check a table given as JSON text; errors name `origin` and the entry.
    #[staticmethod]
    fn parse(py: Python<'_>, text: &str, origin: &str) -> PyResult<TuningFile> {
        let file = TableFile::parse(text, origin, &py_quote(py)).py_err(py)?;
        Ok(TuningFile { file })
    }

    /// The file's path (or the origin its text was given with).
    #[getter]
    fn path(&self) -> PathBuf {
        self.file.path().to_path_buf()
    }

    /// Whether an entry of `op` covers `nprocs` ranks.
    fn covers(&self, op: &str, nprocs: usize) -> bool {
        self.file.covers(op, nprocs)
    }

    /// The rows of operation `op` (the file's name: "alltoall", "allreduce", ...) for
    /// `nprocs` ranks (Alltoall's sorted; `compressed` left out), in the one row format
    /// (table.rs), or None where no entry covers them (as for an operation the format has
    /// no entries of, such as "alltoallv"); ArgumentError for a name of no operation.
    fn rows(&self, py: Python<'_>, op: &str, nprocs: usize) -> PyResult<Option<Vec<RangeRow>>> {
        let fam = crate::table::family(py, op)?;
        let t = if op == "alltoall" {
            self.file.alltoall_for(nprocs)
        } else if tuning_file::coll_family(op).is_some() {
            self.file.coll_for(op, nprocs)
        } else {
            return Ok(None);
        }
        .py_err(py)?;
        Ok(t.as_ref().map(|t| crate::table::to_rows(fam, t)))
    }

    /// The size ranges of `op`'s entry for `nprocs` ranks in the file's order, each with
    /// whether it lists `compressed`; None where no entry covers them.
    fn compression_rows(&self, op: &str, nprocs: usize) -> Option<Vec<CompressionRowPy>> {
        self.file.compressed_for(op, nprocs).map(|rows| {
            rows.into_iter()
                .map(|(lo, hi, listed)| (lo, inf_to_none(hi), listed))
                .collect()
        })
    }

    /// Where the file's hardware fingerprint differs from this machine, as
    /// "key: theirs != ours" (empty: measured on this kind of machine).
    fn fingerprint_differences(&self, py: Python<'_>) -> Vec<String> {
        self.file
            .fingerprint_differences(shmcoll_kernels::hw::machine(), &py_quote(py))
    }
}

/// The digest ranks compare when they bind tables: `comm`'s digest of its selection
/// tables (the PMPI library's) folded with the ranges where Python sends compressed data
/// (`compression`: per operation, sorted by name, its compression rows).
#[pyfunction]
pub fn tables_digest(
    py: Python<'_>,
    comm: &Bound<'_, CommBase>,
    compression: Vec<(String, Vec<CompressionRowPy>)>,
) -> PyResult<u64> {
    let tables = comm.borrow_mut().comm(py)?.tables_digest();
    let compressed: Vec<(String, Vec<CompressedRange>)> = compression
        .into_iter()
        .map(|(op, rows)| {
            let rows = rows
                .into_iter()
                .map(|(lo, hi, listed)| (lo, hi.unwrap_or(usize::MAX), listed))
                .collect();
            (op, rows)
        })
        .collect();
    Ok(tuning_file::binding_digest(tables, &compressed))
}
