//! A node communicator: the segment, this rank's place in it, and the call protocol that
//! every collective shares (sequence numbers, descriptors, the arrive and done rounds,
//! poisoning on fatal errors).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use shmcoll_kernels::hw;
use shmcoll_shm::{handshake, wait_counter, HeapAlloc, Line, Peers, Segment};

use crate::config::Config;
use crate::desc::{
    ArriveLine, Desc, DescCore, DoneLine, LineHead, F_FULL, F_RECV_HEAP, F_ROOT_ONLY, F_SEND_HEAP,
    F_VECTOR, NO_OFFSET,
};
use crate::error::{Error, ErrorKind, Result};
use crate::leave_order::CpuMates;
use crate::op::CollOp;
use crate::pool::{Continued, Pooled};
use crate::registry::{Algo, Choice};
use crate::select::{Selection, Table};
use crate::tables::Tables;

/// Calls per algorithm, for `explain` and tests.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub calls: u64,
    /// Calls of every collective per algorithm (index: the algorithm's code).
    pub per_algo: [u64; Algo::COUNT],
    pub rejected: u64,
    /// Yields spent leaving calls after CPU-mates that arrived first (leave_order.rs).
    pub leave_yields: u64,
}

/// A call this rank left without waiting for every rank's arrival (crate::one_sided): what
/// it must wait for and check at its next call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unwaited {
    pub(crate) seq: u64,
    pub(crate) head: LineHead,
}

#[derive(Debug)]
pub struct Comm {
    pub(crate) seg: Arc<Segment>,
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) peers: Arc<Peers>,
    pub(crate) cma_ok: bool,
    next_seq: u64,
    /// Bytes this rank has produced into its ring for each peer (mirrors the shm counter).
    pub(crate) sent: Vec<u64>,
    /// Bytes this rank has consumed from each peer's ring.
    pub(crate) recvd: Vec<u64>,
    pub(crate) cfg: Config,
    /// The selection tables of every operation family (model or tuned).
    pub(crate) tables: Tables,
    broken: Option<String>,
    /// What served the last call.
    pub(crate) last: Option<Choice>,
    /// Block size from which the model sends private buffers through CMA, as the segment's
    /// creator published it (the same on every rank).
    cma_from: usize,
    pub(crate) stats: Stats,
    heap: Arc<Mutex<HeapAlloc>>,
    /// Reused per call for the peers' descriptors (no allocation on the hot path).
    pub(crate) scratch: Vec<DescCore>,
    /// Steps taken (Line::Step), mirrored in the segment.
    steps: u64,
    /// Buffers outside the segment that peers can reach (shared-array and PMPI arenas).
    arenas: crate::arenas::Arenas,
    /// The last call, if this rank left it without every rank's arrival (one_sided.rs).
    pub(crate) unwaited: Option<Unwaited>,
    /// Bytes of streamed payloads published (mirrors this rank's Progress line).
    pub(crate) streamed: u64,
    /// Persistent Alltoall(v) requests settled so far (each one's id, see
    /// alltoall/settled.rs).
    pub(crate) requests: u32,
    /// Ranks bound to this rank's CPU, which leave calls in arrival order (leave_order.rs).
    mates: CpuMates,
    /// The call in which the peers will publish a notice of this rank's rejection of a
    /// one-sided call (one_sided.rs): this rank must not leave that call early.
    pub(crate) notice_due_at: Option<u64>,
}

/// A block of this rank's shared heap; freed when dropped.
#[derive(Debug)]
pub struct HeapBlock {
    seg: Arc<Segment>,
    heap: Arc<Mutex<HeapAlloc>>,
    heap_off: usize,
    seg_off: usize,
    len: usize,
}

