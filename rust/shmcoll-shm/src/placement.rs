//! Binding ranks to CPUs when they outnumber them.
//!
//! With more ranks than CPUs, a waiting rank must hand its CPU to the rank it waits for.
//! Unbound, the scheduler keeps migrating the ranks between CPUs and sometimes stacks three
//! on one CPU while a lone rank spins on the other, where yielding does nothing (a small
//! Alltoall costs half again as much unbound: docs/results-collectives.md, "The
//! measurements behind the model's choices"). So, as
//! MPI launchers do with `--bind-to core`, each rank is bound round-robin to one CPU of its
//! allowed set, but only when it was not bound already (its mask is every online CPU).

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

/// `SHMCOLL_BIND`: `auto` (default: bind when ranks outnumber CPUs), `core` (always bind),
/// `none`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindPolicy {
    Auto,
    Core,
    None,
}

impl BindPolicy {
    pub fn parse(s: &str) -> Option<BindPolicy> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Some(BindPolicy::Auto),
            "core" | "cpu" | "yes" | "1" => Some(BindPolicy::Core),
            "none" | "no" | "0" => Some(BindPolicy::None),
            _ => None,
        }
    }
}

/// The CPUs this process may run on, in order.
pub fn allowed_cpus() -> Vec<usize> {
    match sched_getaffinity(None) {
        Ok(set) => (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
        Err(_) => Vec::new(),
    }
}

/// The CPU this process is bound to, when its affinity mask holds exactly one.
pub fn only_cpu() -> Option<usize> {
    match allowed_cpus().as_slice() {
        [c] => Some(*c),
        _ => None,
    }
}

fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Bind this process to one CPU if the policy says so; returns the CPU chosen.
pub fn bind_rank(policy: BindPolicy, rank: usize, nranks: usize) -> Option<usize> {
    let allowed = allowed_cpus();
    if allowed.is_empty() {
        return None;
    }
    let want = match policy {
        BindPolicy::None => false,
        BindPolicy::Core => true,
        // Only when oversubscribed, and only if nobody (launcher, user) bound us already.
        BindPolicy::Auto => nranks > allowed.len() && allowed.len() >= online_cpus(),
    };
    if !want {
        return None;
    }
    let cpu = allowed[rank % allowed.len()];
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set).ok().map(|_| cpu)
}
