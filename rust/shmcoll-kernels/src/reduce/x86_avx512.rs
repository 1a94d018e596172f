//! AVX-512 kernels: the generic loop compiled with 64-byte vectors (F for 32/64-bit
//! lanes, BW for 8/16-bit lanes, DQ for 64-bit multiplies, VL for the 128/256-bit tails).

super::generic::define_kernels!(
    256,
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512dq,avx512vl")]
);
