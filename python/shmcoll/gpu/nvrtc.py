"""Compile CUDA sources with NVRTC directly through ctypes, without CuPy or a GPU.

CI has no GPU, but it can still prove that every kernel in ``cuda/`` compiles, to
PTX and to CUBIN for the architectures we ship for, with the exact options the runtime
uses, and read what ptxas reports of each kernel (registers, local memory). The NVRTC
library comes from the ``nvidia-cuda-nvrtc-cu12`` wheel (or the system).
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import sys
from dataclasses import dataclass

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


def _compile(source: str, name: str, target: str, extra: tuple[str, ...] = ()) -> tuple[ctypes.c_void_p, str]:
    """A compiled NVRTC program of `source` for `target` and its log (the caller destroys
    the program); raises :class:`NvrtcError` with the log when compilation fails."""
    lib = library()
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), f"{name}.cu".encode(), 0, None, None)
    if rc != 0:
        raise NvrtcError(f"nvrtcCreateProgram({name}) failed with code {rc}")
    opts = [o.encode() for o in (*NVRTC_OPTIONS, target, *extra)]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    text = log.value.decode(errors="replace")
    if rc != 0:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        raise NvrtcError(f"{name}.cu does not compile for {target}:\n{text}")
    return prog, text


def compile_source(source: str, name: str, arch: str, cubin: bool) -> bytes:
    """Compile `source` for sm_`arch` (CUBIN) or compute_`arch` (PTX); returns the image.

    Raises :class:`NvrtcError` with the compiler log when compilation fails.
    """
    lib = library()
    prog, _ = _compile(source, name, f"--gpu-architecture={'sm' if cubin else 'compute'}_{arch}")
    try:
        get_size, get = (
            (lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN) if cubin else (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX)
        )
        size = ctypes.c_size_t()
        get_size(prog, ctypes.byref(size))
        image = ctypes.create_string_buffer(size.value)
        get(prog, image)
        return image.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel: registers per thread, and the bytes of its
    per-thread stack frame and of register spills (both in local memory, which is device
    memory behind the L1 cache: a kernel streaming at memory speed keeps them at 0)."""

    registers: int
    stack: int
    spill_stores: int
    spill_loads: int


_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")


def resources(source: str, name: str, arch: str) -> dict[str, Resources]:
    """Each kernel of `source` compiled for sm_`arch`: its :class:`Resources`."""
    lib = library()
    prog, log = _compile(source, name, f"--gpu-architecture=sm_{arch}", ("--ptxas-options=--verbose",))
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    found: dict[str, Resources] = {}
    kernel, frame = None, None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            kernel, frame = m.group(1), None
        elif m := _FRAME.search(line):
            frame = tuple(int(v) for v in m.groups())
        elif (m := _REGS.search(line)) and kernel is not None and frame is not None:
            found[kernel] = Resources(int(m.group(1)), *frame)
            kernel = None
    if not found:
        raise NvrtcError(f"no ptxas report for {name}.cu in NVRTC's log:\n{log}")
    return found
