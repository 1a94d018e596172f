// mpc: lossless delta / zigzag / bit transposition / zero-word elimination of 4- and 8-byte
// words. A transliteration of rust/shmcoll-codec/src/mpc.rs, whose module documentation
// is the byte-for-byte spec (integer arithmetic only). The host wrapper
// (shmcoll/gpu/mpc.py) writes the header and chunk table and checks a stream's table
// before decoding; these kernels do the chunks.
//
// Launch geometry:
//   mpc_encode{32,64}: one warp per chunk of MPC_CHUNK words: blockDim.x = 32,
//     gridDim.x = number of chunks. Chunk j goes to scratch + j*MPC_CHUNK*W (raw-sized
//     slots), its payload length to lengths[j].
//   mpc_gather: copies every chunk from its slot to its place in the stream:
//     blockDim.x = 128, gridDim.x = number of chunks.
//   mpc_decode{32,64}: one warp per chunk: blockDim.x = 32, gridDim.x = number of chunks;
//     offsets[j] is chunk j's place in the payload; *error is set on an inconsistent bitmap.
// The bit transposition of a group of 8W words (output word j has bit i = bit j of word i,
// the spec's step 3) is done across the warp's lanes with shuffles (transpose_group).

#define MPC_CHUNK 1024
#define FULL 0xffffffffu

typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u32 zigzag(u32 d) { return (d << 1) ^ (u32)((int)d >> 31); }
__device__ __forceinline__ u64 zigzag(u64 d) { return (d << 1) ^ (u64)((long long)d >> 63); }
__device__ __forceinline__ u32 unzigzag(u32 z) { return (z >> 1) ^ (0u - (z & 1u)); }
__device__ __forceinline__ u64 unzigzag(u64 z) { return (z >> 1) ^ (0ull - (z & 1ull)); }

// One step of the transposition below: lanes l and l ^ s exchange the off-diagonal s x s
// blocks; m has the columns whose bit s is clear (0x0000ffff for s = 16 ... 0x55555555).
__device__ __forceinline__ u32 swap_blocks(u32 v, int s, u32 m) {
    const u32 p = __shfl_xor_sync(FULL, v, s);
    return (threadIdx.x & s) ? (v & ~m) | ((p >> s) & m) : (v & m) | ((p & m) << s);
}

// Lane l holds row l of a 32 x 32 bit matrix (bit c is column c); returns row l of its
// transpose (bit i = bit l of lane i's word), which is word l of the group's
// transposition: five shuffles and a few bit operations, where one ballot per output word
// would take 32.
__device__ __forceinline__ u32 transpose_group(u32 v) {
    v = swap_blocks(v, 16, 0x0000ffffu);
    v = swap_blocks(v, 8, 0x00ff00ffu);
    v = swap_blocks(v, 4, 0x0f0f0f0fu);
    v = swap_blocks(v, 2, 0x33333333u);
    return swap_blocks(v, 1, 0x55555555u);
}

// Lane l holds words l and l+32 of a 64-word group; returns those of its transposition:
// the 64 x 64 matrix is four 32 x 32 blocks (words 0-31 / 32-63, bits 0-31 / 32-63), each
// transposed and the two off-diagonal ones exchanged.
__device__ __forceinline__ void transpose_group(u64 z0, u64 z1, u64& t0, u64& t1) {
    t0 = (u64)transpose_group((u32)z0) | ((u64)transpose_group((u32)z1) << 32);
    t1 = (u64)transpose_group((u32)(z0 >> 32)) | ((u64)transpose_group((u32)(z1 >> 32)) << 32);
}

// Steps 1-2 for word i of the chunk at x (chunk-local delta: nothing before the chunk).
template <typename T>
__device__ __forceinline__ T delta_zz(const T* x, int i, int dim) {
    return zigzag((T)(x[i] - (i >= dim ? x[i - dim] : (T)0)));
}

// Steps 1-3 of a whole chunk (m words at x) into t, by the warp.
template <typename T>
__device__ void forward(const T* x, int m, int dim, T* t);

