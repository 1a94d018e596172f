//! The `extern "C"` functions of include/shmcoll_capi.h. Everything unsafe of the crate is
//! here: turning the caller's pointers into references and slices, and writing messages
//! into the caller's buffers. Panics never cross the boundary: they become SHMCOLL_FATAL.
#![deny(clippy::arithmetic_side_effects)]

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use shmcoll_coll::{CollOp, Comm};
use shmcoll_shm::Segment;

use crate::collectives::{self, coll_op, Collective};
use crate::engine::{self, Class, Failure, Outcome, Rejected, Status, VectorArgs};

/// A mapped segment not yet joined (opaque to C).
#[derive(Debug)]
pub struct ShmcollSegment {
    seg: Arc<Segment>,
}

/// This rank's part of a communicator's creation exchange, not yet settled (opaque to C).
#[derive(Debug)]
pub struct ShmcollOffer {
    offer: shmcoll_coll::pool::Offer,
}

/// One rank of a node communicator (opaque to C).
#[derive(Debug)]
pub struct ShmcollComm {
    comm: Comm,
    /// The algorithm that served the last call, NUL-terminated for C.
    last_algo: &'static CStr,
    /// The class of the last call's failure (`Class::None` after a success).
    last_class: Class,
}

/// Write `msg` NUL-terminated into `err[..cap]` (truncated to fit), if there is room.
fn write_msg(err: *mut c_char, cap: usize, msg: &str) {
    if err.is_null() || cap == 0 {
        return;
    }
    // cap >= 1 (above).
    let n = msg.len().min(cap.saturating_sub(1));
    // SAFETY: the caller promised `err` points to `cap` writable bytes (header contract);
    // n + 1 <= cap, and a &str never overlaps a buffer the caller handed us for writing.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), err.cast::<u8>(), n);
        *err.add(n) = 0;
    }
}

/// Run `f`, turning a panic into a fatal failure.
fn caught<T>(f: impl FnOnce() -> Outcome<T>) -> Outcome<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let what = shmcoll_coll::error::panic_message(&*p);
        Err(Failure::fatal(format!("internal error in shmcoll: {what}")))
    })
}

/// Report a failure through `err`; its status code.
fn report<T>(err: *mut c_char, cap: usize, r: Outcome<T>) -> Result<T, c_int> {
    r.map_err(|e| {
        write_msg(err, cap, &e.msg);
        e.status as c_int
    })
}

/// Run `f`, turn a panic into a fatal failure, report a failure through `err`.
fn guard<T>(err: *mut c_char, cap: usize, f: impl FnOnce() -> Outcome<T>) -> Result<T, c_int> {
    report(err, cap, caught(f))
}

/// A call on a communicator: as `guard`, and the failure's class is kept for
/// `shmcoll_comm_last_error_class`.
///
/// # Safety
/// `comm` must be live and not used concurrently, or null (refused).
unsafe fn on_comm(
    comm: *mut ShmcollComm,
    err: *mut c_char,
    cap: usize,
    f: impl FnOnce(&mut ShmcollComm) -> Outcome<()>,
) -> c_int {
    // SAFETY: the caller promised a live communicator used by this thread only, or null.
    let Some(c) = (unsafe { comm.as_mut() }) else {
        write_msg(err, cap, "null communicator");
        return Status::BadArgument as c_int;
    };
    let r = caught(|| f(&mut *c));
    c.last_class = r.as_ref().err().map_or(Class::None, |e| e.class);
    code(report(err, cap, r))
}

fn code<T>(r: Result<T, c_int>) -> c_int {
    r.map_or_else(|c| c, |_| Status::Ok as c_int)
}

/// The algorithm's name as a C string (the engine's names are static).
fn algo_cstr(name: &str) -> &'static CStr {
    match name {
        "inline" => c"inline",
        "staging" => c"staging",
        "pull" => c"pull",
        "push" => c"push",
        "cma" => c"cma",
        "cma-push" => c"cma-push",
        "direct" => c"direct",
        _ => c"other",
    }
}

