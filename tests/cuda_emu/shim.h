// A CPU stand-in for the few CUDA features shmcoll's codec kernels use, so that the very
// sources in cuda/ can run (slowly) without a GPU and their bytes be compared
// with the Rust reference. Each CUDA thread is an OS thread; the 32 threads of a warp meet
// at a barrier in every warp intrinsic; blocks run one after another, so a kernel's
// __shared__ arrays (statics here) belong to the one block that runs.
//
// Float intrinsics map to plain IEEE operations: g++ on x86-64 neither contracts (with
// -ffp-contract=off) nor flushes subnormals, which is what the NVRTC options guarantee.
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>
#include <type_traits>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __shared__ static
#define __launch_bounds__(...)
// Constant memory: read-only tables, plain statics on the CPU.
#define __constant__ static

struct dim3_ {
    unsigned int x = 0, y = 0, z = 0;
};
inline thread_local dim3_ threadIdx, blockIdx;
inline dim3_ blockDim, gridDim;

// A warp of `lanes` threads (32, fewer in the last warp of a block that is not a multiple
// of 32: kernels without warp intrinsics, such as zfp's, run at any block size).
struct Warp {
    explicit Warp(std::ptrdiff_t lanes) : bar(lanes) {}
    std::barrier<> bar;
    unsigned long long slot[32];
};
inline thread_local Warp* emu_warp = nullptr;

inline int emu_lane() { return (int)(threadIdx.x & 31); }

// Every lane publishes `v`; returns all 32 values.
inline void emu_exchange(unsigned long long v, unsigned long long* all) {
    emu_warp->slot[emu_lane()] = v;
    emu_warp->bar.arrive_and_wait();
    std::memcpy(all, emu_warp->slot, sizeof(emu_warp->slot));
    emu_warp->bar.arrive_and_wait();
}

inline unsigned int __ballot_sync(unsigned int, int pred) {
    unsigned long long all[32];
    emu_exchange(pred ? 1 : 0, all);
    unsigned int m = 0;
    for (int i = 0; i < 32; i++) m |= (unsigned int)(all[i] & 1) << i;
    return m;
}
inline int __any_sync(unsigned int mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline unsigned int __shfl_xor_sync(unsigned int, unsigned int v, int off) {
    unsigned long long all[32];
    emu_exchange(v, all);
    return (unsigned int)all[emu_lane() ^ off];
}
// A lane below `delta` gets its own value back, as on a device. Integers only here (a
// float would be converted, not moved bit for bit as CUDA does).
template <class T>
inline T __shfl_up_sync(unsigned int, T v, unsigned int delta) {
    static_assert(std::is_integral_v<T>);
    unsigned long long all[32];
    emu_exchange((unsigned long long)v, all);
    const int from = emu_lane() - (int)delta;
    return (T)all[from < 0 ? emu_lane() : from];
}
template <class T>
inline T __shfl_sync(unsigned int, T v, int src) {
    static_assert(std::is_integral_v<T>);
    unsigned long long all[32];
    emu_exchange((unsigned long long)v, all);
    return (T)all[src & 31];
}
inline int __reduce_add_sync(unsigned int, int v) {
    unsigned long long all[32];
    emu_exchange((unsigned long long)(unsigned int)v, all);
    unsigned int s = 0;
    for (int i = 0; i < 32; i++) s += (unsigned int)all[i];
    return (int)s;
}
inline void __syncwarp() { emu_warp->bar.arrive_and_wait(); }
inline int atomicExch(int* p, int v) {
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}

inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
inline double __longlong_as_double(long long u) { double d; std::memcpy(&d, &u, 8); return d; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline int __popc(unsigned int v) { return __builtin_popcount(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline int __ffsll(long long v) { return __builtin_ffsll(v); }
// CUDA defines these at 0 too: all 32 (64) bits are leading zeros.
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz((unsigned int)v); }
inline int __clzll(long long v) { return v == 0 ? 64 : __builtin_clzll((unsigned long long)v); }
inline unsigned int __brev(unsigned int v) {
    v = ((v >> 1) & 0x55555555u) | ((v & 0x55555555u) << 1);
    v = ((v >> 2) & 0x33333333u) | ((v & 0x33333333u) << 2);
    v = ((v >> 4) & 0x0f0f0f0fu) | ((v & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(v);
}
using std::max;
using std::min;

// Run `kernel` on grid x block threads: `block` OS threads walk the blocks in order and
// wait for each other after each, so that one block runs at a time.
inline void emu_launch(unsigned int grid, unsigned int block, const std::function<void()>& kernel) {
    gridDim.x = grid;
    blockDim.x = block;
    std::deque<Warp> warps;  // not moved once built: threads hold pointers to them
    for (unsigned int first = 0; first < block; first += 32) warps.emplace_back(std::min(block - first, 32u));
    std::barrier<> all((std::ptrdiff_t)block);
    std::vector<std::thread> threads;
    for (unsigned int t = 0; t < block; t++) {
        threads.emplace_back([&, t] {
            threadIdx.x = t;
            emu_warp = &warps[t / 32];
            for (unsigned int b = 0; b < grid; b++) {
                blockIdx.x = b;
                kernel();
                all.arrive_and_wait();
            }
        });
    }
    for (auto& th : threads) th.join();
}
