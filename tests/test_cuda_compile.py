"""Every CUDA kernel in cuda/ compiles with NVRTC, to PTX and to CUBIN for
each architecture we ship for, with the options the runtime uses. No GPU needed: NVRTC
comes from the nvidia-cuda-nvrtc-cu12 wheel."""

from __future__ import annotations

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


def test_compile_errors_are_reported() -> None:
    with pytest.raises(nvrtc.NvrtcError, match="does not compile"):
        nvrtc.compile_source("this is not CUDA", "broken", "90", cubin=True)


def test_gpu_import_touches_no_device() -> None:
    # available() is lazy and safe without CuPy or a device; the import above did nothing.
    from shmcoll import gpu

    assert isinstance(gpu.available(), bool)
