//! `reduce_local(dst, src, op)`: `dst = dst op src` element by element with the reduction
//! kernels the collectives combine with (MPI's `Reduce_local`), in one process and without
//! a communicator, so that the kernels can be used and measured on their own (against
//! NumPy's ufuncs in the pytest-benchmark suite).

use pyo3::prelude::*;

use crate::buffer;
use crate::errors::to_py;
use crate::pyobj;
use shmcoll_coll::Error;
use shmcoll_kernels::Op;

/// Bytes from which the kernel runs with the GIL released.
const DETACH_BYTES: usize = 1 << 16;

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
    let d = buffer::borrow(py, dst, true, "destination")?;
    let s = buffer::borrow(py, src, false, "source")?;
    let (dr, sr) = (d.raw(), s.raw());
    if dr.len != sr.len {
        return Err(to_py(
            py,
            Error::Buffer(format!(
                "destination has {} bytes but source has {}",
                dr.len, sr.len
            )),
        ));
    }
    let same = dr.addr == sr.addr;
    if !same && dr.len > 0 && dr.addr < sr.addr + sr.len && sr.addr < dr.addr + dr.len {
        return Err(to_py(
            py,
            Error::Buffer("source and destination overlap".into()),
        ));
    }
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
