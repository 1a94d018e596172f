//! The arguments of the collectives as the caller gave them (`Given`), and the scalar ones
//! (a root, an algorithm name...) converted in the call's body rather than by PyO3 before it.
//!
//! Why: PyO3 converts typed parameters before the method runs, where a failure cannot be
//! published to the peers, which would then wait for this rank until their deadline. Taken
//! as the objects they are and converted here, a bad one becomes the call's rejection: the
//! peers raise `PeerRejectedError` in the same call, and this rank raises `ArgumentError`
//! (a ValueError) or `ArgumentTypeError` (also a TypeError).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyString;

use shmcoll_coll::{Comm, Error};

/// An argument this rank rejects: the message, and whether its type was wrong (else its
/// value).
#[derive(Debug)]
pub(crate) struct BadArg {
    msg: String,
    wrong_type: bool,
}

impl BadArg {
    /// The exception this rank raises.
    pub(crate) fn to_py(&self, py: Python<'_>) -> PyErr {
        crate::errors::argument_error(py, &self.msg, self.wrong_type)
    }

    /// The rejection the peers see.
    fn to_engine(&self) -> Error {
        Error::InvalidArgument(self.msg.clone())
    }
}

/// A rank argument (`root`): an integer of any integer type (not a bool, as for the object
/// collectives) in `0..size` (the engine checks the upper bound on every rank); None means
/// rank 0.
pub(crate) fn rank(obj: Option<&Bound<'_, PyAny>>, what: &str) -> Result<usize, BadArg> {
    let Some(obj) = obj else { return Ok(0) };
    if obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(BadArg {
            msg: format!("{what} must be an integer, not bool"),
            wrong_type: true,
        });
    }
    match obj.extract::<i64>() {
        Ok(v) => usize::try_from(v).map_err(|_| BadArg {
            msg: format!("{what} {v} is not a rank (ranks are 0 and up)"),
            wrong_type: false,
        }),
        Err(e) if e.is_instance_of::<PyTypeError>(obj.py()) => Err(BadArg {
            msg: format!(
                "{what} must be an integer, not {}",
                obj.get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ),
            wrong_type: true,
        }),
        Err(_) => Err(BadArg {
            msg: format!("{what} {obj} is not a rank of this communicator"),
            wrong_type: false,
        }),
    }
}

/// A name argument (`algorithm`, `order`, `store`, `traffic`): a string or None.
pub(crate) fn name(obj: Option<&Bound<'_, PyAny>>, what: &str) -> Result<Option<String>, BadArg> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    match obj.cast::<PyString>() {
        Ok(s) => s.to_str().map(|s| Some(s.to_owned())).map_err(|_| BadArg {
            msg: format!("{what} is not valid text"),
            wrong_type: false,
        }),
        Err(_) => Err(BadArg {
            msg: format!(
                "{what} must be a string or None, not {}",
                obj.get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ),
            wrong_type: true,
        }),
    }
}

/// The call `op` (a collective's name, "Alltoall" or "Alltoallv") is rejected on this rank
/// for `bad`: take part in it as a rejection (the peers raise too), then raise here (this
/// rank's own error, unless the call failed for a reason that outweighs it).
pub(crate) fn reject(py: Python<'_>, comm: &mut Comm, op: &str, bad: &BadArg) -> PyErr {
    let err = bad.to_engine();
    let r = py.detach(|| crate::collectives::reject(comm, op, err));
    crate::collectives::outcome(py, r, bad.to_py(py))
}

/// The scalar arguments of one call, converted.
#[derive(Debug, Default)]
pub(crate) struct Scalars {
    pub root: usize,
    pub algorithm: Option<String>,
    pub order: Option<String>,
    pub store: Option<String>,
    pub traffic: Option<String>,
}

/// The arguments of one collective call as the caller gave them (None: not given, or a
/// parameter the method does not have). Fields are named as the methods' parameters, so
/// that the table of methods (calls.rs) fills them by name.
#[derive(Clone, Copy, Default)]
pub(crate) struct Given<'a, 'py> {
    pub buf: Option<&'a Bound<'py, PyAny>>,
    pub sendbuf: Option<&'a Bound<'py, PyAny>>,
    pub recvbuf: Option<&'a Bound<'py, PyAny>>,
    pub recvcounts: Option<&'a Bound<'py, PyAny>>,
    pub op: Option<&'a Bound<'py, PyAny>>,
    pub root: Option<&'a Bound<'py, PyAny>>,
    pub algorithm: Option<&'a Bound<'py, PyAny>>,
    pub order: Option<&'a Bound<'py, PyAny>>,
    pub store: Option<&'a Bound<'py, PyAny>>,
    pub compress: Option<&'a Bound<'py, PyAny>>,
    pub traffic: Option<&'a Bound<'py, PyAny>>,
}

impl<'a, 'py> Given<'a, 'py> {
    /// The object given for the parameter called `name` (None for an unknown name).
    pub(crate) fn named(&self, name: &str) -> Option<&'a Bound<'py, PyAny>> {
        match name {
            "buf" => self.buf,
            "sendbuf" => self.sendbuf,
            "recvbuf" => self.recvbuf,
            "recvcounts" => self.recvcounts,
            "op" => self.op,
            "root" => self.root,
            _ => None,
        }
    }

    /// Every scalar argument converted, or the first that is bad. Most calls give none of
    /// them: that case costs one comparison per argument (it is on every call's path).
    pub(crate) fn convert(&self) -> Result<Scalars, BadArg> {
        let given = |o: Option<&Bound<'_, PyAny>>| o.is_some_and(|o| !o.is_none());
        if !(given(self.root)
            || given(self.algorithm)
            || given(self.order)
            || given(self.store)
            || given(self.traffic))
        {
            return Ok(Scalars::default());
        }
        Ok(Scalars {
            root: rank(self.root, "root")?,
            algorithm: name(self.algorithm, "algorithm")?,
            order: name(self.order, "order")?,
            store: name(self.store, "store")?,
            traffic: name(self.traffic, "traffic")?,
        })
    }
}
