//! The allocator of one rank's share of the shared heap.
//!
//! Each rank allocates only from its own region, so no cross-process locking is needed;
//! peers merely read and write blocks whose offsets are published in call descriptors.
//! First fit over an ordered map of free ranges, coalescing on free: simple and good
//! enough for the few large arrays an application keeps in the heap.

use std::collections::BTreeMap;

use crate::error::{Result, ShmError};

/// Free ranges of `[0, capacity)`, by offset.
#[derive(Debug)]
pub struct HeapAlloc {
    capacity: usize,
    free: BTreeMap<usize, usize>,
    in_use: usize,
}

/// Alignment of every block: a cache line, or a page for blocks of a page or more.
pub fn block_align(len: usize) -> usize {
    if len >= 4096 {
        4096
    } else {
        64
    }
}

/// The length of the block that serves `len` bytes: at least 1, whole cache lines; None
/// when that overflows.
fn rounded(len: usize) -> Option<usize> {
    len.max(1).checked_next_multiple_of(64)
}

impl HeapAlloc {
    pub fn new(capacity: usize) -> HeapAlloc {
        let mut free = BTreeMap::new();
        if capacity > 0 {
            free.insert(0, capacity);
        }
        HeapAlloc {
            capacity,
            free,
            in_use: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn in_use(&self) -> usize {
        self.in_use
    }

    pub fn largest_free(&self) -> usize {
        self.free.values().copied().max().unwrap_or(0)
    }

    /// Reserve `len` bytes (at least 1) aligned to `block_align(len)`; returns the offset.
    /// A length whose block would not fit the address space is exhausted like any other
    /// that does not fit (every size here is checked: the length comes from a caller).
    pub fn alloc(&mut self, len: usize) -> Result<usize> {
        let exhausted = |this: &HeapAlloc| ShmError::HeapExhausted {
            requested: len,
            largest_free: this.largest_free(),
            capacity: this.capacity,
        };
        let Some(len) = rounded(len) else {
            return Err(exhausted(self));
        };
        let align = block_align(len);
        let found = self.free.iter().find_map(|(&start, &size)| {
            let aligned = start.checked_next_multiple_of(align)?;
            let end = aligned.checked_add(len)?;
            // start + size <= capacity: no overflow.
            (end <= start + size).then_some((start, size, aligned))
        });
        let Some((start, size, aligned)) = found else {
            return Err(exhausted(self));
        };
        self.free.remove(&start);
        if aligned > start {
            self.free.insert(start, aligned - start);
        }
        let end = aligned + len;
        if end < start + size {
            self.free.insert(end, start + size - end);
        }
        self.in_use += len;
        Ok(aligned)
    }

    /// Return a block obtained from `alloc(len)` at `off`.
    pub fn free(&mut self, off: usize, len: usize) {
        let mut start = off;
        // `alloc(len)` rounded the same length, so this cannot fail for one of its blocks.
        let size = rounded(len);
        debug_assert!(
            size.is_some(),
            "free of {len} bytes at {off}: no such block"
        );
        let Some(mut size) = size else {
            return;
        };
        debug_assert!(
            size <= self.in_use,
            "free of {len} bytes at {off}: more than in use"
        );
        self.in_use = self.in_use.saturating_sub(size);
        if let Some((&prev, &psize)) = self.free.range(..start).next_back() {
            debug_assert!(prev + psize <= start, "double free at {off}");
            if prev + psize == start {
                self.free.remove(&prev);
                start = prev;
                size += psize;
            }
        }
        if let Some(&nsize) = self.free.get(&(start + size)) {
            self.free.remove(&(start + size));
            size += nsize;
        }
        self.free.insert(start, size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn blocks_never_overlap_and_free_restores(ops in proptest::collection::vec((0usize..200_000, any::<bool>()), 1..200)) {
            let cap = 4 << 20;
            let mut h = HeapAlloc::new(cap);
            let mut live: Vec<(usize, usize)> = Vec::new();
            for (len, free_one) in ops {
                if free_one && !live.is_empty() {
                    let (o, l) = live.swap_remove(len % live.len());
                    h.free(o, l);
                } else if let Ok(o) = h.alloc(len) {
                    prop_assert_eq!(o % block_align(rounded(len).unwrap()), 0);
                    let end = o + len.max(1);
                    prop_assert!(end <= cap);
                    for &(lo, ll) in &live {
                        prop_assert!(end <= lo || o >= lo + ll.max(1), "overlap");
                    }
                    live.push((o, len));
                }
            }
            for (o, l) in live { h.free(o, l); }
            prop_assert_eq!(h.in_use(), 0);
            prop_assert_eq!(h.largest_free(), cap);
        }
    }

    #[test]
    fn exhaustion_is_an_error() {
        let mut h = HeapAlloc::new(8192);
        let a = h.alloc(8192).unwrap();
        assert!(matches!(h.alloc(1), Err(ShmError::HeapExhausted { .. })));
        h.free(a, 8192);
        assert_eq!(h.alloc(100).unwrap(), 0);
    }

    /// Lengths near usize::MAX used to wrap to 0 when rounded up to a cache line (release
    /// builds), and the heap handed out a block of 0 bytes for them.
    #[test]
    fn lengths_that_overflow_are_exhausted_not_wrapped() {
        let mut h = HeapAlloc::new(8192);
        for len in [
            usize::MAX,
            usize::MAX - 1,
            usize::MAX - 62,
            usize::MAX - 63,
            usize::MAX - 64,
            usize::MAX / 2 + 1,
            usize::MAX - 8192,
            8193,
        ] {
            match h.alloc(len) {
                Err(ShmError::HeapExhausted {
                    requested,
                    largest_free,
                    capacity,
                }) => {
                    assert_eq!((requested, largest_free, capacity), (len, 8192, 8192));
                }
                other => panic!("alloc({len}) gave {other:?}"),
            }
        }
        assert_eq!(h.in_use(), 0);
        // A free range that does not start at 0: the aligned end must not wrap either.
        let a = h.alloc(64).unwrap();
        assert!(h.alloc(usize::MAX - 4095).is_err());
        h.free(a, 64);
        assert_eq!(h.largest_free(), 8192);
    }
}
