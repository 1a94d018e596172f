//! Who may read and write this rank's memory with CMA (process_vm_readv/writev) and fetch
//! its descriptors (pidfd_getfd): only as many processes as the job needs.
//!
//! Both calls pass the kernel's ptrace access check. Beyond the same-user rule, Yama's
//! `kernel.yama.ptrace_scope` decides:
//! * absent or 0: any process of the user may already trace the rank; nothing to set.
//! * 1: only ancestors may trace, unless the tracee declares a tracer with PR_SET_PTRACER,
//!   which then lets that process and its descendants trace it. Ranks are siblings or
//!   cousins (children of `shmcoll run`, of the `shmcoll.spawn` caller, of an mpiexec
//!   proxy), so each rank declares the nearest common ancestor of all the ranks: the
//!   launcher, whose descendants are the job. Declaring "any process" would open the rank
//!   to every process of the user, so where the ranks share no ancestor but init, nothing
//!   is declared and the CMA probe of the handshake reports CMA unavailable.
//! * 2 or 3: only CAP_SYS_PTRACE (or nobody) may trace; nothing a rank sets changes that.
//!
//! The decision is a pure function of the scope and the ranks' ancestry (`decide`); the
//! rest reads /proc and calls prctl.

use std::sync::Mutex;

/// Where Yama publishes its mode.
const SCOPE_FILE: &str = "/proc/sys/kernel/yama/ptrace_scope";

/// Longest ancestry followed: deeper process trees exist only by mistake or malice (a
/// loop of ppids cannot occur, but a chain that does not end is not walked forever).
const MAX_DEPTH: usize = 4096;

/// What a rank declares so that its peers may trace it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tracer {
    /// Ptrace is not restricted beyond the same-user rule (or there is no peer): nothing.
    NoNeed,
    /// Declare this process (the ranks' nearest common ancestor) with PR_SET_PTRACER.
    Ancestor(u32),
    /// Nothing short of opening the rank to every process of the user would let the peers
    /// trace it: declare nothing, CMA is unavailable unless the peers are privileged.
    Unavailable,
}

/// The decision for Yama scope `scope` (None: Yama absent) and the ancestry of every rank
/// of the communicator: `chains[i]` is rank i's pid, its parent's, ... up to pid 1, or None
/// where it could not be read.
pub fn decide(scope: Option<u32>, chains: &[Option<Vec<u32>>]) -> Tracer {
    match scope {
        None | Some(0) => return Tracer::NoNeed,
        Some(1) => {}
        Some(_) => return Tracer::Unavailable,
    }
    if chains.len() <= 1 {
        return Tracer::NoNeed;
    }
    let Some(chains) = chains
        .iter()
        .map(Option::as_deref)
        .collect::<Option<Vec<_>>>()
    else {
        return Tracer::Unavailable;
    };
    let common = chains[0]
        .iter()
        .copied()
        .find(|pid| chains[1..].iter().all(|c| c.contains(pid)));
    match common {
        // Pid 1 (init, or a container's) is the ancestor of everything: declaring it would
        // let every process of the user trace the rank.
        Some(pid) if pid > 1 => Tracer::Ancestor(pid),
        _ => Tracer::Unavailable,
    }
}

/// Yama's ptrace_scope, None where Yama is absent or its file unreadable.
pub fn yama_scope() -> Option<u32> {
    parse_scope(&std::fs::read_to_string(SCOPE_FILE).ok()?)
}

fn parse_scope(text: &str) -> Option<u32> {
    text.trim().parse().ok()
}

/// The parent pid in the text of /proc/<pid>/stat: the fourth field, after the command
/// name in parentheses, which may itself hold spaces and parentheses.
fn parse_ppid(stat: &str) -> Option<u32> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_ascii_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

