//! The collective operations, one enum for every collective the engine runs, with the one
//! numbering every border uses: the descriptors' op codes (desc.rs), the C ABI's collective
//! codes (include/shmcoll_capi.h, checked against this enum by shmcoll-capi's header test)
//! and the PMPI shim's (whose enum is spelled with the header's names). On the ground floor
//! of the crate: it imports nothing of it.

/// A collective operation, with mpi4py's names. The discriminant is its code everywhere
/// (0 is no operation: a descriptor never written).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CollOp {
    Barrier = 1,
    Alltoall = 2,
    Alltoallv = 3,
    Bcast = 4,
    Allgather = 5,
    Allgatherv = 6,
    Gather = 7,
    Gatherv = 8,
    Scatter = 9,
    Scatterv = 10,
    ReduceScatterBlock = 11,
    ReduceScatter = 12,
    Allreduce = 13,
    Reduce = 14,
}

impl CollOp {
    pub const ALL: [CollOp; 14] = [
        CollOp::Barrier,
        CollOp::Alltoall,
        CollOp::Alltoallv,
        CollOp::Bcast,
        CollOp::Allgather,
        CollOp::Allgatherv,
        CollOp::Gather,
        CollOp::Gatherv,
        CollOp::Scatter,
        CollOp::Scatterv,
        CollOp::ReduceScatterBlock,
        CollOp::ReduceScatter,
        CollOp::Allreduce,
        CollOp::Reduce,
    ];

    /// One more than the largest code: the length of a table indexed by code.
    pub const COUNT: usize = CollOp::Reduce as usize + 1;

    pub fn name(self) -> &'static str {
        match self {
            CollOp::Barrier => "Barrier",
            CollOp::Alltoall => "Alltoall",
            CollOp::Alltoallv => "Alltoallv",
            CollOp::Bcast => "Bcast",
            CollOp::Allgather => "Allgather",
            CollOp::Allgatherv => "Allgatherv",
            CollOp::Gather => "Gather",
            CollOp::Gatherv => "Gatherv",
            CollOp::Scatter => "Scatter",
            CollOp::Scatterv => "Scatterv",
            CollOp::ReduceScatterBlock => "Reduce_scatter_block",
            CollOp::ReduceScatter => "Reduce_scatter",
            CollOp::Allreduce => "Allreduce",
            CollOp::Reduce => "Reduce",
        }
    }

    pub fn parse(s: &str) -> Option<CollOp> {
        CollOp::ALL
            .into_iter()
            .find(|o| o.name().eq_ignore_ascii_case(s.trim()))
    }

    /// The collective of crate::collectives named `s` (not Barrier nor Alltoall(v)).
    pub fn parse_collective(s: &str) -> Option<CollOp> {
        CollOp::parse(s).filter(|o| o.is_module_collective())
    }

    /// The code of this operation in descriptors, the C ABI and the shim.
    pub fn code(self) -> u32 {
        self as u32
    }

    pub fn from_code(c: u32) -> Option<CollOp> {
        CollOp::ALL.into_iter().find(|o| o.code() == c)
    }

    /// The name of an operation code as messages print it.
    pub fn name_of_code(c: u32) -> &'static str {
        CollOp::from_code(c).map_or("an unknown operation", CollOp::name)
    }

    /// Whether the operation moves data through the collectives module (crate::collectives):
    /// every one but Barrier and Alltoall(v), which have their own entries.
    pub fn is_module_collective(self) -> bool {
        !matches!(self, CollOp::Barrier | CollOp::Alltoall | CollOp::Alltoallv)
    }

    pub fn rooted(self) -> bool {
        matches!(
            self,
            CollOp::Bcast
                | CollOp::Gather
                | CollOp::Gatherv
                | CollOp::Scatter
                | CollOp::Scatterv
                | CollOp::Reduce
        )
    }

    pub fn reduces(self) -> bool {
        matches!(
            self,
            CollOp::ReduceScatterBlock | CollOp::ReduceScatter | CollOp::Allreduce | CollOp::Reduce
        )
    }

    /// The family that shares a selection table (the vector variant with its uniform one).
    pub fn family(self) -> CollOp {
        match self {
            CollOp::Alltoallv => CollOp::Alltoall,
            CollOp::Allgatherv => CollOp::Allgather,
            CollOp::Gatherv => CollOp::Gather,
            CollOp::Scatterv => CollOp::Scatter,
            CollOp::ReduceScatter => CollOp::ReduceScatterBlock,
            o => o,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        for o in CollOp::ALL {
            assert_eq!(CollOp::from_code(o.code()), Some(o));
            assert_eq!(CollOp::parse(o.name()), Some(o));
            assert!(o.code() != 0 && (o.code() as usize) < CollOp::COUNT);
        }
        assert_eq!(CollOp::from_code(0), None);
        assert_eq!(CollOp::name_of_code(99), "an unknown operation");
    }
}
