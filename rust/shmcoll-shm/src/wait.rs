//! Waiting for peers: spin, then yield, then sleep on a futex, always with a deadline and
//! with an eye on the peers' health.
//!
//! Why three phases: a spin on a shared line answers in ~0.1 µs but burns the core; when
//! there are more ranks than cores the rank we wait for may need that very core, so we
//! yield it; a futex round trip costs tens of µs in a VM, so we only sleep once the wait
//! has already been long.

use std::cell::Cell;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::thread::futex;

use crate::ctrl::futex_word;
use crate::error::{Result, ShmError};
use crate::segment::Segment;

thread_local! {
    static ON_BLOCK: Cell<Option<fn()>> = const { Cell::new(None) };
}

/// A wait shorter than this never calls the block hook: small collectives complete within
/// it, and handing the GIL back and forth would cost them more than the wait itself.
pub const BLOCK_HOOK_AFTER: Duration = Duration::from_micros(5);

/// Install `hook` to run once, the first time a wait on this thread outlasts
/// `BLOCK_HOOK_AFTER` (the Python bindings release the GIL there). Returns the old hook.
pub fn set_block_hook(hook: Option<fn()>) -> Option<fn()> {
    ON_BLOCK.with(|h| h.replace(hook))
}

/// The process-wide interrupt check (see `set_interrupt_check`).
static INTERRUPT_CHECK: OnceLock<fn() -> bool> = OnceLock::new();

/// How often a wait asks the interrupt check. The check may take a lock (the Python
/// bindings take the GIL to run signal handlers, which another busy Python thread hands
/// over only at its switch interval), so it runs far less often than the health checks:
/// rarely enough that a wait rarely stands in that queue, often enough that a person
/// pressing Ctrl-C sees no delay.
pub const INTERRUPT_CHECK_EVERY: Duration = Duration::from_millis(50);

/// Register, once per process, `check`: asked every `INTERRUPT_CHECK_EVERY` by a wait that
/// has reached its yield or sleep phase (never while spinning), it returns true when the
/// process was asked to stop (a signal such as SIGINT is pending); the wait then returns
/// `ShmError::Interrupted`, which breaks the communicator and tells the peers. This crate
/// knows nothing of signals: the check is the embedder's (the Python bindings run
/// Python's signal handlers in it). Returns false if a check was registered already.
pub fn set_interrupt_check(check: fn() -> bool) -> bool {
    INTERRUPT_CHECK.set(check).is_ok()
}

#[cold]
fn interrupted() -> bool {
    INTERRUPT_CHECK.get().is_some_and(|check| check())
}

#[cold]
fn on_block() {
    if let Some(f) = ON_BLOCK.with(|h| h.take()) {
        f();
    }
}

/// How long each phase lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitConfig {
    /// Busy-wait this long before yielding (zero when ranks outnumber cores).
    pub spin: Duration,
    /// Then yield the core until this much time has passed in total.
    pub yield_until: Duration,
    /// Give up after this long (`SHMCOLL_TIMEOUT`).
    pub timeout: Duration,
    /// How often the slow phases check peers' health and the deadline.
    pub check_every: Duration,
    /// Yields a rank leaving a call spends letting the ranks that share its CPU and
    /// arrived before it leave first (0: leave at once; see shmcoll-coll's leave_order.rs).
    pub leave_yields: u32,
}

impl WaitConfig {
    /// Defaults for `nranks` processes on `cpus` usable CPUs.
    pub fn defaults(nranks: usize, cpus: usize) -> WaitConfig {
        let oversubscribed = nranks > cpus.max(1);
        WaitConfig {
            // Oversubscribed, every spin is time the rank we wait for may need on this
            // very CPU: yield at once.
            spin: if oversubscribed {
                Duration::ZERO
            } else {
                Duration::from_micros(50)
            },
            yield_until: Duration::from_millis(5),
            timeout: Duration::from_secs(60),
            check_every: Duration::from_millis(1),
            leave_yields: 4,
        }
    }
}

/// The other processes of the communicator, watched through pidfds.
#[derive(Debug)]
pub struct Peers {
    me: usize,
    pids: Vec<u32>,
    /// `None` for ourselves, and where pidfd_open is unavailable (then `kill(pid, 0)`).
    pidfds: Vec<Option<OwnedFd>>,
}

impl Peers {
    pub fn new(seg: &Segment, me: usize) -> Peers {
        let p = seg.layout().sizes.nranks;
        let pids: Vec<u32> = (0..p)
            .map(|r| seg.pid_of(r).load(Ordering::Acquire))
            .collect();
        let pidfds = (0..p)
            .map(|r| {
                if r == me {
                    return None;
                }
                let pid = rustix::process::Pid::from_raw(pids[r] as i32)?;
                rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
            })
            .collect();
        Peers { me, pids, pidfds }
    }

    pub fn pid(&self, rank: usize) -> u32 {
        self.pids[rank]
    }

    pub fn me(&self) -> usize {
        self.me
    }