/// `pid`, its parent, its parent's parent, ... up to and including pid 1 (or the last
/// process whose parent lies outside this pid namespace); None if a link cannot be read
/// (a process exited meanwhile, /proc is not mounted).
pub fn ancestry(pid: u32) -> Option<Vec<u32>> {
    let mut chain = vec![pid];
    let mut cur = pid;
    while cur > 1 {
        if chain.len() > MAX_DEPTH {
            return None;
        }
        let stat = std::fs::read_to_string(format!("/proc/{cur}/stat")).ok()?;
        let ppid = parse_ppid(&stat)?;
        if ppid == 0 {
            break;
        }
        chain.push(ppid);
        cur = ppid;
    }
    Some(chain)
}

/// The tracer this process declared last, with the pid it declared it as (a forked child
/// inherits this static but not the declaration, which Yama keeps per process).
static DECLARED: Mutex<Option<(u32, u32)>> = Mutex::new(None);

/// Let the ranks `pids` (this process among them) trace this process, as far as Yama
/// requires and no further; returns what was decided. A tracer declared earlier for
/// another communicator stays able to trace: its ancestry joins the ranks', so the new
/// declaration is that tracer or one of its ancestors.
pub fn allow_ranks(pids: &[u32]) -> Tracer {
    let scope = yama_scope();
    if scope != Some(1) || pids.len() <= 1 {
        // Nothing to declare (the decision needs no ancestry).
        return decide(scope, &[]);
    }
    let me = std::process::id();
    let mut guard = DECLARED.lock().unwrap_or_else(|e| e.into_inner());
    let earlier = guard.filter(|&(owner, _)| owner == me).map(|(_, t)| t);
    let mut chains: Vec<Option<Vec<u32>>> = pids.iter().map(|&p| ancestry(p)).collect();
    if let Some(t) = earlier {
        // An earlier tracer that has exited no longer counts (Yama forgets it too).
        if let Some(c) = ancestry(t) {
            chains.push(Some(c));
        }
    }
    let decision = decide(scope, &chains);
    if let Tracer::Ancestor(pid) = decision {
        let declared = rustix::process::Pid::from_raw(pid as i32)
            .map(|p| rustix::process::set_ptracer(rustix::process::PTracer::ProcessID(p)));
        match declared {
            Some(Ok(())) => *guard = Some((me, pid)),
            // The ancestor exited meanwhile: the probe will tell.
            _ => return Tracer::Unavailable,
        }
    }
    decision
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn c(pids: &[u32]) -> Option<Vec<u32>> {
        Some(pids.to_vec())
    }

    #[test]
    fn without_yama_or_in_classic_mode_nothing_is_set() {
        let chains = [c(&[10, 5, 1]), c(&[20, 7, 1])];
        assert_eq!(decide(None, &chains), Tracer::NoNeed);
        assert_eq!(decide(Some(0), &chains), Tracer::NoNeed);
    }

    #[test]
    fn admin_only_and_no_attach_cannot_be_helped() {
        let chains = [c(&[10, 5, 1]), c(&[11, 5, 1])];
        assert_eq!(decide(Some(2), &chains), Tracer::Unavailable);
        assert_eq!(decide(Some(3), &chains), Tracer::Unavailable);
        assert_eq!(decide(Some(7), &chains), Tracer::Unavailable);
    }

    #[test]
    fn siblings_declare_their_launcher() {
        // shmcoll run / spawn: every rank is a child of the launcher (pid 5).
        let chains = [c(&[10, 5, 3, 1]), c(&[11, 5, 3, 1]), c(&[12, 5, 3, 1])];
        assert_eq!(decide(Some(1), &chains), Tracer::Ancestor(5));
    }

    #[test]
    fn cousins_under_proxies_declare_the_nearest_shared_ancestor() {
        // mpiexec on one node with two proxies: ranks under proxies 20 and 21 of mpiexec 9.
        let chains = [
            c(&[30, 20, 9, 2, 1]),
            c(&[31, 21, 9, 2, 1]),
            c(&[32, 20, 9, 2, 1]),
        ];
        assert_eq!(decide(Some(1), &chains), Tracer::Ancestor(9));
    }

    #[test]
    fn a_rank_that_is_the_others_ancestor_is_declared() {
        let chains = [c(&[5, 3, 1]), c(&[10, 5, 3, 1])];
        assert_eq!(decide(Some(1), &chains), Tracer::Ancestor(5));
    }

    #[test]
    fn unrelated_ranks_do_not_open_tracing_to_everyone() {
        let chains = [c(&[10, 5, 1]), c(&[20, 7, 1])];
        assert_eq!(decide(Some(1), &chains), Tracer::Unavailable);
        let orphans = [c(&[10, 1]), c(&[20, 1])];
        assert_eq!(decide(Some(1), &orphans), Tracer::Unavailable);
        // Different pid namespaces: no pid in common at all.
        let apart = [c(&[10, 5]), c(&[20, 7])];
        assert_eq!(decide(Some(1), &apart), Tracer::Unavailable);
    }

    #[test]
    fn an_unreadable_ancestry_is_unavailable() {
        assert_eq!(
            decide(Some(1), &[c(&[10, 5, 1]), None]),
            Tracer::Unavailable
        );
    }

    #[test]
    fn a_lone_rank_needs_nothing() {
        assert_eq!(decide(Some(1), &[c(&[10, 5, 1])]), Tracer::NoNeed);
        assert_eq!(decide(Some(1), &[]), Tracer::NoNeed);
    }

    #[test]
    fn stat_lines_parse() {
        assert_eq!(parse_ppid("1234 (python3) S 77 1234 1234 0 -1"), Some(77));
        assert_eq!(parse_ppid("1234 (a) b (c) R 88 1 1"), Some(88));
        assert_eq!(parse_ppid("1234 (x) S"), None);
        assert_eq!(parse_ppid("garbage"), None);
        assert_eq!(parse_scope("1\n"), Some(1));
        assert_eq!(parse_scope("x"), None);
    }

    #[test]
    fn this_process_descends_from_its_parent() {
        let chain = ancestry(std::process::id()).expect("own ancestry");
        assert_eq!(chain[0], std::process::id());
        let ppid = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32);
        if ppid != 0 {
            assert_eq!(chain[1], ppid);
        }
    }

    /// A random process tree: node i > 0 has parent parents[i] < i, node 0 is pid 1.
    fn tree() -> impl Strategy<Value = Vec<usize>> {
        (2usize..40).prop_flat_map(|n| {
            (1..n)
                .map(|i| (0..i).boxed())
                .collect::<Vec<_>>()
                .prop_map(|ps| std::iter::once(0).chain(ps).collect())
        })
    }

    fn chain_of(parents: &[usize], mut i: usize) -> Vec<u32> {
        let mut out = vec![i as u32 + 1];
        while i != 0 {
            i = parents[i];
            out.push(i as u32 + 1);
        }
        out
    }

    proptest! {
        /// Under scope 1 the declared process is an ancestor (or self) of every rank, and
        /// no child of it is: the nearest one, never init.
        #[test]
        fn the_declared_tracer_is_the_nearest_common_ancestor(
            parents in tree(), picks in proptest::collection::vec(any::<prop::sample::Index>(), 2..6)
        ) {
            let ranks: Vec<usize> = picks.iter().map(|ix| ix.index(parents.len())).collect();
            let chains: Vec<_> = ranks.iter().map(|&r| Some(chain_of(&parents, r))).collect();
            let under = |t: u32, r: usize| chain_of(&parents, r).contains(&t);
            match decide(Some(1), &chains) {
                Tracer::Ancestor(t) => {
                    prop_assert!(t > 1);
                    prop_assert!(ranks.iter().all(|&r| under(t, r)));
                    let kids = (1..parents.len()).filter(|&k| parents[k] + 1 == t as usize);
                    for k in kids {
                        prop_assert!(!ranks.iter().all(|&r| under(k as u32 + 1, r)));
                    }
                }
                Tracer::Unavailable => {
                    // Only init is common: no other node is an ancestor of all ranks.
                    for t in 2..=parents.len() as u32 {
                        prop_assert!(!ranks.iter().all(|&r| under(t, r)));
                    }
                }
                Tracer::NoNeed => prop_assert!(false, "scope 1 with {} ranks", ranks.len()),
            }
        }
    }
}
