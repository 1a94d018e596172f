// Every kernel of cuda/ compiled for the CPU through shim.h, behind one C interface for
// ctypes (the CuPy stand-in of standin/cupy and the kernel tests call it):
//   emu_kernels()           the kernels it runs, space-separated;
//   emu_signature(name)     each argument's kind and size ("p8 u8 i4"), NULL for no kernel;
//   emu_run(name, grid, block, args)  runs a kernel on grid x block threads, each args[i]
//                           pointing at the value of argument i; -1 for no kernel.
// One table names each kernel once: its argument types come from its own signature, so a
// caller that packs other types or sizes is told so instead of running on wrong bytes.
#include "shim.h"

#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "bq.cu"
#include "cast.cu"
#include "mpc.cu"
#include "zfp.cu"

namespace {

// "p" pointer, "f" floating point, "i" signed or "u" unsigned integer, then the byte size.
template <class A>
std::string kind() {
    const char* k = std::is_pointer_v<A> ? "p" : std::is_floating_point_v<A> ? "f" : std::is_signed_v<A> ? "i" : "u";
    return k + std::to_string(sizeof(A));
}

template <class F>
struct Entry;

template <class... A>
struct Entry<void (*)(A...)> {
    static std::string signature() {
        std::string s;
        ((s += (s.empty() ? "" : " ") + kind<A>()), ...);
        return s;
    }
    template <void (*K)(A...), std::size_t... I>
    static void call(unsigned grid, unsigned block, void** args, std::index_sequence<I...>) {
        emu_launch(grid, block, [&] { K(*static_cast<A*>(args[I])...); });
    }
    template <void (*K)(A...)>
    static void run(unsigned grid, unsigned block, void** args) {
        call<K>(grid, block, args, std::index_sequence_for<A...>{});
    }
};

struct Kernel {
    const char* name;
    std::string (*signature)();
    void (*run)(unsigned, unsigned, void**);
};

#define KERNEL(k) Kernel{#k, &Entry<decltype(&k)>::signature, &Entry<decltype(&k)>::run<&k>}

const Kernel KERNELS[] = {
    KERNEL(bq_encode),         KERNEL(bq_decode),
    KERNEL(cast_encode_f32),   KERNEL(cast_encode_f64),   KERNEL(cast_decode_f32),   KERNEL(cast_decode_f64),
    KERNEL(mpc_encode32),      KERNEL(mpc_encode64),      KERNEL(mpc_gather),
    KERNEL(mpc_decode32),      KERNEL(mpc_decode64),
    KERNEL(zfp_encode_f32),    KERNEL(zfp_encode_f64),    KERNEL(zfp_decode_f32),    KERNEL(zfp_decode_f64),
    KERNEL(zfp_encode_nd_f32), KERNEL(zfp_encode_nd_f64), KERNEL(zfp_decode_nd_f32), KERNEL(zfp_decode_nd_f64),
};

const Kernel* find(const char* name) {
    for (const Kernel& k : KERNELS)
        if (std::strcmp(k.name, name) == 0) return &k;
    return nullptr;
}

}  // namespace

extern "C" const char* emu_kernels() {
    static const std::string names = [] {
        std::string s;
        for (const Kernel& k : KERNELS) s += (s.empty() ? "" : " ") + std::string(k.name);
        return s;
    }();
    return names.c_str();
}

extern "C" const char* emu_signature(const char* name) {
    static thread_local std::string sig;
    const Kernel* k = find(name);
    if (k == nullptr) return nullptr;
    sig = k->signature();
    return sig.c_str();
}

extern "C" int emu_run(const char* name, unsigned int grid, unsigned int block, void** args) {
    const Kernel* k = find(name);
    if (k == nullptr) return -1;
    k->run(grid, block, args);
    return 0;
}