    /// The pidfd of `rank`'s process, opened when it attached (None for ourselves, where
    /// pidfd_open is unavailable, or for a rank out of range).
    pub fn pidfd(&self, rank: usize) -> Option<BorrowedFd<'_>> {
        self.pidfds.get(rank)?.as_ref().map(|f| f.as_fd())
    }

    /// Error if a peer has exited or aborted.
    pub fn check(&self, seg: &Segment, what: &'static str) -> Result<()> {
        for (r, fd) in self.pidfds.iter().enumerate() {
            if r == self.me {
                continue;
            }
            let dead = match fd {
                Some(fd) => {
                    let mut fds = [PollFd::new(fd, PollFlags::IN)];
                    let zero = rustix::time::Timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    };
                    // A pidfd becomes readable when its process terminates.
                    matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
                }
                None => !pid_alive(self.pids[r]),
            };
            if dead {
                return Err(ShmError::PeerDied {
                    what,
                    peer: r,
                    pid: self.pids[r],
                });
            }
            if seg.poison_of(r).load(Ordering::Acquire) != 0 {
                return Err(ShmError::PeerAborted { what, peer: r });
            }
        }
        Ok(())
    }
}

fn pid_alive(pid: u32) -> bool {
    match rustix::process::Pid::from_raw(pid as i32) {
        Some(p) => rustix::process::test_kill_process(p).is_ok(),
        None => false,
    }
}

/// Wait until `counter >= target` (a counter written by `peer`).
#[inline]
pub fn wait_counter(
    seg: &Segment,
    peers: Option<&Peers>,
    cfg: &WaitConfig,
    what: &'static str,
    peer: usize,
    counter: &AtomicU64,
    target: u64,
) -> Result<()> {
    if counter.load(Ordering::Acquire) >= target {
        return Ok(());
    }
    wait_until(seg, peers, cfg, what, peer, counter, || {
        counter.load(Ordering::Acquire) >= target
    })
}

/// Pauses between two reads of the clock while spinning.
const SPIN_CHECK_EVERY: u32 = 8;

/// Wait until `ready()` holds. `counter` is the word whose change may make it hold (the
/// futex we sleep on); `peer` is the rank we wait for, named in errors.
pub fn wait_until(
    seg: &Segment,
    peers: Option<&Peers>,
    cfg: &WaitConfig,
    what: &'static str,
    peer: usize,
    counter: &AtomicU64,
    mut ready: impl FnMut() -> bool,
) -> Result<()> {
    let start = Instant::now();
    // Spin, unless the rank we wait for is bound to our own CPU: it cannot make progress
    // before we give the CPU up.
    let spin = match peers {
        Some(p) if shares_cpu(seg, p.me(), peer) => Duration::ZERO,
        _ => cfg.spin,
    };
    if spin_phase(start, spin, &mut ready) {
        return Ok(());
    }
    // Yield, then sleep; check health and deadline every `check_every`, and whether the
    // process was interrupted every INTERRUPT_CHECK_EVERY. The block hook waits for
    // BLOCK_HOOK_AFTER here too: with more ranks than CPUs nearly every wait yields once,
    // and releasing the GIL around each of those costs a visible share of a small call.
    let mut last_check = Instant::now();
    let mut last_interrupt_check = start;
    loop {
        if ready() {
            return Ok(());
        }
        let now = Instant::now();
        let waited = now - start;
        if waited >= BLOCK_HOOK_AFTER {
            on_block();
        }
        if now - last_check >= cfg.check_every {
            last_check = now;
            if let Some(p) = peers {
                p.check(seg, what)?;
            }
            if now - last_interrupt_check >= INTERRUPT_CHECK_EVERY {
                last_interrupt_check = now;
                if interrupted() {
                    return Err(ShmError::Interrupted { what, peer });
                }
            }
            if waited >= cfg.timeout {
                return Err(ShmError::Timeout { what, peer, waited });
            }
        }
        if waited < cfg.yield_until {
            rustix::thread::sched_yield();
        } else {
            sleep_on(seg, counter, cfg.check_every, &mut ready);
        }
    }
}

/// Busy-wait until `ready()` or until `spin` has passed since `start`; true if ready.
/// A zero spin returns at once, without a look: the caller's yield loop looks first.
fn spin_phase(start: Instant, spin: Duration, ready: &mut impl FnMut() -> bool) -> bool {
    if spin.is_zero() {
        return false;
    }
    let mut i: u32 = 0;
    loop {
        if ready() {
            return true;
        }
        std::hint::spin_loop();
        i = i.wrapping_add(1);
        // Read the clock every few pauses only: a clock read costs more than a pause, and
        // reading it too rarely would stretch the shortest spin.
        if i.is_multiple_of(SPIN_CHECK_EVERY) {
            let waited = start.elapsed();
            if waited >= BLOCK_HOOK_AFTER {
                on_block();
            }
            if waited >= spin {
                return false;
            }
        }
    }
}

/// Whether ranks `a` and `b` (distinct) are bound to the same single CPU.
pub fn shares_cpu(seg: &Segment, a: usize, b: usize) -> bool {
    let ca = seg.cpu_of(a).load(Ordering::Relaxed);
    ca != 0 && a != b && ca == seg.cpu_of(b).load(Ordering::Relaxed)
}