/// Create a segment for `nranks` ranks and store it in `*out`.
///
/// # Safety
/// `out` must be valid for a write; `err` must point to `cap` writable bytes (or be null).
#[no_mangle]
pub unsafe extern "C" fn shmcoll_segment_create(
    nranks: usize,
    out: *mut *mut ShmcollSegment,
    err: *mut c_char,
    cap: usize,
) -> c_int {
    code(guard(err, cap, || {
        if out.is_null() {
            return Err(Failure::bad_argument("null output pointer"));
        }
        let seg = engine::create_segment(nranks)?;
        // SAFETY: checked non-null; the caller promised it is valid for a write.
        unsafe { *out = Box::into_raw(Box::new(ShmcollSegment { seg })) };
        Ok(())
    }))
}

/// Open the segment another rank created under `name` and store it in `*out`.
///
/// # Safety
/// `name` must be a NUL-terminated string; `out` and `err` as for `shmcoll_segment_create`.
#[no_mangle]
pub unsafe extern "C" fn shmcoll_segment_open(
    name: *const c_char,
    out: *mut *mut ShmcollSegment,
    err: *mut c_char,
    cap: usize,
) -> c_int {
    code(guard(err, cap, || {
        if name.is_null() || out.is_null() {
            return Err(Failure::bad_argument("null name or output pointer"));
        }
        // SAFETY: checked non-null; the caller promised a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(name) }
            .to_str()
            .map_err(|_| Failure::bad_argument("the segment name is not UTF-8"))?;
        let seg = engine::open_segment(name)?;
        // SAFETY: checked non-null; the caller promised it is valid for a write.
        unsafe { *out = Box::into_raw(Box::new(ShmcollSegment { seg })) };
        Ok(())
    }))
}

/// Copy the segment's name (NUL-terminated) into `buf[..cap]`; fails if it does not fit.
///
/// # Safety
/// `seg` must come from `shmcoll_segment_create`/`_open` and not be freed; `buf` must
/// point to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn shmcoll_segment_name(
    seg: *const ShmcollSegment,
    buf: *mut c_char,
    cap: usize,
) -> c_int {
    // SAFETY: the caller promised a live segment (or null, refused here).
    let Some(seg) = (unsafe { seg.as_ref() }) else {
        return Status::BadArgument as c_int;
    };
    let name = seg.seg.name();
    if buf.is_null() || name.len() >= cap {
        return Status::BadArgument as c_int;
    }
    write_msg(buf, cap, name);
    Status::Ok as c_int
}

/// Drop a segment that will not be joined (the creator's drop unlinks the name).
///
/// # Safety
/// `seg` must come from `shmcoll_segment_create`/`_open`, not yet freed or joined; null is
/// ignored.
#[no_mangle]
pub unsafe extern "C" fn shmcoll_segment_free(seg: *mut ShmcollSegment) {
    if !seg.is_null() {
        // SAFETY: the caller hands back ownership of a Box made by this crate.
        drop(unsafe { Box::from_raw(seg) });
    }
}

/// Join the segment as `rank` (collective over its ranks). Consumes `seg` whatever the
/// outcome; on success stores the communicator in `*out`.
///
/// # Safety
/// `seg` as for `shmcoll_segment_free`; `out` valid for a write; `err` as above.
#[no_mangle]
pub unsafe extern "C" fn shmcoll_comm_join(
    seg: *mut ShmcollSegment,
    rank: usize,
    out: *mut *mut ShmcollComm,
    err: *mut c_char,
    cap: usize,
) -> c_int {
    if seg.is_null() {
        write_msg(err, cap, "null segment");
        return Status::BadArgument as c_int;
    }
    // SAFETY: non-null, and the caller hands over ownership of a Box made by this crate.
    let seg = unsafe { Box::from_raw(seg) }.seg;
    code(guard(err, cap, || {
        if out.is_null() {
            return Err(Failure::bad_argument("null output pointer"));
        }
        let comm = engine::join(seg, rank)?;
        let c = Box::new(ShmcollComm {
            comm,
            last_algo: c"none",
            last_class: Class::None,
        });
        // SAFETY: checked non-null; the caller promised it is valid for a write.
        unsafe { *out = Box::into_raw(c) };
        Ok(())
    }))
}

