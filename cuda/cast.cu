// cast: float32/float64 <-> bfloat16/float16 with round to nearest even. A transliteration
// of rust/shmcoll-codec/src/cast.rs, whose module documentation is the byte-for-byte spec.
// The only float operation is the subnormal addition (__fadd_rn/__dadd_rn: IEEE, no FTZ
// under the NVRTC options of shmcoll.gpu) and an exact product when widening.
//
// Launch geometry (every kernel): one thread per element in a grid-stride loop,
// blockDim.x = 256, gridDim.x = min(ceil(n / 256), 65535 * 8). `fmt` is 0 for bfloat16
// (M = 7, B = 127) and 1 for float16 (M = 10, B = 15).

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;

// Step 1-4 of the spec's narrowing from float32 bits (M mantissa bits, bias B).
template <u32 M, u32 B>
__device__ __forceinline__ u16 narrow32(u32 x) {
    const u32 S = 23;
    const u16 sign = (u16)((x >> 16) & 0x8000u);
    const u32 a = x & 0x7fffffffu;
    const u16 exp_ones = (u16)((2 * B + 1) << M);
    u16 h;
    if (a > 0x7f800000u) {
        h = exp_ones | (u16)(1u << (M - 1)) | (u16)((a >> (S - M)) & ((1u << M) - 1));
    } else if (a >= (((B + 127) << S) | (((1u << (M + 1)) - 1) << (S - M - 1)))) {
        h = exp_ones;
    } else if (a >= ((128 - B) << S)) {
        const u32 odd = (a >> (S - M)) & 1u;
        h = (u16)((a - ((127 - B) << S) + (1u << (S - M - 1)) - 1 + odd) >> (S - M));
    } else {
        const u32 magic = (128 - B - M + S) << S;
        h = (u16)(__float_as_uint(__fadd_rn(__uint_as_float(a), __uint_as_float(magic))) - magic);
    }
    return sign | h;
}

// The same from float64 bits, rounded once from the double.
template <u32 M, u32 B>
__device__ __forceinline__ u16 narrow64(u64 x) {
    const u64 S = 52;
    const u64 m = M, b = B;
    const u16 sign = (u16)((x >> 48) & 0x8000u);
    const u64 a = x & 0x7fffffffffffffffull;
    const u16 exp_ones = (u16)((2 * B + 1) << M);
    u16 h;
    if (a > 0x7ff0000000000000ull) {
        h = exp_ones | (u16)(1u << (M - 1)) | (u16)((a >> (S - m)) & ((1u << M) - 1));
    } else if (a >= (((b + 1023) << S) | (((1ull << (m + 1)) - 1) << (S - m - 1)))) {
        h = exp_ones;
    } else if (a >= ((1024 - b) << S)) {
        const u64 odd = (a >> (S - m)) & 1ull;
        h = (u16)((a - ((1023 - b) << S) + (1ull << (S - m - 1)) - 1 + odd) >> (S - m));
    } else {
        const u64 magic = (1024 - b - m + S) << S;
        h = (u16)(__double_as_longlong(__dadd_rn(__longlong_as_double((long long)a),
                                                 __longlong_as_double((long long)magic))) -
                  (long long)magic);
    }
    return sign | h;
}

__device__ __forceinline__ u32 widen_bf16(u16 h) {
    const u32 x = (u32)h << 16;
    return (x & 0x7fffffffu) > 0x7f800000u ? (x | 0x00400000u) : x;
}

__device__ __forceinline__ u32 widen_f16(u16 h) {
    const u32 sign = (u32)(h & 0x8000u) << 16;
    const u32 e = ((u32)h >> 10) & 0x1fu;
    const u32 m = h & 0x3ffu;
    u32 mag;
    if (e == 0x1f) {
        mag = 0x7f800000u | (m << 13) | (m != 0 ? 0x00400000u : 0u);
    } else if (e == 0) {
        mag = __float_as_uint(__fmul_rn((float)m, __uint_as_float(0x33800000u)));  // m * 2^-24, exact
    } else {
        mag = ((e + 112) << 23) | (m << 13);
    }
    return sign | mag;
}

__device__ __forceinline__ u64 f32_bits_to_f64(u32 x) {
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return ((u64)(x >> 31) << 63) | 0x7ff8000000000000ull | ((u64)(x & 0x007fffffu) << 29);
    return (u64)__double_as_longlong((double)__uint_as_float(x));
}

#define GRID_STRIDE(i, n) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (u64)gridDim.x * blockDim.x)

extern "C" __global__ void cast_encode_f32(const u32* __restrict__ x, u64 n, int fmt, u16* __restrict__ out) {
    GRID_STRIDE(i, n) { out[i] = fmt == 0 ? narrow32<7, 127>(x[i]) : narrow32<10, 15>(x[i]); }
}

extern "C" __global__ void cast_encode_f64(const u64* __restrict__ x, u64 n, int fmt, u16* __restrict__ out) {
    GRID_STRIDE(i, n) { out[i] = fmt == 0 ? narrow64<7, 127>(x[i]) : narrow64<10, 15>(x[i]); }
}

extern "C" __global__ void cast_decode_f32(const u16* __restrict__ in, u64 n, int fmt, u32* __restrict__ x) {
    GRID_STRIDE(i, n) { x[i] = fmt == 0 ? widen_bf16(in[i]) : widen_f16(in[i]); }
}

extern "C" __global__ void cast_decode_f64(const u16* __restrict__ in, u64 n, int fmt, u64* __restrict__ x) {
    GRID_STRIDE(i, n) { x[i] = f32_bits_to_f64(fmt == 0 ? widen_bf16(in[i]) : widen_f16(in[i])); }
}
