//! Checked arithmetic on extents: byte ranges `(offset, length)` computed from a caller's
//! counts and displacements or read from a peer's descriptor in shared memory.
//!
//! Why one module: every such number may be hostile (a count of 2^62 elements, a
//! displacement a peer's descriptor says), and an addition that wraps turns a range that
//! is far out of bounds into one that passes the bounds check. The rules live here, each
//! once, and the modules that validate calls use only these helpers, under the clippy lint
//! that forbids plain arithmetic (`arithmetic_side_effects`): a range either has an end
//! that fits in the address space and lies inside its container, or it is rejected.
#![deny(clippy::arithmetic_side_effects)]

/// The end of `len` bytes at `off`, if it fits in a `usize`.
#[inline]
pub fn end(off: usize, len: usize) -> Option<usize> {
    off.checked_add(len)
}

/// Whether `len` bytes at `off` lie inside a container of `cap` bytes.
#[inline]
pub fn within(off: usize, len: usize, cap: usize) -> bool {
    end(off, len).is_some_and(|e| e <= cap)
}

/// Whether `[off, off + len)` lies inside `[start, stop)` (absolute positions).
#[inline]
pub fn inside(off: usize, len: usize, start: usize, stop: usize) -> bool {
    off >= start && end(off, len).is_some_and(|e| e <= stop)
}

/// The sum of `values`, if it fits in a `usize`.
pub fn sum(values: impl IntoIterator<Item = usize>) -> Option<usize> {
    values.into_iter().try_fold(0usize, usize::checked_add)
}

/// The offset of block `j` of uniform blocks of `n` bytes, if it fits in a `usize`.
#[inline]
pub fn uniform_offset(j: usize, n: usize) -> Option<usize> {
    j.checked_mul(n)
}

/// Whether two non-empty byte ranges at absolute addresses share a byte. A range whose end
/// does not fit counts as reaching the end of the address space (such a range was
/// rejected by the bounds checks anyway, and must not look disjoint from anything).
#[inline]
pub fn overlap(a: (usize, usize), b: (usize, usize)) -> bool {
    let stop = |(o, l): (usize, usize)| end(o, l).unwrap_or(usize::MAX);
    a.1 > 0 && b.1 > 0 && a.0 < stop(b) && b.0 < stop(a)
}

/// The first pair of ranks whose non-empty blocks `(offset, length)` share a byte (the
/// blocks are indexed by rank), or None when they are pairwise disjoint.
pub fn first_overlap(blocks: impl IntoIterator<Item = (usize, usize)>) -> Option<(usize, usize)> {
    let mut spans: Vec<(usize, usize, usize)> = blocks
        .into_iter()
        .enumerate()
        .filter(|(_, (_, l))| *l > 0)
        .map(|(j, (o, l))| (o, end(o, l).unwrap_or(usize::MAX), j))
        .collect();
    spans.sort_unstable();
    spans
        .windows(2)
        .find(|w| w[1].0 < w[0].1)
        .map(|w| (w[0].2, w[1].2))
}

/// `value` of a descriptor field (a u64 in shared memory) as a `usize`, if it fits.
#[inline]
pub fn from_shared(value: u64) -> Option<usize> {
    usize::try_from(value).ok()
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wrapping_sums_and_ends_are_rejected() {
        assert_eq!(sum([1usize << 63, 1usize << 63]), None);
        assert_eq!(sum([usize::MAX, 0]), Some(usize::MAX));
        assert!(!within(usize::MAX, 1, usize::MAX));
        assert!(!within(8, usize::MAX - 7, 100));
        assert!(within(0, 0, 0));
        assert_eq!(uniform_offset(2, 1usize << 63), None);
    }

    #[test]
    fn overlap_of_ranges_reaching_the_end_of_the_address_space() {
        assert!(overlap((usize::MAX - 1, 8), (usize::MAX - 1, 1)));
        assert!(!overlap((0, 0), (0, 8)));
        assert_eq!(first_overlap([(0, 8), (8, 8), (4, 0)]), None);
        assert_eq!(first_overlap([(0, 8), (16, 8), (7, 2)]), Some((0, 2)));
    }

    proptest! {
        /// `within` agrees with exact (128-bit) arithmetic for every value, extremes included.
        #[test]
        fn within_is_exact(
            off in prop_oneof![any::<usize>(), 0usize..64, Just(usize::MAX), Just(1usize << 63)],
            len in prop_oneof![any::<usize>(), 0usize..64, Just(usize::MAX), Just(1usize << 63)],
            cap in any::<usize>(),
        ) {
            let exact = off as u128 + len as u128 <= cap as u128;
            prop_assert_eq!(within(off, len, cap), exact);
        }

        /// `sum` is the exact sum when it fits, None otherwise.
        #[test]
        fn sum_is_exact(v in proptest::collection::vec(
            prop_oneof![any::<usize>(), 0usize..1024, Just(usize::MAX / 2 + 1)], 0..8)
        ) {
            let exact: u128 = v.iter().map(|&x| x as u128).sum();
            prop_assert_eq!(sum(v.iter().copied()).map(|s| s as u128), (exact <= usize::MAX as u128).then_some(exact));
        }

        /// `first_overlap` finds a pair exactly when two non-empty blocks share a byte.
        #[test]
        fn first_overlap_matches_pairwise(blocks in proptest::collection::vec(
            (prop_oneof![0usize..64, any::<usize>()], prop_oneof![0usize..16, any::<usize>()]), 0..6)
        ) {
            let pairwise = (0..blocks.len()).any(|i| (0..i).any(|j| overlap(blocks[i], blocks[j])));
            let found = first_overlap(blocks.iter().copied());
            prop_assert_eq!(found.is_some(), pairwise);
            if let Some((a, b)) = found {
                prop_assert!(overlap(blocks[a], blocks[b]));
            }
        }
    }
}
