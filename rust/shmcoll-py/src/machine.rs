//! Machine facts and the catalogue of settings and algorithms, for `shmcoll info`.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use shmcoll_coll::{Algo, Order, Store};
use shmcoll_kernels::hw;

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

/// (environment variable, meaning) of every setting.
#[pyfunction]
pub fn settings() -> Vec<(&'static str, &'static str)> {
    shmcoll_coll::SETTINGS.to_vec()
}

/// The registry: algorithms (name, description), orders and store policies.
#[pyfunction]
pub fn algorithms() -> (
    Vec<(&'static str, &'static str)>,
    Vec<&'static str>,
    Vec<&'static str>,
) {
    (
        Algo::ALL.iter().map(|a| (a.name(), a.describe())).collect(),
        Order::ALL.iter().map(|o| o.name()).collect(),
        Store::ALL.iter().map(|s| s.name()).collect(),
    )
}
