//! Bindings of the zfp codec (shmcoll_codec::zfp): stream sizes, encoding and decoding of
//! buffer-protocol objects as 1-D arrays or as arrays of a given shape (2 to 4 axes: zfp's
//! N-D blocks), with the GIL released for arrays of 64 KiB and more. Every bad argument
//! raises `shmcoll.errors.CodecError`.

mod typed_buffer;

use std::mem::{align_of, size_of};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyString};

use shmcoll_codec::zfp::{self, FloatKind};
use shmcoll_codec::CodecError;

use crate::buffer::{BorrowError, Borrowed};
use crate::errors::codec_to_py;
use typed_buffer::TypedBuf;

/// Arrays at least this large are coded with the GIL released.
const DETACH_BYTES: usize = 1 << 16;

static NUMPY: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn bad(py: Python<'_>, msg: String) -> PyErr {
    codec_to_py(py, CodecError::InvalidArgument(msg))
}

fn numpy(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    NUMPY
        .get_or_try_init(py, || PyModule::import(py, "numpy").map(|m| m.unbind()))
        .map(|m| m.bind(py))
}

fn kind_name(kind: FloatKind) -> &'static str {
    match kind {
        FloatKind::F32 => "float32",
        FloatKind::F64 => "float64",
    }
}

fn itemsize(kind: FloatKind) -> usize {
    match kind {
        FloatKind::F32 => 4,
        FloatKind::F64 => 8,
    }
}

/// float32 / float64 from a dtype spelling ("float32", "f8", numpy.float64, a dtype...).
fn parse_dtype(py: Python<'_>, dtype: &Bound<'_, PyAny>) -> PyResult<FloatKind> {
    if let Ok(s) = dtype.cast::<PyString>() {
        match s.to_str()? {
            "float32" | "f4" | "<f4" | "=f4" => return Ok(FloatKind::F32),
            "float64" | "f8" | "<f8" | "=f8" => return Ok(FloatKind::F64),
            _ => {}
        }
    }
    let unsupported = || {
        bad(
            py,
            format!("zfp codes float32 and float64 (native byte order), not dtype {dtype}"),
        )
    };
    let dt = numpy(py)?
        .getattr("dtype")?
        .call1((dtype,))
        .map_err(|_| unsupported())?;
    if !dt.getattr("isnative")?.extract::<bool>()? {
        return Err(unsupported());
    }
    match dt.getattr("name")?.extract::<String>()?.as_str() {
        "float32" => Ok(FloatKind::F32),
        "float64" => Ok(FloatKind::F64),
        _ => Err(unsupported()),
    }
}

fn rate_arg(py: Python<'_>, kind: FloatKind, rate: i64, shape: &[usize]) -> PyResult<u32> {
    // Out-of-range values get the codec's own message, those beyond u32 one of their own.
    let Ok(r) = u32::try_from(rate) else {
        return Err(bad(
            py,
            format!("zfp rate {rate} is not supported: at most 64 bits per value"),
        ));
    };
    let probe = vec![0; shape.len()];
    zfp::compressed_bytes_nd(&probe, kind, r).map_err(|e| codec_to_py(py, e))?;
    Ok(r)
}

/// A value count (a 1-D array) or a shape (a sequence of 1 to 4 extents, C order).
fn shape_arg(py: Python<'_>, n: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    let extents: Vec<i64> = match n.extract::<i64>() {
        Ok(v) => vec![v],
        Err(_) => n.extract::<Vec<i64>>().map_err(|_| {
            bad(
                py,
                format!("n must be a value count or a shape (a sequence of counts), not {n}"),
            )
        })?,
    };
    extents
        .iter()
        .map(|&v| usize::try_from(v).map_err(|_| bad(py, format!("counts must be >= 0, not {v}"))))
        .collect()
}

fn borrow<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    writable: bool,
    what: &str,
) -> PyResult<Borrowed> {
    Borrowed::new(obj, writable, what).map_err(|e| match e {
        BorrowError::Python(pe) => bad(
            py,
            format!("the {what} does not support the buffer protocol ({pe})"),
        ),
        BorrowError::Shm(e) => bad(py, e.to_string()),
    })
}

fn typed(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    writable: bool,
    what: &str,
) -> PyResult<(TypedBuf, FloatKind)> {
    let b = TypedBuf::new(obj, writable).map_err(|e| {
        bad(
            py,
            format!(
                "the {what} must be a C-contiguous{} float32 or float64 buffer: {e}",
                if writable { ", writable" } else { "" }
            ),
        )
    })?;
    let kind = b.float_kind().ok_or_else(|| {
        bad(
            py,
            format!("the {what} must hold float32 or float64 values in native byte order, not format {:?}", b.format()),
        )
    })?;
    Ok((b, kind))
}

fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
    a.1 > 0 && b.1 > 0 && a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

