// zfp fixed-rate, 1-D to 4-D, float32/float64: the CUDA twin of rust/shmcoll-codec/src/zfp.rs.
// The stream is specified byte for byte in that module's documentation; this file writes
// and reads the same bytes (checked on the CPU by tests/test_codec_zfp_cuda_host.py through
// tests/cuda_emu, which compiles this very file as C++ with g++, and on a GPU by
// tests/test_gpu_zfp.py).
//
// It transliterates the Rust reference coder bit for bit: the block-floating-point cast
// and lifting of zfp/scalar.rs, and the plane coders of zfp/reference.rs, a plane at a time
// in words rather than a bit at a time, computed without tables (the Rust fast path's
// tables would serialise in constant memory here).
// Compile with NVRTC and the options of shmcoll.gpu.kernels (--fmad=false, no fast math,
// denormals kept): every float operation is a power-of-two scaling, an int<->float
// conversion rounded to nearest even or toward zero, or a product rounded once.
//
// Kernels (all pointers device memory; n values; rate 3..=32 for float32, 4..=64 for
// float64, validated by the caller):
//
//   zfp_encode_f32(const float* src, unsigned long long n, unsigned int rate,
//                  unsigned long long* stream)
//   zfp_encode_f64(const double* src, ...same...)
//     One thread per group of G = 16 / gcd(rate, 16) consecutive blocks of 4 values:
//     a group is G * 4 * rate bits, a whole number of 64-bit words, so each thread writes
//     its own words (no atomics, no zeroing beforehand). Thread t codes blocks
//     [t*G, min((t+1)*G, nb)) with nb = ceil(n / 4), and the thread of the last group
//     also writes the zero-padded last word. Launch ceil(nb / G) threads in 1-D:
//     grid = ceil(ceil(nb / G) / blockDim.x); any blockDim.x (256 in shmcoll.gpu.zfp).
//     `stream` must be 8-byte aligned with room for ceil(nb * 4 * rate / 64) words.
//
//   zfp_decode_f32(const unsigned long long* stream, unsigned long long n,
//                  unsigned int rate, float* dst)
//   zfp_decode_f64(..., double* dst)
//     One thread per block: launch nb threads in 1-D (any blockDim.x). The stream must be
//     8-byte aligned and hold ceil(nb * 4 * rate / 64) words.
//
//   zfp_encode_nd_f32(const float* src, unsigned long long nx, unsigned long long ny,
//                     unsigned long long nz, unsigned long long nw, unsigned int dims,
//                     unsigned int rate, unsigned long long* stream)
//   zfp_encode_nd_f64(const double* src, ...same...)
//     A C-contiguous array of dims = 2, 3 or 4 axes, extents in zfp's order (nx = the
//     last C axis; 1 for the axes it lacks), rate 1..=32 / 1..=64, coded in blocks of
//     4^dims values in zfp's block order (x fastest). One thread per group of
//     group_blocks(dims, rate) consecutive blocks, whose bits fill whole words (4 /
//     gcd(rate, 4) blocks in 2-D, one block in 3-D and 4-D); launch
//     ceil(blocks / group) threads, at most 256 a block (ZFP_ND_BOUNDS).
//
//   zfp_decode_nd_f32(const unsigned long long* stream, nx, ny, nz, nw, dims, rate,
//                     float* dst)
//   zfp_decode_nd_f64(..., double* dst)
//     One thread per block: launch prod(ceil(n_axis / 4)) threads, at most 256 a block.
//
// Written in plain C++17 with no headers and few CUDA builtins (bit casts, __clz, __clzll,
// __brev, __ffs, __ffsll), so that g++ compiles it unchanged against the CPU shim of
// tests/cuda_emu/shim.h.

typedef unsigned int zu32;
typedef unsigned long long zu64;
typedef int zi32;
typedef long long zi64;

#define ZFP_INLINE __device__ __forceinline__
#define ZFP_TABLE __constant__ const

// --- the per-type half: cast, lifting, negabinary (zfp/scalar.rs) ------------------------

struct ZfpF32 {
    typedef float F;
    typedef zi32 I;
    typedef zu32 U;
    static constexpr zu32 EBITS = 8;
    static constexpr zu32 PREC = 32;
    static constexpr zu32 MANT = 23;
    static constexpr zi32 EBIAS = 127;
    // Exponent-field clamp: below it 2^(30 - emax) would overflow float32.
    static constexpr zi32 EF_MIN = 29;
    static constexpr U NB = 0xaaaaaaaau;
    static constexpr U ABS = 0x7fffffffu;
    static constexpr U INF = 0x7f800000u;
    static constexpr U MAXF = 0x7f7fffffu;
    ZFP_INLINE static U bits(F x) { return __float_as_uint(x); }
    ZFP_INLINE static F from_bits(U b) { return __uint_as_float(b); }
};

struct ZfpF64 {
    typedef double F;
    typedef zi64 I;
    typedef zu64 U;
    static constexpr zu32 EBITS = 11;
    static constexpr zu32 PREC = 64;
    static constexpr zu32 MANT = 52;
    static constexpr zi32 EBIAS = 1023;
    static constexpr zi32 EF_MIN = 61;
    static constexpr U NB = 0xaaaaaaaaaaaaaaaaull;
    static constexpr U ABS = 0x7fffffffffffffffull;
    static constexpr U INF = 0x7ff0000000000000ull;
    static constexpr U MAXF = 0x7fefffffffffffffull;
    ZFP_INLINE static U bits(F x) { return (U)__double_as_longlong(x); }
    ZFP_INLINE static F from_bits(U b) { return __longlong_as_double((zi64)b); }
};

// Wrapping two's-complement arithmetic through the unsigned type (signed overflow is
// undefined in C++); >> on a signed value is arithmetic on every target we compile for.
template <class T>
ZFP_INLINE typename T::I wadd(typename T::I a, typename T::I b) {
    return (typename T::I)((typename T::U)a + (typename T::U)b);
}
template <class T>
ZFP_INLINE typename T::I wsub(typename T::I a, typename T::I b) {
    return (typename T::I)((typename T::U)a - (typename T::U)b);
}
template <class T>
ZFP_INLINE typename T::I wshl1(typename T::I a) {
    return (typename T::I)((typename T::U)a << 1);
}