impl HeapBlock {
    pub fn as_ptr(&self) -> *mut u8 {
        self.seg.ptr(self.seg_off, self.len)
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HeapBlock {
    fn drop(&mut self) {
        // Not in a child of fork: the pages are the parent's array too (the heap is a
        // shared object), and punching them out would zero it under the parent.
        if self.len >= 2 << 20 && self.seg.in_owner_process() {
            self.seg.release_pages(self.seg_off, self.len);
        }
        if let Ok(mut h) = self.heap.lock() {
            h.free(self.heap_off, self.len);
        }
    }
}

impl Comm {
    /// Create a segment for `nranks` ranks; its name is then shared with the other ranks.
    /// It carries the private-buffer crossover every rank selects with (crate::cma_from).
    pub fn create_segment(nranks: usize, cfg: &Config) -> Result<Arc<Segment>> {
        let seg = Segment::create(cfg.sizes(nranks))?;
        crate::cma_from::publish(&seg, cfg);
        Ok(Arc::new(seg))
    }

    pub fn open_segment(name: &str) -> Result<Arc<Segment>> {
        Ok(Arc::new(Segment::open(name)?))
    }

    /// Join the communicator as `rank`: every rank calls this with the same segment.
    pub fn join(seg: Arc<Segment>, rank: usize, cfg: Config) -> Result<Comm> {
        let size = seg.layout().sizes.nranks;
        if rank >= size {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} out of range for a segment of {size} ranks"
            )));
        }
        // Bind before the handshake: every rank's CPU is then known once it completes.
        announce_cpu(&seg, rank, &cfg);
        let att = handshake(&seg, rank, &cfg.wait)?;
        // Each rank backs its staging rings with pages of /dev/shm (after binding, so that
        // they are allocated on the NUMA node of the CPU the rank runs on; a page tmpfs
        // cannot back when first touched would be a SIGBUS, so a full /dev/shm is an error
        // here, and this rank's poison word makes its peers fail at once rather than at
        // their deadline), then maps the areas it writes, so that its first collectives
        // take no page fault there.
        let l = *seg.layout();
        if let Err(e) = seg.back(l.staging(rank), l.sizes.staging_bytes) {
            seg.poison_of(rank).store(1, Ordering::Release);
            return Err(Error::Shm(shmcoll_shm::ShmError::Os {
                context: format!(
                    "backing rank {rank}'s {} bytes of staging rings in /dev/shm; free space there, or lower SHMCOLL_STAGING_BYTES",
                    l.sizes.staging_bytes
                ),
                source: e,
            }));
        }
        seg.prefault(l.staging(rank), l.sizes.staging_bytes);
        seg.prefault(l.inline(rank, 0), 2 * l.sizes.inline_bytes);
        let heap = Arc::new(Mutex::new(HeapAlloc::new(l.sizes.heap_bytes)));
        let pooled = Pooled {
            seg,
            heap,
            peers: Arc::new(att.peers),
            rank,
            cma_ok: att.cma_ok,
            state: Continued::start(size),
        };
        Comm::assemble(pooled, cfg)
    }

    /// The next communicator of the same ranks on the segment a freed one left, which
    /// every rank agreed on in the same protocol state (crate::pool): it continues that
    /// state, so no rank waits for another and no page needs backing. The CPUs and arenas
    /// the ranks announced in the handshake stand.
    pub fn resume(p: Pooled, cfg: Config) -> Result<Comm> {
        Comm::assemble(p, cfg)
    }

    /// The communicator on a segment every rank has just joined.
    fn assemble(p: Pooled, cfg: Config) -> Result<Comm> {
        let Pooled {
            seg,
            heap,
            peers,
            rank,
            cma_ok,
            state,
        } = p;
        let size = seg.layout().sizes.nranks;
        let l = *seg.layout();
        let mates = CpuMates::of(&seg, rank);
        // Every rank said at the handshake whether it can map its peers' arenas; CMA's
        // ptrace permission is the one pidfd_getfd needs too (crate::arenas). A pooled
        // segment keeps what its ranks said.
        let arenas_reachable =
            cma_ok && (0..size).all(|j| seg.arena_ok_of(j).load(Ordering::Relaxed) == 1);
        let cma_from = crate::cma_from::agreed(&seg)?;
        let tables = Tables::model(
            hw::machine(),
            size,
            l.sizes.inline_bytes,
            l.sizes.staging_bytes,
            cma_from,
        );
        Ok(Comm {
            seg,
            rank,
            size,
            peers,
            cma_ok,
            next_seq: state.next_seq,
            sent: state.sent,
            recvd: state.recvd,
            cfg,
            tables,
            broken: None,
            last: None,
            cma_from,
            stats: Stats::default(),
            heap,
            scratch: Vec::with_capacity(size),
            arenas: crate::arenas::Arenas::shared_arrays(rank, size, arenas_reachable),
            steps: state.steps,
            unwaited: None,
            streamed: state.streamed,
            requests: state.requests,
            mates,
            notice_due_at: None,
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn size(&self) -> usize {
        self.size
    }
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn cma_ok(&self) -> bool {
        self.cma_ok
    }
    /// Block size from which the model tables send private buffers through CMA.
    pub fn cma_from(&self) -> usize {
        self.cma_from
    }
    /// The selection tables in force for `op`'s family.
    pub fn selection(&self, op: CollOp) -> &Selection {
        self.tables.get(op)
    }
    /// Bind a (tuned) table for `op`'s family; Alltoall's model stays as the fallback for
    /// its gaps. Every rank must bind the same table (the bindings load the same file on
    /// every rank).
    pub fn set_table(&mut self, op: CollOp, table: Table, source: String) {
        self.tables.set(op, table, source);
    }
    pub fn last_choice(&self) -> Option<Choice> {
        self.last
    }
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    pub fn pid_of(&self, rank: usize) -> u32 {
        self.peers.pid(rank)
    }

    /// The error of a failed CMA system call (`call`) with rank `j`: the peer's death
    /// (ESRCH) is reported as such, as a death noticed while waiting would be; else the
    /// call's own failure.
    pub fn cma_error(&self, call: &str, j: usize, e: std::io::Error) -> Error {
        if e.raw_os_error() == Some(libc::ESRCH) {
            return Error::Shm(shmcoll_shm::ShmError::PeerDied {
                what: "a CMA transfer",
                peer: j,
                pid: self.pid_of(j),
            });
        }
        Error::Shm(shmcoll_shm::ShmError::Os {
            context: format!("{call} with rank {j}"),
            source: e,
        })
    }
    pub fn is_broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// This rank leaves the communicator for good (its process ends with an error, say):
    /// break it here and tell the peers, which then fail their calls at once
    /// (PeerAborted) instead of waiting for this rank until their deadline.
    pub fn abort(&mut self, why: &str) {
        let _ = self.poison::<()>(Err(Error::Broken(why.to_string())));
    }

    /// Reserve `len` bytes of this rank's shared heap, backed by pages of /dev/shm.
    ///
    /// The heap is sized from the free space of /dev/shm when the segment is created, and
    /// other jobs take from the same space later; a page that tmpfs cannot back when it is
    /// first touched is a SIGBUS. So each block's pages are allocated here (one fallocate;
    /// pages a block already has, as a reused small block does, cost a lookup each), and
    /// a block tmpfs cannot back is refused as the heap refuses one it has no room for.
    pub fn heap_alloc(&self, len: usize) -> Result<HeapBlock> {
        let mut heap = self
            .heap
            .lock()
            .map_err(|_| Error::Broken("heap lock poisoned".into()))?;
        let heap_off = heap.alloc(len)?;
        // Inside this rank's heap (the allocator's offsets are below its capacity).
        let seg_off = self.seg.layout().heap(self.rank) + heap_off;
        let len = len.max(1);
        if let Err(source) = self.seg.back(seg_off, len) {
            // Give back what a partial fallocate allocated (whole pages of this block only:
            // a page it shares with a neighbour is the neighbour's too).
            self.seg.release_pages(seg_off, len);
            heap.free(heap_off, len);
            return Err(Error::Shm(shmcoll_shm::ShmError::HeapUnbacked {
                requested: len,
                source,
            }));
        }
        drop(heap);
        Ok(HeapBlock {
            seg: self.seg.clone(),
            heap: self.heap.clone(),
            heap_off,
            seg_off,
            len,
        })
    }

    /// (bytes in use, capacity) of this rank's heap.
    pub fn heap_usage(&self) -> (usize, usize) {
        let h = self.heap.lock().expect("heap lock");
        (h.in_use(), h.capacity())
    }

    /// If `[addr, addr+len)` is inside the shared heap (any rank's part), its segment offset;
    /// else, if it is in this rank's arena and the peers can map it, its tagged arena offset
    /// (crate::arenas), the arena announced in this rank's slot first. Either way the peers
    /// can reach it (`peer_range`).
    pub fn heap_offset(&self, addr: usize, len: usize) -> Option<usize> {
        let in_heap = self.seg.offset_of(addr, len).filter(|&off| {
            let r = self.seg.layout().heap_range();
            off >= r.start && off + len <= r.end
        });
        in_heap.or_else(|| {
            let tagged = self.arenas.offset(addr, len)?;
            if self.arenas.announces() && !self.announce_shared_arrays() {
                return None;
            }
            Some(tagged)
        })
    }

    /// Make sure this rank's slot names its shared-array arena (the arena may be younger
    /// than the communicator). The stores precede the descriptor that first tags a buffer
    /// in it, whose publication releases them to the peers. False if there is no arena.
    fn announce_shared_arrays(&self) -> bool {
        let Some(a) = shmcoll_shm::shared_arena::get() else {
            return false;
        };
        let fd = self.seg.arena_fd_of(self.rank);
        if fd.load(Ordering::Relaxed) == 0 {
            self.seg
                .arena_len_of(self.rank)
                .store(a.len() as u64, Ordering::Relaxed);
            fd.store(a.raw_fd() as u32 + 1, Ordering::Relaxed);
        }
        true
    }

    /// Rank j's arena as its slot announces it (crate::arenas maps it on first use).
    fn announced_arena(&self, j: usize) -> Option<crate::arenas::ArenaRef> {
        let fd = self.seg.arena_fd_of(j).load(Ordering::Relaxed);
        let len = self.seg.arena_len_of(j).load(Ordering::Relaxed);
        Some(crate::arenas::ArenaRef {
            pid: self.pid_of(j),
            fd: i32::try_from(fd.checked_sub(1)?).ok()?,
            len: usize::try_from(len).ok()?,
        })
    }

    /// Rank j's full descriptor for call `seq`, checked to be what j sealed for that call
    /// (desc.rs, `Desc::verified_core`). Every rank reads the same slot, so a changed
    /// descriptor fails every rank's call before any data moves.
    pub(crate) fn verified_core(&self, j: usize, seq: u64) -> Result<DescCore> {
        Desc::slot(&self.seg, j, (seq & 1) as usize)
            .verified_core(seq)
            .map_err(|why| Error::Corrupt(format!("rank {j}'s descriptor of call {seq}: {why}")))
    }

    /// Every rank's full descriptor for call `seq`, verified with its vector arrays, into
    /// `cores`: for the algorithms that copy straight from and into peers' buffers (the
    /// arrays place the blocks there). The same check on every rank, before data moves.
    pub(crate) fn verified_cores(&self, seq: u64, cores: &mut [DescCore]) -> Result<()> {
        for (j, c) in cores.iter_mut().enumerate() {
            *c = self.verified_core(j, seq)?;
            Desc::slot(&self.seg, j, (seq & 1) as usize)
                .verify_arrays(c)
                .map_err(|why| {
                    Error::Corrupt(format!("rank {j}'s descriptor of call {seq}: {why}"))
                })?;
        }
        Ok(())
    }

    /// `len` bytes at `off` of rank j's `side` buffer, as its descriptor `d` registered it:
    /// checked (with checked arithmetic) to lie inside the buffer it registered, and, when
    /// that buffer is in the shared heap or an arena, to lie inside that region too. Every
    /// peer-provided extent goes through here before a byte moves; a violation is
    /// `Error::Corrupt`, which the caller reports in its done round (every rank fails).
    pub(crate) fn peer_range(
        &self,
        j: usize,
        d: &DescCore,
        side: Side,
        off: usize,
        len: usize,
    ) -> Result<PeerRange> {
        use crate::extent::{end, from_shared, inside, within};
        let (addr, seg_off, registered, heap) = match side {
            Side::Send => (
                d.send_addr,
                d.send_off,
                d.send_len,
                d.flags & F_SEND_HEAP != 0,
            ),
            Side::Recv => (
                d.recv_addr,
                d.recv_off,
                d.recv_len,
                d.flags & F_RECV_HEAP != 0,
            ),
        };
        let corrupt = |why: String| Error::Corrupt(format!("rank {j}'s {side:?} buffer: {why}"));
        let registered = from_shared(registered)
            .ok_or_else(|| corrupt(format!("a length of {registered} bytes")))?;
        if !within(off, len, registered) {
            return Err(corrupt(format!(
                "{len} bytes at offset {off} lie beyond the {registered} bytes it registered"
            )));
        }
        let remote = from_shared(addr)
            .and_then(|a| end(a, off))
            .ok_or_else(|| corrupt(format!("offset {off} past address {addr:#x}")))?;
        if !heap {
            return Ok(PeerRange {
                local: None,
                remote,
            });
        }
        let o =
            from_shared(seg_off).ok_or_else(|| corrupt(format!("a heap offset of {seg_off}")))?;
        let base = if o & crate::arenas::ARENA_TAG != 0 {
            self.arenas
                .resolve(j, o & !crate::arenas::ARENA_TAG, registered, || {
                    Some((self.announced_arena(j)?, self.peers.pidfd(j)))
                })?
                .ok_or_else(|| corrupt(format!("{registered} bytes at arena offset {o:#x}")))?
        } else {
            let heap = self.seg.layout().heap_range();
            if !inside(o, registered, heap.start, heap.end) {
                return Err(corrupt(format!(
                    "{registered} bytes at segment offset {o} are not in the shared heap"
                )));
            }
            self.seg.ptr(o, registered) as usize
        };
        Ok(PeerRange {
            // Inside the registered buffer (checked above), so the sum fits.
            local: Some(base.saturating_add(off)),
            remote,
        })
    }

    /// Map the peers' arenas (see crate::arenas); collective in effect: enable them only
    /// once every rank succeeded (`enable_arenas`).
    pub fn attach_arenas(
        &mut self,
        own: Option<(usize, usize)>,
        peers: &[Option<crate::arenas::ArenaRef>],
    ) -> Result<()> {
        if peers.len() != self.size {
            return Err(Error::InvalidArgument(format!(
                "{} arena entries for {} ranks",
                peers.len(),
                self.size
            )));
        }
        let arenas = crate::arenas::Arenas::attach(self.rank, own, peers, |j, pid| {
            (j < self.size && self.peers.pid(j) == pid)
                .then(|| self.peers.pidfd(j))
                .flatten()
        })?;
        self.arenas = arenas;
        Ok(())
    }

    /// Describe buffers in this rank's attached arena as reachable (every rank attached
    /// its peers').
    pub fn enable_arenas(&mut self) {
        self.arenas.enable();
    }

    /// Start a call: refuse if the communicator is broken, pay the round a one-sided call
    /// skipped (crate::one_sided), reserve the sequence number. When settling found that a
    /// rank rejected that one-sided call, this call is the notice of it (one_sided.rs):
    /// published as this rank's rejection, so that every rank raises in it.
    pub(crate) fn begin(&mut self) -> Result<u64> {
        if let Some(why) = &self.broken {
            return Err(Error::Broken(why.clone()));
        }
        let settled = self.settle();
        let owed = self.poison(settled)?;
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(notice) = owed {
            let core = DescCore {
                op: CollOp::Barrier.code(),
                ..DescCore::default()
            };
            self.publish_arrive(seq, &core, Some(&notice));
            let r = self.wait_arrivals(seq);
            self.leave(seq);
            self.stats.rejected += 1;
            self.poison(r)?;
            return Err(notice);
        }
        Ok(seq)
    }

    /// Run one call: `begin`, then `f` with its sequence number; a rejection is counted,
    /// and a fatal error breaks the communicator (`poison`).
    ///
    /// A panic inside `f` (a bug of shmcoll) is caught here, where it would otherwise cross
    /// into Python or C: it becomes `Error::Internal`, which breaks the communicator and
    /// poisons it, so that the peers fail fast too.
    pub(crate) fn run_call<T>(&mut self, f: impl FnOnce(&mut Comm, u64) -> Result<T>) -> Result<T> {
        let seq = self.begin()?;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self, seq)))
            .unwrap_or_else(|panic| Err(Error::Internal(crate::error::panic_message(&*panic))));
        self.leave(seq);
        if r.is_err() {
            self.stats.rejected += 1;
        }
        self.poison(r)
    }

    /// This rank is done with call `seq` (leave_order.rs).
    fn leave(&mut self, seq: u64) {
        let yields = self
            .mates
            .leave(&self.seg, self.rank, seq, self.cfg.wait.leave_yields);
        self.stats.leave_yields += u64::from(yields);
    }

    /// Every rank's arrive head of call `seq` (just completed, so its lines are intact: a
    /// peer can be at `seq + 1` at most, the other parity), each passed through `tag`:
    /// what a settled Start must find (alltoall/settled.rs).
    pub(crate) fn kept_heads(&self, seq: u64, tag: impl Fn(LineHead) -> LineHead) -> Vec<LineHead> {
        (0..self.size)
            .map(|j| tag(ArriveLine::of(&self.seg, j, seq).head()))
            .collect()
    }

    /// The first rank whose arrival at `seq` is not the kept head (or not at `seq`).
    pub(crate) fn first_unlike(&self, seq: u64, heads: &[LineHead]) -> Option<usize> {
        (0..self.size).find(|&j| {
            self.seg.arrive_seq(j, seq).load(Ordering::Acquire) != seq
                || ArriveLine::of(&self.seg, j, seq).head() != heads[j]
        })
    }

    /// The error of a settled Start whose rank `j` published another head than the kept
    /// one: its own rejection or another call if the descriptors say so, else another
    /// request (`request` names this rank's).
    pub(crate) fn unsettled(&mut self, seq: u64, op: u32, j: usize, request: &str) -> Error {
        let mut cores = std::mem::take(&mut self.scratch);
        let r = self.read_descs(seq, op, &mut cores);
        self.scratch = cores;
        match r {
            Err(e) => e,
            Ok(()) => Error::Mismatch(format!(
                "rank {j} did not start persistent request {request} with this rank ({}): \
                 ranks must start persistent collectives in the same order",
                self.rank
            )),
        }
    }

    /// Mark the communicator unusable after a fatal error and tell the peers, so that they
    /// fail fast instead of waiting for their own deadline.
    pub(crate) fn poison<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            if e.is_fatal() && self.broken.is_none() {
                self.broken = Some(e.to_string());
                // Peers see this in their slow-path health checks (Peers::check).
                self.seg.poison_of(self.rank).store(1, Ordering::Release);
            }
        }
        r
    }

    /// Publish the arrival at `seq`: the full descriptor (when `core.flags` has F_FULL or
    /// on error) in the descriptor slot, the head in the arrive line, then the sequence
    /// number (release). A tiny payload must already be in the line.
    pub(crate) fn publish_arrive(&self, seq: u64, core: &DescCore, err: Option<&Error>) {
        let mut c = *core;
        c.seq = seq;
        if let Some(e) = err {
            c.status = e.kind() as u32;
            c.flags |= F_FULL;
        }
        if c.flags & F_FULL != 0 {
            let d = Desc::slot(&self.seg, self.rank, (seq & 1) as usize);
            match err {
                // A notice passes the rejection on as it came (one_sided.rs): the peers
                // name this rank as the one that told them.
                Some(Error::Peer { msg, .. }) => d.set_msg(msg),
                Some(e) => d.set_msg(&e.to_string()),
                None => {}
            }
            // The vector arrays are already in the slot (written before publishing).
            d.set_sealed(&c);
            #[cfg(test)]
            crate::corrupt::after_seal(self.seg.name(), self.rank, &d);
        }
        ArriveLine::of(&self.seg, self.rank, seq).set_head(&LineHead::of(&c));
        self.mates.arriving(&self.seg, seq);
        self.seg.publish(self.seg.arrive_seq(self.rank, seq), seq);
    }

    /// Take part in call `seq` (operation code `op`) as this rank's rejection `e` (or its
    /// fallback to MPI): publish it where the descriptor goes, wait for every rank's
    /// arrival. A root that left this call early (one_sided.rs) cannot have seen the
    /// rejection, so the ranks that completed the call will publish a notice at their next
    /// one; this rank then must not leave its next call early (`notice_due_at`).
    pub(crate) fn publish_rejection(&mut self, seq: u64, op: u32, e: &Error) -> Result<()> {
        let core = DescCore {
            op,
            ..DescCore::default()
        };
        self.publish_arrive(seq, &core, Some(e));
        self.wait_arrivals(seq)?;
        let early = (0..self.size)
            .any(|j| ArriveLine::of(&self.seg, j, seq).head().flags & F_ROOT_ONLY != 0);
        if early {
            self.notice_due_at = Some(seq + 1);
        }
        Ok(())
    }

    /// Wait until every rank arrived at `seq`.
    pub(crate) fn wait_arrivals(&self, seq: u64) -> Result<()> {
        // Visit peers starting after us: with all ranks doing the same, no single line is
        // polled by everyone at once.
        for k in 1..self.size {
            let j = (self.rank + k) % self.size;
            wait_counter(
                &self.seg,
                Some(&self.peers),
                &self.cfg.wait,
                "arrival",
                j,
                self.seg.arrive_seq(j, seq),
                seq,
            )?;
        }
        Ok(())
    }

    /// Read every rank's descriptor for `seq` into `cores` (index = rank) and check what all
    /// calls must share. A rank that rejected its part makes every rank fail.
    pub(crate) fn read_descs(&self, seq: u64, my_op: u32, cores: &mut Vec<DescCore>) -> Result<()> {
        let parity = (seq & 1) as usize;
        cores.clear();
        for j in 0..self.size {
            let line_seq = self.seg.arrive_seq(j, seq).load(Ordering::Acquire);
            if line_seq != seq {
                return Err(Error::Mismatch(format!(
                    "rank {j} is at call {line_seq} while this rank is at call {seq}: ranks called different numbers of collectives"
                )));
            }
            let h = ArriveLine::of(&self.seg, j, seq).head();
            // The head suffices unless the call needs the vector arrays, an error message
            // or a block size beyond 32 bits; the algorithms that need buffer offsets read
            // them from the slot themselves (Exchange::full).
            let needs_slot = h.status != 0
                || h.flags & F_VECTOR != 0
                || h.send_bpp == u32::MAX
                || h.recv_bpp == u32::MAX;
            let c = if needs_slot {
                self.verified_core(j, seq)?
            } else {
                DescCore {
                    seq,
                    op: h.op,
                    status: h.status,
                    flags: h.flags,
                    extra: h.extra,
                    forced: h.forced,
                    send_bpp: u64::from(h.send_bpp),
                    recv_bpp: u64::from(h.recv_bpp),
                    send_off: NO_OFFSET,
                    recv_off: NO_OFFSET,
                    ..DescCore::default()
                }
            };
            cores.push(c);
        }
        if let Some(j) = cores.iter().position(|c| c.flags & F_ROOT_ONLY != 0) {
            // Only a rank whose call differs from the root's misses a one-sided call.
            return Err(Error::Diverged(format!(
                "call {seq}: rank {j} completed a one-sided {} that rank {} did not join (its call differs)",
                CollOp::name_of_code(cores[j].op),
                self.rank
            )));
        }
        if let Some((j, c)) = cores.iter().enumerate().find(|(_, c)| c.status != 0) {
            return Err(Error::Peer {
                rank: j,
                kind: ErrorKind::from_code(c.status),
                msg: Desc::slot(&self.seg, j, parity).msg(),
            });
        }
        if let Some((j, c)) = cores.iter().enumerate().find(|(_, c)| c.op != my_op) {
            return Err(Error::Mismatch(format!(
                "rank {j} called {} while rank {} called {}",
                CollOp::name_of_code(c.op),
                self.rank,
                CollOp::name_of_code(my_op)
            )));
        }
        Ok(())
    }

    /// The done round: tell peers this rank no longer touches their memory for `seq`, and
    /// wait until they say the same (so that buffers may be reused on return). `failure` is
    /// what went wrong in this rank's part after the arrivals; it travels on the done line,
    /// so that every rank of the call fails with it: a peer whose results this rank was to
    /// write must not return success with a half-written buffer.
    pub(crate) fn done_round(&self, seq: u64, failure: Option<Error>) -> Result<()> {
        if let Some(e) = &failure {
            let (msg, corrupt) = match e {
                Error::Corrupt(m) => (m.clone(), true),
                e => (e.to_string(), false),
            };
            DoneLine::of(&self.seg, self.rank).set_failed(seq, &msg, corrupt);
        }
        self.round(Line::Done, seq, "completion")?;
        if let Some(e) = failure {
            return Err(e);
        }
        // The lines the round just waited on, so in this core's cache: one load per peer.
        for j in (0..self.size).filter(|&j| j != self.rank) {
            if let Some((msg, corrupt)) = DoneLine::of(&self.seg, j).failed_in(seq) {
                return Err(if corrupt {
                    Error::Corrupt(format!("rank {j} found: {msg}"))
                } else {
                    Error::PeerFailed { rank: j, msg }
                });
            }
            // A peer that published its done line and then gave up waiting for this rank
            // (its deadline passed while this rank was stopped or descheduled) failed the
            // call after all: this rank must not return success for it. Every rank that
            // saw the round complete before the poison returns success; the race between a
            // deadline and a late peer is inherent to deadlines.
            if self.seg.poison_of(j).load(Ordering::Acquire) != 0 {
                return Err(Error::PeerFailed {
                    rank: j,
                    msg: "it gave up on this call (its deadline passed, or it was interrupted) after finishing its own part".into(),
                });
            }
        }
        Ok(())
    }

    /// Publish `value` on this rank's `line` and wait until every peer's reaches it.
    /// Peers are visited starting after this rank, so that no line is polled by all at once.
    fn round(&self, line: Line, value: u64, what: &'static str) -> Result<()> {
        self.seg.publish(self.seg.seq(self.rank, line), value);
        for k in 1..self.size {
            let j = (self.rank + k) % self.size;
            wait_counter(
                &self.seg,
                Some(&self.peers),
                &self.cfg.wait,
                what,
                j,
                self.seg.seq(j, line),
                value,
            )?;
        }
        Ok(())
    }

    /// One step of a multi-round algorithm: publish that this rank finished its part of
    /// the step, and wait until every peer did. Every rank of a call takes the same steps
    /// (their number follows from sizes the global checks made equal), so the counters
    /// stay in lockstep; a rank that hit a local error keeps stepping and reports later.
    pub(crate) fn step_all(&mut self) -> Result<()> {
        self.steps += 1;
        self.round(Line::Step, self.steps, "a step")
    }

    /// The step counter every rank of this call started from (they all take the same
    /// steps, so it is the same on every rank).
    pub(crate) fn steps_taken(&self) -> u64 {
        self.steps
    }

    /// Publish this rank's step counter at `value` (a pipelined algorithm that counts its
    /// own progress on it; every rank of the call must end at the same value).
    pub(crate) fn step_to(&mut self, value: u64) {
        self.steps = value;
        self.seg.publish(self.seg.seq(self.rank, Line::Step), value);
    }

    /// Wait until rank `j`'s step counter reaches `value`.
    pub(crate) fn wait_step(&self, j: usize, value: u64, what: &'static str) -> Result<()> {
        wait_counter(
            &self.seg,
            Some(&self.peers),
            &self.cfg.wait,
            what,
            j,
            self.seg.seq(j, Line::Step),
            value,
        )
        .map_err(Into::into)
    }

    /// Block until every rank has called `barrier`.
    pub fn barrier(&mut self) -> Result<()> {
        let seq = self.begin()?;
        let core = DescCore {
            op: CollOp::Barrier.code(),
            ..DescCore::default()
        };
        self.publish_arrive(seq, &core, None);
        let r = self.wait_arrivals(seq);
        self.mates.in_rank_order(); // a barrier's CPU-mates leave in rank order (leave_order.rs)
        self.leave(seq);
        let r = self.poison(r);
        r?;
        let mut cores = std::mem::take(&mut self.scratch);
        let r = self.read_descs(seq, CollOp::Barrier.code(), &mut cores);
        self.scratch = cores;
        if r.is_err() {
            self.stats.rejected += 1;
        }
        // A descriptor found corrupt or a diverged one-sided call breaks the communicator.
        self.poison(r)
    }

    /// Keep what served a call, for `last_choice` and the statistics.
    pub(crate) fn record(&mut self, choice: Choice) {
        self.last = Some(choice);
        self.stats.calls += 1;
        self.stats.per_algo[choice.algo as usize] += 1;
    }

    /// Bind the tuning table file's tables for this communicator's size, if a file is
    /// found (crate::tuning_file); returns its path. For communicators created outside
    /// Python (whose bindings load the file themselves). Every rank must do the same.
    pub fn bind_tuning_file(&mut self) -> Result<Option<std::path::PathBuf>> {
        let Some((path, _)) = crate::tuning_file::find_file()? else {
            return Ok(None);
        };
        let file = crate::tuning_file::TableFile::load(&path)?;
        let tables = file.tables_for(self.size)?;
        let source = path.display().to_string();
        if let Some(t) = tables.alltoall {
            self.set_table(CollOp::Alltoall, t, source.clone());
        }
        for (family, t) in tables.coll {
            self.set_table(family, t, source.clone());
        }
        Ok(Some(path))
    }

    /// A digest of every selection table bound, equal on ranks that bound the same tables
    /// (std's SipHash with fixed keys: the same in every process of one build).
    pub fn tables_digest(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for o in CollOp::ALL {
            format!("{:?}", self.tables.get(o).table).hash(&mut h);
        }
        h.finish()
    }

    /// Calls served by `algo` so far.
    pub fn calls_with(&self, algo: Algo) -> u64 {
        self.stats.per_algo[algo as usize]
    }
}