/// Bytes of one rank's creation record.
#[no_mangle]
pub extern "C" fn shmcoll_offer_record_bytes() -> usize {
    shmcoll_coll::pool::RECORD_BYTES
}

/// Make this rank's offer for a communicator of `nranks` ranks: store it in `*out` and its
/// record in `record[..record_cap]` (at least `shmcoll_offer_record_bytes()`). Settings
/// that are not valid travel in the record (settling fails on every rank).
///
/// # Safety
/// `out` valid for a write; `record` valid for `record_cap` bytes of writes; `err` as for
/// `shmcoll_segment_create`.
#[no_mangle]
pub unsafe extern "C" fn shmcoll_offer_create(
    nranks: usize,
    out: *mut *mut ShmcollOffer,
    record: *mut u8,
    record_cap: usize,
    err: *mut c_char,
    cap: usize,
) -> c_int {
    code(guard(err, cap, || {
        let need = shmcoll_coll::pool::RECORD_BYTES;
        if out.is_null() || record.is_null() || record_cap < need {
            return Err(Failure::bad_argument(format!(
                "null output or a record buffer of {record_cap} bytes (needs {need})"
            )));
        }
        let offer = engine::offer(nranks);
        let bytes = offer.record_bytes();
        // SAFETY: checked non-null and at least `need` = bytes.len() long; the caller
        // promised `record_cap` writable bytes that no Rust value overlaps.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), record, bytes.len());
            *out = Box::into_raw(Box::new(ShmcollOffer { offer }));
        }
        Ok(())
    }))
}

/// Settle `offer` (consumed whatever the outcome) from `records[..len]`, every rank's
/// record in rank order; this rank is `rank`. Stores in `*one_node` whether every rank is
/// on this node, and in `*out` the communicator on a pooled segment or NULL.
///
/// # Safety
/// `offer` from `shmcoll_offer_create`, not yet settled or freed; `records` readable for
/// `len` bytes; `one_node` and `out` valid for a write; `err` as above.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn shmcoll_offer_settle(
    offer: *mut ShmcollOffer,
    records: *const u8,
    len: usize,
    rank: usize,
    one_node: *mut c_int,
    out: *mut *mut ShmcollComm,
    err: *mut c_char,
    cap: usize,
) -> c_int {
    if offer.is_null() {
        write_msg(err, cap, "null offer");
        return Status::BadArgument as c_int;
    }
    // SAFETY: non-null, and the caller hands over ownership of a Box made by this crate.
    let offer = unsafe { Box::from_raw(offer) }.offer;
    code(guard(err, cap, || {
        if records.is_null() || one_node.is_null() || out.is_null() {
            return Err(Failure::bad_argument("null records or output pointer"));
        }
        // SAFETY: checked non-null; the caller promised `len` readable bytes.
        let records = unsafe { std::slice::from_raw_parts(records, len) };
        let (same_node, comm) = engine::settle(offer, records, rank)?;
        let comm = comm.map(|comm| {
            Box::into_raw(Box::new(ShmcollComm {
                comm,
                last_algo: c"none",
                last_class: Class::None,
            }))
        });
        // SAFETY: checked non-null; the caller promised both are valid for a write.
        unsafe {
            *one_node = c_int::from(same_node);
            *out = comm.unwrap_or(std::ptr::null_mut());
        }
        Ok(())
    }))
}

/// Drop an offer that will not be settled (its segments go back to the pool).
///
/// # Safety
/// `offer` from `shmcoll_offer_create`, not yet settled or freed; null is ignored.
#[no_mangle]
pub unsafe extern "C" fn shmcoll_offer_free(offer: *mut ShmcollOffer) {
    if !offer.is_null() {
        // SAFETY: the caller hands back ownership of a Box made by this crate.
        drop(unsafe { Box::from_raw(offer) });
    }
}

