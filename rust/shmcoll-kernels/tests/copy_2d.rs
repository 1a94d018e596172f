//! Tests of the strided 2-D copy against a reference, with canaries between the rows.

use shmcoll_kernels::{copy_2d_raw, store_fence, Store};

const PAD: usize = 128;

fn pattern(i: usize) -> u8 {
    (i as u8).wrapping_mul(29) ^ 0x5A
}

fn check(
    rows: usize,
    row_bytes: usize,
    src_stride: usize,
    dst_stride: usize,
    dmis: usize,
    store: Store,
) {
    let src_len = rows.saturating_sub(1) * src_stride + row_bytes;
    let dst_len = rows.saturating_sub(1) * dst_stride + row_bytes;
    let src: Vec<u8> = (0..src_len + 3).map(|i| (i * 7 + 1) as u8).collect();
    let mut dst: Vec<u8> = (0..dst_len + 2 * PAD + dmis).map(pattern).collect();
    let mut expect = dst.clone();
    let d0 = PAD + dmis;
    for r in 0..rows {
        let (s, d) = (3 + r * src_stride, d0 + r * dst_stride);
        expect[d..d + row_bytes].copy_from_slice(&src[s..s + row_bytes]);
    }
    // SAFETY: every row lies inside its Vec (lengths computed above); rows of dst do not
    // overlap each other since dst_stride >= row_bytes (or rows <= 1); distinct Vecs.
    let nt = unsafe {
        copy_2d_raw(
            dst.as_mut_ptr().add(d0),
            dst_stride,
            src.as_ptr().add(3),
            src_stride,
            rows,
            row_bytes,
            store,
        )
    };
    if nt {
        store_fence();
    }
    assert!(
        dst == expect,
        "rows={rows} row_bytes={row_bytes} src_stride={src_stride} dst_stride={dst_stride} dmis={dmis} {store:?}"
    );
    if store == Store::Temporal || rows == 0 || row_bytes == 0 {
        assert!(!nt);
    }
    if store == Store::NonTemporal && cfg!(target_arch = "x86_64") && rows > 0 && row_bytes >= 256 {
        assert!(nt);
    }
}

#[test]
fn strided_copies() {
    for store in Store::ALL {
        for rows in [0, 1, 2, 3, 7, 64] {
            for row_bytes in [0, 1, 8, 15, 16, 17, 63, 64, 100, 255, 256, 300, 1000, 4100] {
                for (ss, ds) in [
                    (0, 0),
                    (1, 1),
                    (0, 5),
                    (3, 0),
                    (64, 64),
                    (17, 200),
                    (4096, 33),
                ] {
                    for dmis in [0, 13] {
                        check(rows, row_bytes, row_bytes + ss, row_bytes + ds, dmis, store);
                    }
                }
            }
        }
    }
}

#[test]
fn zero_rows_or_bytes_touch_nothing() {
    for store in Store::ALL {
        // SAFETY: nothing is accessed when rows or row_bytes is 0, so dangling is fine.
        let nt = unsafe {
            copy_2d_raw(
                std::ptr::dangling_mut(),
                8,
                std::ptr::dangling(),
                8,
                0,
                8,
                store,
            ) | copy_2d_raw(
                std::ptr::dangling_mut(),
                8,
                std::ptr::dangling(),
                8,
                5,
                0,
                store,
            )
        };
        assert!(!nt);
    }
}

#[test]
fn transpose_blocks() {
    // Pack a 3x5 grid of 16-byte complex values column-major (the FFT transpose use):
    // source rows are 5*16 bytes apart, each destination "row" is one element.
    let (nr, nc, e) = (3usize, 5usize, 16usize);
    let src: Vec<u8> = (0..nr * nc * e).map(|i| i as u8).collect();
    let mut dst = vec![0u8; nr * nc * e];
    for c in 0..nc {
        // SAFETY: column c: nr rows of e bytes, strides within both buffers.
        unsafe {
            copy_2d_raw(
                dst.as_mut_ptr().add(c * nr * e),
                e,
                src.as_ptr().add(c * e),
                nc * e,
                nr,
                e,
                Store::Temporal,
            )
        };
    }
    for r in 0..nr {
        for c in 0..nc {
            assert_eq!(dst[(c * nr + r) * e..][..e], src[(r * nc + c) * e..][..e]);
        }
    }
}
