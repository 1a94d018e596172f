//! The C header (include/shmcoll_capi.h) against the engine: every integer constant it
//! defines is the value the engine gives that name (statuses, error classes, element types,
//! operators, collective codes), so the shim, which only uses the header's names, and the
//! engine speak one numbering. A constant the header adds must be checked here too, and
//! the shim's own enumeration of collectives (csrc/shim.h) must spell each code with the
//! header's name of the same collective.

use std::collections::BTreeMap;

use shmcoll_coll::CollOp;
use shmcoll_kernels::{Dtype, Op};

use crate::collectives::{coll_op, OFFERED};
use crate::engine::{Class, Status};

const HEADER: &str = include_str!("../include/shmcoll_capi.h");
const SHIM: &str = include_str!("../../../python/shmcoll/pmpi/csrc/shim.h");

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
    if let Some(d) = name.strip_prefix("DTYPE_") {
        return Dtype::parse(&d.to_lowercase()).map(|d| i64::from(d.code()));
    }
    if let Some(o) = name.strip_prefix("OP_") {
        return Op::parse(o).map(|o| i64::from(o.code()));
    }
    if let Some(o) = CollOp::ALL
        .into_iter()
        .find(|o| o.name().eq_ignore_ascii_case(name))
    {
        return Some(i64::from(o.code()));
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
        "COLLECTIVES" => i64::try_from(CollOp::COUNT).ok(),
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

#[test]
fn every_collective_offered_is_named_and_taken_back_by_its_code() {
    let d = defines();
    for o in OFFERED {
        let name = o.name().to_uppercase();
        let code = d.get(&name).copied();
        assert_eq!(code, Some(i64::from(o.code())), "SHMCOLL_{name}");
        assert_eq!(coll_op(o.code() as i32), Some(o));
    }
    for name in ["BARRIER", "ALLTOALL", "ALLTOALLV"] {
        assert!(d.contains_key(name), "SHMCOLL_{name}");
    }
}

/// The entries of the shim's `enum shim_op`: (OP_ name, what it is set to).
fn shim_ops() -> Vec<(String, String)> {
    let body = SHIM
        .split_once("enum shim_op {")
        .and_then(|(_, rest)| rest.split_once("};"))
        .expect("shim.h defines enum shim_op")
        .0;
    body.split(',')
        .filter_map(|e| {
            let (name, value) = e.split_once('=')?;
            Some((name.trim().to_string(), value.trim().to_string()))
        })
        .collect()
}

#[test]
fn the_shim_numbers_its_collectives_with_the_header_s_names() {
    let d = defines();
    let ops = shim_ops();
    assert!(ops.len() >= 7, "the parser found only {ops:?}");
    // Every entry has a value (an entry without one would count on from its neighbour).
    let entries = SHIM
        .split_once("enum shim_op {")
        .and_then(|(_, r)| r.split_once("};"))
        .map_or(0, |(b, _)| {
            b.split(',').filter(|e| !e.trim().is_empty()).count()
        });
    assert_eq!(entries, ops.len(), "{ops:?}");
    for (name, value) in &ops {
        let op = name.strip_prefix("OP_").expect("OP_ names");
        assert_eq!(value, &format!("SHMCOLL_{op}"), "{name}");
        assert!(d.contains_key(op), "{value} is not in the header");
    }
    assert!(
        SHIM.contains("#define OP_COUNT SHMCOLL_COLLECTIVES"),
        "the shim's tables have a slot per engine code"
    );
}