template <class T>
ZFP_INLINE void fwd_lift(typename T::I* p) {
    typename T::I x = p[0], y = p[1], z = p[2], w = p[3];
    x = wadd<T>(x, w); x >>= 1; w = wsub<T>(w, x);
    z = wadd<T>(z, y); z >>= 1; y = wsub<T>(y, z);
    x = wadd<T>(x, z); x >>= 1; z = wsub<T>(z, x);
    w = wadd<T>(w, y); w >>= 1; y = wsub<T>(y, w);
    w = wadd<T>(w, y >> 1); y = wsub<T>(y, w >> 1);
    p[0] = x; p[1] = y; p[2] = z; p[3] = w;
}

template <class T>
ZFP_INLINE void inv_lift(typename T::I* p) {
    typename T::I x = p[0], y = p[1], z = p[2], w = p[3];
    y = wadd<T>(y, w >> 1); w = wsub<T>(w, y >> 1);
    y = wadd<T>(y, w); w = wshl1<T>(w); w = wsub<T>(w, y);
    z = wadd<T>(z, x); x = wshl1<T>(x); x = wsub<T>(x, z);
    y = wadd<T>(y, z); z = wshl1<T>(z); z = wsub<T>(z, y);
    w = wadd<T>(w, x); x = wshl1<T>(x); x = wsub<T>(x, w);
    p[0] = x; p[1] = y; p[2] = z; p[3] = w;
}

// 2^k rounded as C's ldexp(1, k): exact down to the smallest subnormal, zero below.
template <class T>
ZFP_INLINE typename T::F pow2(zi32 k) {
    const zi32 min_normal = 1 - T::EBIAS;
    if (k >= min_normal) return T::from_bits((typename T::U)(k + T::EBIAS) << T::MANT);
    if (k >= min_normal - (zi32)T::MANT)
        return T::from_bits((typename T::U)1 << (zu32)(k - (min_normal - (zi32)T::MANT)));
    return T::from_bits(0);
}

// Forward transform of a block: false for a block of zeros, else the biased exponent and
// the negabinary coefficients (zfp/scalar.rs `forward`).
template <class T>
ZFP_INLINE bool forward(const typename T::F* v, zu32* e, typename T::U* u) {
    typedef typename T::U U;
    U b[4];
    U m = 0;
    for (int i = 0; i < 4; i++) {
        b[i] = T::bits(v[i]);
        U a = b[i] & T::ABS;
        m = a > m ? a : m;
    }
    if (m >= T::INF) {
        // NaN as +0, +-inf as +-MAX.
        m = 0;
        for (int i = 0; i < 4; i++) {
            U a = b[i] & T::ABS;
            if (a > T::INF) b[i] = 0;
            else if (a == T::INF) b[i] = (b[i] & ~T::ABS) | T::MAXF;
            a = b[i] & T::ABS;
            m = a > m ? a : m;
        }
    }
    if (m == 0) return false;
    zi32 ef = (zi32)(m >> T::MANT);
    if (ef < T::EF_MIN) ef = T::EF_MIN;
    const zi32 emax = ef - (T::EBIAS - 1);
    const typename T::F s = T::from_bits((U)(T::EBIAS + (zi32)(T::PREC - 2) - emax) << T::MANT);
    typename T::I q[4];
    for (int i = 0; i < 4; i++) q[i] = (typename T::I)(T::from_bits(b[i]) * s);
    fwd_lift<T>(q);
    for (int i = 0; i < 4; i++) u[i] = ((U)q[i] + T::NB) ^ T::NB;
    *e = (zu32)(emax + T::EBIAS);
    return true;
}

template <class T>
ZFP_INLINE void inverse(zu32 e, const typename T::U* u, typename T::F* out) {
    const zi32 emax = (zi32)e - T::EBIAS;
    const typename T::F s = pow2<T>(emax - (zi32)(T::PREC - 2));
    typename T::I q[4];
    for (int i = 0; i < 4; i++) q[i] = (typename T::I)((u[i] ^ T::NB) - T::NB);
    inv_lift<T>(q);
    for (int i = 0; i < 4; i++) out[i] = (typename T::F)q[i] * s;
}

// Lowest decoded bit plane for biased exponent e in blocks of `dims` axes (maxprec of
// zfp's `precision`).
template <class T>
ZFP_INLINE zu32 kmin(zu32 e, zu32 dims) {
    zi32 maxprec = (zi32)e - T::EBIAS + 1074 + 2 * ((zi32)dims + 1);
    maxprec = maxprec < 0 ? 0 : (maxprec > 64 ? 64 : maxprec);
    zu32 p = (zu32)maxprec < T::PREC ? (zu32)maxprec : T::PREC;
    return T::PREC - p;
}

// --- the bit stream (zfp/bits.rs, zfp/reference.rs) --------------------------------------------------------

ZFP_INLINE zu64 zmask(zu32 n) { return n >= 64 ? ~0ull : ((1ull << n) - 1); }

struct ZfpWriter {
    zu64* out;
    zu64 word;  // next word to store
    zu64 acc;   // pending bits, the first in bit 0
    zu32 fill;  // pending bit count, < 64
};

ZFP_INLINE void put(ZfpWriter& w, zu64 v, zu32 n) {
    if (n == 0) return;
    w.acc |= v << w.fill;
    const zu32 f = w.fill + n;
    if (f >= 64) {
        w.out[w.word++] = w.acc;
        const zu32 rem = f - 64;
        w.acc = rem == 0 ? 0 : v >> (n - rem);
        w.fill = rem;
    } else {
        w.fill = f;
    }
}

ZFP_INLINE void put_zeros(ZfpWriter& w, zu32 n) {
    while (n > 0) {
        const zu32 k = n < 64 ? n : 64;
        put(w, 0, k);
        n -= k;
    }
}

// Sequential reader: the next `avail` bits of the stream in `buf` (the next one in bit 0),
// whole words loaded only when a read needs them, so nothing past the block is touched.
struct ZfpReader {
    const zu64* in;
    zu64 next;   // index of the next word to load
    zu64 buf;
    zu32 avail;  // 0..=64; the bits of buf above them are zero
};

ZFP_INLINE void reader_at(ZfpReader& r, const zu64* in, zu64 pos) {
    r.in = in;
    r.next = (pos >> 6) + 1;
    const zu32 sh = (zu32)(pos & 63);
    r.buf = in[pos >> 6] >> sh;
    r.avail = 64 - sh;
}

