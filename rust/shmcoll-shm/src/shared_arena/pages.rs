//! The arena's address space in two parts: blocks below `HUGE_FROM` are carved first fit
//! from the lower part, in whole pages; larger blocks from the upper part, in whole huge
//! pages at huge-page offsets. So where the kernel gives shared memory huge pages
//! (crate::huge_pages), the upper part can ask for them, and only large arrays get them:
//! a small array never shares a huge page with free space, which would make it cost 2 MiB.
//! NumPy draws the same line (it advises huge pages from 4 MiB).

use crate::error::Result;
use crate::heap::HeapAlloc;

/// Blocks of at least this many bytes live in the upper part.
pub const HUGE_FROM: usize = 4 << 20;
/// A PMD huge page on x86-64 and arm64 with 4 KiB pages.
pub const HUGE_PAGE: usize = 2 << 20;
const PAGE: usize = 4096;

/// `[start, end)` of the upper part of an arena of `len` bytes: from half of it (rounded
/// down to a huge page) to its last whole huge page; empty, at the end, when half the arena
/// holds no huge page (the lower part is then all of it).
pub fn large_part(len: usize) -> (usize, usize) {
    let start = len / 2 / HUGE_PAGE * HUGE_PAGE;
    if start == 0 {
        return (len, len);
    }
    (start, len / HUGE_PAGE * HUGE_PAGE)
}

/// The length of the block that serves a request of `len` bytes: whole pages, or whole
/// huge pages from `HUGE_FROM`; None when that overflows.
pub fn block_len(len: usize) -> Option<usize> {
    let len = len.max(1);
    let unit = if len >= HUGE_FROM { HUGE_PAGE } else { PAGE };
    len.checked_next_multiple_of(unit)
}

/// The two allocators. Offsets are the arena's; the upper part's free ranges hold only
/// whole huge pages at huge-page offsets, since every block there is one.
#[derive(Debug)]
pub struct Pages {
    small: HeapAlloc,
    large: HeapAlloc,
    split: usize,
}

impl Pages {
    pub fn new(len: usize) -> Pages {
        let (start, end) = large_part(len);
        Pages {
            small: HeapAlloc::new(start),
            large: HeapAlloc::new(end - start),
            split: start,
        }
    }

    /// A block of `len` bytes, a length `block_len` gave.
    pub fn alloc(&mut self, len: usize) -> Result<usize> {
        if len >= HUGE_FROM {
            Ok(self.large.alloc(len)? + self.split)
        } else {
            self.small.alloc(len)
        }
    }

    /// Return the block of `len` bytes at `off`.
    pub fn free(&mut self, off: usize, len: usize) {
        if len >= HUGE_FROM {
            self.large.free(off - self.split, len);
        } else {
            self.small.free(off, len);
        }
    }

    pub fn in_use(&self) -> usize {
        self.small.in_use() + self.large.in_use()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn large_blocks_sit_on_whole_huge_pages_of_the_upper_part(
            ops in proptest::collection::vec((1usize..(24 << 20), any::<bool>()), 1..120)
        ) {
            let cap = 256 << 20;
            let (start, end) = large_part(cap);
            let mut p = Pages::new(cap);
            let mut live: Vec<(usize, usize)> = Vec::new();
            for (req, free_one) in ops {
                if free_one && !live.is_empty() {
                    let (o, l) = live.swap_remove(req % live.len());
                    p.free(o, l);
                    continue;
                }
                let len = block_len(req).unwrap();
                prop_assert!(len >= req);
                let Ok(o) = p.alloc(len) else { continue };
                if len >= HUGE_FROM {
                    prop_assert_eq!(o % HUGE_PAGE, 0);
                    prop_assert_eq!(len % HUGE_PAGE, 0);
                    prop_assert!(o >= start && o + len <= end);
                } else {
                    prop_assert_eq!(o % PAGE, 0);
                    prop_assert!(o + len <= start);
                }
                for &(lo, ll) in &live {
                    prop_assert!(o + len <= lo || o >= lo + ll, "overlap");
                }
                live.push((o, len));
            }
            for (o, l) in live {
                p.free(o, l);
            }
            prop_assert_eq!(p.in_use(), 0);
        }
    }

    #[test]
    fn parts_of_small_arenas() {
        assert_eq!(large_part(64 << 20), (32 << 20, 64 << 20));
        assert_eq!(large_part((64 << 20) + 4096), (32 << 20, 64 << 20));
        assert_eq!(large_part(2 * HUGE_PAGE), (HUGE_PAGE, 2 * HUGE_PAGE));
        assert_eq!(large_part(HUGE_PAGE), (HUGE_PAGE, HUGE_PAGE));
        assert_eq!(large_part(4096), (4096, 4096));
        assert_eq!(block_len(usize::MAX), None);
        assert_eq!(block_len(HUGE_FROM - 1), Some(HUGE_FROM));
        assert_eq!(block_len(HUGE_FROM + 1), Some(HUGE_FROM + HUGE_PAGE));
    }
}
