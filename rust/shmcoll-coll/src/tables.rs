//! The selection tables a communicator holds: one `Selection` per operation family, every
//! collective alike (Alltoall's model from crate::select, the other collectives' from
//! crate::collectives::select), bound at creation and replaced by a tuned table per family.

use shmcoll_kernels::hw::Machine;

use crate::collectives::select::model_coll_table;
use crate::op::CollOp;
use crate::select::{Selection, Table};

/// One selection per operation code; the members of a family share their family's.
#[derive(Clone, Debug)]
pub struct Tables {
    by_code: Vec<Selection>,
}

impl Tables {
    /// The models for `p` ranks, the other collectives' inline payloads bounded by
    /// `inline_bytes` and pipelines by `staging_bytes`, private buffers taking CMA from
    /// `cma_from` bytes.
    pub fn model(
        m: &Machine,
        p: usize,
        inline_bytes: usize,
        staging_bytes: usize,
        cma_from: usize,
    ) -> Tables {
        let mut by_code = vec![Selection::default(); CollOp::COUNT];
        for op in CollOp::ALL.into_iter().filter(|o| *o == o.family()) {
            by_code[op as usize] = match op {
                CollOp::Barrier => Selection::default(),
                CollOp::Alltoall => Selection::alltoall_model(m, p, cma_from),
                _ => Selection::model(
                    model_coll_table(op, m, p, inline_bytes, staging_bytes, cma_from),
                    false,
                ),
            };
        }
        Tables { by_code }
    }

    /// The selection of `op`'s family.
    pub fn get(&self, op: CollOp) -> &Selection {
        &self.by_code[op.family() as usize]
    }

    /// Bind a (tuned) table for `op`'s family; Alltoall's model stays as the fallback for
    /// its gaps.
    pub fn set(&mut self, op: CollOp, table: Table, source: String) {
        let s = &mut self.by_code[op.family() as usize];
        s.table = table;
        s.source = source;
    }
}
