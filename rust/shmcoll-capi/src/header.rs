//! The C header (include/shmcoll_capi.h) against the engine: every integer constant it
//! defines is the value the engine gives that name (statuses, error classes, element types,
//! operators, collective codes), so the shim, which only uses the header's names, and the
//! engine speak one numbering. A constant the header adds must be checked here too.

use std::collections::BTreeMap;

use shmcoll_coll::CollOp;
use shmcoll_kernels::{Dtype, Op};

use crate::collectives::coll_op;
use crate::engine::{Class, Status};
use crate::ffi::{REJECT_ALLTOALL, REJECT_ALLTOALLV};

const HEADER: &str = include_str!("../include/shmcoll_capi.h");

/// `#define SHMCOLL_<NAME> <integer>` lines: NAME -> value.
fn defines() -> BTreeMap<String, i64> {
    HEADER
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            match (w.next(), w.next(), w.next(), w.next()) {
                (Some("#define"), Some(name), Some(v), None) => {
                    let v = v.parse().ok()?;
                    Some((name.strip_prefix("SHMCOLL_")?.to_string(), v))
                }
                _ => None,
            }
        })
        .collect()
}

/// The engine's value for a header name, None for a name it does not know.
fn engine_value(name: &str) -> Option<i64> {
    let status = |s: Status| Some(s as i64);
    let class = |c: Class| Some(c as i64);
    let coll = |o: CollOp| (0..16).find(|&c| coll_op(c) == Some(o)).map(i64::from);
    if let Some(d) = name.strip_prefix("DTYPE_") {
        return Dtype::parse(&d.to_lowercase()).map(|d| i64::from(d.code()));
    }
    if let Some(o) = name.strip_prefix("OP_") {
        return Op::parse(o).map(|o| i64::from(o.code()));
    }
    match name {
        "OK" => status(Status::Ok),
        "REJECTED" => status(Status::Rejected),
        "FATAL" => status(Status::Fatal),
        "BAD_ARGUMENT" => status(Status::BadArgument),
        "DECLINED" => status(Status::Declined),
        "CLASS_NONE" => class(Class::None),
        "CLASS_OTHER" => class(Class::Other),
        "CLASS_ARG" => class(Class::Argument),
        "CLASS_COUNT" => class(Class::Count),
        "CLASS_BUFFER" => class(Class::Buffer),
        "CLASS_ROOT" => class(Class::Root),
        "CLASS_OP" => class(Class::Operator),
        "CLASS_TYPE" => class(Class::Datatype),
        "CLASS_MISMATCH" => class(Class::Mismatch),
        "BCAST" => coll(CollOp::Bcast),
        "ALLGATHER" => coll(CollOp::Allgather),
        "REDUCE_SCATTER_BLOCK" => coll(CollOp::ReduceScatterBlock),
        "ALLREDUCE" => coll(CollOp::Allreduce),
        "ALLTOALL" => Some(i64::from(REJECT_ALLTOALL)),
        "ALLTOALLV" => Some(i64::from(REJECT_ALLTOALLV)),
        _ => None,
    }
}

#[test]
fn every_constant_of_the_header_is_the_engine_s() {
    let d = defines();
    assert!(d.len() >= 40, "the parser found only {d:?}");
    for (name, v) in &d {
        assert_eq!(
            engine_value(name),
            Some(*v),
            "SHMCOLL_{name} is {v} in the header"
        );
    }
    // Every element type and operator the engine has is named there.
    for dt in Dtype::ALL {
        assert!(
            d.contains_key(&format!("DTYPE_{}", dt.name().to_uppercase())),
            "{dt:?}"
        );
    }
    for op in Op::ALL {
        assert!(
            d.contains_key(&format!("OP_{}", op.name().to_uppercase())),
            "{op:?}"
        );
    }
}
