//! Native entry points of the collectives with one buffer per side (Allreduce, Reduce,
//! Bcast, Allgather, Reduce_scatter_block, Gather, Scatter) for plain arrays: a call with two NumPy arrays and a
//! predefined operator goes from Python straight into the engine, as Alltoall does. Any
//! other form (mpi4py buffer specifications, datatypes, user operators) returns `None`
//! here and the caller hands it to the Python implementation (`Comm._py_<Name>`).

use numpy::{PyArrayDescrMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyModule, PyString};
use pyo3::{intern, PyTypeInfo};

use shmcoll_coll::{CollOp, Comm};
use shmcoll_kernels::{Dtype, Op};

use crate::buffer::exact_ndarray;
use crate::buffer_spec::{whole, Whole};
use crate::collectives::{run, CollArgs, Named};
use crate::vector_spec::{in_bytes, ints, prefix_sums};

static IN_PLACE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
/// mpi4py's predefined operators (registered by `shmcoll.Comm` when it wraps MPI).
static MPI_OPS: PyOnceLock<Vec<(Py<PyAny>, Op)>> = PyOnceLock::new();

fn in_place(py: Python<'_>) -> Option<&Bound<'_, PyAny>> {
    IN_PLACE
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(
                PyModule::import(py, "shmcoll.buffers")?
                    .getattr("IN_PLACE")?
                    .unbind(),
            )
        })
        .ok()
        .map(|o| o.bind(py))
}

/// mpi4py's IN_PLACE (which exports an empty buffer, so it must be recognised first).
static MPI_IN_PLACE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
/// mpi4py's BOTTOM, which exports an empty buffer too but means absolute addresses: the
/// Python implementation hands calls with it to MPI.
static MPI_BOTTOM: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Register mpi4py's IN_PLACE, operators (a list of (operator object, name)) and BOTTOM.
#[pyfunction]
#[pyo3(signature = (in_place, ops, bottom=None))]
pub fn register_mpi(
    py: Python<'_>,
    in_place: Py<PyAny>,
    ops: Vec<(Py<PyAny>, String)>,
    bottom: Option<Py<PyAny>>,
) -> PyResult<()> {
    let _ = MPI_IN_PLACE.set(py, in_place);
    if let Some(b) = bottom {
        let _ = MPI_BOTTOM.set(py, b);
    }
    let v: Vec<(Py<PyAny>, Op)> = ops
        .into_iter()
        .filter_map(|(o, n)| Op::parse(&n).map(|op| (o, op)))
        .collect();
    let _ = MPI_OPS.set(py, v);
    Ok(())
}

/// `shmcoll.IN_PLACE` or mpi4py's `MPI.IN_PLACE`.
pub fn is_in_place(obj: &Bound<'_, PyAny>) -> bool {
    let py = obj.py();
    MPI_IN_PLACE.get(py).is_some_and(|ip| ip.bind(py).is(obj))
        || in_place(py).is_some_and(|ip| ip.is(obj))
}

/// Whether `obj` exports a buffer (then it is a plain buffer, not a specification), other
/// than mpi4py's BOTTOM and IN_PLACE (which export empty buffers).
pub(crate) fn is_buffer(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: `obj` is a live object; the call only inspects its type.
    let exports = unsafe { pyo3::ffi::PyObject_CheckBuffer(obj.as_ptr()) != 0 };
    let py = obj.py();
    exports
        && !MPI_BOTTOM.get(py).is_some_and(|b| b.bind(py).is(obj))
        && !MPI_IN_PLACE.get(py).is_some_and(|b| b.bind(py).is(obj))
}

/// The operator, if predefined (None: the default SUM).
fn operator(py: Python<'_>, op: Option<&Bound<'_, PyAny>>) -> Option<Op> {
    let Some(op) = op else { return Some(Op::Sum) };
    if PyString::is_type_of(op) {
        return op.extract::<&str>().ok().and_then(Op::parse);
    }
    MPI_OPS
        .get(py)?
        .iter()
        .find(|(o, _)| o.as_ptr() == op.as_ptr())
        .map(|(_, op)| *op)
}

/// NumPy dtype objects already mapped, each held by a strong reference so that its
/// address cannot be reused by another object while it is in the list. The builtin
/// dtypes are singletons, so a handful of entries serves every call; the list is capped
/// so that programs creating dtype objects on the fly cannot grow it without bound.
static DTYPES: std::sync::Mutex<Vec<(Py<PyAny>, Dtype)>> = std::sync::Mutex::new(Vec::new());
const DTYPES_CAP: usize = 32;

