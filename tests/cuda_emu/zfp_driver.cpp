// The zfp kernels of cuda/zfp.cu compiled for the CPU through shim.h, behind one C entry
// point for ctypes: emu_zfp_run(kernel name, grid, block, pointers to the arguments). A
// separate library from driver.cpp's, so that each codec's emulation builds on its own.
#include "shim.h"

#include <string>

// zfp.cu keeps its sequency tables in constant memory; on the CPU they are plain statics.
#define __constant__ static

#include "zfp.cu"

#define ARG(T, i) (*reinterpret_cast<T*>(args[i]))

using zu64a = unsigned long long;

extern "C" int emu_zfp_run(const char* name, unsigned int grid, unsigned int block, void** args) {
    const std::string k(name);
    std::function<void()> f;
    if (k == "zfp_encode_f32")
        f = [&] { zfp_encode_f32(ARG(const float*, 0), ARG(zu64a, 1), ARG(unsigned, 2), ARG(zu64a*, 3)); };
    else if (k == "zfp_encode_f64")
        f = [&] { zfp_encode_f64(ARG(const double*, 0), ARG(zu64a, 1), ARG(unsigned, 2), ARG(zu64a*, 3)); };
    else if (k == "zfp_decode_f32")
        f = [&] { zfp_decode_f32(ARG(const zu64a*, 0), ARG(zu64a, 1), ARG(unsigned, 2), ARG(float*, 3)); };
    else if (k == "zfp_decode_f64")
        f = [&] { zfp_decode_f64(ARG(const zu64a*, 0), ARG(zu64a, 1), ARG(unsigned, 2), ARG(double*, 3)); };
    else if (k == "zfp_encode_nd_f32")
        f = [&] {
            zfp_encode_nd_f32(ARG(const float*, 0), ARG(zu64a, 1), ARG(zu64a, 2), ARG(zu64a, 3), ARG(zu64a, 4),
                              ARG(unsigned, 5), ARG(unsigned, 6), ARG(zu64a*, 7));
        };
    else if (k == "zfp_encode_nd_f64")
        f = [&] {
            zfp_encode_nd_f64(ARG(const double*, 0), ARG(zu64a, 1), ARG(zu64a, 2), ARG(zu64a, 3), ARG(zu64a, 4),
                              ARG(unsigned, 5), ARG(unsigned, 6), ARG(zu64a*, 7));
        };
    else if (k == "zfp_decode_nd_f32")
        f = [&] {
            zfp_decode_nd_f32(ARG(const zu64a*, 0), ARG(zu64a, 1), ARG(zu64a, 2), ARG(zu64a, 3), ARG(zu64a, 4),
                              ARG(unsigned, 5), ARG(unsigned, 6), ARG(float*, 7));
        };
    else if (k == "zfp_decode_nd_f64")
        f = [&] {
            zfp_decode_nd_f64(ARG(const zu64a*, 0), ARG(zu64a, 1), ARG(zu64a, 2), ARG(zu64a, 3), ARG(zu64a, 4),
                              ARG(unsigned, 5), ARG(unsigned, 6), ARG(double*, 7));
        };
    else
        return -1;
    emu_launch(grid, block, f);
    return 0;
}
