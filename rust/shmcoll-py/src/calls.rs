//! The collective methods of `CommBase` (mpi4py's names) come from one table: each row of
//! `comm_methods!` (the table is in engine.rs) names the Python method, its parameters
//! and the `Route` that runs it, and becomes a native method that passes what it was given
//! to `call`. A call enters Rust once and stays there:
//!
//! 1. the scalar arguments are converted (given.rs; a bad one rejects the call on every
//!    rank);
//! 2. a call with `compress=` or `traffic=` goes to Python's compression layer
//!    (`Comm._compressed`, `shmcoll.compress`): a compressed call is a composition of
//!    collectives around codecs that run in Python (NumPy, numcodecs, CuPy), each of which
//!    enters the engine once again through these methods;
//! 3. otherwise the route reads the buffers (natively, or through the resolver for the
//!    forms only Python reads, resolver.rs) and runs the call;
//! 4. an argument the resolver declines is settled here: `ServedByMPI` runs the call on
//!    MPI once every rank agreed to (`on_mpi`), anything else rejects the call on every
//!    rank and raises this rank's error (`reject`). Calls made in Python (the persistent
//!    requests' creation, the object collectives, the compressed calls) reach the same two
//!    rules through `CommBase._on_mpi` and `_reject_with`.
//!
//! PyO3 takes one `#[pymethods]` block per class, so the macro emits the whole block: the
//! table's methods and the others, which follow the table.

use pyo3::prelude::*;
use pyo3::types::{PyModule, PyTuple};

use shmcoll_coll::{CollOp, Comm, Error};

use crate::given::{Given, Scalars};
use crate::resolver::Declined;

/// How a collective method reads its arguments and runs.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Route {
    /// Alltoall: a count per rank (alltoall.rs).
    Alltoall,
    /// Alltoallv: vector specifications on both sides (alltoall.rs).
    Alltoallv,
    /// A collective with one buffer per side (one_buffer.rs); Bcast's `buf` is its
    /// receive buffer.
    OneBuffer(CollOp),
    /// Reduce_scatter with its `recvcounts` (one_buffer.rs).
    ReduceScatter,
    /// Allgatherv, Gatherv, Scatterv: one vector side (vector_spec.rs).
    Vector(CollOp),
}

/// What `call` needs of the communicator object (engine.rs implements it for
/// `CommBase`): the Python object, and its engine for the length of `f`.
pub(crate) trait Engine<'py> {
    fn obj(&self) -> &Bound<'py, PyAny>;
    fn with_comm<R>(&self, f: impl FnOnce(&mut Comm) -> R) -> PyResult<R>;
}

/// One call of collective `name` (a row of the table): `positional` names its positional
/// parameters in order (for the compression layer and MPI, which take them as mpi4py).
pub(crate) fn call<'py>(
    slf: &impl Engine<'py>,
    name: &'static str,
    route: Route,
    positional: &[&str],
    given: Given<'_, 'py>,
) -> PyResult<()> {
    let py = slf.obj().py();
    let a = match given.convert() {
        Ok(a) => a,
        Err(bad) => return Err(slf.with_comm(|c| crate::given::reject(py, c, name, &bad))?),
    };
    if given.compress.is_some() || a.traffic.is_some() {
        let args = arguments(py, &given, positional, &a, false)?;
        return slf
            .obj()
            .call_method1("_compressed", (name, args, given.compress, &a.traffic))
            .map(|_| ());
    }
    let none = py.None().into_bound(py);
    let arg = |o: Option<&Bound<'py, PyAny>>| o.map_or_else(|| none.clone(), Bound::clone);
    let (send, recv) = (arg(given.sendbuf), arg(given.recvbuf));
    let algorithm = a.algorithm.as_deref();
    let ran = slf.with_comm(|comm| match route {
        Route::Alltoall => crate::alltoall::alltoall(py, comm, &send, &recv, &a),
        Route::Alltoallv => crate::alltoall::alltoallv(py, comm, &send, &recv, &a),
        Route::OneBuffer(CollOp::Bcast) => {
            let buf = arg(given.buf);
            crate::one_buffer::collective(
                py,
                comm,
                CollOp::Bcast,
                None,
                &buf,
                a.root,
                None,
                algorithm,
            )
        }
        Route::OneBuffer(op) => crate::one_buffer::collective(
            py,
            comm,
            op,
            Some(&send),
            &recv,
            a.root,
            given.op,
            algorithm,
        ),
        Route::ReduceScatter => crate::one_buffer::reduce_scatter(
            py,
            comm,
            &send,
            &recv,
            given.recvcounts.filter(|c| !c.is_none()),
            given.op,
            algorithm,
        ),
        Route::Vector(op) => {
            crate::vector_spec::vector_collective(py, comm, op, &send, &recv, a.root, algorithm)
        }
    })?;
    match ran {
        Ok(done) => done,
        Err(Declined(e)) => settle(slf, name, e, || arguments(py, &given, positional, &a, true)),
    }
}

