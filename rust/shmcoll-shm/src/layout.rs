//! Where everything lives inside a node communicator's segment.
//!
//! ```text
//! header        one page: magic, version, sizes (so that `open` can recompute the layout),
//!               the count of sleeping waiters, the creator's CMA crossover
//! control       per rank: two ARRIVE lines (by call parity), DONE, INFO, STEP, PROGRESS and
//!               LEFT lines (crate::ctrl::Line), 128 bytes each, written only by their rank
//!               (one writer per line: no ping-pong of lines between writers; 128 rather
//!               than 64 because the adjacent-line prefetcher pairs lines)
//! descriptors   per rank and call parity: what the rank contributes to the call
//! inline        per rank and call parity: small payloads, written before the arrive
//! ring counters per rank: bytes produced for / consumed from each peer, 64 bytes apart
//! staging       per rank: one ring per destination for two-copy transfers
//! heap          per rank: memory `Comm.empty` hands out; peers read and write it directly
//! ```
//! Parity slots (call sequence mod 2) make one round of synchronisation enough for small
//! calls: a rank can only reach call s+2 after every peer arrived at s+1, hence after every
//! peer finished reading what it published for call s.

/// Bytes between two control lines.
pub const LINE: usize = 128;
/// Bytes between two per-pair ring counters.
pub const COUNTER_STRIDE: usize = 64;
/// Control lines per rank.
pub const LINES_PER_RANK: usize = 7;
/// Fixed part of a call descriptor; the variable part holds 4 arrays of `nranks` u64.
pub const DESC_FIXED: usize = 256;
/// First bytes of the segment.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SHMCOLL\x01");
/// Bumped whenever the layout changes, so that mixed versions refuse to attach.
pub const LAYOUT_VERSION: u32 = 4;
/// The header occupies one page.
pub const HEADER_BYTES: usize = 4096;
/// Heaps start on huge-page boundaries so that THP can back them where the kernel allows.
pub const HEAP_ALIGN: usize = 2 << 20;

/// The sizes that determine a layout; stored in the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    pub nranks: usize,
    /// Inline payload bytes per rank and parity.
    pub inline_bytes: usize,
    /// Staging bytes per rank (split into one ring per destination).
    pub staging_bytes: usize,
    /// Shared heap bytes per rank.
    pub heap_bytes: usize,
}

/// Offsets of every region, computed from [`Sizes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub sizes: Sizes,
    pub ctrl_off: usize,
    pub desc_off: usize,
    pub desc_stride: usize,
    pub inline_off: usize,
    pub counters_off: usize,
    pub counters_stride: usize,
    pub staging_off: usize,
    pub heap_off: usize,
    pub total: usize,
}

/// `x` rounded up to a multiple of `to` (a power of two), None on overflow.
fn round_up(x: usize, to: usize) -> Option<usize> {
    x.checked_next_multiple_of(to)
}

impl Layout {
    /// The layout for `sizes`, or None if a size does not fit the address space: the sizes
    /// come from the environment at creation and from the (shared, writable) header when
    /// another rank opens the segment, so none of them is trusted to be small.
    pub fn new(sizes: Sizes) -> Option<Layout> {
        let p = sizes.nranks;
        let page = 4096;
        let lines = |n: usize| n.checked_mul(LINE);
        let ctrl_off = HEADER_BYTES;
        let desc_off = round_up(
            ctrl_off.checked_add(lines(p.checked_mul(LINES_PER_RANK)?)?)?,
            page,
        )?;
        let desc_stride = round_up(DESC_FIXED.checked_add(p.checked_mul(4 * 8)?)?, LINE)?;
        let inline_bytes = round_up(sizes.inline_bytes, LINE)?;
        let per_parity = |stride: usize| p.checked_mul(2)?.checked_mul(stride);
        let inline_off = round_up(desc_off.checked_add(per_parity(desc_stride)?)?, page)?;
        let counters_off = round_up(inline_off.checked_add(per_parity(inline_bytes)?)?, page)?;
        // produced[p] then consumed[p], each counter on its own 64-byte line.
        let counters_stride = round_up(per_parity(COUNTER_STRIDE)?, LINE)?;
        let staging_bytes = round_up(sizes.staging_bytes, page)?;
        let staging_off = round_up(
            counters_off.checked_add(p.checked_mul(counters_stride)?)?,
            page,
        )?;
        let heap_bytes = round_up(sizes.heap_bytes, page)?;
        let heap_off = round_up(
            staging_off.checked_add(p.checked_mul(staging_bytes)?)?,
            HEAP_ALIGN,
        )?;
        let total = heap_off.checked_add(p.checked_mul(heap_bytes)?)?;
        // Offsets are stored and compared as u64 and handed to mmap as isize-sized lengths.
        isize::try_from(total).ok()?;
        Some(Layout {
            sizes: Sizes {
                nranks: p,
                inline_bytes,
                staging_bytes,
                heap_bytes,
            },
            ctrl_off,
            desc_off,
            desc_stride,
            inline_off,
            counters_off,
            counters_stride,
            staging_off,
            heap_off,
            total,
        })
    }