// The next n <= 32 bits without taking them; they must lie inside the block (the next
// word is loaded only when needed, so nothing past the block is touched).
ZFP_INLINE zu32 peek(const ZfpReader& r, zu32 n) {
    if (n <= r.avail) return (zu32)(r.buf & zmask(n));
    return (zu32)((r.buf | (r.in[r.next] << r.avail)) & zmask(n));
}

// n <= 32 bits.
ZFP_INLINE zu64 get(ZfpReader& r, zu32 n) {
    if (n <= r.avail) {
        const zu64 v = r.buf & zmask(n);
        r.buf = n == 64 ? 0 : r.buf >> n;
        r.avail -= n;
        return v;
    }
    const zu64 w = r.in[r.next++];
    const zu64 v = (r.buf | (w << r.avail)) & zmask(n);
    const zu32 used = n - r.avail;
    r.buf = w >> used;
    r.avail = 64 - used;
    return v;
}

// --- the bit planes of a 1-D block (zfp/reference.rs: encode_few_ints / decode_few_ints) --
// The same bits as zfp's loops, which code one bit at a time, arranged for a GPU thread:
// coefficients in the type's own word (32-bit arithmetic for float32), the leading empty
// planes as one run of zeros, each plane's code computed whole (one write per plane),
// runs of quiet planes (nothing new becomes significant: n verbatim bits and a 0 each) up
// to 32 bits per write, and, once all four coefficients are significant, the remaining
// planes (their 4 bits verbatim, coefficient 0 first) eight at a time by bit reversal and
// spreading (the decoder: quiet runs found by their group bits among the next 32, and the
// all-significant planes eight at a time). Every lane of a warp then runs the same
// instructions per plane instead of diverging bit by bit.

ZFP_INLINE zu32 zclz(zu32 v) { return (zu32)__clz((int)v); }          // 32 for 0
ZFP_INLINE zu32 zclz(zu64 v) { return (zu32)__clzll((long long)v); }  // 64 for 0

// Bit m of the 8 low bits of v to bit 4m, and back.
ZFP_INLINE zu32 spread4(zu32 v) {
    v &= 0xffu;
    v = (v | (v << 12)) & 0x000f000fu;
    v = (v | (v << 6)) & 0x03030303u;
    return (v | (v << 3)) & 0x11111111u;
}
ZFP_INLINE zu32 gather4(zu32 v) {
    v &= 0x11111111u;
    v = (v | (v >> 3)) & 0x03030303u;
    v = (v | (v >> 6)) & 0x000f000fu;
    return (v | (v >> 12)) & 0xffu;
}

// x / (n + 1) for n in 0..3 and x <= 32, the length of a quiet plane's code being n + 1,
// without a division instruction (x * 43 >> 7 is x / 3 there).
ZFP_INLINE zu32 per_quiet_plane(zu32 x, zu32 n) {
    return n == 0 ? x : (n == 1 ? x >> 1 : (n == 2 ? (x * 43) >> 7 : x >> 2));
}

// Plane k: bit i is bit k of coefficient i.
template <class U>
ZFP_INLINE zu32 plane_bits(const U* u, zu32 k) {
    return (zu32)((u[0] >> k) & 1) | ((zu32)((u[1] >> k) & 1) << 1) | ((zu32)((u[2] >> k) & 1) << 2) |
           ((zu32)((u[3] >> k) & 1) << 3);
}

// The code of plane x when n < 4 coefficients are significant, as encode_few_ints writes
// it without a budget: the n known bits verbatim, then group tests. A group starts at
// position n and after each set bit found; it codes as a 1 ("a bit is set") followed by
// its bits up to the set one, except that position 3 is implied and not sent; a final
// 0 says the positions after the last set bit are empty (absent when that bit is 3).
// *len gets the code's length (at most 7), *n_after the significant count after it.
ZFP_INLINE zu32 plane_code(zu32 x, zu32 n, zu32* len, zu32* n_after) {
    zu32 code = x & ((1u << n) - 1);
    if ((x >> n) == 0) {
        *len = n + 1;
        *n_after = n;
        return code;
    }
    const zu32 last = 31 - zclz(x);  // the highest set bit, >= n here
    zu32 l = n;
#pragma unroll
    for (zu32 p = 0; p < 4; p++) {
        if (p >= n && p <= last) {
            if (p == n || (p > 0 && ((x >> (p - 1)) & 1))) code |= 1u << l++;
            if (p < 3) code |= ((x >> p) & 1) << l++;
        }
    }
    *len = l + (last < 3 ? 1 : 0);
    *n_after = last + 1;
    return code;
}

// Code planes prec-1 down to 0 of u into exactly `bits` bits (zero padded). prec is U's
// width (32 for float32, 64 for float64): the planes above u's highest set bit are counted
// from it.
template <class U>
ZFP_INLINE void encode_ints(ZfpWriter& w, const U* u, zu32 prec, zu32 bits) {
    zu32 k = (zu32)(8 * sizeof(U)) - zclz(u[0] | u[1] | u[2] | u[3]);
    // The planes above the highest set bit code as one 0 each (nothing is significant).
    const zu32 empty = prec - k < bits ? prec - k : bits;
    put_zeros(w, empty);
    bits -= empty;
    zu32 n = 0;
    // Planes above the highest set bit of the coefficients not yet significant are quiet:
    // n verbatim bits and a 0 each (smooth data has many, with n = 1).
    zu32 quiet_below = k;
    while (bits > 0 && k > 0 && n < 4) {
        if (k > quiet_below) {
            // As many quiet planes as one 32-bit write holds.
            const zu32 step = n + 1;
            const zu32 most = per_quiet_plane(32, n);
            const zu32 c = k - quiet_below < most ? k - quiet_below : most;
            zu32 code = 0;
            for (zu32 j = 0; j < c; j++) {
                const zu32 p = k - 1 - j;
                zu32 x = (zu32)(u[0] >> p) & 1;
                if (n > 1) x |= ((zu32)(u[1] >> p) & 1) << 1;
                if (n > 2) x |= ((zu32)(u[2] >> p) & 1) << 2;
                code |= x << (step * j);
            }
            const zu32 len = step * c < bits ? step * c : bits;
            put(w, code & zmask(len), len);
            bits -= len;
            k -= c;
            continue;
        }
        k--;
        zu32 len, n_after;
        const zu32 code = plane_code(plane_bits(u, k), n, &len, &n_after);
        // The budget may end inside the code: zfp writes exactly its first bits.
        if (len > bits) len = bits;
        put(w, code & zmask(len), len);
        bits -= len;
        if (n_after != n && n_after < 4) {
            const U rest = n_after == 1 ? u[1] | u[2] | u[3] : n_after == 2 ? u[2] | u[3] : u[3];
            quiet_below = (zu32)(8 * sizeof(U)) - zclz(rest);
        }
        n = n_after;
    }
    while (bits > 0 && k > 0) {
        // Planes k-1 .. k-c, plane k-1 in the low nibble.
        const zu32 c = k < 8 ? k : 8;
        k -= c;
        zu32 chunk = 0;
        for (int i = 0; i < 4; i++) chunk |= spread4(__brev((zu32)(u[i] >> k) & ((1u << c) - 1)) >> (32 - c)) << i;
        const zu32 len = 4 * c < bits ? 4 * c : bits;
        put(w, chunk & zmask(len), len);
        bits -= len;
    }
    put_zeros(w, bits);
}

