//! The probe of the private-buffer paths: what moving one block between ordinary
//! (non-shared) buffers costs on this machine by CMA and by the two copies of staging and
//! inline, at a few block sizes, in this process and in a few milliseconds.
//!
//! Model: each path's cost per transfer is a per-call part plus a per-byte part, and both
//! depend on the machine (system call entry under the kernel's mitigations, page pinning,
//! how fast lines move between cores), so they are timed rather than derived:
//! * CMA: `process_vm_writev` and `process_vm_readv` against this process's own pid, which
//!   takes the same system call, pins the same pages and makes the same single copy as
//!   against a peer.
//! * Staged: the writer copies the block, chunk by chunk, into a ring of two slots of the
//!   staging chunk and publishes each chunk on a counter; a second thread, standing for
//!   the peer on another CPU, copies each published chunk out. Its copy reads lines that
//!   the first wrote in another core's cache, and every chunk is a handoff: that is what
//!   staging costs in a collective, and one thread making both copies would see neither.
//! * Inline: the writer copies the whole block into an area and publishes it once; the
//!   other thread copies it out (one handoff, no pipelining).
//!
//! Timing: per size and path, back-to-back transfers moving at least `SAMPLE_BYTES`, each
//! timed alone; the cost is the median of every transfer of up to `REPS` repetitions (so
//! that a transfer that lost its CPU to another process does not count), and the
//! repetitions stop once the next would pass the budget. Waits spin, then yield the CPU,
//! as the engine's do. A probe that passes its cap (a machine too busy to run the two
//! threads side by side) gives up rather than report what the scheduler did.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use shmcoll_kernels::{copy, Store};
use shmcoll_shm::cma::{read_from, write_to};

use super::derive;

/// Block sizes probed, bytes.
pub const SIZES: [usize; 5] = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];
/// Repetitions at most; the figures are their medians.
pub const REPS: u32 = 5;
/// Bytes moved per timed sample (small blocks repeat to reach it).
const SAMPLE_BYTES: usize = 256 << 10;
/// Polls of a counter before a waiter starts yielding its CPU.
const SPIN_POLLS: u32 = 20_000;

/// What the probe measured: nanoseconds per transfer of each size (medians).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figures {
    pub sizes: Vec<usize>,
    pub cma_read_ns: Vec<u64>,
    pub cma_write_ns: Vec<u64>,
    pub staged_ns: Vec<u64>,
    pub inline_ns: Vec<u64>,
    /// The staging ring's chunk, bytes.
    pub chunk_bytes: usize,
    /// Repetitions taken (the budget may stop them early).
    pub reps: u32,
    /// How long the whole probe took, microseconds.
    pub took_us: u64,
}

impl Figures {
    /// CMA's cost per size: the slower direction, so that the crossover holds for both
    /// (Alltoall pushes; the other collectives read and push).
    pub fn cma_ns(&self) -> Vec<u64> {
        self.cma_read_ns
            .iter()
            .zip(&self.cma_write_ns)
            .map(|(r, w)| *r.max(w))
            .collect()
    }

    /// The block size below which private buffers should not use CMA (derive.rs).
    pub fn crossover(&self) -> Option<usize> {
        derive::crossover(&self.sizes, &self.cma_ns(), &self.staged_ns)
    }
}

/// Jobs the writer posts to the reader thread.
const STOP: u64 = 0;
const STAGED: u64 = 1;
const INLINE: u64 = 2;

/// A value on its own 128 bytes, as the segment's control lines are (shmcoll_shm::layout):
/// a line written by one side and polled by the other carries nothing else, and the
/// adjacent-line prefetcher does not pair it with another.
#[repr(align(128))]
struct Own<T>(T);

impl<T> std::ops::Deref for Own<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// What the writer (this thread) and the reader (the peer's stand-in) share.
struct Shared {
    /// Sequence number of the last job posted; `kind` and `len` describe it.
    job: Own<AtomicU64>,
    kind: AtomicU64,
    len: AtomicU64,
    /// Chunks the writer has put into the ring, over the probe's life.
    produced: Own<AtomicU64>,
    /// Chunks the reader has copied out of the ring.
    consumed: Own<AtomicU64>,
    /// The last job the reader finished.
    done: Own<AtomicU64>,
    slots: [Own<Mutex<Vec<u8>>>; 2],
    area: Own<Mutex<Vec<u8>>>,
    chunk: usize,
    /// Set by the writer when it stops, so that a reader mid-transfer stops too.
    abort: AtomicBool,
    /// When the probe passes its cap.
    deadline: Instant,
}

impl Shared {
    fn wait_for(&self, counter: &AtomicU64, value: u64) -> Result<(), String> {
        wait_for(counter, value, &self.abort, self.deadline)
    }
}

