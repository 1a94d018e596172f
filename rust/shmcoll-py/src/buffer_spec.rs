//! mpi4py's single-buffer specifications (`[buf, datatype]`, `[buf, count]`,
//! `[buf, count, datatype]`, `[buf, (count, displ), datatype]`, items after the buffer in
//! any order) resolved natively, as `shmcoll.buffers.parse_whole` and `parse_simple`
//! resolve them, for the common case: a buffer with an item size (NumPy array,
//! memoryview), non-negative int counts, and a datatype that `datatypes` caches. Anything
//! else returns None, and the resolver (resolver.rs) reads it or raises (`side`). This is
//! the commonest mpi4py idiom (`comm.Bcast([data, MPI.INT], root=0)`), and the Python
//! parser costs several times MPI's whole call.
//!
//! Counts, displacements and sizes here are the caller's, so they are computed with checked
//! arithmetic only (the lint below keeps it so): one that does not fit sends the call to
//! the Python parser, which raises.
#![deny(clippy::arithmetic_side_effects)]

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};
use pyo3::PyTypeInfo;

use shmcoll_kernels::Dtype;

use crate::datatypes::datatype_info;
use crate::pyobj::{dtype, is_buffer, is_in_place, means_in_place, nbytes};
use crate::pyobj::{is_list_or_tuple, item_size, list_items};
use crate::resolver::{self, Declined};

/// A specification's items, read as `shmcoll.buffers._items` reads them.
struct Items<'py> {
    buf: Bound<'py, PyAny>,
    count: Option<usize>,
    displ: usize,
    size: usize,
    elem: Option<Dtype>,
}

fn int(obj: &Bound<'_, PyAny>) -> bool {
    PyInt::is_type_of(obj) && !PyBool::is_type_of(obj)
}

/// The items of a list or tuple specification (None for anything else).
fn items<'py>(spec: &Bound<'py, PyAny>) -> Option<Items<'py>> {
    let items = list_items(spec)?;
    let (buf, rest) = items.split_first()?;
    if rest.len() > 3 || !is_buffer(buf) {
        return None;
    }
    let (mut count, mut displ, mut datatype) = (None, 0, None);
    for item in rest {
        if int(item) && count.is_none() {
            count = Some(item.extract::<usize>().ok()?);
        } else if is_list_or_tuple(item) && item.len().ok()? == 2 && count.is_none() {
            let (c, d) = (item.get_item(0).ok()?, item.get_item(1).ok()?);
            if !(int(&c) && int(&d)) {
                return None;
            }
            count = Some(c.extract::<usize>().ok()?);
            displ = d.extract::<usize>().ok()?;
        } else if item.is_none() {
            // No datatype: the buffer's own, as mpi4py reads it.
        } else if datatype.is_none() {
            datatype = Some(item);
        } else {
            return None;
        }
    }
    let (size, elem) = match datatype {
        Some(dt) => {
            let i = datatype_info(dt)?;
            (i.size, i.elem)
        }
        None => (item_size(buf)?, dtype(buf)),
    };
    Some(Items {
        buf: buf.clone(),
        count,
        displ,
        size,
        elem,
    })
}

/// A specification resolved to a run of bytes of its buffer.
#[derive(Debug)]
pub(crate) struct Whole<'py> {
    pub buf: Bound<'py, PyAny>,
    /// Where the run starts in the buffer, and its length, in bytes.
    pub offset: usize,
    pub len: usize,
    /// The element type (the datatype's, or the buffer's without one).
    pub elem: Option<Dtype>,
    /// Bytes of one element (the datatype's, or the buffer's item); 0 where unknown.
    pub size: usize,
}

/// `parse_whole(spec, blocks)` for a list or tuple specification: a count is per block
/// (`blocks` > 1 for Gather's and Scatter's root buffers, as mpi4py reads them).
pub(crate) fn whole<'py>(spec: &Bound<'py, PyAny>, blocks: usize) -> Option<Whole<'py>> {
    let it = items(spec)?;
    let total = nbytes(&it.buf)?;
    let offset = it.displ.checked_mul(it.size)?;
    let len = match it.count {
        // A count is inferred only from whole elements (mpi4py: "cannot infer count,
        // buffer length is not a multiple of datatype extent"): the Python parser raises.
        // The same for the blocks a count would be per (mpi4py: "number of entries is not
        // a multiple of required number of blocks").
        None => Some(total.checked_sub(offset)?).filter(|n| {
            n.checked_rem(it.size) == Some(0)
                && n.checked_div(it.size)
                    .and_then(|e| e.checked_rem(blocks.max(1)))
                    == Some(0)
        })?,
        Some(c) => c.checked_mul(it.size)?.checked_mul(blocks)?,
    };
    if offset.checked_add(len)? > total {
        return None;
    }
    // Part of a buffer is a byte view of it in Python, which needs C order: leave arrays
    // of more than one dimension to it.
    let part = offset != 0 || len != total;
    if part
        && it
            .buf
            .getattr(intern!(spec.py(), "ndim"))
            .ok()?
            .extract::<usize>()
            .ok()?
            > 1
    {
        return None;
    }
    Some(Whole {
        buf: it.buf,
        offset,
        len,
        elem: it.elem,
        size: it.size,
    })
}