// Decode planes prec-1 down to kmin from at most `bits` bits.
template <class U>
ZFP_INLINE void decode_ints(ZfpReader& r, zu32 prec, zu32 kmin, zu32 bits, U* u) {
    for (int i = 0; i < 4; i++) u[i] = 0;
    zu32 n = 0;
    zu32 k = prec;
    // Until all four are significant, bit by bit as decode_few_ints reads (a plane cut
    // short by the budget still makes position n significant, so no whole-code shortcut),
    // except runs of quiet planes: whole groups of n verbatim bits and a 0, found among the
    // next 32 bits by their group bits (at n, n + step, ...); with n = 0 these are the
    // leading empty planes, a 0 each.
    while (bits > 0 && k > kmin && n < 4) {
        const zu32 step = n + 1;
        const zu32 len = bits < 32 ? bits : 32;
        const zu32 p = peek(r, len);
        const zu32 groups = n == 0 ? ~0u : (n == 1 ? 0xaaaaaaaau : (n == 2 ? 0x24924924u : 0x88888888u));
        // Whole groups in len bits, and those before the first set group bit.
        const zu32 first = (zu32)__ffs((int)(p & groups));
        zu32 runs = per_quiet_plane(first == 0 ? len : first - 1 - n, n);
        if (runs > k - kmin) runs = k - kmin;
        if (runs > 0) {
            for (zu32 j = 0; j < runs && n > 0; j++) {
                const zu32 plane = k - 1 - j;
                const zu32 at = step * j;
                u[0] |= (U)((p >> at) & 1) << plane;
                if (n > 1) u[1] |= (U)((p >> (at + 1)) & 1) << plane;
                if (n > 2) u[2] |= (U)((p >> (at + 2)) & 1) << plane;
            }
            get(r, step * runs);
            bits -= step * runs;
            k -= runs;
            continue;
        }
        k--;
        const zu32 m = n < bits ? n : bits;
        bits -= m;
        zu32 x = (zu32)get(r, m);
        while (n < 4 && bits > 0) {
            bits--;
            if (!get(r, 1)) break;
            while (n < 3 && bits > 0) {
                bits--;
                if (get(r, 1)) break;
                n++;
            }
            x += 1u << n;
            n++;
        }
        for (int i = 0; i < 4; i++) u[i] |= (U)((x >> i) & 1) << k;
    }
    while (bits > 0 && k > kmin) {
        const zu32 c = k - kmin < 8 ? k - kmin : 8;
        const zu32 len = 4 * c < bits ? 4 * c : bits;
        const zu32 chunk = (zu32)get(r, len);
        bits -= len;
        k -= c;
        for (int i = 0; i < 4; i++) u[i] |= (U)(__brev(gather4(chunk >> i)) >> (32 - c)) << k;
    }
}

// --- blocks and kernels -------------------------------------------------------------------

// Blocks per encoder thread: the smallest group of 4^dims * rate-bit blocks filling whole
// 64-bit words (16 / gcd(rate, 16) in 1-D, 4 / gcd(rate, 4) in 2-D, 1 beyond).
ZFP_INLINE zu32 group_blocks(zu32 dims, zu32 rate) {
    const zu64 bits = ((zu64)1 << (2 * dims)) * rate;
    zu32 g = 1;
    while ((g * bits) % 64 != 0) g *= 2;
    return g;
}

// Values of block b, the last one padded as zfp's pad_block.
template <class T>
ZFP_INLINE void load_block(const typename T::F* src, zu64 n, zu64 b, typename T::F* v) {
    const zu64 at = 4 * b;
    const zu64 left = n - at;
    if (left >= 4) {
        for (int i = 0; i < 4; i++) v[i] = src[at + i];
    } else {
        v[0] = src[at];
        v[1] = left > 1 ? src[at + 1] : v[0];
        v[2] = left > 2 ? src[at + 2] : v[1];
        v[3] = v[0];
    }
}

template <class T>
ZFP_INLINE void encode_group(const typename T::F* src, zu64 n, zu32 rate, zu64* stream, zu64 t) {
    const zu64 nb = (n + 3) / 4;
    const zu32 maxbits = 4 * rate;
    const zu64 g = group_blocks(1, rate);
    const zu64 b0 = t * g;
    if (b0 >= nb) return;
    const zu64 b1 = b0 + g < nb ? b0 + g : nb;
    ZfpWriter w;
    w.out = stream;
    w.word = b0 * maxbits / 64;
    w.acc = 0;
    w.fill = 0;
    for (zu64 b = b0; b < b1; b++) {
        typename T::F v[4];
        load_block<T>(src, n, b, v);
        zu32 e;
        typename T::U u[4];
        if (forward<T>(v, &e, u)) {
            put(w, ((zu64)e << 1) | 1, T::EBITS + 1);
            encode_ints(w, u, T::PREC, maxbits - 1 - T::EBITS);
        } else {
            put_zeros(w, maxbits);
        }
    }
    // Only the last group ends inside a word: the stream's zero-padded last word.
    if (w.fill > 0) w.out[w.word] = w.acc;
}