/// Leave and unmap. Not collective: each rank frees its own when it is done.
///
/// # Safety
/// `comm` must come from `shmcoll_comm_join` and not be freed yet; null is ignored.
#[no_mangle]
pub unsafe extern "C" fn shmcoll_comm_free(comm: *mut ShmcollComm) {
    if !comm.is_null() {
        // SAFETY: the caller hands back ownership of a Box made by this crate.
        drop(unsafe { Box::from_raw(comm) });
    }
}

/// Ranks of the communicator (0 for null).
///
/// # Safety
/// `comm` must be live or null.
#[no_mangle]
pub unsafe extern "C" fn shmcoll_comm_size(comm: *const ShmcollComm) -> usize {
    // SAFETY: the caller promised a live communicator or null.
    unsafe { comm.as_ref() }.map_or(0, |c| c.comm.size())
}

/// Map the peers' arenas (the PMPI library's shared allocator): `pids`, `fds` and `lens`
/// have one entry per rank (`fds[j] < 0`: rank j has no arena); `own_base`/`own_len` are
/// this rank's (null/0: none). Each rank calls it; the library enables arenas with
/// `shmcoll_comm_enable_arenas` only if every rank succeeded.
///
/// # Safety
/// `comm` live and not used concurrently; the arrays readable for `n` entries; `err` as
/// above.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn shmcoll_comm_attach_arenas(
    comm: *mut ShmcollComm,
    own_base: *const std::ffi::c_void,
    own_len: usize,
    pids: *const u32,
    fds: *const c_int,
    lens: *const usize,
    n: usize,
    err: *mut c_char,
    cap: usize,
) -> c_int {
    code(guard(err, cap, || {
        // SAFETY: the caller promised a live communicator not used elsewhere meanwhile.
        let c =
            unsafe { comm.as_mut() }.ok_or_else(|| Failure::bad_argument("null communicator"))?;
        if n > 0 && (pids.is_null() || fds.is_null() || lens.is_null()) {
            return Err(Failure::bad_argument("null arena arrays"));
        }
        let peers: Vec<Option<shmcoll_coll::arenas::ArenaRef>> = (0..n)
            .map(|j| {
                // SAFETY: j < n, and the caller promised n readable entries in each array.
                let (pid, fd, len) = unsafe { (*pids.add(j), *fds.add(j), *lens.add(j)) };
                (fd >= 0).then_some(shmcoll_coll::arenas::ArenaRef { pid, fd, len })
            })
            .collect();
        let own = (!own_base.is_null() && own_len > 0).then_some((own_base as usize, own_len));
        c.comm.attach_arenas(own, &peers)?;
        Ok(())
    }))
}

/// Describe this rank's arena buffers to its peers from now on (after every rank attached).
///
/// # Safety
/// `comm` must be live or null, and not used concurrently.
#[no_mangle]
pub unsafe extern "C" fn shmcoll_comm_enable_arenas(comm: *mut ShmcollComm) {
    // SAFETY: the caller promised a live communicator or null.
    if let Some(c) = unsafe { comm.as_mut() } {
        c.comm.enable_arenas();
    }
}

/// A digest of the selection tables the communicator bound (model or tuning file):
/// equal on ranks that bound the same tables, which the selection protocol needs.
///
/// # Safety
/// `comm` must be live or null.
#[no_mangle]
pub unsafe extern "C" fn shmcoll_comm_tables_digest(comm: *const ShmcollComm) -> u64 {
    // SAFETY: the caller promised a live communicator or null.
    unsafe { comm.as_ref() }.map_or(0, |c| c.comm.tables_digest())
}

