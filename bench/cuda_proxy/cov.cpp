// Basic-block counts for zfp_cost.cpp's simt modes: the callback of gcc's
// -fsanitize-coverage=trace-pc, counting per return address while a thread is measured.
// This file is compiled without the instrumentation, but the map's inline code may come
// from the instrumented file (the linker keeps one copy): `busy` stops the recursion.
#include <cstdint>
#include <unordered_map>
bool cov_on = false;
std::unordered_map<uintptr_t, uint32_t>* cov_map = nullptr;
static bool busy = false;
extern "C" void __sanitizer_cov_trace_pc() {
    if (!cov_on || busy) return;
    busy = true;
    (*cov_map)[(uintptr_t)__builtin_return_address(0)]++;
    busy = false;
}
