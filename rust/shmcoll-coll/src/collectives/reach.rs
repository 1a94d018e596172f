//! Reaching a peer's buffer during a `direct` call: straight through the shared heap
//! when the buffer lives there, else with CMA (process_vm_readv / writev).

use shmcoll_kernels::reduce::{reduce3_raw, reduce_into_raw, Dtype, Op};
use shmcoll_kernels::Store;
use shmcoll_shm::cma::{read_from, write_to};

use super::Call;
use crate::comm::Comm;
use crate::error::Error;
use crate::transfer::Mover;

/// Which of a peer's buffers: `Send` is its contribution (its send block, or inside its
/// receive buffer in place).
pub(super) use crate::comm::Side;

/// A place in a peer's buffer: rank, which buffer, byte offset.
#[derive(Clone, Copy, Debug)]
pub(super) struct At {
    pub rank: usize,
    pub side: Side,
    pub off: usize,
}

/// Where a range of a peer's buffer is.
#[derive(Clone, Copy, Debug)]
enum Loc {
    /// Mapped in this process, at this address.
    Here(usize),
    /// Only in the peer's process, at this address (reached with CMA).
    There(usize),
}

pub(super) fn at(rank: usize, side: Side, off: usize) -> At {
    At { rank, side, off }
}

/// Moves bytes between this rank and its peers' buffers; remembers the first failure so
/// that the caller can finish its rounds (peers wait for them) and report it afterwards.
pub(super) struct Reach<'c> {
    pub c: &'c Comm,
    pub m: Mover,
    pub failure: Option<Error>,
}