/// Whether ranks `a` and `b` are each bound to a single CPU, and not to the same one.
pub fn bound_apart(seg: &Segment, a: usize, b: usize) -> bool {
    let ca = seg.cpu_of(a).load(Ordering::Relaxed);
    let cb = seg.cpu_of(b).load(Ordering::Relaxed);
    ca != 0 && cb != 0 && ca != cb
}

/// One futex sleep of at most `max`, unless `ready()` already holds.
fn sleep_on(seg: &Segment, counter: &AtomicU64, max: Duration, ready: &mut impl FnMut() -> bool) {
    let word = futex_word(counter);
    let seen = word.load(Ordering::Acquire);
    seg.waiters().fetch_add(1, Ordering::SeqCst);
    if !ready() {
        let ts = rustix::time::Timespec {
            tv_sec: max.as_secs() as i64,
            tv_nsec: max.subsec_nanos() as i64,
        };
        // EAGAIN (the word changed), EINTR and ETIMEDOUT all just mean: look again.
        let _ = futex::wait(word, futex::Flags::empty(), seen, Some(&ts));
    }
    seg.waiters().fetch_sub(1, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Looks at the condition (never true) during a spin of `spin`; returns how often.
    fn looks_during(spin: Duration) -> u32 {
        let mut looks = 0;
        let ready = spin_phase(Instant::now(), spin, &mut || {
            looks += 1;
            false
        });
        assert!(!ready);
        looks
    }

    #[test]
    fn zero_spin_yields_without_spinning() {
        assert_eq!(looks_during(Duration::ZERO), 0);
    }

    #[test]
    fn a_short_spin_ends_at_the_first_clock_read() {
        // 1 ns has passed by the first read of the clock, after SPIN_CHECK_EVERY looks;
        // reading it rarely is what made the shortest spin last microseconds.
        assert_eq!(looks_during(Duration::from_nanos(1)), SPIN_CHECK_EVERY);
        const { assert!(SPIN_CHECK_EVERY <= 8) };
    }

    #[test]
    fn a_spin_returns_as_soon_as_ready() {
        let mut looks = 0;
        let ready = spin_phase(Instant::now(), Duration::from_secs(10), &mut || {
            looks += 1;
            looks == 3
        });
        assert!(ready);
        assert_eq!(looks, 3);
    }

    #[test]
    fn ranks_are_apart_only_when_both_are_bound_to_different_cpus() {
        let seg = Segment::create(crate::Sizes {
            nranks: 3,
            inline_bytes: 4096,
            staging_bytes: 3 * 4096,
            heap_bytes: 0,
        })
        .unwrap();
        for (r, cpu) in [1, 2, 0].into_iter().enumerate() {
            seg.cpu_of(r).store(cpu, Ordering::Relaxed); // CPU + 1; 0: unbound
        }
        assert!(bound_apart(&seg, 0, 1));
        assert!(!bound_apart(&seg, 0, 0));
        assert!(!bound_apart(&seg, 0, 2) && !bound_apart(&seg, 2, 1));
    }

    thread_local! {
        static STOP_ME: Cell<bool> = const { Cell::new(false) };
    }

    /// The test binary's interrupt check: only the thread that asked for it is interrupted,
    /// so that the other tests' waits, running beside it, are not.
    fn stop_me() -> bool {
        STOP_ME.with(Cell::get)
    }

    #[test]
    fn an_interrupted_wait_returns_promptly_and_names_the_peer() {
        let seg = Segment::create(crate::Sizes {
            nranks: 2,
            inline_bytes: 4096,
            staging_bytes: 2 * 4096,
            heap_bytes: 0,
        })
        .unwrap();
        set_interrupt_check(stop_me);
        assert!(
            !set_interrupt_check(stop_me),
            "a second registration is refused"
        );
        let cfg = WaitConfig {
            timeout: Duration::from_secs(30),
            ..WaitConfig::defaults(2, 2)
        };
        let never = AtomicU64::new(0);
        // Not interrupted: the wait runs to its (short) deadline.
        let short = WaitConfig {
            timeout: Duration::from_millis(30),
            ..cfg
        };
        let e = wait_counter(&seg, None, &short, "test", 1, &never, 1).unwrap_err();
        assert!(matches!(e, ShmError::Timeout { .. }), "{e}");
        STOP_ME.with(|s| s.set(true));
        let t = Instant::now();
        let e = wait_counter(&seg, None, &cfg, "test", 1, &never, 1).unwrap_err();
        STOP_ME.with(|s| s.set(false));
        assert!(matches!(e, ShmError::Interrupted { peer: 1, .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        // A wait that is ready never asks.
        STOP_ME.with(|s| s.set(true));
        let done = AtomicU64::new(1);
        let r = wait_counter(&seg, None, &cfg, "test", 1, &done, 1);
        STOP_ME.with(|s| s.set(false));
        assert!(r.is_ok());
    }

    #[test]
    fn oversubscribed_ranks_do_not_spin() {
        assert_eq!(WaitConfig::defaults(4, 2).spin, Duration::ZERO);
        assert_eq!(WaitConfig::defaults(2, 2).spin, Duration::from_micros(50));
    }
}
