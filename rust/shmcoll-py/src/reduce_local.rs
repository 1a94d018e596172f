//! `reduce_local(dst, src, op)`: `dst = dst op src` element by element with the reduction
//! kernels the collectives combine with (MPI's `Reduce_local`), in one process and without
//! a communicator, so that the kernels can be used and measured on their own (against
//! NumPy's ufuncs in the pytest-benchmark suite).

use pyo3::prelude::*;

use crate::buffer;
use crate::errors::to_py;
use crate::gil::DETACH_BYTES;
use crate::pyobj;
use shmcoll_coll::Error;
use shmcoll_kernels::Op;

/// `dst = dst op src` for two contiguous arrays of one dtype and size (`op` as the
/// collectives name it: "sum", "prod", "min", "max", "band", ...).
#[pyfunction]
#[pyo3(signature = (dst, src, op="sum"))]
pub fn reduce_local(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    op: &str,
) -> PyResult<()> {
    let bad = |m: String| to_py(py, Error::InvalidArgument(m));
    let o = Op::parse(op).ok_or_else(|| bad(format!("unknown reduction op {op:?}")))?;
    let dt = pyobj::dtype(dst).ok_or_else(|| {
        bad("the destination is not an array of a dtype the kernels reduce".into())
    })?;
    if pyobj::dtype(src) != Some(dt) {
        return Err(bad(format!("the source is not an array of {}", dt.name())));
    }
    if !o.supports(dt) {
        return Err(bad(format!(
            "{} is not defined for {}",
            o.name(),
            dt.name()
        )));
    }
    let (d, s) = buffer::borrow_pair(py, dst, src, true)?;
    let (dr, sr) = (d.raw(), s.raw());
    let n = dr.len / dt.size();
    let run = || {
        // SAFETY: both views are held (so the memory stays valid and sized) for the whole
        // call; each holds n elements of dt; the ranges are disjoint or identical; op
        // supports dt (checked above).
        unsafe {
            shmcoll_kernels::reduce_into_raw(dt, o, dr.addr as *mut u8, sr.addr as *const u8, n)
        }
    };
    if dr.len >= DETACH_BYTES {
        py.detach(run);
    } else {
        run();
    }
    Ok(())
}