template <>
__device__ void forward<u32>(const u32* x, int m, int dim, u32* t) {
    const int lane = threadIdx.x & 31;
    const int full = m / 32 * 32;
    for (int g = 0; g < full; g += 32) t[g + lane] = transpose_group(delta_zz(x, g + lane, dim));
    for (int i = full + lane; i < m; i += 32) t[i] = delta_zz(x, i, dim);
}

template <>
__device__ void forward<u64>(const u64* x, int m, int dim, u64* t) {
    const int lane = threadIdx.x & 31;
    const int full = m / 64 * 64;
    for (int g = 0; g < full; g += 64) {
        u64 t0 = 0, t1 = 0;
        transpose_group(delta_zz(x, g + lane, dim), delta_zz(x, g + 32 + lane, dim), t0, t1);
        t[g + lane] = t0;
        t[g + 32 + lane] = t1;
    }
    for (int i = full + lane; i < m; i += 32) t[i] = delta_zz(x, i, dim);
}

// The inverse of step 3 in place (the transposition is its own inverse).
__device__ void untranspose(u32* a, int m) {
    const int lane = threadIdx.x & 31;
    for (int g = 0; g + 32 <= m; g += 32) a[g + lane] = transpose_group(a[g + lane]);
}

__device__ void untranspose(u64* a, int m) {
    const int lane = threadIdx.x & 31;
    for (int g = 0; g + 64 <= m; g += 64) {
        u64 t0 = 0, t1 = 0;
        transpose_group(a[g + lane], a[g + 32 + lane], t0, t1);
        a[g + lane] = t0;
        a[g + 32 + lane] = t1;
    }
}

__device__ __forceinline__ int bitmap_bytes(int m, int w) { return ((m + 7) / 8 + w - 1) / w * w; }

template <typename T>
__device__ void encode_chunk(const T* __restrict__ x, u64 n, int dim, unsigned char* __restrict__ scratch,
                             u32* __restrict__ lengths, T* t) {
    const int lane = threadIdx.x & 31;
    const u64 j = blockIdx.x;
    const u64 base = j * MPC_CHUNK;
    const int m = (int)min((u64)MPC_CHUNK, n - base);
    const int W = sizeof(T);
    forward<T>(x + base, m, dim, t);
    __syncwarp();
    int nz = 0;
    for (int i = lane; i < m; i += 32) nz += t[i] != 0;
    nz = __reduce_add_sync(FULL, nz);
    const int bm = bitmap_bytes(m, W);
    const u32 packed = (u32)(bm + nz * W);
    unsigned char* dst = scratch + base * W;
    if (packed < (u32)(m * W)) {
        u32* bitmap = reinterpret_cast<u32*>(dst);
        T* words = reinterpret_cast<T*>(dst + bm);
        int pos = 0;
        const int steps = (m + 31) / 32;
        for (int s = 0; s < steps; s++) {
            const int i = 32 * s + lane;
            const bool flag = i < m && t[i] != 0;
            const u32 b = __ballot_sync(FULL, flag);
            if (lane == 0) bitmap[s] = b;  // bit k%8 of byte k/8: little-endian u32s
            if (flag) words[pos + __popc(b & ((1u << lane) - 1u))] = t[i];
            pos += __popc(b);
        }
        if (lane == 0 && bm > 4 * steps) bitmap[steps] = 0;  // W=8: pad to a multiple of 8
        if (lane == 0) lengths[j] = packed;
    } else {
        T* raw = reinterpret_cast<T*>(dst);
        for (int i = lane; i < m; i += 32) raw[i] = x[base + i];
        if (lane == 0) lengths[j] = (u32)(m * W);
    }
}

