// bq: block-wise absmax quantization, float32 -> int8/int4 codes + one float32 scale per
// block. A transliteration of rust/shmcoll-codec/src/bq.rs, whose module documentation is
// the byte-for-byte spec; compiled with --fmad=false --prec-div=true (no FTZ), so every
// division, addition and product rounds as the Rust reference does.
//
// Launch geometry (both kernels): one thread per 8 consecutive elements, so a bq block of
// B elements is a group of B/8 adjacent lanes (4, 8, 16 or 32: never across a warp);
// blockDim.x = 256, gridDim.x = ceil(ceil(n / 8) / 256). Every lane of a launched warp
// takes part in the shuffles, past the end of the input too (with zeros).
// `block` is 32, 64, 128 or 256 (checked by the caller, shmcoll.gpu.bq, through
// _core.bq_compressed_size), so block indices are shifts.
//
// Alignment the caller guarantees (shmcoll.gpu.launch): the encoder's input and output
// and the decoder's stream start on a 16-byte boundary; the decoder's output only on a
// float's (a slice at any element), so it stores 16 bytes at a time only where the
// group's place is 16-byte aligned.

#define BQ_PER_THREAD 8

// Four floats as one 16-byte access (a full group of 8 is two).
struct alignas(16) BqF4 {
    float f[4];
};
#define ROUND_MAGIC 12582912.0f      // 1.5 * 2^23: adding it rounds to an integer, ties to even
#define ROUND_MAGIC_BITS 0x4B400000

// Step 4 of the spec: one code of a finite block with scale > 0.
__device__ __forceinline__ int bq_quantize(float v, float scale, float qmax) {
    float t = __fdiv_rn(v, scale);
    t = fminf(fmaxf(t, -qmax), qmax);
    return (int)__float_as_uint(__fadd_rn(t, ROUND_MAGIC)) - ROUND_MAGIC_BITS;
}

extern "C" __global__ void bq_encode(const float* __restrict__ x, unsigned long long n, int bits,
                                     int block, unsigned char* __restrict__ out) {
    const unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long first = t * BQ_PER_THREAD;
    const int lg = __ffs(block) - 1;  // log2(block): no 64-bit division
    const unsigned long long nb = (n + block - 1) >> lg;
    const float qmax = bits == 8 ? 127.0f : 7.0f;

    float v[BQ_PER_THREAD];
    if (first + BQ_PER_THREAD <= n) {
        // x starts on a 16-byte boundary (shmcoll.gpu.launch.device_flat), first is a
        // multiple of 8: two 16-byte loads.
        const BqF4* at = reinterpret_cast<const BqF4*>(x + first);
        const BqF4 lo = at[0], hi = at[1];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[k] = lo.f[k];
            v[4 + k] = hi.f[k];
        }
    } else {
#pragma unroll
        for (int k = 0; k < BQ_PER_THREAD; k++) v[k] = first + k < n ? x[first + k] : 0.0f;
    }
    unsigned int amax = 0;
#pragma unroll
    for (int k = 0; k < BQ_PER_THREAD; k++) amax = max(amax, __float_as_uint(v[k]) & 0x7fffffffu);
    // Steps 1-3: the group's maximum of magnitude bit patterns, then the scale.
    const int lanes = block >> 3;  // block / BQ_PER_THREAD
    for (int off = lanes / 2; off > 0; off >>= 1)
        amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    if (first >= n) return;

    const unsigned long long b = first >> lg;
    float scale;
    bool zero;
    if (amax >= 0x7f800000u) {
        scale = __uint_as_float(0x7fc00000u);
        zero = true;
    } else {
        scale = __fdiv_rn(__uint_as_float(amax), qmax);
        zero = scale == 0.0f;
    }
    if ((first & (block - 1)) == 0) {
        // Little-endian float32 at 4*b: out starts on a 16-byte boundary
        // (shmcoll.gpu.launch.device_out) and the device is little-endian.
        *reinterpret_cast<unsigned int*>(out + 4 * b) = __float_as_uint(scale);
    }
    int q[BQ_PER_THREAD];
