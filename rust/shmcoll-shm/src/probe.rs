//! Probes of what the machine allows a synchronisation right now, for the benchmarks'
//! floors (`shmcoll bench machine`).
//!
//! Why: on a shared VM the two costs under every small collective change by half within
//! minutes (the host moves the vCPUs), and a table is only judged fairly against the
//! floor of the minute it ran in. A handoff between two processes that take turns on one
//! CPU (`sched_yield`) is what a call pays per rank when ranks outnumber CPUs; a cache
//! line's one-way trip between two CPUs is what it pays when each rank has a CPU.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Result, ShmError};

/// Play one side of a ping-pong on `word` (which both processes map): side `me` (0 or 1)
/// waits for `2 i + me`, then stores `2 i + me + 1`, for rounds `i = first..first +
/// rounds` (a second call continues where a first, the warm-up, ended). With
/// `yield_cpu` a waiting side yields its CPU (the two sides share one), else it spins.
/// Returns the time this side took; divided by `2 rounds` it is one handoff. Gives up
/// with `ShmError::Timeout` once `timeout` has passed (the other side is gone).
pub fn ping_pong(
    word: &AtomicU64,
    me: u64,
    first: u64,
    rounds: u64,
    yield_cpu: bool,
    timeout: Duration,
) -> Result<Duration> {
    let start = Instant::now();
    for i in first..first + rounds {
        let want = 2 * i + me;
        let mut polls = 0u32;
        while word.load(Ordering::Acquire) != want {
            if yield_cpu {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            polls = polls.wrapping_add(1);
            // The clock is read rarely: it would cost more than a spinning poll.
            if polls.is_multiple_of(4096) && start.elapsed() > timeout {
                return Err(ShmError::Timeout {
                    what: "the machine probe's ping-pong",
                    peer: (1 - me) as usize,
                    waited: start.elapsed(),
                });
            }
        }
        word.store(want + 1, Ordering::Release);
    }
    Ok(start.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn both_sides_finish_and_leave_the_count() {
        for yield_cpu in [false, true] {
            let w = Arc::new(AtomicU64::new(0));
            let w1 = Arc::clone(&w);
            let t = std::thread::spawn(move || {
                ping_pong(&w1, 1, 0, 10, yield_cpu, Duration::from_secs(20))?;
                ping_pong(&w1, 1, 10, 1000, yield_cpu, Duration::from_secs(20))
            });
            let t20 = Duration::from_secs(20);
            ping_pong(&w, 0, 0, 10, yield_cpu, t20).unwrap();
            let mine = ping_pong(&w, 0, 10, 1000, yield_cpu, t20).unwrap();
            let theirs = t.join().unwrap().unwrap();
            assert_eq!(w.load(Ordering::Relaxed), 2020);
            assert!(mine > Duration::ZERO && theirs > Duration::ZERO);
        }
    }

    #[test]
    fn a_missing_peer_times_out() {
        let w = AtomicU64::new(0);
        let e = ping_pong(&w, 1, 0, 10, false, Duration::from_millis(20)).unwrap_err();
        assert!(matches!(e, ShmError::Timeout { peer: 0, .. }), "{e}");
    }
}