template <class T>
ZFP_INLINE void decode_block(const zu64* stream, zu64 n, zu32 rate, typename T::F* dst, zu64 b) {
    const zu64 nb = (n + 3) / 4;
    if (b >= nb) return;
    const zu32 maxbits = 4 * rate;
    ZfpReader r;
    reader_at(r, stream, b * maxbits);
    typename T::F v[4];
    const zu64 head = get(r, 1 + T::EBITS);
    if (head & 1) {
        const zu32 e = (zu32)(head >> 1);
        typename T::U u[4];
        decode_ints(r, T::PREC, kmin<T>(e, 1), maxbits - 1 - T::EBITS, u);
        inverse<T>(e, u, v);
    } else {
        for (int i = 0; i < 4; i++) v[i] = 0;
    }
    const zu64 at = 4 * b;
    const zu64 left = n - at;
    for (zu64 i = 0; i < 4 && i < left; i++) dst[at + i] = v[i];
}


// --- N-D blocks (zfp/nd.rs, zfp/perm.rs, zfp/reference.rs) ------------------------------
// zfp's sequency orders: position i of the coded sequence holds block offset PERM[i].
ZFP_TABLE unsigned char ZFP_PERM2[16] = {
    0, 1, 4, 5, 2, 8, 6, 9, 3, 12, 10, 7, 13, 11, 14, 15,
};
ZFP_TABLE unsigned char ZFP_PERM3[64] = {
    0, 1, 4, 16, 20, 17, 5, 2, 8, 32, 21, 6, 18, 24, 9, 33,
    36, 3, 12, 48, 22, 25, 37, 40, 34, 10, 7, 19, 28, 13, 49, 52,
    41, 38, 26, 23, 29, 53, 11, 35, 44, 14, 50, 56, 42, 27, 39, 45,
    30, 54, 57, 60, 51, 15, 43, 46, 58, 61, 55, 31, 62, 59, 47, 63,
};
ZFP_TABLE unsigned char ZFP_PERM4[256] = {
    0, 1, 4, 16, 64, 5, 80, 17, 68, 65, 20, 2, 8, 32, 128, 84,
    81, 69, 21, 6, 18, 66, 24, 72, 9, 96, 33, 36, 129, 132, 144, 3,
    12, 48, 192, 85, 82, 70, 22, 73, 25, 88, 37, 100, 97, 148, 145, 133,
    10, 160, 34, 136, 130, 40, 7, 19, 67, 28, 76, 13, 112, 49, 52, 193,
    196, 208, 86, 89, 101, 149, 161, 137, 41, 134, 38, 164, 26, 152, 146, 104,
    98, 74, 83, 71, 23, 77, 29, 92, 53, 116, 113, 212, 209, 197, 11, 35,
    131, 44, 140, 14, 176, 50, 56, 194, 200, 224, 90, 165, 102, 153, 150, 105,
    168, 162, 138, 42, 87, 93, 117, 213, 27, 75, 99, 39, 135, 147, 108, 45,
    141, 156, 30, 78, 177, 180, 54, 114, 120, 57, 198, 210, 216, 201, 225, 228,
    15, 240, 51, 204, 195, 60, 169, 166, 154, 106, 91, 103, 151, 109, 157, 94,
    181, 118, 121, 214, 217, 229, 163, 139, 43, 142, 46, 172, 58, 184, 178, 232,
    226, 202, 241, 205, 61, 199, 55, 244, 31, 220, 211, 124, 115, 79, 170, 167,
    155, 107, 158, 110, 173, 122, 185, 182, 233, 230, 218, 95, 245, 119, 221, 215,
    125, 242, 206, 62, 203, 59, 248, 47, 236, 227, 188, 179, 143, 171, 174, 186,
    234, 246, 222, 126, 219, 123, 249, 111, 237, 231, 189, 183, 159, 252, 243, 207,
    63, 175, 250, 187, 238, 235, 190, 253, 247, 223, 127, 254, 251, 239, 191, 255,
};

template <zu32 D>
ZFP_INLINE const unsigned char* perm_nd() {
    return D == 2 ? ZFP_PERM2 : (D == 3 ? ZFP_PERM3 : ZFP_PERM4);
}

struct ZfpExt {
    zu64 n[4];  // nx, ny, nz, nw
    zu32 dims;
};

// Coordinates of the first value of linear block b (x fastest), and the values of the
// block inside the array along each axis (1 for absent axes).
ZFP_INLINE void block_at(const ZfpExt& e, zu64 b, zu64* at, zu32* cnt) {
    for (zu32 a = 0; a < 4; a++) {
        const zu64 nb = a < e.dims ? (e.n[a] + 3) / 4 : 1;
        at[a] = 4 * (b % nb);
        b /= nb;
        const zu64 left = e.n[a] - at[a];
        cnt[a] = a < e.dims ? (zu32)(left < 4 ? left : 4) : 1;
    }
}

ZFP_INLINE zu64 block_count(const ZfpExt& e) {
    zu64 c = 1;
    for (zu32 a = 0; a < e.dims; a++) c *= (e.n[a] + 3) / 4;
    return c;
}

// The N-D coder is compiled once per axis count D (2, 3, 4): a block's 4^D values, its
// integers and its coefficients live in arrays of exactly that size (thread-local memory
// on a GPU: a 2-D float32 block touches 192 bytes, a 4-D float64 one 6 KiB; a kernel
// serves every D, so it reserves the 4-D frame), and the coefficients are in the value
// type's word width. Loops over a block stay loops
// (`#pragma unroll 1`): unrolled, the compiler moves the arrays into registers, and the
// kernels, which serve all three D, reach 255 registers and spill.

