"""Loading the CUDA sources shipped in ``shmcoll/cuda`` as CuPy RawModules.

Every kernel is compiled with ``--fmad=false`` and without fast-math, so that float
arithmetic rounds exactly as the Rust reference does (a fused multiply-add rounds once
where the CPU rounds twice, and the streams would differ).
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

#: NVRTC options of every kernel: no contraction into FMA, IEEE division and square root.
NVRTC_OPTIONS: tuple[str, ...] = (
    "--fmad=false",
    "--prec-div=true",
    "--prec-sqrt=true",
    "--std=c++17",
)


def kernel_names() -> list[str]:
    """The kernel sources shipped with the package (file stems of ``shmcoll/cuda/*.cu``)."""
    root = resources.files("shmcoll") / "cuda"
    return sorted(p.name[:-3] for p in root.iterdir() if p.name.endswith(".cu"))


KERNEL_NAMES: tuple[str, ...] = tuple(kernel_names())


def kernel_source(name: str) -> str:
    """The CUDA source of kernel file `name` (``zfp`` for ``shmcoll/cuda/zfp.cu``)."""
    if name not in KERNEL_NAMES:
        raise ValueError(f"no CUDA source {name!r}; known: {', '.join(KERNEL_NAMES)}")
    return (resources.files("shmcoll") / "cuda" / f"{name}.cu").read_text()


@functools.cache
def available() -> bool:
    """Whether CuPy imports and sees at least one CUDA device (checked once, lazily)."""
    try:
        import cupy  # type: ignore[import-not-found]

        return bool(cupy.cuda.runtime.getDeviceCount() > 0)
    except Exception:
        return False


@functools.cache
def load_module(name: str) -> Any:
    """``cupy.RawModule`` of kernel file `name`, compiled once per process by NVRTC."""
    import cupy

    return cupy.RawModule(code=kernel_source(name), options=NVRTC_OPTIONS, backend="nvrtc")
