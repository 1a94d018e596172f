//! `shmcoll._core`: the native module under the `shmcoll` package. The only crate that
//! knows Python; everything else lives in the engine crates.

mod alltoall;
mod buffer;
mod buffer_spec;
mod calls;
mod codec_misc;
mod codec_zfp;
mod collectives;
mod datatypes;
mod engine;
mod errors;
mod gil;
mod given;
mod heap;
mod machine;
mod objects;
mod one_buffer;
mod persistent;
mod pool;
mod pyobj;
mod quarantine;
mod reduce_local;
mod resolver;
mod shared_arrays;
mod table;
mod tuning_file;
mod vector_spec;

use pyo3::prelude::*;

use errors::to_py;
use shmcoll_coll::Error;
use shmcoll_kernels::Store;

/// Copy `src` into `dst` (contiguous buffers of equal size) with the chosen store policy:
/// "temporal", "nt" (streaming stores), "hybrid" or "auto" (hybrid). Releases the GIL for
/// large copies.
#[pyfunction]
#[pyo3(signature = (dst, src, store="auto"))]
fn copy(
    py: Python<'_>,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    store: &str,
) -> PyResult<()> {
    let store = if store.eq_ignore_ascii_case("auto") {
        Store::Hybrid
    } else {
        Store::parse(store).ok_or_else(|| {
            to_py(
                py,
                Error::InvalidArgument(format!(
                    "unknown store policy {store:?}; known: auto, temporal, nt, hybrid"
                )),
            )
        })?
    };
    let (d, s) = buffer::borrow_pair(py, dst, src, false)?;
    let (dr, sr) = (d.raw(), s.raw());
    let run = || {
        // SAFETY: both views are held (so the memory stays valid and sized) for the whole
        // copy, lengths are equal and the ranges do not overlap (checked above).
        let nt = unsafe {
            shmcoll_kernels::copy_raw(dr.addr as *mut u8, sr.addr as *const u8, dr.len, store)
        };
        if nt {
            shmcoll_kernels::store_fence();
        }
    };
    if dr.len >= gil::DETACH_BYTES {
        py.detach(run);
    } else {
        run();
    }
    Ok(())
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    gil::install_signal_check(m.py())?;
    m.add_class::<engine::CommBase>()?;
    m.add_class::<engine::SegmentHandle>()?;
    m.add_class::<heap::HeapBuffer>()?;
    m.add_class::<heap::PeerView>()?;
    m.add_class::<persistent::Prequest>()?;
    m.add_class::<pool::SegmentOffer>()?;
    m.add_class::<pool::PooledSegment>()?;
    m.add_class::<tuning_file::TuningFile>()?;
    m.add_function(wrap_pyfunction!(tuning_file::tables_digest, m)?)?;
    m.add_function(wrap_pyfunction!(pool::pool_record_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(pool::pooled_segments, m)?)?;
    m.add_function(wrap_pyfunction!(copy, m)?)?;
    m.add_function(wrap_pyfunction!(reduce_local::reduce_local, m)?)?;
    m.add_function(wrap_pyfunction!(shared_arrays::_install_shared_arrays, m)?)?;
    m.add_function(wrap_pyfunction!(shared_arrays::_shared_arrays_bounds, m)?)?;
    m.add_function(wrap_pyfunction!(
        shared_arrays::_shared_arrays_env_bounds,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(
        shared_arrays::_shared_arrays_default_bounds,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(shared_arrays::_numpy_handler, m)?)?;
    m.add_function(wrap_pyfunction!(shared_arrays::_in_shared_arena, m)?)?;
    m.add_function(wrap_pyfunction!(shared_arrays::shared_arrays_info, m)?)?;
    m.add_function(wrap_pyfunction!(pyobj::register_mpi, m)?)?;
    m.add_function(wrap_pyfunction!(vector_spec::vector_spec, m)?)?;
    m.add_function(wrap_pyfunction!(buffer_spec::whole_spec, m)?)?;
    m.add_function(wrap_pyfunction!(buffer_spec::per_rank_spec, m)?)?;
    m.add_function(wrap_pyfunction!(collectives::reduction_supported, m)?)?;
    m.add_function(wrap_pyfunction!(machine::machine, m)?)?;
    m.add_function(wrap_pyfunction!(machine::parse_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(machine::settings, m)?)?;
    m.add_function(wrap_pyfunction!(machine::cma_from, m)?)?;
    m.add_function(wrap_pyfunction!(machine::ping_pong, m)?)?;
    m.add_function(wrap_pyfunction!(machine::algorithms, m)?)?;
    m.add_function(wrap_pyfunction!(table::model_table, m)?)?;
    m.add_function(wrap_pyfunction!(table::check_table, m)?)?;
    m.add_function(wrap_pyfunction!(table::tuning_file_places, m)?)?;
    m.add_function(wrap_pyfunction!(table::find_tuning_file, m)?)?;
    m.add_function(wrap_pyfunction!(table::resolve, m)?)?;
    codec_zfp::register(m)?;
    codec_misc::register(m)?;
    m.add("SEGMENT_PREFIX", shmcoll_shm::NAME_PREFIX)?;
    // The pickle bytes that travel in the first exchange of an object collective.
    m.add("OBJECT_ROOM", objects::ROOM)?;
    Ok(())
}