// Gather a block, partial blocks padded with zfp's pad_block along x, then y, z, w.
template <class T, zu32 D>
ZFP_INLINE void gather_nd(const typename T::F* src, const ZfpExt& e, zu64 b, typename T::F* q) {
    constexpr zu32 S = 1u << (2 * D);
    zu64 at[4];
    zu32 cnt[4];
    block_at(e, b, at, cnt);
    const zu64 sy = e.n[0], sz = sy * e.n[1], sw = sz * e.n[2];
    const zu64 origin = at[0] + at[1] * sy + at[2] * sz + at[3] * sw;
    for (zu32 w = 0; w < cnt[3]; w++)
        for (zu32 z = 0; z < cnt[2]; z++)
            for (zu32 y = 0; y < cnt[1]; y++)
                for (zu32 x = 0; x < cnt[0]; x++)
                    q[x + 4 * y + 16 * z + 64 * w] = src[origin + x + y * sy + z * sz + w * sw];
#pragma unroll 1
    for (zu32 a = 0; a < D; a++) {
        const zu32 n = cnt[a];
        if (n == 4) continue;
        const zu32 s = 1u << (2 * a);
#pragma unroll 1
        for (zu32 base = 0; base < S; base++) {
            if ((base >> (2 * a)) % 4 != 0) continue;
            if (n <= 1) q[base + s] = q[base];
            if (n <= 2) q[base + 2 * s] = q[base + s];
            q[base + 3 * s] = q[base];
        }
    }
}

// Lifting of every line of 4 along each axis: x first (forward) or the last axis first.
template <class T, zu32 D>
ZFP_INLINE void xform_nd(typename T::I* q, bool fwd) {
    constexpr zu32 S = 1u << (2 * D);
#pragma unroll 1
    for (zu32 i = 0; i < D; i++) {
        const zu32 a = fwd ? i : D - 1 - i;
        const zu32 s = 1u << (2 * a);
#pragma unroll 1
        for (zu32 base = 0; base < S; base++) {
            if ((base >> (2 * a)) % 4 != 0) continue;
            typename T::I p[4] = {q[base], q[base + s], q[base + 2 * s], q[base + 3 * s]};
            if (fwd) fwd_lift<T>(p);
            else inv_lift<T>(p);
            q[base] = p[0];
            q[base + s] = p[1];
            q[base + 2 * s] = p[2];
            q[base + 3 * s] = p[3];
        }
    }
}

// Forward transform of a block of 4^D values (zfp/scalar.rs `forward_nd`); `u` gets the
// negabinary coefficients in sequency order.
template <class T, zu32 D>
ZFP_INLINE bool forward_nd(typename T::F* v, zu32* e, typename T::U* u) {
    typedef typename T::U U;
    constexpr zu32 S = 1u << (2 * D);
    U m = 0;
#pragma unroll 1
    for (zu32 i = 0; i < S; i++) {
        const U a = T::bits(v[i]) & T::ABS;
        m = a > m ? a : m;
    }
    if (m >= T::INF) {
        m = 0;
#pragma unroll 1
        for (zu32 i = 0; i < S; i++) {
            U b = T::bits(v[i]);
            const U a = b & T::ABS;
            if (a > T::INF) b = 0;
            else if (a == T::INF) b = (b & ~T::ABS) | T::MAXF;
            v[i] = T::from_bits(b);
            const U c = b & T::ABS;
            m = c > m ? c : m;
        }
    }
    if (m == 0) return false;
    zi32 ef = (zi32)(m >> T::MANT);
    if (ef < T::EF_MIN) ef = T::EF_MIN;
    const zi32 emax = ef - (T::EBIAS - 1);
    const typename T::F s = T::from_bits((U)(T::EBIAS + (zi32)(T::PREC - 2) - emax) << T::MANT);
    typename T::I q[S];
#pragma unroll 1
    for (zu32 i = 0; i < S; i++) q[i] = (typename T::I)(v[i] * s);
    xform_nd<T, D>(q, true);
    const unsigned char* perm = perm_nd<D>();
#pragma unroll 1
    for (zu32 i = 0; i < S; i++) u[i] = ((U)q[perm[i]] + T::NB) ^ T::NB;
    *e = (zu32)(emax + T::EBIAS);
    return true;
}

template <class T, zu32 D>
ZFP_INLINE void inverse_nd(zu32 e, const typename T::U* u, typename T::F* out) {
    constexpr zu32 S = 1u << (2 * D);
    const typename T::F s = pow2<T>((zi32)e - T::EBIAS - (zi32)(T::PREC - 2));
    typename T::I q[S];
    const unsigned char* perm = perm_nd<D>();
#pragma unroll 1
    for (zu32 i = 0; i < S; i++) q[perm[i]] = (typename T::I)((u[i] ^ T::NB) - T::NB);
    xform_nd<T, D>(q, false);
#pragma unroll 1
    for (zu32 i = 0; i < S; i++) out[i] = (typename T::F)q[i] * s;
}

// --- the bit planes of an N-D block (zfp's encode_many_ints / decode_many_ints) ---------
// A plane is held as words (coefficient i at bit i % 64 of word i / 64), so that the n
// verbatim bits are word writes, a group test is a test of the bits from n up, and the
// unary position of the next significant coefficient is a count of trailing zeros,
// instead of zfp's one bit at a time. The planes come from the coefficients, and go back,
// by 32 x 32 bit transposes in registers.

ZFP_INLINE zu32 zctz(zu64 v) { return (zu32)__ffsll((long long)v) - 1; }  // v != 0

// One step of a 32 x 32 bit transpose: rows k and k + J exchange their off-diagonal J x J
// blocks (m: the columns of the lower block). Bounds are constants, so the compiler
// unrolls the loops and keeps the 32 rows in registers.
template <zu32 J>
ZFP_INLINE void transpose_step(zu32* a, zu32 m) {
#pragma unroll
    for (zu32 b = 0; b < 32; b += 2 * J) {
#pragma unroll
        for (zu32 r = 0; r < J; r++) {
            const zu32 t = ((a[b + r] >> J) ^ a[b + r + J]) & m;
            a[b + r] ^= t << J;
            a[b + r + J] ^= t;
        }
    }
}

// Transpose a 32 x 32 bit matrix in place: bit j of a[i] becomes bit i of a[j].
ZFP_INLINE void transpose32(zu32* a) {
    transpose_step<16>(a, 0x0000ffffu);
    transpose_step<8>(a, 0x00ff00ffu);
    transpose_step<4>(a, 0x0f0f0f0fu);
    transpose_step<2>(a, 0x33333333u);
    transpose_step<1>(a, 0x55555555u);
}