/// Run `f` on `n` values of type T at `addr`, copying them first if unaligned.
///
/// # Safety
/// `addr` must point to `n * size_of::<T>()` readable bytes that stay valid and are not
/// written during the call; every bit pattern must be a valid T.
unsafe fn with_values<T: Copy, R>(addr: usize, n: usize, f: impl FnOnce(&[T]) -> R) -> R {
    if n == 0 {
        return f(&[]);
    }
    if addr.is_multiple_of(align_of::<T>()) {
        // SAFETY: aligned, and valid for n values by the caller's contract.
        return f(unsafe { std::slice::from_raw_parts(addr as *const T, n) });
    }
    let mut v: Vec<T> = Vec::with_capacity(n);
    // SAFETY: the source holds n * size_of::<T>() readable bytes (contract), the vector's
    // allocation as many, they do not overlap, and every bit pattern is a valid T.
    unsafe {
        std::ptr::copy_nonoverlapping(
            addr as *const u8,
            v.as_mut_ptr() as *mut u8,
            n * size_of::<T>(),
        );
        v.set_len(n);
    }
    f(&v)
}

/// Run `f` on `n` writable values of type T at `addr`, through an aligned copy if needed.
///
/// # Safety
/// `addr` must point to `n * size_of::<T>()` writable bytes that nothing else reads or
/// writes during the call; every bit pattern must be a valid T.
unsafe fn with_values_mut<T: Copy + Default, R>(
    addr: usize,
    n: usize,
    f: impl FnOnce(&mut [T]) -> R,
) -> R {
    if n == 0 {
        return f(&mut []);
    }
    if addr.is_multiple_of(align_of::<T>()) {
        // SAFETY: aligned, valid and exclusive for n values by the caller's contract.
        return f(unsafe { std::slice::from_raw_parts_mut(addr as *mut T, n) });
    }
    let mut v = vec![T::default(); n];
    let r = f(&mut v);
    // SAFETY: the destination holds n * size_of::<T>() writable bytes (contract) and does
    // not overlap the vector.
    unsafe {
        std::ptr::copy_nonoverlapping(v.as_ptr() as *const u8, addr as *mut u8, n * size_of::<T>())
    };
    r
}

/// Encode `n` values of `kind` at `src` into `dst`.
///
/// # Safety
/// As `with_values` for `src` (a held buffer view that `dst` does not overlap).
unsafe fn encode_raw(
    kind: FloatKind,
    src: usize,
    shape: &[usize],
    n: usize,
    rate: u32,
    dst: &mut [u8],
) -> Result<usize, CodecError> {
    // SAFETY: forwarded contract.
    unsafe {
        match kind {
            FloatKind::F32 => {
                with_values(src, n, |s: &[f32]| zfp::encode_nd_f32(s, shape, rate, dst))
            }
            FloatKind::F64 => {
                with_values(src, n, |s: &[f64]| zfp::encode_nd_f64(s, shape, rate, dst))
            }
        }
    }
}

/// Decode `n` values of `kind` from `stream` into `dst`.
///
/// # Safety
/// As `with_values_mut` for `dst` (a held writable view that `stream` does not overlap).
unsafe fn decode_raw(
    kind: FloatKind,
    stream: &[u8],
    rate: u32,
    dst: usize,
    shape: &[usize],
    n: usize,
) -> Result<(), CodecError> {
    // SAFETY: forwarded contract.
    unsafe {
        match kind {
            FloatKind::F32 => with_values_mut(dst, n, |d: &mut [f32]| {
                zfp::decode_nd_f32(stream, shape, rate, d)
            }),
            FloatKind::F64 => with_values_mut(dst, n, |d: &mut [f64]| {
                zfp::decode_nd_f64(stream, shape, rate, d)
            }),
        }
    }
}

/// Bytes of the zfp stream of `n` values (an int: a 1-D array) or of an array of shape `n`
/// (a sequence: 1 to 4 axes, C order) of `dtype` at `rate` bits per value.
#[pyfunction]
fn zfp_compressed_size(
    py: Python<'_>,
    n: &Bound<'_, PyAny>,
    dtype: &Bound<'_, PyAny>,
    rate: i64,
) -> PyResult<usize> {
    let kind = parse_dtype(py, dtype)?;
    let shape = shape_arg(py, n)?;
    let rate = rate_arg(py, kind, rate, &shape)?;
    zfp::compressed_bytes_nd(&shape, kind, rate).map_err(|e| codec_to_py(py, e))
}

