#!/usr/bin/env bash
# What cuda/zfp.cu's kernels cost per value, on a machine without a GPU (the proxies of
# bench/cuda_proxy/zfp_cost.cpp): x86 instructions per value of encoding and decoding
# (callgrind; the device's SASS differs, but a change that halves one roughly halves the
# other) and the SIMT efficiency of a warp (the share of its lanes' basic blocks that are
# not divergence's idle slots). float32, rates 8 and 16, gaussian (x 1e-3) and smooth data,
# 1-D to 3-D. Needs g++ and valgrind (apt-get install g++ valgrind).
#
#   bench/zfp_kernel_cost.sh              # this checkout's cuda/zfp.cu
#   ZFP_SRC=/path/other_zfp.cu bench/zfp_kernel_cost.sh    # another version, to compare
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/.."
src="$(realpath "${ZFP_SRC:-$root/cuda/zfp.cu}")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
flags=(-std=c++20 -O2 -ffp-contract=off -I "$root/tests/cuda_emu" -DZFP_SRC="\"$src\"")
g++ "${flags[@]}" "$here/cuda_proxy/zfp_cost.cpp" -o "$work/cost"
g++ -std=c++20 -O2 -c "$here/cuda_proxy/cov.cpp" -o "$work/cov.o"
g++ "${flags[@]}" -fsanitize-coverage=trace-pc "$here/cuda_proxy/zfp_cost.cpp" "$work/cov.o" -o "$work/simt"
WARPS="${WARPS:-64}"
ir() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$work/cost" "$@" "$WARPS" 2>&1 |
        awk '/Collected/ {gsub(",", "", $4); print $4}'
}
echo "zfp.cu: $src"
echo "| dims | rate | data | encode instr/value | decode instr/value | encode SIMT | decode SIMT |"
echo "|---|---|---|---|---|---|---|"
for dims in 1 2 3; do
    for rate in 8 16; do
        for kind in 0 1; do
            n0=$(ir "$dims" "$rate" "$kind" n)
            ne=$(ir "$dims" "$rate" "$kind" e)
            nb=$(ir "$dims" "$rate" "$kind" b)
            se=$("$work/simt" "$dims" "$rate" "$kind" se "$WARPS")
            sd=$("$work/simt" "$dims" "$rate" "$kind" sd "$WARPS")
            python3 - "$dims" "$rate" "$kind" "$n0" "$ne" "$nb" "$se" "$sd" "$WARPS" <<'PY'
import sys
dims, rate, kind, n0, ne, nb, se, sd, warps = sys.argv[1:]
dims, rate = int(dims), int(rate)
group = 1
while (group * (4 ** dims) * rate) % 64:
    group *= 2
values = 4 * 32 * int(warps) * group * 4 ** (dims - 1)
enc, dec = (int(ne) - int(n0)) / values, (int(nb) - int(ne)) / values
data = "gaussian" if kind == "0" else "smooth"
print(f"| {dims} | {rate} | {data} | {enc:.0f} | {dec:.0f} | {se} | {sd} |")
PY
        done
    done
done
