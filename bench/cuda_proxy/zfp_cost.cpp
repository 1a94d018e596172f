// What a zfp CUDA kernel costs per value, measured on the CPU (no GPU needed): cuda/zfp.cu
// compiled for the host against tests/cuda_emu/shim.h, with the device's forced inlining,
// its kernels run one emulated thread at a time over float32 data. Two proxies, neither
// a device measurement:
//   instructions  run under callgrind in modes n (data and stream set up only), e (and
//                 every encoder thread) and b (and every decoder thread): the differences
//                 are x86 instructions of encoding and decoding (bench/zfp_kernel_cost.sh);
//   simt          built with -fsanitize-coverage=trace-pc (cov.cpp counts each thread's
//                 basic blocks): a warp of 32 consecutive threads runs a basic block as
//                 often as its busiest lane needs it, so the lanes' own counts over 32 x the
//                 warp's measure how much divergence leaves idle (1.00: none).
//   zfp_cost DIMS RATE KIND MODE [WARPS]   KIND 0: gaussian * 1e-3, 1: smooth;
//   MODE n|e|b|se|sd; the array has WARPS x 32 encoder threads' blocks (default 256).
#include "shim.h"
#undef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#include ZFP_SRC
#include <algorithm>
#include <cstdio>
#include <random>
#include <unordered_map>
#include <vector>

// cov.cpp (in the simt build only; weak here so the plain build links without it).
extern bool cov_on __attribute__((weak));
extern std::unordered_map<uintptr_t, uint32_t>* cov_map __attribute__((weak));

int main(int argc, char** argv) {
    if (argc < 5) return 2;
    const unsigned dims = atoi(argv[1]), rate = atoi(argv[2]), kind = atoi(argv[3]);
    const char* mode = argv[4];
    const zu64 warps = argc > 5 ? atoll(argv[5]) : 256;
    // 1-D: n values; N-D: (4 x 32 x warps x group) along x, 4 along every other axis.
    const zu64 group = group_blocks(dims, rate);
    zu64 ext[4] = {1, 1, 1, 1}, n = 4 * 32 * warps * group;
    ext[0] = n;
    for (unsigned a = 1; a < dims; a++) ext[a] = 4, n *= 4;
    std::vector<float> x(n), y(n);
    std::mt19937_64 g(1);
    std::normal_distribution<float> d(0.f, 1.f);
    float acc = 0;
    for (zu64 i = 0; i < n; i++) {
        const float v = d(g);
        acc += v * 0.01f;
        x[i] = kind ? 100.f * sinf(i * 1e-4f) + acc : v * 1e-3f;
    }
    const zu64 blocks = n >> (2 * dims);
    std::vector<zu64> s((blocks * (1ull << (2 * dims)) * rate + 63) / 64 + 1);
    const zu64 enc_threads = (blocks + group - 1) / group;
    blockDim.x = 1;
    auto launch = [&](bool enc, zu64 t) {
        blockIdx.x = t;
        threadIdx.x = 0;
        if (dims == 1) {
            if (enc) zfp_encode_f32(x.data(), n, rate, s.data());
            else zfp_decode_f32(s.data(), n, rate, y.data());
        } else if (enc) {
            zfp_encode_nd_f32(x.data(), ext[0], ext[1], ext[2], ext[3], dims, rate, s.data());
        } else {
            zfp_decode_nd_f32(s.data(), ext[0], ext[1], ext[2], ext[3], dims, rate, y.data());
        }
    };
    if (mode[0] == 'n') return 0;
    for (zu64 t = 0; t < enc_threads; t++) launch(true, t);
    if (mode[0] == 'b')
        for (zu64 t = 0; t < blocks; t++) launch(false, t);
    if (mode[0] != 's') return 0;
    if (!&cov_on) {
        fprintf(stderr, "simt modes need the coverage build (bench/zfp_kernel_cost.sh)\n");
        return 2;
    }
    const bool enc = mode[1] == 'e';
    const zu64 threads = enc ? enc_threads : blocks;
    double lanes = 0, warp = 0;
    std::vector<std::unordered_map<uintptr_t, uint32_t>> lane(32);
    for (zu64 w = 0; w * 32 < threads; w++) {
        std::unordered_map<uintptr_t, uint32_t> most;
        const zu64 m = std::min<zu64>(32, threads - w * 32);
        for (zu64 l = 0; l < m; l++) {
            lane[l].clear();
            cov_map = &lane[l];
            cov_on = true;
            launch(enc, w * 32 + l);
            cov_on = false;
            for (auto& [pc, c] : lane[l]) {
                lanes += c;
                most[pc] = std::max(most[pc], c);
            }
        }
        for (auto& [pc, c] : most) warp += (double)c * m;
    }
    printf("%.2f\n", lanes / warp);
}