/// Compress a C-contiguous float32/float64 buffer at `rate`, as a 1-D array, or as an
/// array of `shape` (whose values it must hold exactly); returns bytes, or writes into
/// `out` and returns the number of bytes written.
#[pyfunction]
#[pyo3(signature = (arr, rate, out=None, shape=None))]
fn zfp_encode<'py>(
    py: Python<'py>,
    arr: &Bound<'py, PyAny>,
    rate: i64,
    out: Option<&Bound<'py, PyAny>>,
    shape: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let (src, kind) = typed(py, arr, false, "array to compress")?;
    let n = src.len() / itemsize(kind);
    let shape = match shape {
        Some(s) => shape_arg(py, s)?,
        None => vec![n],
    };
    let rate = rate_arg(py, kind, rate, &shape)?;
    let need = zfp::compressed_bytes_nd(&shape, kind, rate).map_err(|e| codec_to_py(py, e))?;
    if zfp::values(&shape).map_err(|e| codec_to_py(py, e))? != n {
        return Err(bad(
            py,
            format!("the array to compress has {n} values, not those of shape {shape:?}"),
        ));
    }
    let src_addr = src.addr();
    let detach = src.len() >= DETACH_BYTES;
    let run = move |dst: &mut [u8]| {
        // SAFETY: `src` stays held (alive, unresizable) until this function returns, and
        // `dst` is a fresh bytes object or a view checked not to overlap it.
        let mut job = move || unsafe { encode_raw(kind, src_addr, &shape, n, rate, dst) };
        if detach {
            py.detach(job)
        } else {
            job()
        }
    };
    match out {
        None => {
            let bytes = PyBytes::new_with(py, need, |buf| {
                run(buf).map(|_| ()).map_err(|e| codec_to_py(py, e))
            })?;
            Ok(bytes.into_any())
        }
        Some(out) => {
            let dst = borrow(py, out, true, "output buffer")?;
            let raw = dst.raw();
            if raw.len < need {
                return Err(codec_to_py(
                    py,
                    CodecError::BufferTooSmall {
                        need,
                        have: raw.len,
                    },
                ));
            }
            if overlaps((src_addr, src.len()), (raw.addr, need)) {
                return Err(bad(
                    py,
                    "the output buffer overlaps the array to compress".into(),
                ));
            }
            // SAFETY: `dst` is held (valid, writable, at least `need` bytes) for the call,
            // and nothing else touches those bytes while the GIL may be released.
            let slice = unsafe { std::slice::from_raw_parts_mut(raw.addr as *mut u8, need) };
            let written = run(slice).map_err(|e| codec_to_py(py, e))?;
            Ok(written.into_pyobject(py)?.into_any())
        }
    }
}

/// Decompress `n` values (an int: a 1-D array) or an array of shape `n` (a sequence) of
/// `dtype` from `buf` (a zfp stream at `rate`); returns a new array of that shape, or
/// fills `out` (a C-contiguous array of exactly as many such values) and returns it.
#[pyfunction]
#[pyo3(signature = (buf, dtype, n, rate, out=None))]
fn zfp_decode<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyAny>,
    dtype: &Bound<'py, PyAny>,
    n: &Bound<'py, PyAny>,
    rate: i64,
    out: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let kind = parse_dtype(py, dtype)?;
    let shape = shape_arg(py, n)?;
    let rate = rate_arg(py, kind, rate, &shape)?;
    let need = zfp::compressed_bytes_nd(&shape, kind, rate).map_err(|e| codec_to_py(py, e))?;
    let n = zfp::values(&shape).map_err(|e| codec_to_py(py, e))?;
    let stream = borrow(py, buf, false, "stream")?;
    if stream.raw().len < need {
        // Before allocating the output: a wrong n must not cost a huge allocation.
        return Err(codec_to_py(
            py,
            CodecError::Corrupt(format!(
                "a zfp stream of a {} array of shape {shape:?} at rate {rate} has {need} bytes, this one {}",
                kind_name(kind),
                stream.raw().len
            )),
        ));
    }
    let target = match out {
        Some(o) => o.clone(),
        None => numpy(py)?
            .getattr("empty")?
            .call1((shape.clone(), kind_name(kind)))?,
    };
    let (dst, out_kind) = typed(py, &target, true, "output array")?;
    if out_kind != kind || dst.len() != n * itemsize(kind) {
        return Err(bad(
            py,
            format!(
                "the output array must hold exactly {n} {} values, not {} bytes of format {:?}",
                kind_name(kind),
                dst.len(),
                dst.format()
            ),
        ));
    }
    let sraw = stream.raw();
    if overlaps((sraw.addr, sraw.len), (dst.addr(), dst.len())) {
        return Err(bad(py, "the output array overlaps the stream".into()));
    }
    let dst_addr = dst.addr();
    let job = move || {
        // SAFETY: both views are held until this function returns; the stream is only
        // read, the output (checked not to overlap it) only written, by this call.
        unsafe {
            let s = if sraw.len == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(sraw.addr as *const u8, sraw.len)
            };
            decode_raw(kind, s, rate, dst_addr, &shape, n)
        }
    };
    let res = if dst.len() >= DETACH_BYTES {
        py.detach(job)
    } else {
        job()
    };
    res.map_err(|e| codec_to_py(py, e))?;
    drop(dst);
    Ok(target)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(zfp_compressed_size, m)?)?;
    m.add_function(wrap_pyfunction!(zfp_encode, m)?)?;
    m.add_function(wrap_pyfunction!(zfp_decode, m)?)?;
    Ok(())
}