/// The algorithm that served the last successful call ("none" before any), a static
/// NUL-terminated string.
///
/// # Safety
/// `comm` must be live or null.
#[no_mangle]
pub unsafe extern "C" fn shmcoll_comm_last_algorithm(comm: *const ShmcollComm) -> *const c_char {
    // SAFETY: the caller promised a live communicator or null.
    unsafe { comm.as_ref() }
        .map_or(c"none", |c| c.last_algo)
        .as_ptr()
}

/// Alltoall of `bytes_per_rank` bytes to and from every rank; `send` null: in place.
///
/// # Safety
/// `comm` live and not used concurrently; `send` (unless null) readable and `recv`
/// writable for `bytes_per_rank * size` bytes, not overlapping; `err` as above.
#[no_mangle]
pub unsafe extern "C" fn shmcoll_alltoall(
    comm: *mut ShmcollComm,
    send: *const u8,
    recv: *mut u8,
    bytes_per_rank: usize,
    err: *mut c_char,
    cap: usize,
) -> c_int {
    let f = |c: &mut ShmcollComm| {
        let send = (!send.is_null()).then_some(send as usize);
        let algo = engine::alltoall(&mut c.comm, send, recv as usize, bytes_per_rank)?;
        c.last_algo = algo_cstr(algo);
        Ok(())
    };
    // SAFETY: the caller promised a live communicator used by this thread only.
    unsafe { on_comm(comm, err, cap, f) }
}

/// Alltoallv with byte counts and byte displacements (`size` entries each); `send` null:
/// in place (the send blocks are the receive blocks).
///
/// # Safety
/// As `shmcoll_alltoall`; the four arrays must hold `size` entries; the blocks they
/// describe must lie in the buffers.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn shmcoll_alltoallv(
    comm: *mut ShmcollComm,
    send: *const u8,
    send_counts: *const usize,
    send_displs: *const usize,
    recv: *mut u8,
    recv_counts: *const usize,
    recv_displs: *const usize,
    err: *mut c_char,
    cap: usize,
) -> c_int {
    let f = |c: &mut ShmcollComm| {
        let p = c.comm.size();
        let in_place = send.is_null();
        let arrays = [
            (
                if in_place { recv_counts } else { send_counts },
                "send counts",
            ),
            (
                if in_place { recv_displs } else { send_displs },
                "send displacements",
            ),
            (recv_counts, "receive counts"),
            (recv_displs, "receive displacements"),
        ];
        if let Some((_, what)) = arrays.iter().find(|(ptr, _)| ptr.is_null()) {
            // Through the engine, so that the peers fail this call too.
            let why = format!("null {what} array");
            return Err(engine::reject(
                &mut c.comm,
                Rejected::Alltoall,
                Class::Argument,
                &why,
            ));
        }
        // SAFETY: checked non-null, and the caller promised `p` readable entries.
        let [sc, sd, rc, rd] = arrays.map(|(ptr, _)| unsafe { std::slice::from_raw_parts(ptr, p) });
        let v = VectorArgs {
            send_counts: sc,
            send_displs: sd,
            recv_counts: rc,
            recv_displs: rd,
        };
        let send = (!send.is_null()).then_some(send as usize);
        let algo = engine::alltoallv(&mut c.comm, send, recv as usize, v)?;
        c.last_algo = algo_cstr(algo);
        Ok(())
    };
    // SAFETY: the caller promised a live communicator used by this thread only.
    unsafe { on_comm(comm, err, cap, f) }
}

