"""Every CUDA kernel in cuda/ compiles with NVRTC, to PTX and to CUBIN for
each architecture we ship for, with the options the runtime uses. No GPU needed: NVRTC
comes from the nvidia-cuda-nvrtc-cu12 wheel."""

from __future__ import annotations

import re

import pytest

from shmcoll.gpu import KERNEL_NAMES, kernel_source

nvrtc = pytest.importorskip("shmcoll.gpu.nvrtc")

try:
    nvrtc.library()
except nvrtc.NvrtcError as e:  # pragma: no cover - the test extras install it
    pytest.skip(f"NVRTC unavailable: {e}", allow_module_level=True)


@pytest.mark.parametrize("cubin", [False, True], ids=["ptx", "cubin"])
@pytest.mark.parametrize("arch", nvrtc.ARCHS)
@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_kernel_compiles(name: str, arch: str, cubin: bool) -> None:
    image = nvrtc.compile_source(kernel_source(name), name, arch, cubin)
    assert len(image) > 100
    if not cubin:
        assert b".entry" in image, "PTX without a single kernel entry point"


#: Kernels that hold a whole block in thread-local arrays by design (4^d values of an N-D
#: zfp block, up to 256): local memory is their working set, cached in L1; they also
#: divide to find a block's place in the array.
BLOCK_IN_LOCAL_MEMORY = frozenset(
    {"zfp_encode_nd_f32", "zfp_encode_nd_f64", "zfp_decode_nd_f32", "zfp_decode_nd_f64"}
)


@pytest.mark.parametrize("arch", nvrtc.ARCHS)
@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_streaming_kernels_keep_their_values_in_registers(name: str, arch: str) -> None:
    """What ptxas reports, the one performance property a machine without a GPU can check:
    no kernel spills registers, and the streaming ones (every kernel but the N-D zfp
    coders) have no stack frame (an array indexed by a loop bound, such as bq's eight codes
    written in a tail loop, moves to local memory and adds a store and a load per value)
    and use at most 64 registers (half the threads an SM holds, at 256 threads a block);
    the N-D ones at most 128 (a quarter)."""
    found = nvrtc.resources(kernel_source(name), name, arch)
    ptx = nvrtc.compile_source(kernel_source(name), name, arch, cubin=False).decode()
    assert set(found) == set(re.findall(r"\.entry\s+(\w+)\(", ptx)), "a kernel ptxas did not report"
    for kernel, r in found.items():
        assert r.spill_stores == 0 and r.spill_loads == 0, (kernel, r)
        if kernel not in BLOCK_IN_LOCAL_MEMORY:
            assert r.stack == 0 and r.registers <= 64, (kernel, r)
        else:  # their launch bounds: two blocks of 256 threads an SM
            assert r.registers <= 128, (kernel, r)


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_streaming_kernels_divide_no_integers(name: str) -> None:
    """An integer division by a value known only at run time is a reciprocal sequence with
    a slow-path call (64-bit: tens of instructions), per thread: the streaming kernels
    index by shifts (bq's power-of-two block) or choices instead. Read in the PTX."""
    ptx = nvrtc.compile_source(kernel_source(name), name, nvrtc.ARCHS[-1], cubin=False).decode()
    bodies = dict(re.findall(r"\.entry\s+(\w+)\((.*?)\n\}", ptx, re.S))
    assert bodies, name
    for kernel, body in bodies.items():
        if kernel not in BLOCK_IN_LOCAL_MEMORY:
            divisions = re.findall(r"\b(?:div|rem)\.[us](?:16|32|64)\b", body)
            assert not divisions, (kernel, divisions)


def test_compile_errors_are_reported() -> None:
    with pytest.raises(nvrtc.NvrtcError, match="does not compile"):
        nvrtc.compile_source("this is not CUDA", "broken", "90", cubin=True)


def test_gpu_import_touches_no_device() -> None:
    # available() is lazy and safe without CuPy or a device; the import above did nothing.
    from shmcoll import gpu

    assert isinstance(gpu.available(), bool)