/// The element type of a NumPy array (None for anything else). The dtype object is looked
/// up by identity first: formatting its `str` ("<f8", "|u1", ...) costs more than the rest
/// of a small call's overhead together.
pub(crate) fn dtype(arr: &Bound<'_, PyAny>) -> Option<Dtype> {
    let py = arr.py();
    let dt = match exact_ndarray(arr) {
        Some(a) => a.dtype().into_any(),
        None => arr.getattr(intern!(py, "dtype")).ok()?,
    };
    let mut known = DTYPES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, d)) = known.iter().find(|(o, _)| o.as_ptr() == dt.as_ptr()) {
        return Some(*d);
    }
    let d = dtype_from_str(&dt)?;
    if known.len() < DTYPES_CAP {
        known.push((dt.unbind(), d));
    }
    Some(d)
}

/// The element type named by a dtype's `str`, for native or little-endian byte order.
pub(crate) fn dtype_from_str(dt: &Bound<'_, PyAny>) -> Option<Dtype> {
    let s = dt.getattr(intern!(dt.py(), "str")).ok()?;
    let s: &str = s.extract().ok()?;
    let mut chars = s.chars();
    let order = chars.next()?;
    let kind = chars.next()?;
    let size: usize = chars.as_str().parse().ok()?;
    if order == '>' {
        return None;
    }
    Some(match (kind, size) {
        ('i', 1) => Dtype::I8,
        ('i', 2) => Dtype::I16,
        ('i', 4) => Dtype::I32,
        ('i', 8) => Dtype::I64,
        ('u', 1) => Dtype::U8,
        ('u', 2) => Dtype::U16,
        ('u', 4) => Dtype::U32,
        ('u', 8) => Dtype::U64,
        ('f', 4) => Dtype::F32,
        ('f', 8) => Dtype::F64,
        ('c', 8) => Dtype::C64,
        ('c', 16) => Dtype::C128,
        _ => return None,
    })
}

/// Bytes of a buffer's export (None if it does not export one).
pub(crate) fn nbytes(obj: &Bound<'_, PyAny>) -> Option<usize> {
    if let Some(a) = exact_ndarray(obj) {
        return Some(a.len() * a.dtype().itemsize());
    }
    obj.getattr(intern!(obj.py(), "nbytes"))
        .ok()?
        .extract()
        .ok()
}

/// Reduce_scatter with plain arrays or specifications, a predefined operator and
/// `recvcounts` given as a list or tuple of ints or a NumPy integer array (without them,
/// the counts must first be gathered: the Python implementation does that); None sends
/// the call there.
pub fn try_reduce_scatter(
    py: Python<'_>,
    comm: &mut Comm,
    sendbuf: &Bound<'_, PyAny>,
    recvbuf: &Bound<'_, PyAny>,
    recvcounts: Option<&Bound<'_, PyAny>>,
    red: Option<&Bound<'_, PyAny>>,
    algorithm: Option<&str>,
) -> Option<PyResult<()>> {
    let p = comm.size();
    let counts = ints(recvcounts?, p)?;
    let recv = arg(recvbuf, 1)??;
    let send = arg(sendbuf, 1)?;
    // The receive buffer's element type first, as the Python implementation reads it.
    let d = recv.elem().or_else(|| send.as_ref().and_then(Arg::elem))?;
    let o = operator(py, red)?;
    if !o.supports(d) {
        return None;
    }
    let bytes = in_bytes(&counts, d.size())?;
    let displs = prefix_sums(&bytes)?;
    Some(run(
        py,
        comm,
        CollArgs {
            op: CollOp::ReduceScatter,
            sendbuf: send.as_ref().map(Arg::obj),
            recvbuf: Some(recv.obj()),
            send_window: send.as_ref().and_then(Arg::window),
            recv_window: recv.window(),
            root: 0,
            block: None,
            counts: Some(bytes),
            displs: Some(displs),
            dtype: Some(Named::Value(d)),
            reduce_op: Some(Named::Value(o)),
            algorithm,
        },
    ))
}

/// A buffer argument of the fast path: a plain buffer, or a specification resolved to a
/// run of bytes of one (`buffer_spec::whole`).
pub(crate) enum Arg<'a, 'py> {
    Plain(&'a Bound<'py, PyAny>),
    Spec(Whole<'py>),
}

impl<'py> Arg<'_, 'py> {
    pub(crate) fn obj(&self) -> &Bound<'py, PyAny> {
        match self {
            Arg::Plain(o) => o,
            Arg::Spec(w) => &w.buf,
        }
    }

    fn nbytes(&self) -> Option<usize> {
        match self {
            Arg::Plain(o) => nbytes(o),
            Arg::Spec(w) => Some(w.len),
        }
    }

    fn elem(&self) -> Option<Dtype> {
        match self {
            Arg::Plain(o) => dtype(o),
            Arg::Spec(w) => w.elem,
        }
    }

    /// The (offset, length) in bytes the call may use, None for the whole buffer.
    pub(crate) fn window(&self) -> Option<(usize, usize)> {
        match self {
            Arg::Plain(_) => None,
            Arg::Spec(w) => Some((w.offset, w.len)),
        }
    }
}