    pub fn ctrl_line(&self, rank: usize, line: usize) -> usize {
        debug_assert!(rank < self.sizes.nranks && line < LINES_PER_RANK);
        self.ctrl_off + (rank * LINES_PER_RANK + line) * LINE
    }

    pub fn desc(&self, rank: usize, parity: usize) -> usize {
        self.desc_off + (rank * 2 + parity) * self.desc_stride
    }

    pub fn inline(&self, rank: usize, parity: usize) -> usize {
        self.inline_off + (rank * 2 + parity) * self.sizes.inline_bytes
    }

    /// Counter of bytes `rank` produced for `peer` (written by `rank`).
    pub fn produced(&self, rank: usize, peer: usize) -> usize {
        self.counters_off + rank * self.counters_stride + peer * COUNTER_STRIDE
    }

    /// Counter of bytes `rank` consumed from `peer` (written by `rank`).
    pub fn consumed(&self, rank: usize, peer: usize) -> usize {
        let p = self.sizes.nranks;
        self.counters_off + rank * self.counters_stride + (p + peer) * COUNTER_STRIDE
    }

    pub fn staging(&self, rank: usize) -> usize {
        self.staging_off + rank * self.sizes.staging_bytes
    }

    pub fn heap(&self, rank: usize) -> usize {
        self.heap_off + rank * self.sizes.heap_bytes
    }

    /// End of the fixed regions (header, control lines, descriptors, inline areas, ring
    /// counters, staging): what every communicator on the segment uses whatever its calls.
    /// Only padding to `HEAP_ALIGN` lies between it and the heap.
    pub fn fixed_end(&self) -> usize {
        self.staging(self.sizes.nranks)
    }

    /// The whole heap region (all ranks): `[heap_off, total)`.
    pub fn heap_range(&self) -> std::ops::Range<usize> {
        self.heap_off..self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn regions_are_disjoint_and_aligned(p in 1usize..70, inline in 0usize..100_000,
                                            staging in 0usize..10_000_000, heap in 0usize..100_000_000) {
            let l = Layout::new(Sizes { nranks: p, inline_bytes: inline, staging_bytes: staging, heap_bytes: heap }).unwrap();
            let ends = [
                (l.ctrl_off, l.ctrl_line(p - 1, LINES_PER_RANK - 1) + LINE),
                (l.desc_off, l.desc(p - 1, 1) + l.desc_stride),
                (l.inline_off, l.inline(p - 1, 1) + l.sizes.inline_bytes),
                (l.counters_off, l.consumed(p - 1, p - 1) + COUNTER_STRIDE),
                (l.staging_off, l.staging(p - 1) + l.sizes.staging_bytes),
                (l.heap_off, l.total),
            ];
            let mut prev_end = HEADER_BYTES;
            for (start, end) in ends {
                prop_assert!(start >= prev_end);
                prop_assert!(start.is_multiple_of(4096));
                prop_assert!(end >= start);
                prev_end = end;
            }
            prop_assert!(l.heap_off.is_multiple_of(HEAP_ALIGN));
            prop_assert_eq!(l.fixed_end(), l.staging(p - 1) + l.sizes.staging_bytes);
            prop_assert!(l.fixed_end() <= l.heap_off);
            prop_assert!(l.desc_stride >= DESC_FIXED + 32 * p);
            prop_assert!(l.sizes.inline_bytes >= inline && l.sizes.staging_bytes >= staging);
        }
    }

    proptest! {
        #[test]
        fn sizes_that_overflow_give_no_layout(p in 1usize..1 << 20, big in (usize::MAX >> 8)..usize::MAX,
                                              which in 0usize..3) {
            let mut sizes = Sizes { nranks: p, inline_bytes: 0, staging_bytes: 0, heap_bytes: 0 };
            match which {
                0 => sizes.inline_bytes = big,
                1 => sizes.staging_bytes = big,
                _ => sizes.heap_bytes = big,
            }
            prop_assert!(Layout::new(sizes).is_none());
        }
    }

    #[test]
    fn huge_rank_counts_give_no_layout() {
        let sizes = |nranks| Sizes {
            nranks,
            inline_bytes: 4096,
            staging_bytes: 4096,
            heap_bytes: 4096,
        };
        assert!(Layout::new(sizes(usize::MAX)).is_none());
        assert!(Layout::new(sizes(usize::MAX / LINE)).is_none());
        assert!(Layout::new(sizes(4)).is_some());
    }
}
