//! Selection as data: an ordered list of rules, first match wins.
//!
//! The built-in list is derived from a small model of the machine (below); the tuning-table
//! work replaces it with measured tables. A rule names an algorithm; it matches when the
//! call's largest block is at most `max_block` and the algorithm's restrictions allow the
//! call. Forced choices (keyword or environment) bypass the rules but not the restrictions.

use shmcoll_kernels::hw::Machine;

use crate::error::{Error, Result};
use crate::order::Order;
use crate::registry::{Algo, CallFacts, Choice, Forced, Store};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Largest block (bytes per peer) this rule covers; `usize::MAX` for "inf".
    pub max_block: usize,
    pub algo: Algo,
    pub order: Order,
    pub store: Store,
}

/// The built-in rules for `p` ranks.
///
/// Model: while a rank's whole payload is a few cache lines, synchronisation dominates and
/// the one-round inline path wins everywhere. Beyond that, single copies win: `push` into
/// heap receive buffers (each rank reads its own, cache-hot send data and writes each block
/// once), `pull` from heap send buffers, and between private buffers `cma-push` (the kernel
/// copies straight into the receiver, still from the sender's cache) once the inline
/// payload outgrows a few KiB. Staging serves whatever remains (in-place calls, no CMA).
/// The store policy is hybrid: streaming stores once a call writes more than the cache
/// model's threshold (`SHMCOLL_NT_THRESHOLD`).
pub fn builtin_rules(_m: &Machine, p: usize) -> Vec<Rule> {
    let p = p.max(1);
    let r = |max_block, algo| Rule {
        max_block,
        algo,
        order: Order::Shifted,
        store: Store::Hybrid,
    };
    vec![
        r((1 << 10) / p, Algo::Inline),
        r(usize::MAX, Algo::Push),
        r(usize::MAX, Algo::Pull),
        r((8 << 10) / p, Algo::Inline),
        r(usize::MAX, Algo::CmaPush),
        r(usize::MAX, Algo::Staging),
    ]
}

/// Largest block for which the rules would choose the inline path (decided before the
/// arrive round, so it must depend on nothing but the block size).
pub fn inline_limit(rules: &[Rule]) -> usize {
    rules
        .iter()
        .filter(|r| r.algo == Algo::Inline)
        .map(|r| r.max_block)
        .max()
        .unwrap_or(0)
}

/// The choice for a call, identical on every rank because `facts` and `forced` are.
pub fn select(rules: &[Rule], facts: &CallFacts, forced: Forced) -> Result<Choice> {
    let (algo, order, store) = match forced.algo {
        Some(a) => {
            if let Some(why) = a.restriction(facts) {
                return Err(Error::CannotServe {
                    algo: a.name(),
                    why,
                });
            }
            // Order and store of the first rule for this algorithm and size, if any.
            let r = rules
                .iter()
                .find(|r| r.algo == a && facts.max_block <= r.max_block)
                .copied();
            (
                a,
                r.map_or(Order::Shifted, |r| r.order),
                r.map_or(Store::Hybrid, |r| r.store),
            )
        }
        None => {
            let r = rules
                .iter()
                .find(|r| facts.max_block <= r.max_block && r.algo.restriction(facts).is_none())
                .copied()
                .unwrap_or(Rule {
                    max_block: usize::MAX,
                    algo: Algo::Staging,
                    order: Order::Shifted,
                    store: Store::Hybrid,
                });
            (r.algo, r.order, r.store)
        }
    };
    Ok(Choice {
        algo,
        order: forced.order.unwrap_or(order),
        store: forced.store.unwrap_or(store),
        forced,
    })
}
