//! The C ABI as the shim uses it: create, name, open, join, call, free; and what a C caller
//! gets back for the contract breaches the functions can detect.

use std::ffi::{c_char, CStr};
use std::ptr::{null, null_mut};
use std::thread;

use super::*;

fn msg(buf: &[c_char]) -> String {
    // SAFETY: the functions always NUL-terminate what they write (and buffers start zeroed).
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn two_ranks_exchange_through_the_c_functions() {
    let mut seg: *mut ShmcollSegment = null_mut();
    let mut err = [0 as c_char; 256];
    // SAFETY: valid out pointer and error buffer of the stated size.
    let rc = unsafe { shmcoll_segment_create(2, &mut seg, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, Status::Ok as c_int, "{}", msg(&err));
    let mut name = [0 as c_char; 128];
    // SAFETY: `seg` is live; the buffer holds 128 bytes.
    let rc = unsafe { shmcoll_segment_name(seg, name.as_mut_ptr(), name.len()) };
    assert_eq!(rc, 0);
    let name = msg(&name);
    let seg_addr = seg as usize;
    let ranks: Vec<_> = (0..2usize)
        .map(|rank| {
            let name = name.clone();
            thread::spawn(move || {
                let mut err = [0 as c_char; 256];
                let mut seg = seg_addr as *mut ShmcollSegment;
                if rank == 1 {
                    let cname = std::ffi::CString::new(name).expect("name");
                    // SAFETY: NUL-terminated name, valid out pointer and error buffer.
                    let rc = unsafe {
                        shmcoll_segment_open(cname.as_ptr(), &mut seg, err.as_mut_ptr(), err.len())
                    };
                    assert_eq!(rc, 0, "{}", msg(&err));
                }
                let mut comm: *mut ShmcollComm = null_mut();
                // SAFETY: `seg` is this rank's own live segment, consumed here.
                let rc =
                    unsafe { shmcoll_comm_join(seg, rank, &mut comm, err.as_mut_ptr(), err.len()) };
                assert_eq!(rc, 0, "{}", msg(&err));
                // SAFETY: `comm` is live.
                assert_eq!(unsafe { shmcoll_comm_size(comm) }, 2);
                let send: Vec<u8> = (0..64).map(|i| (rank * 100 + i) as u8).collect();
                let mut recv = vec![0u8; 64];
                // SAFETY: both buffers hold 2 * 32 bytes; `comm` is used by this thread only.
                let rc = unsafe {
                    shmcoll_alltoall(
                        comm,
                        send.as_ptr(),
                        recv.as_mut_ptr(),
                        32,
                        err.as_mut_ptr(),
                        err.len(),
                    )
                };
                assert_eq!(rc, 0, "{}", msg(&err));
                // SAFETY: `comm` is live; the result is a static NUL-terminated string.
                let algo = unsafe { CStr::from_ptr(shmcoll_comm_last_algorithm(comm)) };
                assert_ne!(algo.to_str(), Ok("none"));
                // SAFETY: `comm` is live and freed once.
                unsafe { shmcoll_comm_free(comm) };
                let want: Vec<u8> = (0..64)
                    .map(|k| ((k / 32) * 100 + rank * 32 + k % 32) as u8)
                    .collect();
                recv == want
            })
        })
        .collect();
    for r in ranks {
        assert!(r.join().expect("rank"), "wrong data");
    }
}

#[test]
fn contract_breaches_are_bad_arguments_with_a_message() {
    let mut err = [0 as c_char; 64];
    // SAFETY: null pointers are what is being tested; the error buffer is valid.
    let rc = unsafe { shmcoll_segment_create(2, null_mut(), err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, Status::BadArgument as c_int);
    assert!(msg(&err).contains("null"));
    // SAFETY: as above.
    let rc = unsafe {
        shmcoll_alltoall(
            null_mut(),
            null(),
            null_mut(),
            8,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    assert_eq!(rc, Status::BadArgument as c_int);
    // SAFETY: as above.
    let rc = unsafe { shmcoll_comm_join(null_mut(), 0, null_mut(), err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, Status::BadArgument as c_int);
    // SAFETY: null handles are documented as accepted.
    unsafe {
        shmcoll_comm_free(null_mut());
        shmcoll_segment_free(null_mut());
        assert_eq!(shmcoll_comm_size(null()), 0);
    }
}

#[test]
fn opening_a_missing_segment_is_rejected_and_messages_are_truncated_to_fit() {
    let mut seg: *mut ShmcollSegment = null_mut();
    let mut err = [0x55 as c_char; 16];
    let name = c"/shmcoll-no-such-segment";
    // SAFETY: NUL-terminated name, valid out pointer, 16-byte error buffer.
    let rc = unsafe { shmcoll_segment_open(name.as_ptr(), &mut seg, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, Status::Rejected as c_int);
    assert!(seg.is_null());
    assert_eq!(
        msg(&err).len(),
        15,
        "truncated to the buffer, NUL-terminated"
    );
}

#[test]
fn a_name_that_does_not_fit_is_refused() {
    let mut seg: *mut ShmcollSegment = null_mut();
    // SAFETY: valid out pointer; no error buffer (null is allowed).
    let rc = unsafe { shmcoll_segment_create(1, &mut seg, null_mut(), 0) };
    assert_eq!(rc, 0);
    let mut tiny = [0 as c_char; 4];
    // SAFETY: `seg` is live; the buffer holds 4 bytes.
    let rc = unsafe { shmcoll_segment_name(seg, tiny.as_mut_ptr(), tiny.len()) };
    assert_eq!(rc, Status::BadArgument as c_int);
    // SAFETY: `seg` is live, never joined, freed once (its drop unlinks the name).
    unsafe { shmcoll_segment_free(seg) };
}

#[test]
fn the_header_codes_are_the_ones_the_functions_use() {
    let header = include_str!("../../include/shmcoll_capi.h");
    let value = |name: &str| -> c_int {
        let line = header
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("{name} is not defined in the header"));
        line.split_whitespace()
            .nth(2)
            .and_then(|v| v.parse().ok())
            .expect("a number")
    };
    let statuses = [
        ("SHMCOLL_OK", Status::Ok),
        ("SHMCOLL_REJECTED", Status::Rejected),
        ("SHMCOLL_FATAL", Status::Fatal),
        ("SHMCOLL_BAD_ARGUMENT", Status::BadArgument),
        ("SHMCOLL_DECLINED", Status::Declined),
    ];
    for (name, s) in statuses {
        assert_eq!(value(name), s as c_int, "{name}");
    }
    let classes = [
        ("SHMCOLL_CLASS_NONE", Class::None),
        ("SHMCOLL_CLASS_OTHER", Class::Other),
        ("SHMCOLL_CLASS_ARG", Class::Argument),
        ("SHMCOLL_CLASS_COUNT", Class::Count),
        ("SHMCOLL_CLASS_BUFFER", Class::Buffer),
        ("SHMCOLL_CLASS_ROOT", Class::Root),
        ("SHMCOLL_CLASS_OP", Class::Operator),
        ("SHMCOLL_CLASS_TYPE", Class::Datatype),
        ("SHMCOLL_CLASS_MISMATCH", Class::Mismatch),
    ];
    for (name, c) in classes {
        assert_eq!(value(name), c as c_int, "{name}");
    }
    assert_eq!(value("SHMCOLL_ALLTOALL"), CollOp::Alltoall.code() as c_int);
    assert_eq!(
        value("SHMCOLL_ALLTOALLV"),
        CollOp::Alltoallv.code() as c_int
    );
}

#[test]
fn a_rejection_through_the_c_function_reaches_the_peer_with_its_class() {
    let mut seg: *mut ShmcollSegment = null_mut();
    let mut err = [0 as c_char; 256];
    // SAFETY: valid out pointer and error buffer of the stated size.
    let rc = unsafe { shmcoll_segment_create(2, &mut seg, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, Status::Ok as c_int, "{}", msg(&err));
    let mut name = [0 as c_char; 128];
    assert_eq!(
        // SAFETY: `seg` is live; the buffer holds 128 bytes.
        unsafe { shmcoll_segment_name(seg, name.as_mut_ptr(), name.len()) },
        0
    );
    let name = std::ffi::CString::new(msg(&name)).expect("name");
    let seg_addr = seg as usize;
    let ranks: Vec<_> = (0..2usize)
        .map(|rank| {
            let name = name.clone();
            thread::spawn(move || {
                let mut err = [0 as c_char; 256];
                let mut seg = seg_addr as *mut ShmcollSegment;
                if rank == 1 {
                    // SAFETY: NUL-terminated name, valid out pointer and error buffer.
                    let rc = unsafe {
                        shmcoll_segment_open(name.as_ptr(), &mut seg, err.as_mut_ptr(), err.len())
                    };
                    assert_eq!(rc, 0, "{}", msg(&err));
                }
                let mut comm: *mut ShmcollComm = null_mut();
                // SAFETY: `seg` is this rank's own live segment, consumed here.
                let rc =
                    unsafe { shmcoll_comm_join(seg, rank, &mut comm, err.as_mut_ptr(), err.len()) };
                assert_eq!(rc, 0, "{}", msg(&err));
                let mut recv = [0u8; 16];
                let why = c"recvcount -1 is negative";
                // SAFETY: `comm` is live and used by this thread only; `why` NUL-terminated;
                // `recv` holds 2 * 8 bytes.
                let rc = unsafe {
                    if rank == 0 {
                        let class = Class::Count as c_int;
                        shmcoll_reject(
                            comm,
                            CollOp::Alltoall.code() as c_int,
                            class,
                            why.as_ptr(),
                            err.as_mut_ptr(),
                            256,
                        )
                    } else {
                        shmcoll_alltoall(comm, null(), recv.as_mut_ptr(), 8, err.as_mut_ptr(), 256)
                    }
                };
                // SAFETY: `comm` is live; freed once, here.
                let class = unsafe { shmcoll_comm_last_error_class(comm) };
                // SAFETY: as above.
                unsafe { shmcoll_comm_free(comm) };
                (rc, class, msg(&err), recv)
            })
        })
        .collect();
    for h in ranks {
        let (rc, class, text, recv) = h.join().expect("rank");
        assert_eq!(rc, Status::Rejected as c_int, "{text}");
        assert_eq!(class, Class::Count as c_int, "{text}");
        assert!(text.contains("recvcount -1 is negative"), "{text}");
        assert_eq!(recv, [0u8; 16]);
    }
}

#[test]
fn the_creation_exchange_through_the_c_functions() {
    let n = shmcoll_offer_record_bytes();
    let mut err = [0 as c_char; 256];
    let mut offer: *mut ShmcollOffer = null_mut();
    let mut small = vec![0u8; n - 1];
    // SAFETY: valid pointers; the record buffer is one byte short (refused).
    let rc = unsafe {
        shmcoll_offer_create(
            1,
            &mut offer,
            small.as_mut_ptr(),
            small.len(),
            err.as_mut_ptr(),
            err.len(),
        )
    };
    assert_eq!(rc, Status::BadArgument as c_int);
    assert!(msg(&err).contains("needs"), "{}", msg(&err));
    let mut record = vec![0u8; n];
    // SAFETY: valid out pointer, a record buffer of the size asked, an error buffer.
    let rc = unsafe {
        shmcoll_offer_create(
            1,
            &mut offer,
            record.as_mut_ptr(),
            n,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    assert_eq!(rc, Status::Ok as c_int, "{}", msg(&err));
    let mut one_node = 0;
    let mut comm: *mut ShmcollComm = null_mut();
    let mut garbled = record.clone();
    garbled[0] ^= 0xff;
    // SAFETY: `offer` is live and consumed here; the records hold `n` bytes.
    let rc = unsafe {
        shmcoll_offer_settle(
            offer,
            garbled.as_ptr(),
            n,
            0,
            &mut one_node,
            &mut comm,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    assert_eq!(rc, Status::Rejected as c_int);
    assert!(
        msg(&err).contains("garbled") && comm.is_null(),
        "{}",
        msg(&err)
    );
    // A single rank settles on this node; a pooled segment (another test's) or none.
    // SAFETY: as above, with a new offer.
    let rc = unsafe {
        shmcoll_offer_create(
            1,
            &mut offer,
            record.as_mut_ptr(),
            n,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    assert_eq!(rc, 0, "{}", msg(&err));
    // SAFETY: `offer` is live and consumed here; the record holds `n` bytes.
    let rc = unsafe {
        shmcoll_offer_settle(
            offer,
            record.as_ptr(),
            n,
            0,
            &mut one_node,
            &mut comm,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    assert_eq!(rc, 0, "{}", msg(&err));
    assert_eq!(one_node, 1);
    if !comm.is_null() {
        // SAFETY: `comm` is live and used by this thread only.
        assert_eq!(unsafe { shmcoll_comm_size(comm) }, 1);
    }
    // SAFETY: `comm` is live or null.
    unsafe { shmcoll_comm_free(comm) };
    // SAFETY: null is ignored.
    unsafe {
        shmcoll_offer_free(null_mut());
        assert_eq!(
            shmcoll_offer_settle(
                null_mut(),
                null(),
                0,
                0,
                &mut one_node,
                &mut comm,
                err.as_mut_ptr(),
                err.len()
            ),
            Status::BadArgument as c_int
        );
    }
}
