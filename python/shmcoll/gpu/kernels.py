"""Loading the CUDA kernel sources (top-level ``cuda/``, carried by the wheel; see
shmcoll.bundle) as CuPy RawModules.

Every kernel is compiled with ``--fmad=false`` and without fast-math, so that float
arithmetic rounds exactly as the Rust reference does (a fused multiply-add rounds once
where the CPU rounds twice, and the streams would differ).
"""

from __future__ import annotations

import functools
from typing import Any

from ..bundle import shipped

#: NVRTC options of every kernel: no contraction into FMA, IEEE division and square root.
NVRTC_OPTIONS: tuple[str, ...] = (
    "--fmad=false",
    "--prec-div=true",
    "--prec-sqrt=true",
    "--std=c++17",
)


def kernel_names() -> list[str]:
    """The kernel sources shipped with the package (file stems of ``cuda/*.cu``)."""
    root = shipped("cuda")
    return sorted(p.stem for p in root.glob("*.cu")) if root.is_dir() else []


KERNEL_NAMES: tuple[str, ...] = tuple(kernel_names())


def kernel_source(name: str) -> str:
    """The CUDA source of kernel file `name` (``zfp`` for ``cuda/zfp.cu``)."""
    if name not in KERNEL_NAMES:
        raise ValueError(f"no CUDA source {name!r}; known: {', '.join(KERNEL_NAMES)}")
    return (shipped("cuda") / f"{name}.cu").read_text()


@functools.cache
def unavailable() -> str | None:
    """Why the GPU path cannot run in this process, or None when it can: CuPy must import,
    see a CUDA device, and compile every kernel (a driver without NVRTC has devices but
    compiles nothing, and the codecs must then take the CPU path instead of failing).
    Checked once, lazily, by the first call that could use the GPU; compiling the kernels
    then is a cost that call would pay anyway."""
    if not KERNEL_NAMES:
        return f"no CUDA kernel sources in {shipped('cuda')} (this installation does not carry them)"
    try:
        import cupy  # type: ignore[import-not-found]

        if cupy.cuda.runtime.getDeviceCount() <= 0:
            return "no CUDA device"
    except Exception as e:
        return f"no CUDA device or CuPy ({type(e).__name__}: {e})"
    for name in KERNEL_NAMES:
        try:
            load_module(name).compile()
        except Exception as e:
            return (
                f"the CUDA kernels do not compile here ({name}.cu: {type(e).__name__}: {e}); "
                "NVRTC comes with pip install 'shmcoll[gpu]'"
            )
    return None


def available() -> bool:
    """Whether the GPU path can run: a device is present and the kernels compile."""
    return unavailable() is None


@functools.cache
def load_module(name: str) -> Any:
    """``cupy.RawModule`` of kernel file `name`, compiled once per process by NVRTC."""
    import cupy

    return cupy.RawModule(code=kernel_source(name), options=NVRTC_OPTIONS, backend="nvrtc")