/// A buffer or a specification (`Some(Some(..))`), IN_PLACE (`Some(None)`; checked first,
/// as mpi4py's exports an empty buffer), or None when only the Python implementation can
/// read the argument. A count in the specification is per block when `blocks` > 1.
pub(crate) fn arg<'a, 'py>(
    obj: &'a Bound<'py, PyAny>,
    blocks: usize,
) -> Option<Option<Arg<'a, 'py>>> {
    if is_in_place(obj) {
        Some(None)
    } else if is_buffer(obj) {
        Some(Some(Arg::Plain(obj)))
    } else {
        whole(obj, blocks).map(|w| Some(Arg::Spec(w)))
    }
}

/// One call on the fast path, or None when the arguments need the Python implementation.
#[allow(clippy::too_many_arguments)]
pub fn try_fast(
    py: Python<'_>,
    comm: &mut Comm,
    op: CollOp,
    sendbuf: Option<&Bound<'_, PyAny>>,
    recvbuf: &Bound<'_, PyAny>,
    root: usize,
    red: Option<&Bound<'_, PyAny>>,
    algorithm: Option<&str>,
) -> Option<PyResult<()>> {
    let p = comm.size();
    // Reduce and Gather: only the root has a receive buffer; Scatter: only the root a send
    // buffer (mpi4py ignores the others').
    let at_root = comm.rank() == root;
    let needs_recv = at_root || !matches!(op, CollOp::Reduce | CollOp::Gather);
    let sendbuf = if op == CollOp::Scatter && !at_root {
        None
    } else {
        sendbuf
    };
    // As mpi4py reads them, a count is per block in Gather's and Allgather's receive
    // specification, Scatter's send one, and Reduce_scatter_block's send one (its receive
    // one in place).
    let send_blocks = match op {
        CollOp::Scatter | CollOp::ReduceScatterBlock => p,
        _ => 1,
    };
    let send = match sendbuf {
        None => None,
        Some(s) => arg(s, send_blocks)?,
    };
    let in_place = sendbuf.is_some() && send.is_none();
    let recv_blocks = match op {
        CollOp::Allgather | CollOp::Gather => p,
        CollOp::ReduceScatterBlock if in_place => p,
        _ => 1,
    };
    // IN_PLACE as a receive buffer (Scatter's root) is the Python implementation's.
    let recv = if needs_recv {
        Some(arg(recvbuf, recv_blocks)??)
    } else {
        None
    };
    let (mut block, mut dt, mut rop) = (None, None, None);
    if op.reduces() {
        // The receive buffer's element type first, as the Python implementation reads it.
        let d = recv
            .as_ref()
            .and_then(Arg::elem)
            .or_else(|| send.as_ref().and_then(Arg::elem))?;
        let o = operator(py, red)?;
        if !o.supports(d) {
            return None; // the Python path falls back to MPI or raises
        }
        (dt, rop) = (Some(Named::Value(d)), Some(Named::Value(o)));
    }
    let whole_blocks = |a: Option<&Arg<'_, '_>>| -> Option<usize> {
        let n = a?.nbytes()?;
        n.is_multiple_of(p).then_some(n / p)
    };
    match op {
        CollOp::Allgather => block = Some(whole_blocks(recv.as_ref())?),
        CollOp::ReduceScatterBlock => {
            block = Some(if in_place {
                whole_blocks(recv.as_ref())?
            } else {
                recv.as_ref()?.nbytes()?
            });
        }
        // The root's buffer of p blocks sets the block; the others' size comes from their
        // own buffer, and the engine checks that all agree.
        CollOp::Gather if at_root => block = Some(whole_blocks(recv.as_ref())?),
        CollOp::Scatter if at_root => block = Some(whole_blocks(send.as_ref())?),
        _ => {}
    }
    let (send, recv) = if op == CollOp::Bcast {
        (None, recv)
    } else {
        (send, recv)
    };
    Some(run(
        py,
        comm,
        CollArgs {
            op,
            sendbuf: send.as_ref().map(Arg::obj),
            recvbuf: recv.as_ref().map(Arg::obj),
            send_window: send.as_ref().and_then(Arg::window),
            recv_window: recv.as_ref().and_then(Arg::window),
            root,
            block,
            counts: None,
            displs: None,
            dtype: dt,
            reduce_op: rop,
            algorithm,
        },
    ))
}
