//! AVX2 kernels: the generic loop compiled with 32-byte vectors. Only `avx2` is enabled (no
//! `fma`: Rust never contracts `a * b + c` anyway, this just keeps it obvious).

super::generic::define_kernels!(256, #[target_feature(enable = "avx2")]);
