// zfp.cu's plane coders against zfp's own loops, which code one bit at a time
// (transliterated below as `reference`). The 1-D one (encode_ints / decode_ints: whole
// plane codes, quiet runs, eight all-significant planes per write) against
// encode_few_ints / decode_few_ints for every budget from 1 bit to a float's largest, on
// every combination of four coefficients from a set of bit patterns (zero, one, the top
// bit, all ones, alternating, ...) and on random ones, each stream also decoded with
// several lowest planes. The N-D one (encode_many_ints / decode_many_ints on plane words)
// against zfp's many-ints loops for 16, 64 and 256 coefficients on random sets. Built and
// run by tests/test_codec_zfp_cuda_host.py, with UBSan where the compiler has it; prints
// one line per check and exits non-zero on a difference.
#include "shim.h"
#include "zfp.cu"

#include <cstdio>
#include <cstring>
#include <vector>

namespace reference {

void encode(ZfpWriter& s, const zu64* u, zu32 prec, zu32 maxbits) {
    zu32 bits = maxbits, n = 0, k = prec;
    while (bits > 0 && k > 0) {
        k--;
        zu64 x = 0;
        for (int i = 0; i < 4; i++) x += ((u[i] >> k) & 1) << i;
        const zu32 m = n < bits ? n : bits;
        bits -= m;
        put(s, x & zmask(m), m);
        x >>= m;
        while (n < 4 && bits > 0) {
            bits--;
            const zu32 any = x != 0;
            put(s, any, 1);
            if (!any) break;
            while (n < 3 && bits > 0) {
                bits--;
                const zu32 b = (zu32)(x & 1);
                put(s, b, 1);
                if (b) break;
                x >>= 1;
                n++;
            }
            x >>= 1;
            n++;
        }
    }
    put_zeros(s, bits);
}

void decode(ZfpReader& r, zu32 prec, zu32 kmin, zu32 maxbits, zu64* u) {
    for (int i = 0; i < 4; i++) u[i] = 0;
    zu32 bits = maxbits, n = 0, k = prec;
    while (bits > 0 && k > kmin) {
        k--;
        const zu32 m = n < bits ? n : bits;
        bits -= m;
        zu64 x = get(r, m);
        while (n < 4 && bits > 0) {
            bits--;
            if (!get(r, 1)) break;
            while (n < 3 && bits > 0) {
                bits--;
                if (get(r, 1)) break;
                n++;
            }
            x += 1ull << n;
            n++;
        }
        for (int i = 0; x != 0; i++, x >>= 1) u[i] += (x & 1) << k;
    }
}

// zfp's encode_many_ints / decode_many_ints (N-D blocks of `size` coefficients).
void encode_many(ZfpWriter& s, const zu64* data, zu32 size, zu32 prec, zu32 maxbits) {
    zu32 bits = maxbits, n = 0, k = prec;
    while (bits > 0 && k > 0) {
        k--;
        const zu32 m = n < bits ? n : bits;
        bits -= m;
        for (zu32 i = 0; i < m; i++) put(s, (data[i] >> k) & 1, 1);
        zu32 c = 0;
        for (zu32 i = m; i < size; i++) c += (zu32)((data[i] >> k) & 1);
        while (bits > 0 && n < size) {
            bits--;
            put(s, c > 0, 1);
            if (c == 0) break;
            c--;
            while (bits > 0 && n < size - 1) {
                bits--;
                const zu32 b = (zu32)((data[n] >> k) & 1);
                put(s, b, 1);
                if (b) break;
                n++;
            }
            n++;
        }
    }
    put_zeros(s, bits);
}

void decode_many(ZfpReader& r, zu64* data, zu32 size, zu32 prec, zu32 kmin, zu32 maxbits) {
    for (zu32 i = 0; i < size; i++) data[i] = 0;
    zu32 bits = maxbits, n = 0, k = prec;
    while (bits > 0 && k > kmin) {
        k--;
        const zu32 m = n < bits ? n : bits;
        bits -= m;
        for (zu32 i = 0; i < m; i++) data[i] += get(r, 1) << k;
        while (bits > 0 && n < size) {
            bits--;
            if (!get(r, 1)) break;
            while (bits > 0 && n < size - 1) {
                bits--;
                if (get(r, 1)) break;
                n++;
            }
            data[n] += 1ull << k;
            n++;
        }
    }
}

}  // namespace reference

