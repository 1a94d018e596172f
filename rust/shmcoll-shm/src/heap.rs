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
    pub fn alloc(&mut self, len: usize) -> Result<usize> {
        let len = len.max(1).div_ceil(64) * 64;
        let align = block_align(len);
        let found = self.free.iter().find_map(|(&start, &size)| {
            let aligned = start.div_ceil(align) * align;
            (aligned + len <= start + size).then_some((start, size, aligned))
        });
        let Some((start, size, aligned)) = found else {
            return Err(ShmError::HeapExhausted {
                requested: len,
                largest_free: self.largest_free(),
                capacity: self.capacity,
            });
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
        let mut size = len.max(1).div_ceil(64) * 64;
        self.in_use -= size;
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
                    prop_assert_eq!(o % block_align(len.max(1).div_ceil(64) * 64), 0);
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
}
