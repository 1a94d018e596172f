//! Bindings of the bq, cast and mpc codecs (shmcoll_codec::{bq, cast, mpc}).
//!
//! Thin on purpose: the Python classes in `shmcoll.codecs` check dtypes and shapes and
//! allocate outputs; these functions borrow contiguous buffers, check sizes and alignment,
//! and run the Rust codec with the GIL released for large inputs.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use shmcoll_codec::{bq::Bq, cast, mpc, CodecError};

use crate::buffer::{borrow, Borrowed};
use crate::errors::codec_to_py;

/// Inputs at least this large are coded with the GIL released.
const DETACH_BYTES: usize = 1 << 16;

/// A borrowed buffer seen as `len` elements of `size` bytes at `addr`: checked for size
/// and alignment, so that slices of `T` can be built on it.
#[derive(Clone, Copy)]
struct Span {
    addr: usize,
    len: usize,
}

fn span(b: &Borrowed, size: usize, what: &str) -> Result<Span, CodecError> {
    let raw = b.raw();
    if !raw.len.is_multiple_of(size) || !raw.addr.is_multiple_of(size) {
        return Err(CodecError::InvalidArgument(format!(
            "the {what} is not an aligned array of {size}-byte elements ({} bytes at {:#x})",
            raw.len, raw.addr
        )));
    }
    Ok(Span {
        addr: raw.addr,
        len: raw.len / size,
    })
}

/// The span of `s` counted in bytes.
fn bytes_of(s: Span, size: usize) -> Span {
    Span {
        addr: s.addr,
        len: s.len * size,
    }
}

impl Span {
    /// # Safety
    /// The buffer the span came from is still borrowed, holds `len` aligned `T`s, and no
    /// mutable slice of it is alive.
    unsafe fn slice<'a, T>(self) -> &'a [T] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: per the contract above.
        unsafe { std::slice::from_raw_parts(self.addr as *const T, self.len) }
    }

    /// # Safety
    /// As for `slice`, the buffer is writable, and no other slice of it is alive.
    unsafe fn slice_mut<'a, T>(self) -> &'a mut [T] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: per the contract above.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut T, self.len) }
    }
}

/// An error unless the byte spans `read` and `written` are disjoint: a codec reads its
/// input while it writes its output, and a `&[u8]` and a `&mut [T]` of the same bytes
/// must never both be alive.
fn disjoint(py: Python<'_>, read: Span, written: Span, what: &str) -> PyResult<()> {
    if read.len > 0
        && written.len > 0
        && written.addr < read.addr + read.len
        && read.addr < written.addr + written.len
    {
        return Err(codec_to_py(
            py,
            CodecError::InvalidArgument(format!("the output {what} overlaps the input")),
        ));
    }
    Ok(())
}

/// Run `f` with the GIL released when `bytes` is large.
fn run<T: Send>(py: Python<'_>, bytes: usize, f: impl FnOnce() -> T + Send) -> T {
    if bytes >= DETACH_BYTES {
        py.detach(f)
    } else {
        f()
    }
}

/// Write `need` bytes through `code` into `out` (returns the count) or into new bytes.
/// `input` is the span (in bytes) that `code` reads, which `out` must not overlap.
fn emit<'py>(
    py: Python<'py>,
    need: usize,
    input: Span,
    out: Option<&Bound<'py, PyAny>>,
    code: impl Fn(&mut [u8]) -> Result<usize, CodecError> + Send + Sync,
) -> PyResult<Py<PyAny>> {
    match out {
        Some(o) => {
            let b = borrow(py, o, true, "output buffer")?;
            let dst = span(&b, 1, "output buffer").map_err(|e| codec_to_py(py, e))?;
            disjoint(py, input, dst, "buffer")?;
            // SAFETY: `b` keeps the writable output borrowed for this call, and it does not
            // overlap the input that `code` reads (checked above).
            let n = run(py, input.len, || code(unsafe { dst.slice_mut::<u8>() }))
                .map_err(|e| codec_to_py(py, e))?;
            Ok(n.into_pyobject(py)?.into_any().unbind())
        }
        None => {
            let bytes = PyBytes::new_with(py, need, |buf| {
                run(py, input.len, || code(buf))
                    .map(|_| ())
                    .map_err(|e| codec_to_py(py, e))
            })?;
            Ok(bytes.into_any().unbind())
        }
    }
}

/// An error unless `n` elements of `size` bytes could be one array (at most isize::MAX
/// bytes): the codecs' size formulas cannot overflow below that.
fn array_count(py: Python<'_>, n: usize, size: usize) -> PyResult<usize> {
    if n > isize::MAX as usize / size {
        return Err(codec_to_py(
            py,
            CodecError::InvalidArgument(format!(
                "{n} elements of {size} bytes are more than any array holds"
            )),
        ));
    }
    Ok(n)
}

