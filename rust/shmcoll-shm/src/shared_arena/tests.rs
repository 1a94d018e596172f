use proptest::prelude::*;

use super::*;

fn read(addr: usize, len: usize) -> &'static [u8] {
    // SAFETY: the tests read blocks the arena handed out, inside its mapping, which the
    // arena (leaked below) keeps alive.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
}

fn fill(addr: usize, len: usize, v: u8) {
    // SAFETY: as in `read`; the block is the test's own.
    unsafe { std::ptr::write_bytes(addr as *mut u8, v, len) };
}

fn arena(len: usize) -> &'static SharedArena {
    Box::leak(Box::new(SharedArena::create(len).expect("arena")))
}

#[test]
fn blocks_are_pages_inside_the_arena_and_reused_after_free() {
    let a = arena(1 << 20);
    let x = a.alloc(100, false).unwrap();
    let y = a.alloc(5000, false).unwrap();
    assert_eq!(x % 4096, 0);
    assert_eq!(y, x + 4096, "first fit, whole pages");
    assert_eq!(a.block_len(y), Some(8192));
    assert!(a.contains(x) && a.contains(y + 8191) && !a.contains(a.base() + a.len()));
    assert_eq!(a.stats().in_use, 3 * 4096);
    assert!(a.free(x));
    assert!(!a.free(x), "a second free of the same block is refused");
    assert!(!a.free(y + 64), "not a block start");
    assert_eq!(
        a.alloc(4096, false),
        Some(x),
        "the freed page is taken first"
    );
}

/// A request too large to round up to pages is the largest one, which the limits bring
/// down (it wrapped to 0 before: rounding up overflowed).
#[test]
fn requests_near_the_top_of_the_address_space_are_capped_not_wrapped() {
    let limits = sizing::Limits {
        address_space: Some(4 * (64 << 20)),
        file_size: None,
        strict_overcommit: false,
    };
    for requested in [usize::MAX, usize::MAX - 1, usize::MAX - PAGE + 2] {
        let a = SharedArena::create_under(requested, &limits).expect("arena");
        assert_eq!(a.len(), 64 << 20);
        assert_eq!(a.sizing().requested, usize::MAX / PAGE * PAGE);
        assert_eq!(a.sizing().reduced_by, Some(sizing::Reason::AddressSpace));
    }
}

/// Under strict overcommit a block's pages exist (reserved with fallocate) before the
/// block is handed out, so that touching them cannot raise SIGBUS; elsewhere they appear
/// only when touched.
#[test]
fn strict_overcommit_reserves_pages_before_handing_them_out() {
    let strict = sizing::Limits {
        address_space: None,
        file_size: None,
        strict_overcommit: true,
    };
    let a: &'static SharedArena = Box::leak(Box::new(
        SharedArena::create_under(64 << 20, &strict).expect("arena"),
    ));
    let before = a.resident().unwrap();
    let x = a.alloc(1 << 20, false).unwrap();
    assert!(
        a.resident().unwrap() >= before + (1 << 20),
        "pages not reserved"
    );
    a.free(x);
    let lazy = arena(64 << 20);
    let before = lazy.resident().unwrap();
    let _y = lazy.alloc(1 << 20, false).unwrap();
    assert!(
        lazy.resident().unwrap() < before + (1 << 20),
        "pages reserved without need"
    );
}

#[test]
fn a_full_arena_refuses_and_counts() {
    let a = arena(64 << 10);
    assert!(a.alloc(64 << 10, false).is_some());
    assert!(a.alloc(1, false).is_none());
    let s = a.stats();
    assert_eq!((s.served, s.refused, s.in_use), (1, 1, 64 << 10));
}

#[test]
fn zeroed_blocks_read_zero_after_reuse() {
    let a = arena(16 << 20);
    // From the cache of freed blocks (same length).
    let x = a.alloc(3 * 4096, false).unwrap();
    fill(x, 3 * 4096, 0xAB);
    a.free(x);
    assert_eq!(a.stats().cached, 3 * 4096);
    let z = a.alloc(3 * 4096, true).unwrap();
    assert_eq!(z, x, "the cached block is reused");
    assert!(read(z, 3 * 4096).iter().all(|&b| b == 0));
    // From the free ranges (the freed block went there, punched), overlapping a used part
    // and a fresh one.
    let y = a.alloc(5 * 4096, false).unwrap();
    fill(y, 5 * 4096, 0xCD);
    a.free(y);
    let w = a.alloc(1 << 20, false).unwrap(); // evicts nothing: y stays cached
    a.free(w);
    let big = a.alloc(5 * 4096 + 8 * 4096, true).unwrap();
    assert!(read(big, 13 * 4096).iter().all(|&b| b == 0));
}