/// Bcast, Allgather, Reduce_scatter_block or Allreduce (`op`: SHMCOLL_BCAST..) of `bytes`
/// bytes (see the header); `dtype` and `redop` are the engine's codes for reductions, -1
/// otherwise; `send` null: in place (Bcast ignores it).
///
/// # Safety
/// `comm` live and not used concurrently; the buffers as MPI's call would need them for
/// `bytes` and the communicator's size; `err` as above.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn shmcoll_collective(
    comm: *mut ShmcollComm,
    op: c_int,
    send: *const u8,
    recv: *mut u8,
    bytes: usize,
    root: usize,
    dtype: c_int,
    redop: c_int,
    err: *mut c_char,
    cap: usize,
) -> c_int {
    let f = |c: &mut ShmcollComm| {
        let op =
            coll_op(op).ok_or_else(|| Failure::bad_argument(format!("unknown collective {op}")))?;
        let reduce = match (u8::try_from(dtype), u8::try_from(redop)) {
            (Ok(d), Ok(o)) => Some((d, o)),
            _ => None,
        };
        let call = Collective {
            op,
            send: (!send.is_null()).then_some(send as usize),
            recv: recv as usize,
            bytes,
            root,
            reduce,
        };
        let algo = collectives::collective(&mut c.comm, call)?;
        c.last_algo = algo_cstr(algo);
        Ok(())
    };
    // SAFETY: the caller promised a live communicator used by this thread only.
    unsafe { on_comm(comm, err, cap, f) }
}

/// Barrier over the communicator.
///
/// # Safety
/// `comm` live and not used concurrently; `err` as above.
#[no_mangle]
pub unsafe extern "C" fn shmcoll_barrier(
    comm: *mut ShmcollComm,
    err: *mut c_char,
    cap: usize,
) -> c_int {
    // SAFETY: the caller promised a live communicator used by this thread only.
    unsafe { on_comm(comm, err, cap, |c| collectives::barrier(&mut c.comm)) }
}

/// Reject this rank's part of a call (`op`: SHMCOLL_BCAST.. or SHMCOLL_ALLTOALL(V)) with
/// the error class `class` (SHMCOLL_CLASS_ARG..) and the message `why`: the engine tells
/// every peer in the same call, so that all fail it together and nothing moves. Returns
/// SHMCOLL_REJECTED (the class then in `shmcoll_comm_last_error_class`) or SHMCOLL_FATAL.
///
/// # Safety
/// `comm` live and not used concurrently; `why` NUL-terminated or null; `err` as above.
#[no_mangle]
pub unsafe extern "C" fn shmcoll_reject(
    comm: *mut ShmcollComm,
    op: c_int,
    class: c_int,
    why: *const c_char,
    err: *mut c_char,
    cap: usize,
) -> c_int {
    let why = if why.is_null() {
        std::borrow::Cow::Borrowed("(no reason given)")
    } else {
        // SAFETY: non-null, and the caller promised a NUL-terminated string.
        unsafe { CStr::from_ptr(why) }.to_string_lossy()
    };
    let f = |c: &mut ShmcollComm| {
        let alltoall = [CollOp::Alltoall, CollOp::Alltoallv].map(|o| o.code() as c_int);
        let call = if alltoall.contains(&op) {
            Rejected::Alltoall
        } else {
            Rejected::Collective(
                coll_op(op)
                    .ok_or_else(|| Failure::bad_argument(format!("unknown collective {op}")))?,
            )
        };
        let class = Class::from_code(class).unwrap_or(Class::Argument);
        Err(engine::reject(&mut c.comm, call, class, &why))
    };
    // SAFETY: the caller promised a live communicator used by this thread only.
    unsafe { on_comm(comm, err, cap, f) }
}

/// The class of the last call's failure on `comm` (SHMCOLL_CLASS_*; SHMCOLL_CLASS_NONE
/// after a success or for null).
///
/// # Safety
/// `comm` must be live or null.
#[no_mangle]
pub unsafe extern "C" fn shmcoll_comm_last_error_class(comm: *const ShmcollComm) -> c_int {
    // SAFETY: the caller promised a live communicator or null.
    unsafe { comm.as_ref() }.map_or(Class::None, |c| c.last_class) as c_int
}

/// 1 if the engine reduces the dtype `dtype` with the operator `redop` (the header's
/// codes), else 0.
#[no_mangle]
pub extern "C" fn shmcoll_reduction_supported(dtype: c_int, redop: c_int) -> c_int {
    c_int::from(collectives::reduces(dtype, redop))
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests;