/// Bytes of the bq stream of `n` float32 elements.
#[pyfunction]
fn bq_compressed_size(py: Python<'_>, n: usize, bits: u32, block: usize) -> PyResult<usize> {
    let n = array_count(py, n, 4)?;
    Ok(Bq::new(bits, block)
        .map_err(|e| codec_to_py(py, e))?
        .compressed_size(n))
}

/// Encode a contiguous float32 buffer; returns bytes, or the byte count written to `out`.
#[pyfunction]
#[pyo3(signature = (src, bits, block, out=None))]
fn bq_encode<'py>(
    py: Python<'py>,
    src: &Bound<'py, PyAny>,
    bits: u32,
    block: usize,
    out: Option<&Bound<'py, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let q = Bq::new(bits, block).map_err(|e| codec_to_py(py, e))?;
    let s = borrow(py, src, false, "bq input")?;
    let sp = span(&s, 4, "bq input").map_err(|e| codec_to_py(py, e))?;
    // SAFETY: `s` keeps the float32 input borrowed until this function returns.
    let x = unsafe { sp.slice::<f32>() };
    emit(py, q.compressed_size(sp.len), bytes_of(sp, 4), out, |dst| {
        q.encode(x, dst)
    })
}

/// Decode a bq stream into the float32 buffer `out` (its length gives n).
#[pyfunction]
fn bq_decode(
    py: Python<'_>,
    src: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    bits: u32,
    block: usize,
) -> PyResult<()> {
    let q = Bq::new(bits, block).map_err(|e| codec_to_py(py, e))?;
    let s = borrow(py, src, false, "bq stream")?;
    let o = borrow(py, out, true, "output array")?;
    let (ss, os) = (
        span(&s, 1, "bq stream").map_err(|e| codec_to_py(py, e))?,
        span(&o, 4, "output array").map_err(|e| codec_to_py(py, e))?,
    );
    disjoint(py, ss, bytes_of(os, 4), "array")?;
    // SAFETY: `s` and `o` keep both buffers borrowed (the output writable) for the call,
    // and they do not overlap (checked above).
    let (src, dst) = unsafe { (ss.slice::<u8>(), os.slice_mut::<f32>()) };
    run(py, 4 * os.len, || q.decode(src, dst)).map_err(|e| codec_to_py(py, e))
}

/// Narrow a contiguous float32 or float64 buffer (by its itemsize) to "bfloat16" or
/// "float16"; returns bytes, or the byte count written to `out`.
#[pyfunction]
#[pyo3(signature = (src, dtype, out=None))]
fn cast_encode<'py>(
    py: Python<'py>,
    src: &Bound<'py, PyAny>,
    dtype: &str,
    out: Option<&Bound<'py, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let fmt = cast::Format::parse(dtype).map_err(|e| codec_to_py(py, e))?;
    let s = borrow(py, src, false, "cast input")?;
    let wide = s.itemsize();
    if wide != 4 && wide != 8 {
        return Err(codec_to_py(
            py,
            CodecError::InvalidArgument(format!(
                "cast narrows float32 or float64, not {wide}-byte items"
            )),
        ));
    }
    let sp = span(&s, wide, "cast input").map_err(|e| codec_to_py(py, e))?;
    let need = cast::compressed_size(sp.len);
    if wide == 4 {
        // SAFETY: `s` keeps the input borrowed until this function returns; its items are
        // 4 bytes (checked above) and aligned (`span`).
        let x = unsafe { sp.slice::<f32>() };
        emit(py, need, bytes_of(sp, 4), out, |d| {
            cast::encode_f32(fmt, x, d)
        })
    } else {
        // SAFETY: as above, with 8-byte items.
        let x = unsafe { sp.slice::<f64>() };
        emit(py, need, bytes_of(sp, 8), out, |d| {
            cast::encode_f64(fmt, x, d)
        })
    }
}

/// Widen a cast stream into `out`, float32 or float64 by its itemsize.
#[pyfunction]
fn cast_decode(
    py: Python<'_>,
    src: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    dtype: &str,
) -> PyResult<()> {
    let fmt = cast::Format::parse(dtype).map_err(|e| codec_to_py(py, e))?;
    let s = borrow(py, src, false, "cast stream")?;
    let o = borrow(py, out, true, "output array")?;
    let wide = o.itemsize();
    if wide != 4 && wide != 8 {
        return Err(codec_to_py(
            py,
            CodecError::InvalidArgument(format!(
                "cast widens to float32 or float64, not {wide}-byte items"
            )),
        ));
    }
    let ss = span(&s, 1, "cast stream").map_err(|e| codec_to_py(py, e))?;
    let os = span(&o, wide, "output array").map_err(|e| codec_to_py(py, e))?;
    disjoint(py, ss, bytes_of(os, wide), "array")?;
    // SAFETY: `s` and `o` keep both buffers borrowed (the output writable) for the call,
    // and they do not overlap (checked above).
    let src = unsafe { ss.slice::<u8>() };
    let r = if wide == 4 {
        // SAFETY: as above; the output's items are 4 bytes.
        let dst = unsafe { os.slice_mut::<f32>() };
        run(py, 4 * os.len, || cast::decode_f32(fmt, src, dst))
    } else {
        // SAFETY: as above; the output's items are 8 bytes.
        let dst = unsafe { os.slice_mut::<f64>() };
        run(py, 8 * os.len, || cast::decode_f64(fmt, src, dst))
    };
    r.map_err(|e| codec_to_py(py, e))
}

