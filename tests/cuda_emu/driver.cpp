// The codec kernels of cuda/ compiled for the CPU through shim.h, behind one
// C entry point for ctypes: emu_run(kernel name, grid, block, pointers to the arguments).
#include "shim.h"

#include <string>

#include "bq.cu"
#include "cast.cu"
#include "mpc.cu"

#define ARG(T, i) (*reinterpret_cast<T*>(args[i]))

extern "C" int emu_run(const char* name, unsigned int grid, unsigned int block, void** args) {
    const std::string k(name);
    std::function<void()> f;
    if (k == "bq_encode")
        f = [&] { bq_encode(ARG(const float*, 0), ARG(u64, 1), ARG(int, 2), ARG(int, 3), ARG(unsigned char*, 4)); };
    else if (k == "bq_decode")
        f = [&] { bq_decode(ARG(const unsigned char*, 0), ARG(u64, 1), ARG(int, 2), ARG(int, 3), ARG(float*, 4)); };
    else if (k == "cast_encode_f32")
        f = [&] { cast_encode_f32(ARG(const u32*, 0), ARG(u64, 1), ARG(int, 2), ARG(u16*, 3)); };
    else if (k == "cast_encode_f64")
        f = [&] { cast_encode_f64(ARG(const u64*, 0), ARG(u64, 1), ARG(int, 2), ARG(u16*, 3)); };
    else if (k == "cast_decode_f32")
        f = [&] { cast_decode_f32(ARG(const u16*, 0), ARG(u64, 1), ARG(int, 2), ARG(u32*, 3)); };
    else if (k == "cast_decode_f64")
        f = [&] { cast_decode_f64(ARG(const u16*, 0), ARG(u64, 1), ARG(int, 2), ARG(u64*, 3)); };
    else if (k == "mpc_encode32")
        f = [&] { mpc_encode32(ARG(const u32*, 0), ARG(u64, 1), ARG(int, 2), ARG(unsigned char*, 3), ARG(u32*, 4)); };
    else if (k == "mpc_encode64")
        f = [&] { mpc_encode64(ARG(const u64*, 0), ARG(u64, 1), ARG(int, 2), ARG(unsigned char*, 3), ARG(u32*, 4)); };
    else if (k == "mpc_gather")
        f = [&] {
            mpc_gather(ARG(const unsigned char*, 0), ARG(const u32*, 1), ARG(const u64*, 2), ARG(int, 3),
                       ARG(unsigned char*, 4));
        };
    else if (k == "mpc_decode32")
        f = [&] {
            mpc_decode32(ARG(const unsigned char*, 0), ARG(const u32*, 1), ARG(const u64*, 2), ARG(u64, 3),
                         ARG(int, 4), ARG(u32*, 5), ARG(int*, 6));
        };
    else if (k == "mpc_decode64")
        f = [&] {
            mpc_decode64(ARG(const unsigned char*, 0), ARG(const u32*, 1), ARG(const u64*, 2), ARG(u64, 3),
                         ARG(int, 4), ARG(u64*, 5), ARG(int*, 6));
        };
    else
        return -1;
    emu_launch(grid, block, f);
    return 0;
}
