//! The named algorithms, copy orders and store policies, and what each algorithm needs.
//!
//! Like Open MPI's coll/base: an algorithm is a name plus declared restrictions; selection
//! (select.rs) is data that names algorithms, and a forced choice that an algorithm's
//! restrictions exclude is an error, never a silent substitution.

pub use shmcoll_kernels::Store;

use crate::error::{Error, Result};
use crate::order::Order;

/// Alltoall(v) algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Algo {
    /// Payloads copied into the segment before the arrive, read after it: one round.
    Inline = 1,
    /// Two copies through per-pair rings in the staging areas, chunked and pipelined.
    Staging = 2,
    /// Each rank copies its blocks straight out of its peers' heap send buffers.
    Pull = 3,
    /// Each rank copies its blocks straight into its peers' heap receive buffers.
    Push = 4,
    /// Each rank reads its blocks out of its peers' private memory with process_vm_readv.
    Cma = 5,
    /// Each rank writes its blocks into its peers' private memory with process_vm_writev.
    CmaPush = 6,
}

impl Algo {
    pub const ALL: [Algo; 6] = [
        Algo::Inline,
        Algo::Staging,
        Algo::Pull,
        Algo::Push,
        Algo::Cma,
        Algo::CmaPush,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algo::Inline => "inline",
            Algo::Staging => "staging",
            Algo::Pull => "pull",
            Algo::Push => "push",
            Algo::Cma => "cma",
            Algo::CmaPush => "cma-push",
        }
    }

    pub fn parse(s: &str) -> Option<Algo> {
        Algo::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s.trim()))
    }

    fn from_code(c: u16) -> Option<Algo> {
        Algo::ALL.into_iter().find(|a| *a as u16 == c)
    }

    pub fn describe(self) -> &'static str {
        match self {
            Algo::Inline => "payloads inline in the segment, one synchronisation round (small messages)",
            Algo::Staging => "two copies through per-pair staging rings, chunked and pipelined (any buffers, in-place)",
            Algo::Pull => "single copy from peers' send buffers in the shared heap",
            Algo::Push => "single copy into peers' receive buffers in the shared heap",
            Algo::Cma => "single copy from peers' private memory with process_vm_readv",
            Algo::CmaPush => "single copy into peers' private memory with process_vm_writev",
        }
    }

    /// Why this algorithm cannot serve a call with these facts, if it cannot.
    pub fn restriction(self, f: &CallFacts) -> Option<String> {
        match self {
            Algo::Inline if !f.all_inline_written => Some(format!(
                "a rank sends more than the {} bytes of its inline area (SHMCOLL_INLINE_BYTES)",
                f.inline_capacity
            )),
            Algo::Pull if f.in_place => Some("in-place calls need a copy of the send data; use staging or inline".into()),
            Algo::Pull if !f.all_send_in_heap => Some(format!(
                "every rank's send buffer must be in the shared heap (Comm.empty); rank {}'s is not",
                f.first_send_outside_heap.unwrap_or(0)
            )),
            Algo::Push if f.in_place => Some("in-place calls need a copy of the send data; use staging or inline".into()),
            Algo::Push if !f.all_recv_in_heap => Some(format!(
                "every rank's receive buffer must be in the shared heap (Comm.empty); rank {}'s is not",
                f.first_recv_outside_heap.unwrap_or(0)
            )),
            Algo::Cma | Algo::CmaPush if f.in_place => {
                Some("in-place calls need a copy of the send data; use staging or inline".into())
            }
            Algo::Cma | Algo::CmaPush if !f.cma_ok => {
                Some("process_vm_readv/writev is not permitted between these processes".into())
            }
            _ => None,
        }
    }
}

/// Facts about a call, known identically on every rank after the arrive round.
#[derive(Clone, Copy, Debug, Default)]
pub struct CallFacts {
    pub nranks: usize,
    /// Largest block any rank sends to any peer.
    pub max_block: usize,
    /// Every rank copied its payload into its inline area before arriving.
    pub all_inline_written: bool,
    pub inline_capacity: usize,
    pub all_send_in_heap: bool,
    pub all_recv_in_heap: bool,
    pub first_send_outside_heap: Option<usize>,
    pub first_recv_outside_heap: Option<usize>,
    pub in_place: bool,
    pub cma_ok: bool,
}

/// What the caller (keyword) or the environment forced; `None` lets selection decide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Forced {
    pub algo: Option<Algo>,
    pub order: Option<Order>,
    pub store: Option<Store>,
}

