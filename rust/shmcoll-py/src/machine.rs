//! Machine facts and the catalogue of settings and algorithms, for `shmcoll info`.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use shmcoll_coll::{Algo, CollOp, Error, Order, Store};
use shmcoll_kernels::hw;
use shmcoll_shm::probe;

use crate::buffer::borrow;
use crate::errors::to_py;

/// A byte count as every part of shmcoll reads one (`4096`, `64K`, `16M`, `1.5M`, `64KiB`;
/// binary suffixes), the environment's settings included (shmcoll_kernels::hw::parse_bytes).
#[pyfunction]
pub fn parse_bytes(py: Python<'_>, text: &str) -> PyResult<usize> {
    hw::parse_bytes(text).ok_or_else(|| {
        to_py(
            py,
            Error::InvalidArgument(format!("not a byte count: {text:?} (examples: 8, 4K, 16M)")),
        )
    })
}

/// Hardware as shmcoll sees it.
#[pyfunction]
pub fn machine(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let m = hw::machine();
    let d = PyDict::new(py);
    d.set_item("vendor", &m.vendor)?;
    d.set_item("model_name", &m.model_name)?;
    d.set_item("logical_cpus", m.logical_cpus)?;
    d.set_item("physical_cores", m.physical_cores)?;
    d.set_item("sockets", m.sockets)?;
    d.set_item("l1d_bytes", m.l1d_bytes)?;
    d.set_item("l2_bytes", m.l2_bytes)?;
    d.set_item("l3_bytes", m.l3_bytes)?;
    d.set_item("l3_shared_by", m.l3_shared_by)?;
    d.set_item("simd", m.simd.clone())?;
    d.set_item("page_size", m.page_size)?;
    d.set_item("isa", shmcoll_kernels::active_isa().name())?;
    d.set_item("nt_threshold", hw::nt_threshold())?;
    Ok(d)
}

/// The private-buffer crossover in force in this process (shmcoll_coll::cma_from), for
/// `shmcoll explain` and `shmcoll info`: its bytes, where it came from, and the probe's
/// figures when this process has them (None when forced, or when the probe could not run).
#[pyfunction]
pub fn cma_from(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let c = shmcoll_coll::cma_from::in_force().map_err(|e| to_py(py, e))?;
    let d = PyDict::new(py);
    d.set_item("bytes", c.bytes)?;
    d.set_item(
        "origin",
        match c.origin {
            shmcoll_coll::Origin::Forced => "forced",
            shmcoll_coll::Origin::Measured => "measured",
            shmcoll_coll::Origin::Cached(_) => "cache",
            shmcoll_coll::Origin::Failed(_) => "failed",
            shmcoll_coll::Origin::Agreed => "agreed",
        },
    )?;
    d.set_item("describe", c.origin.describe())?;
    match c.figures {
        None => d.set_item("figures", py.None())?,
        Some(f) => {
            let g = PyDict::new(py);
            g.set_item("sizes", f.sizes.clone())?;
            g.set_item("cma_read_ns", f.cma_read_ns.clone())?;
            g.set_item("cma_write_ns", f.cma_write_ns.clone())?;
            g.set_item("staged_ns", f.staged_ns.clone())?;
            g.set_item("inline_ns", f.inline_ns.clone())?;
            g.set_item("chunk_bytes", f.chunk_bytes)?;
            g.set_item("reps", f.reps)?;
            g.set_item("took_us", f.took_us)?;
            d.set_item("figures", g)?;
        }
    }
    Ok(d)
}

/// (environment variable, meaning) of every setting.
#[pyfunction]
pub fn settings() -> Vec<(&'static str, &'static str)> {
    shmcoll_coll::SETTINGS.to_vec()
}

/// (algorithms as (name, description), copy orders, store policies).
type Registry = (
    Vec<(&'static str, &'static str)>,
    Vec<&'static str>,
    Vec<&'static str>,
);

/// The registry for operation `op` (mpi4py's name; Alltoall by default): the algorithms
/// that serve it (name, description), and the copy orders and store policies its
/// candidates take (none for the collectives whose algorithms take no parameters).
#[pyfunction]
#[pyo3(signature = (op="Alltoall"))]
pub fn algorithms(py: Python<'_>, op: &str) -> PyResult<Registry> {
    let op = crate::table::family(py, op)?;
    let algos = Algo::serving(op)
        .map(|a| (a.name(), a.describe(op)))
        .collect();
    if op != CollOp::Alltoall {
        return Ok((algos, Vec::new(), Vec::new()));
    }
    Ok((
        algos,
        Order::ALL.iter().map(|o| o.name()).collect(),
        Store::ALL.iter().map(|s| s.name()).collect(),
    ))
}

/// One side of the machine probe's ping-pong (`shmcoll.bench.machine_state`): `word` is a
/// writable buffer of at least 8 bytes, 8-aligned, that both processes map (an anonymous
/// shared mmap made before fork); `me` is 0 or 1; rounds `first..first + rounds`.
/// Returns this side's seconds, the GIL released.
#[pyfunction]
#[pyo3(signature = (word, me, first, rounds, yield_cpu, timeout_s=10.0))]
#[allow(clippy::too_many_arguments)]
pub fn ping_pong(
    py: Python<'_>,
    word: &Bound<'_, PyAny>,
    me: u64,
    first: u64,
    rounds: u64,
    yield_cpu: bool,
    timeout_s: f64,
) -> PyResult<f64> {
    let bad = |m: &str| to_py(py, Error::InvalidArgument(m.into()));
    if me > 1 {
        return Err(bad("me must be 0 or 1"));
    }
    if !(timeout_s.is_finite() && timeout_s > 0.0) {
        return Err(bad("timeout_s must be a positive number of seconds"));
    }
    let b = borrow(py, word, true, "probe word")?;
    let raw = b.raw();
    if raw.len < 8 || raw.addr % std::mem::align_of::<AtomicU64>() != 0 {
        return Err(bad("the probe word needs 8 writable, 8-aligned bytes"));
    }
    // SAFETY: the view `b` keeps the 8 aligned bytes valid (and the exporter alive) until
    // it drops at the end of this function, after the last use of `w`; AtomicU64 has the
    // size and alignment of u64, and every access to the word (here and in the peer
    // process) is atomic.
    let w = unsafe { &*(raw.addr as *const AtomicU64) };
    let timeout = Duration::from_secs_f64(timeout_s);
    let took = py
        .detach(|| probe::ping_pong(w, me, first, rounds, yield_cpu, timeout))
        .map_err(|e| to_py(py, Error::Shm(e)))?;
    Ok(took.as_secs_f64())
}
