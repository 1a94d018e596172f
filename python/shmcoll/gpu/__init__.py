"""The GPU side of shmcoll's codecs: CUDA kernels (``cuda/*.cu``) compiled at run
time by NVRTC through CuPy's ``RawModule``.

Nothing here imports CuPy or touches a device at import time: :func:`available` says
whether a GPU path can run, and the codec classes fall back to the Rust codecs (the
byte-exact reference) when it cannot.
"""

from __future__ import annotations

from .kernels import KERNEL_NAMES, NVRTC_OPTIONS, available, kernel_source, load_module, unavailable

__all__ = ["KERNEL_NAMES", "NVRTC_OPTIONS", "available", "kernel_source", "load_module", "unavailable"]