/// Bind this rank to a CPU if the settings say so, and tell the peers where it runs
/// (before the round that publishes it).
fn announce_cpu(seg: &Segment, rank: usize, cfg: &Config) {
    let cpu = shmcoll_shm::placement::bind_rank(cfg.bind, rank, seg.layout().sizes.nranks)
        .or_else(shmcoll_shm::placement::only_cpu);
    seg.cpu_of(rank)
        .store(cpu.map_or(0, |c| c as u32 + 1), Ordering::Relaxed);
}

impl Drop for Comm {
    /// A communicator that ends without a fatal error leaves its segment to the pool, for
    /// the next communicator of the same ranks (crate::pool); a broken one unmaps it.
    fn drop(&mut self) {
        if self.broken.is_some() || self.cfg.pool_segments == 0 {
            return;
        }
        let pooled = Pooled {
            seg: self.seg.clone(),
            heap: self.heap.clone(),
            peers: self.peers.clone(),
            rank: self.rank,
            cma_ok: self.cma_ok,
            state: Continued {
                next_seq: self.next_seq,
                steps: self.steps,
                requests: self.requests,
                streamed: self.streamed,
                sent: std::mem::take(&mut self.sent),
                recvd: std::mem::take(&mut self.recvd),
            },
        };
        crate::pool::keep(pooled, self.cfg.pool_segments);
    }
}

/// Which of a rank's buffers a descriptor describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// Its send buffer (or contribution).
    Send,
    /// Its receive buffer.
    Recv,
}

/// A validated range of a peer's buffer (`Comm::peer_range`): its address in this process
/// when it is mapped here (shared heap, arena), and in the peer's process (for CMA).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeerRange {
    pub local: Option<usize>,
    pub remote: usize,
}