impl Forced {
    /// `<prefix>_ALGORITHM`, `<prefix>_ORDER`, `<prefix>_STORE`.
    pub fn from_env(prefix: &str) -> Result<Forced> {
        let get = |suffix: &str| {
            std::env::var(format!("{prefix}_{suffix}"))
                .ok()
                .filter(|v| !v.trim().is_empty() && !v.trim().eq_ignore_ascii_case("auto"))
        };
        Forced::parse(
            get("ALGORITHM").as_deref(),
            get("ORDER").as_deref(),
            get("STORE").as_deref(),
        )
        .map_err(|e| match e {
            Error::InvalidArgument(m) => Error::InvalidArgument(format!("environment: {m}")),
            e => e,
        })
    }

    /// Parse names; `None` or "auto" means not forced.
    pub fn parse(algo: Option<&str>, order: Option<&str>, store: Option<&str>) -> Result<Forced> {
        fn auto(s: Option<&str>) -> Option<&str> {
            s.filter(|v| !v.eq_ignore_ascii_case("auto"))
        }
        let algo = match auto(algo) {
            None => None,
            Some(n) => Some(Algo::parse(n).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown algorithm {n:?}; known: {}",
                    Algo::ALL.map(|a| a.name()).join(", ")
                ))
            })?),
        };
        let order = match auto(order) {
            None => None,
            Some(n) => Some(Order::parse(n).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown copy order {n:?}; known: {}",
                    Order::ALL.map(|o| o.name()).join(", ")
                ))
            })?),
        };
        let store = match auto(store) {
            None => None,
            Some(n) => Some(Store::parse(n).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown store policy {n:?}; known: temporal, nt, hybrid"
                ))
            })?),
        };
        Ok(Forced { algo, order, store })
    }

    /// Fields of `self` win over `other`'s.
    pub fn or(self, other: Forced) -> Forced {
        Forced {
            algo: self.algo.or(other.algo),
            order: self.order.or(other.order),
            store: self.store.or(other.store),
        }
    }

    /// Packed into one u64 for the call descriptor, so that ranks can compare.
    pub fn encode(self) -> u64 {
        let a = self.algo.map_or(0, |a| a as u64);
        let o = self.order.map_or(0, |o| o as u64 + 1);
        let s = self.store.map_or(0, |s| {
            Store::ALL.iter().position(|x| *x == s).unwrap() as u64 + 1
        });
        a | (o << 16) | (s << 32)
    }

    pub fn decode(v: u64) -> Forced {
        let a = (v & 0xffff) as u16;
        let o = ((v >> 16) & 0xffff) as usize;
        let s = ((v >> 32) & 0xffff) as usize;
        Forced {
            algo: Algo::from_code(a),
            order: o.checked_sub(1).and_then(|i| Order::ALL.get(i).copied()),
            store: s.checked_sub(1).and_then(|i| Store::ALL.get(i).copied()),
        }
    }

    pub fn describe(self) -> String {
        format!(
            "algorithm={}, order={}, store={}",
            self.algo.map_or("auto", |a| a.name()),
            self.order.map_or("auto", |o| o.name()),
            self.store.map_or("auto", |s| s.name())
        )
    }
}

/// The resolved choice for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    pub algo: Algo,
    pub order: Order,
    pub store: Store,
    /// Bytes written per call from which `hybrid` streams.
    pub nt_threshold: usize,
    /// Pipelining chunk (staging) and tile size (morton).
    pub chunk_bytes: usize,
    /// Whether each part was forced (keyword or environment) rather than selected.
    pub forced: Forced,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forced_round_trips_through_the_descriptor_code() {
        for a in [None].into_iter().chain(Algo::ALL.map(Some)) {
            for o in [None].into_iter().chain(Order::ALL.map(Some)) {
                for s in [None].into_iter().chain(Store::ALL.map(Some)) {
                    let f = Forced {
                        algo: a,
                        order: o,
                        store: s,
                    };
                    assert_eq!(Forced::decode(f.encode()), f);
                }
            }
        }
    }

    #[test]
    fn names_parse_back() {
        for a in Algo::ALL {
            assert_eq!(Algo::parse(a.name()), Some(a));
        }
        assert!(Forced::parse(Some("nope"), None, None).is_err());
        assert_eq!(
            Forced::parse(Some("auto"), Some("auto"), None).unwrap(),
            Forced::default()
        );
    }
}