template <typename T>
__device__ void decode_chunk(const unsigned char* __restrict__ payload, const u32* __restrict__ lengths,
                             const u64* __restrict__ offsets, u64 n, int dim, T* __restrict__ x, T* a,
                             int* error) {
    const int lane = threadIdx.x & 31;
    const u64 j = blockIdx.x;
    const u64 base = j * MPC_CHUNK;
    const int m = (int)min((u64)MPC_CHUNK, n - base);
    const int W = sizeof(T);
    const u32 len = lengths[j];
    const unsigned char* src = payload + offsets[j];
    if (len == (u32)(m * W)) {
        const T* raw = reinterpret_cast<const T*>(src);
        for (int i = lane; i < m; i += 32) x[base + i] = raw[i];
        return;
    }
    const int bm = bitmap_bytes(m, W);
    const u32* bitmap = reinterpret_cast<const u32*>(src);
    const T* words = reinterpret_cast<const T*>(src + bm);
    const int avail = ((int)len - bm) / W;  // words the length allows (host checked len >= bm)
    const int steps = (m + 31) / 32;
    int pos = 0;
    bool bad = false;
    for (int s = 0; s < steps; s++) {
        const u32 bits = bitmap[s];
        const int i = 32 * s + lane;
        const bool flag = (bits >> lane) & 1u;
        const int at = pos + __popc(bits & ((1u << lane) - 1u));
        bad |= flag && (i >= m || at >= avail);
        if (i < m) a[i] = (flag && at < avail) ? words[at] : (T)0;
        pos += __popc(bits);
    }
    if (bm > 4 * steps && bitmap[steps] != 0) bad = true;
    if (pos != avail || (int)len != bm + avail * W) bad = true;
    if (__any_sync(FULL, bad)) {
        if (lane == 0) atomicExch(error, 1);
        return;
    }
    __syncwarp();
    untranspose(a, m);
    __syncwarp();
    // x[i] = d[i] + x[i-dim] (wrapping sums), 32 words at a time. With dim >= 32 a word's
    // predecessor lies in a group already done. Below, the group is scanned along its
    // stride-dim chains by shuffles (offsets dim, 2 dim, 4 dim, ...), and each chain goes
    // on from the previous group's result at lane 32 - dim + lane % dim.
    int from = lane;  // lane % dim, without a division
    while (from >= dim) from -= dim;
    from += 32 - dim;
    T before = 0;  // this lane's result in the previous group
    for (int g = 0; g < m; g += 32) {
        const int i = g + lane;
        T v = i < m ? unzigzag(a[i]) : (T)0;
        if (dim >= 32) {
            if (i < m && i >= dim) v += a[i - dim];
        } else {
            for (int off = dim; off < 32; off <<= 1) {
                const T up = __shfl_up_sync(FULL, v, off);
                if (lane >= off) v += up;
            }
            const T chain = __shfl_sync(FULL, before, from);
            if (g > 0) v += chain;
            before = v;
        }
        if (i < m) x[base + i] = v;
        if (dim >= 32) {
            // Later groups read these results.
            if (i < m) a[i] = v;
            __syncwarp();
        }
    }
}

extern "C" __global__ void mpc_encode32(const u32* x, u64 n, int dim, unsigned char* scratch, u32* lengths) {
    __shared__ u32 t[MPC_CHUNK];
    encode_chunk<u32>(x, n, dim, scratch, lengths, t);
}

extern "C" __global__ void mpc_encode64(const u64* x, u64 n, int dim, unsigned char* scratch, u32* lengths) {
    __shared__ u64 t[MPC_CHUNK];
    encode_chunk<u64>(x, n, dim, scratch, lengths, t);
}

extern "C" __global__ void mpc_gather(const unsigned char* __restrict__ scratch, const u32* __restrict__ lengths,
                                      const u64* __restrict__ offsets, int word, unsigned char* __restrict__ out) {
    const u64 j = blockIdx.x;
    // Lengths and offsets are multiples of the word size (>= 4), so u32 copies are aligned.
    const u32* src = reinterpret_cast<const u32*>(scratch + j * MPC_CHUNK * (u64)word);
    u32* dst = reinterpret_cast<u32*>(out + offsets[j]);
    for (u32 k = threadIdx.x; k < lengths[j] / 4; k += blockDim.x) dst[k] = src[k];
}

extern "C" __global__ void mpc_decode32(const unsigned char* payload, const u32* lengths, const u64* offsets,
                                        u64 n, int dim, u32* x, int* error) {
    __shared__ u32 a[MPC_CHUNK];
    decode_chunk<u32>(payload, lengths, offsets, n, dim, x, a, error);
}

extern "C" __global__ void mpc_decode64(const unsigned char* payload, const u32* lengths, const u64* offsets,
                                        u64 n, int dim, u64* x, int* error) {
    __shared__ u64 a[MPC_CHUNK];
    decode_chunk<u64>(payload, lengths, offsets, n, dim, x, a, error);
}
