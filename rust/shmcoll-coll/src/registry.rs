//! The one algorithm registry of every collective: each algorithm's name, the operations
//! it serves, what a call must satisfy for it (its restrictions), the copy orders and
//! store policies of Alltoall's candidates, what a call forced, and what served it.
//!
//! Like Open MPI's coll/base: an algorithm is a name plus declared restrictions; selection
//! (select.rs) is data that names algorithms, and a forced choice that an algorithm's
//! restrictions exclude is an error, never a silent substitution. On the ground floor of
//! the crate, beside the operations (op.rs).

pub use shmcoll_kernels::Store;

use crate::error::{Error, Result};
use crate::op::CollOp;
use crate::order::Order;

/// The algorithms. The discriminant is the code that descriptors carry for a forced one
/// (0: not forced) and the index of the calls counted per algorithm (crate::comm::Stats).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Algo {
    /// Payloads copied into the segment before the arrive, read after it: one round.
    Inline = 1,
    /// Two copies through the staging areas, chunked and pipelined.
    Staging = 2,
    /// Alltoall: each rank copies its blocks straight out of its peers' heap send buffers.
    Pull = 3,
    /// Alltoall: each rank copies its blocks straight into its peers' heap receive buffers.
    Push = 4,
    /// Single copies reaching peers' private memory with process_vm_readv/writev.
    Cma = 5,
    /// Alltoall: each rank writes its blocks into its peers' private memory with
    /// process_vm_writev.
    CmaPush = 6,
    /// The other collectives: single copies from/into peers' buffers in the shared heap.
    Direct = 7,
}

impl Algo {
    pub const ALL: [Algo; 7] = [
        Algo::Inline,
        Algo::Staging,
        Algo::Pull,
        Algo::Push,
        Algo::Cma,
        Algo::CmaPush,
        Algo::Direct,
    ];

    /// One more than the largest code: the length of a table indexed by code.
    pub const COUNT: usize = Algo::Direct as usize + 1;