#[test]
fn the_cache_of_freed_blocks_is_bounded_and_evicts_the_oldest() {
    let a = arena(4 * CACHE_BYTES);
    let block = 1 << 20;
    let n = CACHE_BYTES / block + 4;
    let blocks: Vec<usize> = (0..n).map(|_| a.alloc(block, false).unwrap()).collect();
    for &b in &blocks {
        fill(b, block, 9);
        a.free(b);
    }
    let s = a.stats();
    assert_eq!((s.in_use, s.cached), (0, CACHE_BYTES));
    // The four oldest left the cache punched: they read zero; the newest are kept warm.
    for &b in &blocks[..4] {
        assert!(read(b, block).iter().step_by(4096).all(|&v| v == 0));
    }
    assert!(read(blocks[n - 1], block)
        .iter()
        .step_by(4096)
        .all(|&v| v == 9));
}

#[test]
fn the_cache_order_stays_as_small_as_the_cache() {
    let a = arena(16 << 20);
    for _ in 0..10_000 {
        let x = a.alloc(8192, false).unwrap();
        a.free(x);
    }
    let s = a.lock();
    assert!(s.cache_order.len() <= 2 + 64, "{}", s.cache_order.len());
}

#[test]
fn large_freed_blocks_leave_memory_and_read_zero() {
    let a = arena(2 * RELEASE_FROM);
    let x = a.alloc(RELEASE_FROM, false).unwrap();
    fill(x, RELEASE_FROM, 7);
    a.free(x);
    assert_eq!(a.stats().cached, 0);
    let y = a.alloc(RELEASE_FROM, false).unwrap();
    assert_eq!(y, x);
    assert!(read(y, RELEASE_FROM).iter().step_by(4096).all(|&b| b == 0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Live blocks never overlap, stay inside the arena, keep what their owner wrote, and
    /// zeroed ones start at zero whatever freed blocks left behind.
    #[test]
    fn live_blocks_are_disjoint_and_keep_their_bytes(
        ops in prop::collection::vec((1usize..40_000, any::<bool>(), any::<bool>()), 1..60)
    ) {
        let a = arena(1 << 20);
        let mut live: Vec<(usize, usize, u8)> = Vec::new();
        for (k, &(len, zeroed, free_one)) in ops.iter().enumerate() {
            if free_one && !live.is_empty() {
                let (addr, _, _) = live.remove(k % live.len());
                prop_assert!(a.free(addr));
            }
            if let Some(addr) = a.alloc(len, zeroed) {
                if zeroed {
                    prop_assert!(read(addr, len).iter().all(|&b| b == 0));
                }
                prop_assert!(addr >= a.base() && addr + len <= a.base() + a.len());
                for &(b, blen, _) in &live {
                    prop_assert!(addr + len <= b || b + blen <= addr, "overlap");
                }
                let tag = (k % 251) as u8 + 1;
                fill(addr, len, tag);
                live.push((addr, len, tag));
            }
            for &(b, blen, tag) in &live {
                prop_assert!(read(b, blen).iter().all(|&v| v == tag));
            }
        }
        let pages: usize = live.iter().map(|&(_, l, _)| l.div_ceil(4096) * 4096).sum();
        prop_assert_eq!(a.stats().in_use, pages);
    }
}

/// Large blocks sit on whole huge pages of the upper half, small ones in the lower half,
/// so that huge pages (where the kernel gives shared memory any) back only large arrays.
#[test]
fn large_blocks_take_whole_huge_pages_in_the_upper_half() {
    let a = arena(256 << 20);
    let (start, end) = large_part(a.len());
    let small = a.alloc(HUGE_FROM - 4096, false).unwrap() - a.base();
    assert!(small + HUGE_FROM - 4096 <= start);
    let big = a.alloc(HUGE_FROM + 1, false).unwrap() - a.base();
    assert_eq!(big % HUGE_PAGE, 0);
    assert!(big >= start && big + HUGE_FROM + HUGE_PAGE <= end);
    assert_eq!(a.block_len(a.base() + big), Some(HUGE_FROM + HUGE_PAGE));
    assert!(a.free(a.base() + big));
    assert_eq!(a.stats().in_use, HUGE_FROM - 4096);
}