/// The lock of a buffer only one side touches at a time (the counters order them), so it
/// is never contended; a poisoned one still holds the bytes.
fn lock(m: &Mutex<Vec<u8>>) -> MutexGuard<'_, Vec<u8>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Wait until `counter` reaches `value`: spin, then yield; an error once `abort` is set
/// or `deadline` passed.
fn wait_for(
    counter: &AtomicU64,
    value: u64,
    abort: &AtomicBool,
    deadline: Instant,
) -> Result<(), String> {
    let mut polls = 0u32;
    while counter.load(Ordering::Acquire) < value {
        polls = polls.saturating_add(1);
        if polls < SPIN_POLLS {
            std::hint::spin_loop();
            continue;
        }
        std::thread::yield_now();
        if abort.load(Ordering::Relaxed) || Instant::now() > deadline {
            return Err(TOO_BUSY.into());
        }
    }
    Ok(())
}

const TOO_BUSY: &str = "the probe passed its time cap: the machine is too busy to probe now";

/// The reader: copies each job's block out, the staged one chunk by chunk.
fn reader(sh: &Shared) -> Result<(), String> {
    let mut dst = vec![0x5au8; SIZES[SIZES.len() - 1]];
    let mut seen = 0u64;
    let mut chunks = 0u64;
    loop {
        sh.wait_for(&sh.job, seen + 1)?;
        seen += 1;
        let len = usize::try_from(sh.len.load(Ordering::Acquire)).unwrap_or(usize::MAX);
        let dst = dst
            .get_mut(..len)
            .ok_or("a job longer than the probe's buffers")?;
        match sh.kind.load(Ordering::Acquire) {
            STOP => return Ok(()),
            STAGED => {
                for piece in dst.chunks_mut(sh.chunk) {
                    sh.wait_for(&sh.produced, chunks + 1)?;
                    let slot = lock(&sh.slots[(chunks % 2) as usize]);
                    copy(piece, &slot[..piece.len()], Store::Temporal);
                    drop(slot);
                    chunks += 1;
                    sh.consumed.store(chunks, Ordering::Release);
                }
            }
            _ => copy(dst, &lock(&sh.area)[..len], Store::Temporal),
        }
        sh.done.store(seen, Ordering::Release);
    }
}

/// The writer's side of the transfers, and the CMA ones it makes alone.
struct Writer<'a> {
    sh: &'a Shared,
    src: Vec<u8>,
    dst: Vec<u8>,
    pid: u32,
    job: u64,
    chunks: u64,
}

impl Writer<'_> {
    fn post(&mut self, kind: u64, len: usize) {
        self.job += 1;
        self.sh.kind.store(kind, Ordering::Relaxed);
        self.sh.len.store(len as u64, Ordering::Relaxed);
        self.sh.job.store(self.job, Ordering::Release);
    }

    fn staged(&mut self, len: usize) -> Result<(), String> {
        self.post(STAGED, len);
        for piece in self.src[..len].chunks(self.sh.chunk) {
            // A slot is free once the reader copied out the chunk put there two ago.
            if self.chunks >= 2 {
                self.sh.wait_for(&self.sh.consumed, self.chunks - 1)?;
            }
            let mut slot = lock(&self.sh.slots[(self.chunks % 2) as usize]);
            copy(&mut slot[..piece.len()], piece, Store::Temporal);
            drop(slot);
            self.chunks += 1;
            self.sh.produced.store(self.chunks, Ordering::Release);
        }
        self.sh.wait_for(&self.sh.done, self.job)
    }

    fn inline(&mut self, len: usize) -> Result<(), String> {
        copy(
            &mut lock(&self.sh.area)[..len],
            &self.src[..len],
            Store::Temporal,
        );
        self.post(INLINE, len);
        self.sh.wait_for(&self.sh.done, self.job)
    }

    fn cma_write(&mut self, len: usize) -> Result<(), String> {
        let (src, dst) = (&self.src[..len], &mut self.dst[..len]);
        // SAFETY: `src` is valid for `len` bytes of reads; the remote range is `dst`, which
        // this process owns, is valid for `len` bytes and is borrowed mutably here.
        unsafe { write_to(self.pid, dst.as_mut_ptr() as usize, src.as_ptr(), len) }
            .map_err(|e| format!("process_vm_writev on this process: {e}"))
    }

    fn cma_read(&mut self, len: usize) -> Result<(), String> {
        let (src, dst) = (&self.src[..len], &mut self.dst[..len]);
        // SAFETY: `dst` is valid for `len` bytes of writes; the remote range is `src`, which
        // this process owns and is valid for `len` bytes of reads.
        unsafe { read_from(self.pid, src.as_ptr() as usize, dst.as_mut_ptr(), len) }
            .map_err(|e| format!("process_vm_readv on this process: {e}"))
    }
}

/// The paths timed, in the order of `Figures`.
#[derive(Clone, Copy, Debug)]
enum Path {
    CmaRead,
    CmaWrite,
    Staged,
    Inline,
}