/// The positional arguments of a call as mpi4py takes them (the root converted; for MPI,
/// the operator SUM where none was given).
fn arguments<'py>(
    py: Python<'py>,
    given: &Given<'_, 'py>,
    positional: &[&str],
    a: &Scalars,
    for_mpi: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = positional
        .iter()
        .map(|&n| match (n, given.named(n)) {
            ("root", _) => Ok(a.root.into_pyobject(py)?.into_any()),
            ("op", None) if for_mpi => PyModule::import(py, "shmcoll.ops")?.getattr("SUM"),
            ("op", Some(o)) if for_mpi && o.is_none() => {
                PyModule::import(py, "shmcoll.ops")?.getattr("SUM")
            }
            (_, Some(o)) => Ok(o.clone()),
            (_, None) => Ok(py.None().into_bound(py)),
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, items)
}

/// Settle a call whose argument the resolver declined with `e`: `ServedByMPI` runs it on
/// MPI (`on_mpi`), anything else rejects it on every rank.
fn settle<'py>(
    slf: &impl Engine<'py>,
    name: &str,
    e: PyErr,
    mpi_args: impl FnOnce() -> PyResult<Bound<'py, PyTuple>>,
) -> PyResult<()> {
    let py = slf.obj().py();
    let served_by_mpi = PyModule::import(py, "shmcoll.errors")?.getattr("ServedByMPI")?;
    if !e.is_instance(py, &served_by_mpi) {
        return Err(slf.with_comm(|c| reject(py, c, name, e))?);
    }
    let why = e.value(py).str()?.to_string();
    on_mpi(slf, name, &why, &mpi_args()?).map(|_| ())
}

/// Run call `name` (a collective, or the creation of its persistent request, `<name>_init`)
/// on the wrapped MPI communicator with `args`, `why` being what shmcoll does not serve:
/// every rank agrees first (a rank on MPI and a rank in the engine would wait for each
/// other), then `Comm._served_by_mpi` makes the call. Without an MPI communicator, every
/// rank rejects the call (UnsupportedError).
pub(crate) fn on_mpi<'py>(
    slf: &impl Engine<'py>,
    name: &str,
    why: &str,
    args: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.obj().py();
    let agreed_as = name.strip_suffix("_init").unwrap_or(name);
    if slf.obj().getattr("_mpi")?.is_none() {
        let msg = format!(
            "{name}: {why} is not supported by shmcoll, and there is no MPI to fall back to"
        );
        let cls = PyModule::import(py, "shmcoll.errors")?.getattr("UnsupportedError")?;
        let unsupported = PyErr::from_value(cls.call1((msg,))?);
        return Err(slf.with_comm(|c| reject(py, c, agreed_as, unsupported))?);
    }
    slf.with_comm(|c| crate::collectives::agree_fallback(py, c, agreed_as, why))??;
    slf.obj().call_method1("_served_by_mpi", (name, why, args))
}

/// This rank rejects call `op` for the exception `e` (an argument it cannot take): the
/// peers raise `PeerRejectedError` with its type and message, and this rank raises `e` as
/// a shmcoll error of the same built-in family (`errors.as_shmcoll_error`), unless the
/// call failed for a reason that outweighs it (`collectives::outcome`).
pub(crate) fn reject(py: Python<'_>, comm: &mut Comm, op: &str, e: PyErr) -> PyErr {
    let text = format!(
        "{}: {}",
        e.get_type(py)
            .name()
            .map_or_else(|_| "?".into(), |n| n.to_string()),
        e.value(py)
            .str()
            .map_or_else(|_| String::new(), |s| s.to_string())
    );
    let own = crate::errors::as_shmcoll(py, e);
    let class = |name: &str| {
        PyModule::import(py, "shmcoll.errors")
            .and_then(|m| m.getattr(name))
            .is_ok_and(|c| own.is_instance(py, &c))
    };
    let err = if class("BadBufferError") {
        Error::Buffer(text)
    } else if class("UnsupportedError") {
        Error::Unsupported(text)
    } else {
        Error::InvalidArgument(text)
    };
    let r = py.detach(|| crate::collectives::reject(comm, op, err));
    crate::collectives::outcome(py, r, own)
}

/// The one `#[pymethods]` block of `CommBase`: the collective methods from the table
/// (`collectives { ... }`: doc comment, Python name, Rust name, an optional
/// `text_signature`, the positional parameters (`=None`: optional) `;` the keyword-only
/// ones (all default to None), `=>` the route), then the other methods as written.
macro_rules! comm_methods {
    (
        collectives {
            $(
                $(#[doc = $doc:literal])*
                $name:literal $method:ident $(text $text:literal)?
                    ($($pos:ident $(= $pdef:ident)?),+ ; $($kw:ident),+) => $route:expr;
            )+
        }
        $($rest:tt)*
    ) => {
        #[pymethods]
        impl CommBase {
            $(
                $(#[doc = $doc])*
                #[pyo3(name = $name, signature = ($($pos $(= $pdef)?),+ , * , $($kw = None),+))]
                $(#[pyo3(text_signature = $text)])?
                #[allow(clippy::too_many_arguments)]
                fn $method(
                    slf: &Bound<'_, Self>,
                    $($pos: Option<&Bound<'_, PyAny>>,)+
                    $($kw: Option<&Bound<'_, PyAny>>),+
                ) -> PyResult<()> {
                    $crate::calls::call(
                        slf,
                        $name,
                        $route,
                        &[$(stringify!($pos)),+],
                        $crate::given::Given { $($pos,)+ $($kw,)+ ..Default::default() },
                    )
                }
            )+
            $($rest)*
        }
    };
}
pub(crate) use comm_methods;