// The planes of S coefficients (planes[k * W + j]: bit i is bit k of coefficient 64 j + i),
// or back (to_planes false: the coefficients from the planes, or'ed into u), 32
// coefficients by 32 bits at a time through transpose32.
template <class U, zu32 S>
ZFP_INLINE void planes_of(U* u, zu64* planes, bool to_planes) {
    constexpr zu32 W = (S + 63) / 64;
    constexpr zu32 ROWS = S < 32 ? S : 32;
#pragma unroll 1
    for (zu32 g = 0; g < (S + 31) / 32; g++) {
#pragma unroll 1
        for (zu32 h = 0; h < 8 * sizeof(U); h += 32) {
            zu32 t[32];
            const zu32 shift = 32 * (g % 2);
#pragma unroll
            for (zu32 i = 0; i < 32; i++) {
                if (to_planes) t[i] = i < ROWS ? (zu32)(u[32 * g + i] >> h) : 0;
                else t[i] = (zu32)(planes[(h + i) * W + g / 2] >> shift);
            }
            transpose32(t);
#pragma unroll
            for (zu32 i = 0; i < 32; i++) {
                if (to_planes) planes[(h + i) * W + g / 2] |= (zu64)t[i] << shift;
                else if (i < ROWS) u[32 * g + i] |= (U)t[i] << h;
            }
        }
    }
}

// The offset from n of the lowest set bit at or above n of the plane, or S - n if none.
template <zu32 S>
ZFP_INLINE zu32 next_set(const zu64* p, zu32 n) {
    constexpr zu32 W = (S + 63) / 64;
    for (zu32 j = n / 64; j < W; j++) {
        zu64 x = p[j];
        if (j == n / 64) x &= ~zmask(n % 64);
        if (x != 0) return 64 * j + zctz(x) - n;
    }
    return S - n;
}

// Code planes prec-1 down to 0 of S coefficients into exactly `bits` bits (zero padded);
// prec is U's width.
template <class U, zu32 S>
ZFP_INLINE void encode_many_ints(ZfpWriter& w, const U* u, zu32 prec, zu32 bits) {
    constexpr zu32 W = (S + 63) / 64;
    U all = 0;
#pragma unroll 1
    for (zu32 i = 0; i < S; i++) all |= u[i];
    zu32 k = (zu32)(8 * sizeof(U)) - zclz(all);
    // The planes above the highest set bit code as one 0 each (nothing is significant).
    const zu32 empty = prec - k < bits ? prec - k : bits;
    put_zeros(w, empty);
    bits -= empty;
    zu64 planes[8 * sizeof(U) * W];
#pragma unroll 1
    for (zu32 i = 0; i < 8 * sizeof(U) * W; i++) planes[i] = 0;
    planes_of<U, S>(const_cast<U*>(u), planes, true);  // to planes: u is only read
    zu32 n = 0;
    while (bits > 0 && k > 0) {
        k--;
        const zu64* p = planes + k * W;
        // The n coefficients already significant: their bits verbatim.
        const zu32 m = n < bits ? n : bits;
        for (zu32 j = 0; 64 * j < m; j++) {
            const zu32 len = m - 64 * j < 64 ? m - 64 * j : 64;
            put(w, p[j] & zmask(len), len);
        }
        bits -= m;
        // Group tests: is a bit set from n up; if so, its position in unary (zeros, then a
        // 1 unless it is the last coefficient's), stopping where the budget ends.
        while (bits > 0 && n < S) {
            const zu32 z = next_set<S>(p, n);
            bits--;
            if (z == S - n) {
                put(w, 0, 1);
                break;
            }
            put(w, 1, 1);
            const zu32 zeros = z < S - 1 - n ? z : S - 1 - n;
            if (bits <= zeros) {
                put_zeros(w, bits);
                bits = 0;
                break;
            }
            put_zeros(w, zeros);
            bits -= zeros;
            n += zeros;
            if (n < S - 1) {
                put(w, 1, 1);
                bits--;
            }
            n++;
        }
    }
    put_zeros(w, bits);
}

// Decode planes prec-1 down to kmin of S coefficients from at most `bits` bits, reading
// as decode_many_ints does (a run cut short by the budget still makes position n
// significant).
template <class U, zu32 S>
ZFP_INLINE void decode_many_ints(ZfpReader& r, zu32 prec, zu32 kmin, zu32 bits, U* u) {
    constexpr zu32 W = (S + 63) / 64;
    zu64 planes[8 * sizeof(U) * W];
#pragma unroll 1
    for (zu32 i = 0; i < 8 * sizeof(U) * W; i++) planes[i] = 0;
    zu32 n = 0;
    zu32 k = prec;
    while (bits > 0 && k > kmin) {
        k--;
        zu64* p = planes + k * W;
        const zu32 m = n < bits ? n : bits;
        bits -= m;
#pragma unroll 1
        for (zu32 i = 0; i < m; i += 32) {
            const zu32 len = m - i < 32 ? m - i : 32;
            p[i / 64] |= get(r, len) << (i % 64);
        }
        while (bits > 0 && n < S) {
            bits--;
            if (!get(r, 1)) break;
            // Zeros until a 1, the last coefficient (implied) or the end of the budget,
            // up to 32 bits at a time.
            for (;;) {
                const zu32 most = S - 1 - n;
                zu32 t = bits < most ? bits : most;
                if (t == 0) break;
                if (t > 32) t = 32;
                const zu32 look = peek(r, t);
                if (look != 0) {
                    const zu32 z = (zu32)__ffs((int)look) - 1;
                    get(r, z + 1);
                    bits -= z + 1;
                    n += z;
                    break;
                }
                get(r, t);
                bits -= t;
                n += t;
            }
            p[n / 64] |= 1ull << (n % 64);
            n++;
        }
    }
#pragma unroll 1
    for (zu32 i = 0; i < S; i++) u[i] = 0;
    planes_of<U, S>(u, planes, false);
}

