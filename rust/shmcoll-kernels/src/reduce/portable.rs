//! Portable kernels: the generic loop compiled for the baseline target. Serves `Isa::Scalar`
//! and `Isa::Sse2` (on x86_64 the compiler vectorises it with SSE2, on aarch64 with NEON),
//! and every call on fewer than `SMALL_N` elements.

super::generic::define_kernels!(128);