    pub fn name(self) -> &'static str {
        match self {
            Algo::Inline => "inline",
            Algo::Staging => "staging",
            Algo::Pull => "pull",
            Algo::Push => "push",
            Algo::Cma => "cma",
            Algo::CmaPush => "cma-push",
            Algo::Direct => "direct",
        }
    }

    /// Whether this algorithm serves `op`: Alltoall(v) has its own single copies (`pull`,
    /// `push`, `cma-push`), the other collectives theirs (`direct`); `inline`, `staging`
    /// and `cma` serve both. Barrier has no algorithms.
    pub fn serves(self, op: CollOp) -> bool {
        let alltoall = op.family() == CollOp::Alltoall;
        match self {
            _ if op == CollOp::Barrier => false,
            Algo::Pull | Algo::Push | Algo::CmaPush => alltoall,
            Algo::Direct => !alltoall,
            Algo::Inline | Algo::Staging | Algo::Cma => true,
        }
    }

    /// The algorithms that serve `op`, in the order the bindings list them.
    pub fn serving(op: CollOp) -> impl Iterator<Item = Algo> {
        let order: &'static [Algo] = if op.family() == CollOp::Alltoall {
            &Algo::ALL
        } else {
            // As the collectives' documentation introduces them.
            &[Algo::Inline, Algo::Direct, Algo::Cma, Algo::Staging]
        };
        order.iter().copied().filter(move |a| a.serves(op))
    }

    /// The algorithm named `s` among those that serve `op`.
    pub fn parse(op: CollOp, s: &str) -> Option<Algo> {
        Algo::serving(op).find(|a| a.name().eq_ignore_ascii_case(s.trim()))
    }

    /// `Algo::parse`, with the error that lists the known names.
    pub fn parse_or_err(op: CollOp, s: &str) -> Result<Algo> {
        Algo::parse(op, s).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "unknown algorithm {s:?}; known: {}",
                Algo::names(op)
            ))
        })
    }

    /// The names of the algorithms that serve `op`, comma-separated (for messages).
    pub fn names(op: CollOp) -> String {
        Algo::serving(op)
            .map(Algo::name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub(crate) fn from_code(c: u16) -> Option<Algo> {
        Algo::ALL.into_iter().find(|a| *a as u16 == c)
    }

    /// What the algorithm does for `op`.
    pub fn describe(self, op: CollOp) -> &'static str {
        let alltoall = op.family() == CollOp::Alltoall;
        match self {
            Algo::Inline if alltoall => "payloads inline in the segment, one synchronisation round (small messages)",
            Algo::Inline => "contributions inline in the segment, one synchronisation round (small messages)",
            Algo::Staging if alltoall => "two copies through per-pair staging rings, chunked and pipelined (any buffers, in-place)",
            Algo::Staging => "chunked rounds through the staging areas (any buffers, no CMA)",
            Algo::Pull => "single copy from peers' send buffers in the shared heap",
            Algo::Push => "single copy into peers' receive buffers in the shared heap",
            Algo::Cma if alltoall => "single copy from peers' private memory with process_vm_readv",
            Algo::Cma => "as direct, reaching peers' private buffers with process_vm_readv/writev",
            Algo::CmaPush => "single copy into peers' private memory with process_vm_writev",
            Algo::Direct => "single copies from/into peers' buffers in the shared heap; reductions as reduce-scatter, each rank writing its slice",
        }
    }

    /// Why this algorithm cannot serve a call of `op` with these facts, if it cannot.
    pub fn restriction(self, op: CollOp, f: &CallFacts) -> Option<String> {
        if !self.serves(op) {
            return Some(format!(
                "it does not serve {}; known: {}",
                op.name(),
                Algo::names(op)
            ));
        }
        let alltoall = op.family() == CollOp::Alltoall;
        let in_place = "in-place calls need a copy of the send data; use staging or inline";
        match self {
            Algo::Inline if !f.all_inline_written && alltoall => Some(format!(
                "a rank sends more than the {} bytes of its inline area (SHMCOLL_INLINE_BYTES)",
                f.inline_capacity
            )),
            Algo::Inline if !f.all_inline_written => Some(format!(
                "a contribution is larger than the {} bytes of the inline area (SHMCOLL_INLINE_BYTES)",
                f.inline_capacity
            )),
            Algo::Pull | Algo::Push if f.in_place => Some(in_place.into()),
            Algo::Pull if !f.all_send_in_heap => Some(format!(
                "every rank's send buffer must be in the shared heap (Comm.empty); rank {}'s is not",
                f.first_send_outside_heap.unwrap_or(0)
            )),
            Algo::Push if !f.all_recv_in_heap => Some(format!(
                "every rank's receive buffer must be in the shared heap (Comm.empty); rank {}'s is not",
                f.first_recv_outside_heap.unwrap_or(0)
            )),
            Algo::Direct if f.first_outside_heap.is_some() => Some(format!(
                "every buffer that peers touch must be in the shared heap (Comm.empty); rank {}'s is not",
                f.first_outside_heap.unwrap_or(0)
            )),
            // Alltoall's CMA reads the send data while peers write theirs.
            Algo::Cma | Algo::CmaPush if alltoall && f.in_place => Some(in_place.into()),
            Algo::Cma | Algo::CmaPush if !f.cma_ok => {
                Some("process_vm_readv/writev is not permitted between these processes".into())
            }
            _ => None,
        }
    }

    /// What selection tries, in order, when no candidate of the table's range can serve a
    /// call of `op` (or no range holds its size): Alltoall `staging`, which serves every
    /// Alltoall; the other collectives `direct`, `cma`, then `staging`, which serves every
    /// call.
    pub fn last_resorts(op: CollOp) -> &'static [Algo] {
        if op.family() == CollOp::Alltoall {
            &[Algo::Staging]
        } else {
            &[Algo::Direct, Algo::Cma, Algo::Staging]
        }
    }
}

/// Facts about a call, known identically on every rank after the arrive round: what the
/// algorithms' restrictions and the selection table's ranges look at.
#[derive(Clone, Copy, Debug, Default)]
pub struct CallFacts {
    pub nranks: usize,
    /// The size selection looks up: Alltoall the largest block any rank sends to any peer,
    /// the other collectives the largest contribution of a rank.
    pub bytes: usize,
    /// Every rank copied its payload into its inline area before arriving.
    pub all_inline_written: bool,
    pub inline_capacity: usize,
    /// Alltoall: every rank's send (receive) buffer is in the heap, else the first rank
    /// whose is not.
    pub all_send_in_heap: bool,
    pub all_recv_in_heap: bool,
    pub first_send_outside_heap: Option<usize>,
    pub first_recv_outside_heap: Option<usize>,
    /// The other collectives: the first rank with a buffer that peers touch under
    /// `direct` outside the heap.
    pub first_outside_heap: Option<usize>,
    pub in_place: bool,
    pub cma_ok: bool,
}