impl Path {
    const ALL: [Path; 4] = [Path::CmaRead, Path::CmaWrite, Path::Staged, Path::Inline];
}

/// Add the nanoseconds of each of enough transfers of `len` bytes to move SAMPLE_BYTES
/// to `out`.
fn sample(w: &mut Writer<'_>, len: usize, path: Path, out: &mut Vec<u64>) -> Result<(), String> {
    for _ in 0..(SAMPLE_BYTES / len.max(1)).max(1) {
        let t = Instant::now();
        match path {
            Path::CmaRead => w.cma_read(len),
            Path::CmaWrite => w.cma_write(len),
            Path::Staged => w.staged(len),
            Path::Inline => w.inline(len),
        }?;
        out.push(
            u64::try_from(t.elapsed().as_nanos())
                .unwrap_or(u64::MAX)
                .max(1),
        );
        if Instant::now() > w.sh.deadline {
            return Err(TOO_BUSY.into());
        }
    }
    Ok(())
}

/// The median (the lower of the middle two of an even count: noise only adds time).
fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(u64::MAX)
}

/// Run the probe with ring chunks of `chunk` bytes: repetitions stop at `budget`, and the
/// probe fails once it passes `cap`.
pub fn measure(chunk: usize, budget: Duration, cap: Duration) -> Result<Figures, String> {
    let start = Instant::now();
    let largest = SIZES[SIZES.len() - 1];
    let chunk = chunk.clamp(64, largest);
    let sh = Shared {
        job: Own(AtomicU64::new(0)),
        kind: AtomicU64::new(STOP),
        len: AtomicU64::new(0),
        produced: Own(AtomicU64::new(0)),
        consumed: Own(AtomicU64::new(0)),
        done: Own(AtomicU64::new(0)),
        slots: [
            Own(Mutex::new(vec![0x5a; chunk])),
            Own(Mutex::new(vec![0x5a; chunk])),
        ],
        area: Own(Mutex::new(vec![0x5a; largest])),
        chunk,
        abort: AtomicBool::new(false),
        deadline: start + cap,
    };
    // samples[path][size]: every transfer's nanoseconds.
    let mut samples = vec![vec![Vec::new(); SIZES.len()]; Path::ALL.len()];
    let reps = std::thread::scope(|s| {
        let peer = s.spawn(|| reader(&sh));
        let mut w = Writer {
            sh: &sh,
            src: vec![0xa5; largest],
            dst: vec![0x5a; largest],
            pid: std::process::id(),
            job: 0,
            chunks: 0,
        };
        let mut run = || -> Result<u32, String> {
            let mut last = Duration::ZERO;
            for rep in 0..REPS {
                if rep > 0 && start.elapsed() + last > budget {
                    return Ok(rep);
                }
                let t = Instant::now();
                for (k, &len) in SIZES.iter().enumerate() {
                    for (i, &path) in Path::ALL.iter().enumerate() {
                        sample(&mut w, len, path, &mut samples[i][k])?;
                    }
                }
                last = t.elapsed();
            }
            Ok(REPS)
        };
        let reps = run();
        w.post(STOP, 0);
        sh.abort.store(true, Ordering::Relaxed);
        // The writer's waits saw whatever stopped the reader; its own outcome adds nothing.
        let _ = peer.join();
        reps
    })?;
    let mut medians = samples
        .into_iter()
        .map(|per_size| per_size.into_iter().map(median).collect::<Vec<u64>>());
    let mut next = || medians.next().unwrap_or_default();
    Ok(Figures {
        sizes: SIZES.to_vec(),
        cma_read_ns: next(),
        cma_write_ns: next(),
        staged_ns: next(),
        inline_ns: next(),
        chunk_bytes: chunk,
        reps,
        took_us: u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_is_timed_at_every_size_within_the_budget() {
        let f = measure(32 << 10, Duration::from_millis(40), Duration::from_secs(20)).unwrap();
        assert_eq!(f.sizes, SIZES);
        for v in [&f.cma_read_ns, &f.cma_write_ns, &f.staged_ns, &f.inline_ns] {
            assert_eq!(v.len(), SIZES.len());
            assert!(v.iter().all(|&ns| ns > 0), "{f:?}");
        }
        assert!((1..=REPS).contains(&f.reps), "{f:?}");
        assert_eq!(f.chunk_bytes, 32 << 10);
        assert!(f.crossover().is_some_and(|c| c <= SIZES[4]));
    }

    #[test]
    fn an_exhausted_budget_still_completes_one_repetition() {
        let f = measure(16 << 10, Duration::ZERO, Duration::from_secs(20)).unwrap();
        assert_eq!(f.reps, 1);
        assert!(f.staged_ns.iter().all(|&ns| ns > 0));
    }

    #[test]
    fn a_probe_past_its_cap_gives_up() {
        let e = measure(16 << 10, Duration::ZERO, Duration::ZERO).unwrap_err();
        assert!(e.contains("too busy"), "{e}");
    }
}
