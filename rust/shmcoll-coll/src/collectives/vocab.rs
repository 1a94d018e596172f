//! The collectives' vocabulary, on the ground floor of the crate (it imports only the
//! operations, crate::op): the algorithms
//! (`CollAlgo`, and the facts every rank agrees on that decide which can serve a call,
//! `CollFacts`), and what served a call (`CollChoice`). The protocol core (crate::comm),
//! the settings (crate::config), the descriptors and the tuning file speak it; the
//! algorithms (this module's siblings) implement it.

pub use crate::op::CollOp;

/// Algorithms of this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CollAlgo {
    Inline = 0,
    Direct = 1,
    Staging = 2,
    Cma = 3,
}

impl CollAlgo {
    pub const ALL: [CollAlgo; 4] = [
        CollAlgo::Inline,
        CollAlgo::Direct,
        CollAlgo::Cma,
        CollAlgo::Staging,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CollAlgo::Inline => "inline",
            CollAlgo::Direct => "direct",
            CollAlgo::Cma => "cma",
            CollAlgo::Staging => "staging",
        }
    }

    pub fn parse(s: &str) -> Option<CollAlgo> {
        CollAlgo::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s.trim()))
    }

    pub fn describe(self) -> &'static str {
        match self {
            CollAlgo::Inline => "contributions inline in the segment, one synchronisation round (small messages)",
            CollAlgo::Direct => "single copies from/into peers' buffers in the shared heap; reductions as reduce-scatter, each rank writing its slice",
            CollAlgo::Cma => "as direct, reaching peers' private buffers with process_vm_readv/writev",
            CollAlgo::Staging => "chunked rounds through the staging areas (any buffers, no CMA)",
        }
    }

    /// Why this algorithm cannot serve a call with these facts, if it cannot.
    pub fn restriction(self, f: &CollFacts) -> Option<String> {
        match self {
            CollAlgo::Inline if !f.all_inline_written => Some(format!(
                "a contribution is larger than the {} bytes of the inline area (SHMCOLL_INLINE_BYTES)",
                f.inline_capacity
            )),
            CollAlgo::Direct if f.first_outside_heap.is_some() => Some(format!(
                "every buffer that peers touch must be in the shared heap (Comm.empty); rank {}'s is not",
                f.first_outside_heap.unwrap_or(0)
            )),
            CollAlgo::Cma if !f.cma_ok => {
                Some("process_vm_readv/writev is not permitted between these processes".into())
            }
            _ => None,
        }
    }

    /// Encoded in descriptors (0: not forced).
    pub(crate) fn encode(a: Option<CollAlgo>) -> u64 {
        a.map_or(0, |a| a as u64 + 1)
    }
}

/// What is known identically on every rank after the arrive round.
#[derive(Clone, Copy, Debug, Default)]
pub struct CollFacts {
    /// The size that selection looks up: the largest contribution of a rank, in bytes.
    pub bytes: usize,
    pub all_inline_written: bool,
    pub inline_capacity: usize,
    /// The first rank with a buffer that peers touch under `direct` outside the heap.
    pub first_outside_heap: Option<usize>,
    pub cma_ok: bool,
}

/// What served a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollChoice {
    pub op: CollOp,
    pub algo: CollAlgo,
    pub forced: bool,
}
