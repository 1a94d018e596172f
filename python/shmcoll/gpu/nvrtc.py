"""Compile CUDA sources with NVRTC directly through ctypes, without CuPy or a GPU.

CI has no GPU, but it can still prove that every kernel in ``cuda/`` compiles, to
PTX and to CUBIN for the architectures we ship for, with the exact options the runtime
uses. The NVRTC library comes from the ``nvidia-cuda-nvrtc-cu12`` wheel (or the system).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

from .kernels import NVRTC_OPTIONS

#: Architectures the kernels must compile for (A100 and H100/H200).
ARCHS: tuple[str, ...] = ("80", "90")


class NvrtcError(RuntimeError):
    """NVRTC is missing, or a source failed to compile (the message holds NVRTC's log)."""


def _candidates() -> list[str]:
    found: list[str] = []
    if os.environ.get("SHMCOLL_NVRTC"):
        found.append(os.environ["SHMCOLL_NVRTC"])
    for base in sys.path:
        found += sorted(glob.glob(os.path.join(base, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*")))
    found += ["libnvrtc.so.12", "libnvrtc.so"]
    return found


def library() -> ctypes.CDLL:
    """The NVRTC shared library (first of: $SHMCOLL_NVRTC, the pip wheel, the system)."""
    errors = []
    for path in _candidates():
        if "builtins" in os.path.basename(path):
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise NvrtcError("NVRTC not found (pip install nvidia-cuda-nvrtc-cu12): " + "; ".join(errors[-3:]))


def version() -> tuple[int, int]:
    lib = library()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def compile_source(source: str, name: str, arch: str, cubin: bool) -> bytes:
    """Compile `source` for sm_`arch` (CUBIN) or compute_`arch` (PTX); returns the image.

    Raises :class:`NvrtcError` with the compiler log when compilation fails.
    """
    lib = library()
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), f"{name}.cu".encode(), 0, None, None)
    if rc != 0:
        raise NvrtcError(f"nvrtcCreateProgram({name}) failed with code {rc}")
    try:
        target = f"--gpu-architecture={'sm' if cubin else 'compute'}_{arch}"
        opts = [o.encode() for o in (*NVRTC_OPTIONS, target)]
        arr = (ctypes.c_char_p * len(opts))(*opts)
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        if rc != 0:
            text = log.value.decode(errors="replace")
            raise NvrtcError(f"{name}.cu does not compile for {target}:\n{text}")
        get_size, get = (
            (lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN) if cubin else (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX)
        )
        get_size(prog, ctypes.byref(size))
        image = ctypes.create_string_buffer(size.value)
        get(prog, image)
        return image.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