/// `parse_simple(spec, size)` (Alltoall's reading: a count is per rank) for a list or
/// tuple specification without a displacement: the buffer and its bytes per rank.
pub(crate) fn per_rank<'py>(
    spec: &Bound<'py, PyAny>,
    ranks: usize,
) -> Option<(Bound<'py, PyAny>, usize)> {
    let it = items(spec)?;
    if it.displ != 0 || it.size == 0 || ranks == 0 {
        return None;
    }
    let bpp = match it.count {
        Some(c) => c.checked_mul(it.size)?,
        None => {
            let total = nbytes(&it.buf)?;
            let elems = total.checked_div(it.size)?;
            if total.checked_rem(it.size)? != 0 || elems.checked_rem(ranks)? != 0 {
                return None;
            }
            elems.checked_div(ranks)?.checked_mul(it.size)?
        }
    };
    Some((it.buf, bpp))
}

/// `(buffer, offset, bytes, element type name or None)` of a single-buffer specification,
/// or None when the Python parser must handle it (exposed for the agreement tests).
#[pyfunction]
#[pyo3(signature = (spec, blocks=1))]
#[allow(clippy::type_complexity)]
pub fn whole_spec<'py>(
    spec: &Bound<'py, PyAny>,
    blocks: usize,
) -> Option<(Bound<'py, PyAny>, usize, usize, Option<&'static str>)> {
    whole(spec, blocks).map(|w| (w.buf, w.offset, w.len, w.elem.map(Dtype::name)))
}

/// `(buffer, bytes per rank)` of an Alltoall specification, or None (for the tests).
#[pyfunction]
pub fn per_rank_spec<'py>(
    spec: &Bound<'py, PyAny>,
    ranks: usize,
) -> Option<(Bound<'py, PyAny>, usize)> {
    per_rank(spec, ranks)
}

/// A buffer argument: a plain buffer, a specification resolved natively to a run of bytes
/// of one (`buffer_spec::whole`), or one the resolver read (the exact bytes it names; its
/// element type is the resolver's to tell).
pub(crate) enum Arg<'a, 'py> {
    Plain(&'a Bound<'py, PyAny>),
    Spec(Whole<'py>),
    Resolved(Whole<'py>),
}

impl<'py> Arg<'_, 'py> {
    pub(crate) fn obj(&self) -> &Bound<'py, PyAny> {
        match self {
            Arg::Plain(o) => o,
            Arg::Spec(w) | Arg::Resolved(w) => &w.buf,
        }
    }

    pub(crate) fn nbytes(&self) -> Option<usize> {
        match self {
            Arg::Plain(o) => nbytes(o),
            Arg::Spec(w) | Arg::Resolved(w) => Some(w.len),
        }
    }

    /// Bytes of one element, where known.
    pub(crate) fn item_size(&self) -> Option<usize> {
        match self {
            Arg::Plain(o) => item_size(o),
            Arg::Spec(w) => Some(w.size),
            Arg::Resolved(_) => None,
        }
        .filter(|&n| n > 0)
    }

    pub(crate) fn elem(&self) -> Option<Dtype> {
        match self {
            Arg::Plain(o) => dtype(o),
            Arg::Spec(w) => w.elem,
            Arg::Resolved(_) => None,
        }
    }

    /// The (offset, length) in bytes the call may use, None for the whole buffer.
    pub(crate) fn window(&self) -> Option<(usize, usize)> {
        match self {
            Arg::Plain(_) | Arg::Resolved(_) => None,
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

/// One buffer argument: IN_PLACE (None) where `may_be_in_place`, else read natively, else
/// by the resolver (which raises what is wrong with it). `needs_len`: the call needs its
/// length (a plain buffer that does not tell it natively goes to the resolver).
pub(crate) fn side<'a, 'py>(
    obj: &'a Bound<'py, PyAny>,
    blocks: usize,
    may_be_in_place: bool,
    needs_len: bool,
) -> Result<Option<Arg<'a, 'py>>, Declined> {
    if may_be_in_place && means_in_place(obj) {
        return Ok(None);
    }
    if let Some(Some(a)) = arg(obj, blocks) {
        if !needs_len || a.nbytes().is_some() {
            return Ok(Some(a));
        }
    }
    let (buf, len) = resolver::whole(obj, blocks)?;
    Ok(Some(Arg::Resolved(Whole {
        buf,
        offset: 0,
        len,
        elem: None,
        size: 0,
    })))
}