impl<'c> Reach<'c> {
    pub fn new(c: &'c Comm) -> Reach<'c> {
        Reach {
            c,
            m: Mover::default(),
            failure: None,
        }
    }

    /// Where `off..off+len` of rank j's buffer is: in this process (its own, or in the
    /// heap or an arena), else in j's process (for CMA). None when rank j's descriptor does
    /// not allow the range (`Comm::peer_range`); the failure is then kept for the done round
    /// and the caller skips the copy.
    fn locate(&mut self, x: &Call, j: usize, side: Side, off: usize, len: usize) -> Option<Loc> {
        let d = &x.peers[j];
        if j == self.c.rank {
            let addr = match side {
                Side::Send => d.send_addr,
                Side::Recv => d.recv_addr,
            };
            // Our own buffer, checked by prepare before it was published.
            return Some(Loc::Here((addr as usize).saturating_add(off)));
        }
        match self.c.peer_range(j, d, side, off, len) {
            Ok(r) => Some(r.local.map_or(Loc::There(r.remote), Loc::Here)),
            Err(e) => {
                self.failure.get_or_insert(e);
                None
            }
        }
    }

    /// Copy `len` bytes at `off` of rank j's buffer to `dst` (this process).
    pub fn read(&mut self, x: &Call, from: At, dst: usize, len: usize, store: Store) {
        let At { rank: j, side, off } = from;
        if len == 0 {
            return;
        }
        match self.locate(x, j, side, off, len) {
            // SAFETY: src is inside rank j's buffer as it registered it (Comm::peer_range
            // checked it, and the heap or arena it lies in), which j leaves alone until the
            // done round; dst is a range of this rank's buffers that the caller checked.
            Some(Loc::Here(src)) => unsafe { self.m.copy(dst, src, len, store) },
            None => {}
            Some(Loc::There(remote)) => {
                // SAFETY: dst is valid for len bytes (caller); the remote range is inside the
                // buffer j registered (checked), and the kernel checks it against j's memory.
                if let Err(e) = unsafe { read_from(self.c.pid_of(j), remote, dst as *mut u8, len) }
                {
                    self.failure
                        .get_or_insert(self.c.cma_error("process_vm_readv", j, e));
                }
            }
        }
    }

    /// Copy `len` bytes from `src` (this process) to `off` of rank j's buffer.
    pub fn write(&mut self, x: &Call, to: At, src: usize, len: usize, store: Store) {
        let At { rank: j, side, off } = to;
        if len == 0 {
            return;
        }
        match self.locate(x, j, side, off, len) {
            // SAFETY: as in `read`, with the roles swapped; only this rank writes this range
            // of j's buffer during the call.
            Some(Loc::Here(dst)) => unsafe { self.m.copy(dst, src, len, store) },
            None => {}
            Some(Loc::There(remote)) => {
                // SAFETY: src is valid for len bytes (caller); the remote range is inside the
                // buffer j registered (checked), and the kernel checks it against j's memory.
                if let Err(e) = unsafe { write_to(self.c.pid_of(j), remote, src as *const u8, len) }
                {
                    self.failure
                        .get_or_insert(self.c.cma_error("process_vm_writev", j, e));
                }
            }
        }
    }

    /// Copy `len` bytes from `src` (this process) to each of `to`, reading `src` from memory
    /// once: the reachable destinations are written a chunk at a time, so that after the
    /// first the chunk comes from L1 (p reads of a large source become one). On this 2-core
    /// VM the streaming stores bound the time, so a 2-rank Allgather gained little (within
    /// noise at 4 MiB); the others go through CMA.
    pub fn write_all(&mut self, x: &Call, to: &[At], src: usize, len: usize, store: Store) {
        /// Small enough that a chunk stays in L1 while it is written to every destination.
        const CHUNK: usize = 8 << 10;
        if len == 0 {
            return;
        }
        let mut local = Vec::with_capacity(to.len());
        for &t in to {
            match self.locate(x, t.rank, t.side, t.off, len) {
                Some(Loc::Here(dst)) => local.push(dst),
                Some(Loc::There(_)) => self.write(x, t, src, len, store),
                None => {}
            }
        }
        let mut done = 0;
        while done < len {
            let n = CHUNK.min(len - done);
            for &dst in &local {
                // SAFETY: as in `write`: each dst holds len bytes (locate), only this
                // rank writes those ranges during the call, and done + n <= len.
                unsafe { self.m.copy(dst + done, src + done, n, store) };
            }
            done += n;
        }
    }

    /// This process's address of `len` bytes at `off` of rank j's buffer, when it is mapped
    /// here (heap, arena, or this rank's own); None otherwise or when the range was refused
    /// (the failure is then kept for the done round).
    pub fn local(
        &mut self,
        x: &Call,
        j: usize,
        side: Side,
        off: usize,
        len: usize,
    ) -> Option<usize> {
        match self.locate(x, j, side, off, len)? {
            Loc::Here(a) => Some(a),
            Loc::There(_) => {
                self.failure.get_or_insert(Error::Corrupt(format!(
                    "rank {j}'s buffer is not in the shared heap, as its descriptor said"
                )));
                None
            }
        }
    }

    /// A readable address holding `len` bytes at `off` of rank j's buffer: in place when
    /// reachable, else read into `tmp`.
    pub fn view(
        &mut self,
        x: &Call,
        j: usize,
        side: Side,
        off: usize,
        len: usize,
        tmp: &mut Vec<u8>,
    ) -> usize {
        if let Some(Loc::Here(a)) = self.locate(x, j, side, off, len) {
            return a;
        }
        // Read into `tmp` with CMA, or (when the range was refused) left as it is: the
        // failure goes to the done round, and this rank's results are not used.
        if tmp.len() < len {
            tmp.resize(len, 0);
        }
        let dst = tmp.as_mut_ptr() as usize;
        self.read(x, at(j, side, off), dst, len, Store::Temporal);
        dst
    }

    /// `dst = s_0 op s_1 op ... op s_{p-1}` over `len` bytes, where `s_j` is `off..` of
    /// rank j's contribution, combined in rank order. `dst` must not overlap any source
    /// except rank 0's or rank 1's exactly (the kernels allow that alias).
    pub fn reduce_all(
        &mut self,
        x: &Call,
        red: (Dtype, Op),
        off: usize,
        dst: usize,
        len: usize,
        tmps: &mut [Vec<u8>; 2],
    ) {
        let (dt, op) = red;
        let n = len / dt.size();
        let p = self.c.size;
        if len == 0 {
            return;
        }
        if p == 1 {
            let s = self.view(x, 0, Side::Send, off, len, &mut tmps[0]);
            if s != dst {
                // SAFETY: s and dst are distinct ranges of len bytes (caller's contract).
                unsafe { self.m.copy(dst, s, len, Store::Temporal) };
            }
            return;
        }
        let [t0, t1] = tmps;
        let a = self.view(x, 0, Side::Send, off, len, t0);
        let b = self.view(x, 1, Side::Send, off, len, t1);
        // SAFETY: a, b are readable for len bytes (views), dst writable (caller); dst equals
        // a or b exactly or overlaps neither (caller's contract).
        unsafe { reduce3_raw(dt, op, dst as *mut u8, a as *const u8, b as *const u8, n) };
        for j in 2..p {
            let s = self.view(x, j, Side::Send, off, len, t1);
            // SAFETY: as above; s does not overlap dst.
            unsafe { reduce_into_raw(dt, op, dst as *mut u8, s as *const u8, n) };
        }
    }

    pub fn finish(mut self) -> Option<Error> {
        self.m.fence();
        self.failure
    }
}