#pragma unroll
    for (int k = 0; k < BQ_PER_THREAD; k++)
        q[k] = (zero || first + k >= n) ? 0 : bq_quantize(v[k], scale, qmax);

    unsigned char* codes = out + 4 * nb;
    if (bits == 8) {
        if (first + BQ_PER_THREAD <= n) {
#pragma unroll
            for (int w = 0; w < 2; w++) {
                unsigned int word = 0;
                for (int k = 0; k < 4; k++) word |= ((unsigned int)q[4 * w + k] & 0xffu) << (8 * k);
                // codes starts at a multiple of 4 and first is a multiple of 8.
                *reinterpret_cast<unsigned int*>(codes + first + 4 * w) = word;
            }
        } else {
            // Constant indices into q (a loop bounded by n would move q to local memory).
#pragma unroll
            for (int k = 0; k < BQ_PER_THREAD; k++)
                if (first + k < n) codes[first + k] = (unsigned char)(q[k] & 0xff);
        }
    } else {
        unsigned int word = 0;
#pragma unroll
        for (int k = 0; k < BQ_PER_THREAD; k++) word |= ((unsigned int)q[k] & 0xfu) << (4 * k);
        const unsigned long long at = first / 2;
        const unsigned long long bytes = (n + 1) / 2;
        if (at + 4 <= bytes) {
            *reinterpret_cast<unsigned int*>(codes + at) = word;
        } else {
            for (int k = 0; at + k < bytes; k++) codes[at + k] = (unsigned char)(word >> (8 * k));
        }
    }
}

extern "C" __global__ void bq_decode(const unsigned char* __restrict__ in, unsigned long long n, int bits,
                                     int block, float* __restrict__ x) {
    const unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long first = t * BQ_PER_THREAD;
    if (first >= n) return;
    const int lg = __ffs(block) - 1;  // log2(block): no 64-bit division
    const unsigned long long nb = (n + block - 1) >> lg;
    const unsigned long long b = first >> lg;
    // in starts on a 16-byte boundary (shmcoll.gpu.launch.device_flat): the scales and
    // the codes (from 4*nb) are 4-byte aligned, and first is a multiple of 8.
    const unsigned int s = *reinterpret_cast<const unsigned int*>(in + 4 * b);
    const float scale = __uint_as_float(s);
    const bool nan = (s & 0x7fffffffu) >= 0x7f800000u;  // a non-finite scale: all 0x7fc00000
    const unsigned char* codes = in + 4 * nb;
    const bool whole = first + BQ_PER_THREAD <= n;
    int q[BQ_PER_THREAD];
    if (bits == 8 && whole) {
        const unsigned int* w = reinterpret_cast<const unsigned int*>(codes + first);
        const unsigned int w0 = w[0], w1 = w[1];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            q[k] = (int)(signed char)(w0 >> (8 * k));
            q[4 + k] = (int)(signed char)(w1 >> (8 * k));
        }
    } else if (bits == 8) {
#pragma unroll
        for (int k = 0; k < BQ_PER_THREAD; k++)
            q[k] = first + k < n ? (int)(signed char)codes[first + k] : 0;
    } else if (whole) {
        const unsigned int w = *reinterpret_cast<const unsigned int*>(codes + first / 2);
        // Sign-extend each nibble: move it to the top of an int and shift back.
#pragma unroll
        for (int k = 0; k < BQ_PER_THREAD; k++) q[k] = ((int)(w << (28 - 4 * k))) >> 28;
    } else {
#pragma unroll
        for (int k = 0; k < BQ_PER_THREAD; k++) {
            if (first + k < n) {
                unsigned int c = codes[(first + k) / 2];
                // Sign-extend the nibble: move it to the top of an int and shift back.
                q[k] = ((int)(c << (k % 2 == 0 ? 28 : 24))) >> 28;
            } else {
                q[k] = 0;
            }
        }
    }
    float v[BQ_PER_THREAD];
#pragma unroll
    for (int k = 0; k < BQ_PER_THREAD; k++) v[k] = nan ? __uint_as_float(0x7fc00000u) : __fmul_rn((float)q[k], scale);
    // x may start at any element (the collectives decode into slices): 16-byte stores
    // where this group's place is 16-byte aligned.
    if (whole && ((unsigned long long)(x + first) & 15) == 0) {
        BqF4* at = reinterpret_cast<BqF4*>(x + first);
        BqF4 lo, hi;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            lo.f[k] = v[k];
            hi.f[k] = v[4 + k];
        }
        at[0] = lo;
        at[1] = hi;
    } else {
#pragma unroll
        for (int k = 0; k < BQ_PER_THREAD; k++)
            if (first + k < n) x[first + k] = v[k];
    }
}