/// What the caller (keyword) or the environment forced; `None` lets selection decide.
/// The other collectives force an algorithm only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Forced {
    pub algo: Option<Algo>,
    pub order: Option<Order>,
    pub store: Option<Store>,
}

impl Forced {
    /// Only the algorithm forced (or nothing).
    pub fn algo(algo: Option<Algo>) -> Forced {
        Forced {
            algo,
            ..Forced::default()
        }
    }

    /// `<prefix>_ALGORITHM`, `<prefix>_ORDER`, `<prefix>_STORE` of Alltoall.
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

    /// Parse Alltoall's names; `None` or "auto" means not forced.
    pub fn parse(algo: Option<&str>, order: Option<&str>, store: Option<&str>) -> Result<Forced> {
        fn auto(s: Option<&str>) -> Option<&str> {
            s.filter(|v| !v.eq_ignore_ascii_case("auto"))
        }
        let algo = match auto(algo) {
            None => None,
            Some(n) => Some(Algo::parse_or_err(CollOp::Alltoall, n)?),
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

    pub fn is_some(self) -> bool {
        self != Forced::default()
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

/// The resolved choice for one call. `order`, `store`, `nt_threshold` and `chunk_bytes`
/// are Alltoall's parameters; the other collectives' algorithms take none (their choices
/// carry the defaults, unused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    pub op: CollOp,
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

impl Choice {
    /// A choice without parameters (the other collectives', and calls that skip
    /// selection such as a one-sided Bcast).
    pub fn plain(op: CollOp, algo: Algo, forced: Forced) -> Choice {
        Choice {
            op,
            algo,
            order: Order::Shifted,
            store: Store::Hybrid,
            nt_threshold: 0,
            chunk_bytes: 0,
            forced,
        }
    }
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
    fn names_parse_back_among_the_algorithms_of_the_operation() {
        for op in CollOp::ALL {
            for a in Algo::ALL {
                let parsed = Algo::parse(op, a.name());
                assert_eq!(parsed, a.serves(op).then_some(a), "{op:?} {a:?}");
            }
        }
        assert!(Forced::parse(Some("nope"), None, None).is_err());
        assert!(Forced::parse(Some("direct"), None, None).is_err());
        assert!(Algo::parse(CollOp::Allreduce, "pull").is_none());
        assert_eq!(
            Forced::parse(Some("auto"), Some("auto"), None).unwrap(),
            Forced::default()
        );
    }

    #[test]
    fn the_lists_keep_the_bindings_order() {
        let names = |op| Algo::serving(op).map(Algo::name).collect::<Vec<_>>();
        assert_eq!(
            names(CollOp::Alltoallv),
            ["inline", "staging", "pull", "push", "cma", "cma-push"]
        );
        assert_eq!(
            names(CollOp::Reduce),
            ["inline", "direct", "cma", "staging"]
        );
        assert_eq!(names(CollOp::Barrier), Vec::<&str>::new());
    }

    #[test]
    fn an_algorithm_cannot_serve_an_operation_it_does_not_serve() {
        let f = CallFacts {
            all_inline_written: true,
            all_send_in_heap: true,
            all_recv_in_heap: true,
            cma_ok: true,
            ..CallFacts::default()
        };
        assert!(Algo::Direct.restriction(CollOp::Alltoall, &f).is_some());
        assert!(Algo::Push.restriction(CollOp::Bcast, &f).is_some());
        assert!(Algo::Push.restriction(CollOp::Alltoall, &f).is_none());
        assert!(Algo::Direct.restriction(CollOp::Bcast, &f).is_none());
        // In place: Alltoall's CMA needs a copy of the send data; the others' does not.
        let in_place = CallFacts {
            in_place: true,
            ..f
        };
        assert!(Algo::Cma.restriction(CollOp::Alltoall, &in_place).is_some());
        assert!(Algo::Cma
            .restriction(CollOp::Allreduce, &in_place)
            .is_none());
    }
}