template <class T, zu32 D>
ZFP_INLINE void encode_group_nd(const typename T::F* src, const ZfpExt& e, zu32 rate, zu64* stream, zu64 t) {
    constexpr zu32 S = 1u << (2 * D);
    const zu64 nb = block_count(e);
    const zu32 maxbits = S * rate;
    const zu64 g = group_blocks(D, rate);
    const zu64 b0 = t * g;
    if (b0 >= nb) return;
    const zu64 b1 = b0 + g < nb ? b0 + g : nb;
    ZfpWriter w;
    w.out = stream;
    w.word = b0 * maxbits / 64;
    w.acc = 0;
    w.fill = 0;
    for (zu64 b = b0; b < b1; b++) {
        typename T::F v[S];
        gather_nd<T, D>(src, e, b, v);
        zu32 ex;
        typename T::U u[S];
        if (forward_nd<T, D>(v, &ex, u)) {
            put(w, ((zu64)ex << 1) | 1, T::EBITS + 1);
            encode_many_ints<typename T::U, S>(w, u, T::PREC, maxbits - 1 - T::EBITS);
        } else {
            put_zeros(w, maxbits);
        }
    }
    if (w.fill > 0) w.out[w.word] = w.acc;
}

template <class T, zu32 D>
ZFP_INLINE void decode_block_nd(const zu64* stream, const ZfpExt& e, zu32 rate, typename T::F* dst, zu64 b) {
    constexpr zu32 S = 1u << (2 * D);
    if (b >= block_count(e)) return;
    const zu32 maxbits = S * rate;
    ZfpReader r;
    reader_at(r, stream, b * maxbits);
    typename T::F v[S];
    const zu64 head = get(r, 1 + T::EBITS);
    if (head & 1) {
        const zu32 ex = (zu32)(head >> 1);
        typename T::U u[S];
        decode_many_ints<typename T::U, S>(r, T::PREC, kmin<T>(ex, D), maxbits - 1 - T::EBITS, u);
        inverse_nd<T, D>(ex, u, v);
    } else {
#pragma unroll 1
        for (zu32 i = 0; i < S; i++) v[i] = 0;
    }
    zu64 at[4];
    zu32 cnt[4];
    block_at(e, b, at, cnt);
    const zu64 sy = e.n[0], sz = sy * e.n[1], sw = sz * e.n[2];
    const zu64 origin = at[0] + at[1] * sy + at[2] * sz + at[3] * sw;
    for (zu32 w = 0; w < cnt[3]; w++)
        for (zu32 z = 0; z < cnt[2]; z++)
            for (zu32 y = 0; y < cnt[1]; y++)
                for (zu32 x = 0; x < cnt[0]; x++)
                    dst[origin + x + y * sy + z * sz + w * sw] = v[x + 4 * y + 16 * z + 64 * w];
}

// The kernels' dispatch on the axis count (2, 3 or 4, checked by the caller).
template <class T>
ZFP_INLINE void encode_nd(const typename T::F* src, const ZfpExt& e, zu32 rate, zu64* stream, zu64 t) {
    if (e.dims == 2) encode_group_nd<T, 2>(src, e, rate, stream, t);
    else if (e.dims == 3) encode_group_nd<T, 3>(src, e, rate, stream, t);
    else encode_group_nd<T, 4>(src, e, rate, stream, t);
}

template <class T>
ZFP_INLINE void decode_nd(const zu64* stream, const ZfpExt& e, zu32 rate, typename T::F* dst, zu64 b) {
    if (e.dims == 2) decode_block_nd<T, 2>(stream, e, rate, dst, b);
    else if (e.dims == 3) decode_block_nd<T, 3>(stream, e, rate, dst, b);
    else decode_block_nd<T, 4>(stream, e, rate, dst, b);
}

ZFP_INLINE ZfpExt zfp_ext(zu64 nx, zu64 ny, zu64 nz, zu64 nw, zu32 dims) {
    ZfpExt e;
    e.n[0] = nx;
    e.n[1] = ny;
    e.n[2] = nz;
    e.n[3] = nw;
    e.dims = dims;
    return e;
}

#define ZFP_TID ((zu64)blockIdx.x * (zu64)blockDim.x + (zu64)threadIdx.x)

extern "C" __global__ void zfp_encode_f32(const float* src, unsigned long long n, unsigned int rate,
                                          unsigned long long* stream) {
    encode_group<ZfpF32>(src, n, rate, stream, ZFP_TID);
}

extern "C" __global__ void zfp_encode_f64(const double* src, unsigned long long n, unsigned int rate,
                                          unsigned long long* stream) {
    encode_group<ZfpF64>(src, n, rate, stream, ZFP_TID);
}

extern "C" __global__ void zfp_decode_f32(const unsigned long long* stream, unsigned long long n,
                                          unsigned int rate, float* dst) {
    decode_block<ZfpF32>(stream, n, rate, dst, ZFP_TID);
}

extern "C" __global__ void zfp_decode_f64(const unsigned long long* stream, unsigned long long n,
                                          unsigned int rate, double* dst) {
    decode_block<ZfpF64>(stream, n, rate, dst, ZFP_TID);
}

// The N-D coders hold a 32 x 32 bit transpose in registers: at most 128 registers a
// thread (two blocks of 256 threads an SM) without spilling; shmcoll.gpu.zfp launches 256.
#define ZFP_ND_BOUNDS __launch_bounds__(256, 2)
#define ZFP_ND_ARGS unsigned long long nx, unsigned long long ny, unsigned long long nz, \
    unsigned long long nw, unsigned int dims, unsigned int rate
extern "C" __global__ void ZFP_ND_BOUNDS zfp_encode_nd_f32(const float* src, ZFP_ND_ARGS, unsigned long long* stream) {
    encode_nd<ZfpF32>(src, zfp_ext(nx, ny, nz, nw, dims), rate, stream, ZFP_TID);
}
extern "C" __global__ void ZFP_ND_BOUNDS zfp_encode_nd_f64(const double* src, ZFP_ND_ARGS, unsigned long long* stream) {
    encode_nd<ZfpF64>(src, zfp_ext(nx, ny, nz, nw, dims), rate, stream, ZFP_TID);
}
extern "C" __global__ void ZFP_ND_BOUNDS zfp_decode_nd_f32(const unsigned long long* stream, ZFP_ND_ARGS, float* dst) {
    decode_nd<ZfpF32>(stream, zfp_ext(nx, ny, nz, nw, dims), rate, dst, ZFP_TID);
}
extern "C" __global__ void ZFP_ND_BOUNDS zfp_decode_nd_f64(const unsigned long long* stream, ZFP_ND_ARGS, double* dst) {
    decode_nd<ZfpF64>(stream, zfp_ext(nx, ny, nz, nw, dims), rate, dst, ZFP_TID);
}