/// The largest mpc stream of `n` words of `word` bytes.
#[pyfunction]
fn mpc_max_compressed_size(py: Python<'_>, n: usize, word: usize) -> PyResult<usize> {
    mpc::Mpc::new(word, 1).map_err(|e| codec_to_py(py, e))?;
    Ok(mpc::max_compressed_size(array_count(py, n, word)?, word))
}

/// Encode the words of a contiguous buffer (`word` 4 or 8 bytes, delta distance `dim`);
/// returns bytes, or the byte count written to `out` (which must hold the worst case).
#[pyfunction]
#[pyo3(signature = (src, word, dim=1, out=None))]
fn mpc_encode<'py>(
    py: Python<'py>,
    src: &Bound<'py, PyAny>,
    word: usize,
    dim: usize,
    out: Option<&Bound<'py, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let c = mpc::Mpc::new(word, dim).map_err(|e| codec_to_py(py, e))?;
    let s = borrow(py, src, false, "mpc input")?;
    let sp = span(&s, 1, "mpc input").map_err(|e| codec_to_py(py, e))?;
    // SAFETY: `s` keeps the input borrowed until this function returns.
    let x = unsafe { sp.slice::<u8>() };
    if out.is_some() {
        return emit(py, 0, sp, out, |d| c.encode(x, d));
    }
    if !sp.len.is_multiple_of(word) {
        return Err(codec_to_py(
            py,
            CodecError::InvalidArgument(format!(
                "mpc input of {} bytes is not a whole number of {word}-byte words",
                sp.len
            )),
        ));
    }
    let mut v = vec![0u8; mpc::max_compressed_size(sp.len / word, word)];
    let k = run(py, sp.len, || c.encode(x, &mut v)).map_err(|e| codec_to_py(py, e))?;
    Ok(PyBytes::new(py, &v[..k]).into_any().unbind())
}

/// `(word, dim, n)` from an mpc stream's header.
#[pyfunction]
fn mpc_header(py: Python<'_>, src: &Bound<'_, PyAny>) -> PyResult<(usize, usize, usize)> {
    let s = borrow(py, src, false, "mpc stream")?;
    let ss = span(&s, 1, "mpc stream").map_err(|e| codec_to_py(py, e))?;
    // SAFETY: `s` keeps the stream borrowed for the call.
    let h = mpc::header(unsafe { ss.slice::<u8>() }).map_err(|e| codec_to_py(py, e))?;
    Ok((h.word, h.dim, h.n))
}

/// Decode an mpc stream into `out`, which holds exactly its `n * word` bytes.
#[pyfunction]
fn mpc_decode(py: Python<'_>, src: &Bound<'_, PyAny>, out: &Bound<'_, PyAny>) -> PyResult<()> {
    let s = borrow(py, src, false, "mpc stream")?;
    let o = borrow(py, out, true, "output array")?;
    let ss = span(&s, 1, "mpc stream").map_err(|e| codec_to_py(py, e))?;
    let os = span(&o, 1, "output array").map_err(|e| codec_to_py(py, e))?;
    disjoint(py, ss, os, "array")?;
    // SAFETY: `s` and `o` keep both buffers borrowed (the output writable) for the call,
    // and they do not overlap (checked above).
    let (src, dst) = unsafe { (ss.slice::<u8>(), os.slice_mut::<u8>()) };
    run(py, os.len, || mpc::decode(src, dst)).map_err(|e| codec_to_py(py, e))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(bq_compressed_size, m)?)?;
    m.add_function(wrap_pyfunction!(bq_encode, m)?)?;
    m.add_function(wrap_pyfunction!(bq_decode, m)?)?;
    m.add_function(wrap_pyfunction!(cast_encode, m)?)?;
    m.add_function(wrap_pyfunction!(cast_decode, m)?)?;
    m.add_function(wrap_pyfunction!(mpc_max_compressed_size, m)?)?;
    m.add_function(wrap_pyfunction!(mpc_encode, m)?)?;
    m.add_function(wrap_pyfunction!(mpc_header, m)?)?;
    m.add_function(wrap_pyfunction!(mpc_decode, m)?)?;
    Ok(())
}