zu64 splitmix(zu64& state) {
    zu64 z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// The N-D plane coder (S coefficients) against zfp's many-ints loops on `sets` random
// coefficient sets (random words shifted right by random amounts, a third of them zero),
// at every budget up to 600 bits and every 13th beyond, to a float's largest block.
template <class U, zu32 S>
long check_nd(zu32 width, int sets) {
    const zu32 maxbits = S * width - 1 - (width == 32 ? 8 : 11);
    const zu32 kmins[] = {0, 3, width - 1};
    zu64 state = 0x5eed0000ull + S + width;
    long encodes = 0, bad = 0;
    const zu64 mask = width == 32 ? 0xffffffffull : ~0ull;
    for (int t = 0; t < sets; t++) {
        zu64 wide[S];
        U u[S];
        for (zu32 i = 0; i < S; i++) {
            wide[i] = splitmix(state) % 3 == 0 ? 0 : (splitmix(state) & mask) >> (splitmix(state) % width);
            u[i] = (U)wide[i];
        }
        for (zu32 bits = 1; bits <= maxbits; bits += bits < 600 ? 1 : 13) {
            const zu32 words = (maxbits + 63) / 64 + 1;
            std::vector<zu64> want(words, 0), got(words, 0);
            ZfpWriter ww{want.data(), 0, 0, 0}, wg{got.data(), 0, 0, 0};
            reference::encode_many(ww, wide, S, width, bits);
            encode_many_ints<U, S>(wg, u, width, bits);
            if (ww.fill) want[ww.word] = ww.acc;
            if (wg.fill) got[wg.word] = wg.acc;
            encodes++;
            if (want != got && bad++ < 3) std::printf("N-D encode differs: %u coefficients, width %u, %u bits\n", S, width, bits);
            for (zu32 kmin : kmins) {
                ZfpReader rr, rg;
                reader_at(rr, want.data(), 0);
                reader_at(rg, want.data(), 0);
                zu64 back_want[S];
                U back_got[S];
                reference::decode_many(rr, back_want, S, width, kmin, bits);
                decode_many_ints<U, S>(rg, width, kmin, bits, back_got);
                for (zu32 i = 0; i < S; i++) {
                    if (back_want[i] != (zu64)back_got[i]) {
                        if (bad++ < 3)
                            std::printf("N-D decode differs: %u coefficients, width %u, %u bits, kmin %u\n", S, width,
                                        bits, kmin);
                        break;
                    }
                }
            }
        }
    }
    std::printf("%u coefficients, width %u: %ld encodes, %ld differences\n", S, width, encodes, bad);
    return bad;
}

// One coefficient set at every budget: encoded by both coders, the reference's stream
// decoded by both with several lowest planes; the number of differences.
template <class U>
long compare(zu32 width, const zu64* wide) {
    const zu32 maxbits = width == 32 ? 4 * 32 - 9 : 4 * 64 - 12;  // rate 32 / 64 blocks
    const zu32 kmins[] = {0, 1, 5, width / 2, width - 1, width};
    U u[4];
    for (int i = 0; i < 4; i++) u[i] = (U)wide[i];
    long bad = 0;
    for (zu32 bits = 1; bits <= maxbits; bits++) {
        zu64 want[5] = {0}, got[5] = {0};
        ZfpWriter ww{want, 0, 0, 0}, wg{got, 0, 0, 0};
        reference::encode(ww, wide, width, bits);
        encode_ints<U>(wg, u, width, bits);
        if (ww.fill) want[ww.word] = ww.acc;
        if (wg.fill) got[wg.word] = wg.acc;
        if (std::memcmp(want, got, sizeof want) != 0 && bad++ < 3)
            std::printf("encode differs: width %u, %u bits, u = %llx %llx %llx %llx\n", width, bits, wide[0],
                        wide[1], wide[2], wide[3]);
        for (zu32 kmin : kmins) {
            ZfpReader rr, rg;
            reader_at(rr, want, 0);
            reader_at(rg, want, 0);
            zu64 back_want[4];
            U back_got[4];
            reference::decode(rr, width, kmin, bits, back_want);
            decode_ints<U>(rg, width, kmin, bits, back_got);
            for (int i = 0; i < 4; i++) {
                if (back_want[i] != (zu64)back_got[i]) {
                    if (bad++ < 3)
                        std::printf("decode differs: width %u, %u bits, kmin %u, u = %llx %llx %llx %llx\n", width,
                                    bits, kmin, wide[0], wide[1], wide[2], wide[3]);
                    break;
                }
            }
        }
    }
    return bad;
}

// Every combination of four values from `values`, then `randoms` sets of random words
// shifted right by random amounts (so that coefficients become significant at every plane
// and in every order, and quiet runs end anywhere).
template <class U>
long check(zu32 width, const std::vector<zu64>& values, int randoms) {
    long sets = 0, bad = 0;
    const size_t v = values.size();
    for (size_t a = 0; a < v * v * v * v; a++, sets++) {
        const zu64 wide[4] = {values[a % v], values[a / v % v], values[a / v / v % v], values[a / v / v / v]};
        bad += compare<U>(width, wide);
    }
    zu64 state = 0x9e3779b97f4a7c15ull;
    auto next = [&state] { return splitmix(state); };
    const zu64 mask = width == 32 ? 0xffffffffull : ~0ull;
    for (int t = 0; t < randoms; t++, sets++) {
        zu64 wide[4];
        for (int i = 0; i < 4; i++) wide[i] = (next() & mask) >> (next() % width);
        bad += compare<U>(width, wide);
    }
    std::printf("width %u: %ld coefficient sets at every budget, %ld differences\n", width, sets, bad);
    return bad;
}

int main() {
    const std::vector<zu64> v32 = {0, 1, 3, 0x80000000u, 0xffffffffu, 0x40000000u, 0x12345678u, 0x0001ffffu, 0x55555555u};
    const std::vector<zu64> v64 = {0, 1, 0x8000000000000000ull, ~0ull, 0x4000000000000000ull, 0x0123456789abcdefull,
                                   0x80000000ull, 0xaaaaaaaaaaaaaaaaull};
    long bad = check<zu32>(32, v32, 4000) + check<zu64>(64, v64, 2000);
    bad += check_nd<zu32, 16>(32, 200) + check_nd<zu64, 16>(64, 60);
    bad += check_nd<zu32, 64>(32, 40) + check_nd<zu64, 64>(64, 10);
    bad += check_nd<zu32, 256>(32, 6) + check_nd<zu64, 256>(64, 2);
    return bad != 0;
}
