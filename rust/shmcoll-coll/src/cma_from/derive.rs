//! The crossover from the probe's figures: the block size from which a private buffer's
//! single CMA copy costs no more than the two copies of staging.
//!
//! Model: between two probed sizes each path's cost is linear in the block size, so the
//! difference `staged - cma` is the piecewise-linear curve through the probed points (and
//! constant below the first). CMA's per-call cost (the system call) is what staging saves
//! and its per-byte cost (pinning, one copy) grows slower than staging's (two copies and
//! a handoff per chunk), so the curve rises through zero once; the crossover is where it
//! first reaches zero: 0 when CMA costs no more even at the smallest size, the largest
//! probed size when staging is cheaper even there (beyond it the probe says nothing).
//! Taking the first crossing keeps the few, noisier samples of the largest sizes from
//! moving it. Exact integer arithmetic keeps it monotone: a dearer CMA never lowers it, a
//! dearer staging never raises it.

/// `sizes` ascending; `cma_ns` and `staged_ns` the cost of one transfer of each size.
/// Returns bytes: blocks below it should not use CMA. None if the slices differ in length,
/// are empty, or the sizes do not ascend.
pub fn crossover(sizes: &[usize], cma_ns: &[u64], staged_ns: &[u64]) -> Option<usize> {
    let n = sizes.len();
    if n == 0 || cma_ns.len() != n || staged_ns.len() != n {
        return None;
    }
    if sizes.windows(2).any(|w| w[0] >= w[1]) {
        return None;
    }
    let d = |i: usize| i128::from(staged_ns[i]) - i128::from(cma_ns[i]);
    // The first probed size where CMA costs no more than staging.
    let Some(i) = (0..n).find(|&i| d(i) >= 0) else {
        return Some(sizes[n - 1]);
    };
    if i == 0 {
        return Some(0);
    }
    // d(i - 1) < 0 <= d(i): the root of the segment between them, rounded up.
    let (lo, hi) = (sizes[i - 1] as u128, sizes[i] as u128);
    let below = (-d(i - 1)) as u128;
    let span = below + d(i) as u128;
    let root = lo + ((hi - lo) * below).div_ceil(span);
    usize::try_from(root).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SIZES: [usize; 5] = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];

    #[test]
    fn crossing_between_two_sizes_is_interpolated() {
        // Staging 1000 ns cheaper at 16 KiB, 3000 ns dearer at 64 KiB: a quarter of the way.
        let cma = [2000, 3000, 6000, 20000, 80000];
        let staged = [500, 2000, 9000, 40000, 160000];
        assert_eq!(
            crossover(&SIZES, &cma, &staged),
            Some((16 << 10) + (12 << 10))
        );
    }

    #[test]
    fn the_ends() {
        let cma = [100, 200, 300, 400, 500];
        assert_eq!(crossover(&SIZES, &cma, &[1000; 5]), Some(0));
        assert_eq!(crossover(&SIZES, &cma, &[1; 5]), Some(1 << 20));
        // Equal costs: CMA serves (staging is not cheaper).
        assert_eq!(crossover(&SIZES, &cma, &cma), Some(0));
    }

    #[test]
    fn malformed_figures_give_none() {
        assert_eq!(crossover(&[], &[], &[]), None);
        assert_eq!(crossover(&SIZES, &[1; 4], &[1; 5]), None);
        assert_eq!(crossover(&[4096, 4096], &[1, 1], &[1, 1]), None);
    }

    fn costs() -> impl Strategy<Value = Vec<u64>> {
        proptest::collection::vec(1u64..10_000_000, SIZES.len())
    }

    proptest! {
        #[test]
        fn bounded(cma in costs(), staged in costs()) {
            let c = crossover(&SIZES, &cma, &staged).unwrap();
            prop_assert!(c <= SIZES[SIZES.len() - 1]);
            // Staging cheaper at every size means the cap; no cheaper at the first, 0.
            if staged.iter().zip(&cma).all(|(s, c)| s < c) {
                prop_assert_eq!(c, 1 << 20);
            }
            if staged[0] >= cma[0] {
                prop_assert_eq!(c, 0);
            }
        }

        #[test]
        fn monotone(cma in costs(), staged in costs(), i in 0usize..5, more in 1u64..10_000_000) {
            let c = crossover(&SIZES, &cma, &staged).unwrap();
            let mut dearer_cma = cma.clone();
            dearer_cma[i] += more;
            prop_assert!(crossover(&SIZES, &dearer_cma, &staged).unwrap() >= c);
            let mut dearer_staging = staged.clone();
            dearer_staging[i] += more;
            prop_assert!(crossover(&SIZES, &cma, &dearer_staging).unwrap() <= c);
        }

        #[test]
        fn agrees_with_the_figures_at_the_probed_sizes(cma in costs(), staged in costs()) {
            let c = crossover(&SIZES, &cma, &staged).unwrap();
            for (k, &s) in SIZES.iter().enumerate() {
                // Below the crossover staging is cheaper at every probed size.
                if s < c {
                    prop_assert!(staged[k] < cma[k], "{} bytes, crossover {}", s, c);
                }
            }
            // The first probed size from the crossover on is one where CMA costs no more
            // (unless staging is cheaper everywhere: the cap).
            if let Some(k) = SIZES.iter().position(|&s| s >= c) {
                prop_assert!(staged[k] >= cma[k] || c == SIZES[SIZES.len() - 1]);
            }
        }

        #[test]
        fn noise_past_the_crossing_does_not_move_it(cma in costs(), staged in costs(), noise in 1u64..10_000_000) {
            let c = crossover(&SIZES, &cma, &staged).unwrap();
            if let Some(k) = SIZES.iter().position(|&s| s > c) {
                for j in k + 1..SIZES.len() {
                    let mut lower = staged.clone();
                    lower[j] = lower[j].saturating_sub(noise).max(1);
                    prop_assert_eq!(crossover(&SIZES, &cma, &lower).unwrap(), c);
                }
            }
        }
    }
}
