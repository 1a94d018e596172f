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
/// Model: below a few KiB per peer, synchronisation dominates, so the one-round inline path
/// wins while the payload is small enough for two copies to be cheaper than a second
/// round. Above it, single-copy paths (heap pull, heap push) move each byte once; between
/// private buffers the staging rings keep both copies in cache, chunk by chunk. The
/// store policy is hybrid: streaming stores once a call writes more than the cache share
/// (`SHMCOLL_NT_THRESHOLD`, derived from the cache sizes).
pub fn builtin_rules(_m: &Machine, p: usize) -> Vec<Rule> {
    let inline_max = (16 << 10) / p.max(1);
    let r = |max_block, algo, order| Rule {
        max_block,
        algo,
        order,
        store: Store::Hybrid,
    };
    vec![
        r(inline_max, Algo::Inline, Order::Shifted),
        r(usize::MAX, Algo::Pull, Order::Shifted),
        r(usize::MAX, Algo::Push, Order::Shifted),
        r(usize::MAX, Algo::Staging, Order::Shifted),
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
