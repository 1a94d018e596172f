"""A NumPy-backed stand-in for the part of CuPy that shmcoll uses, so that the GPU code paths
(the codec wrappers in shmcoll/gpu, the compressed collectives, the DDP hook, ``shmcoll
selftest --gpu``) run unmodified on a machine without a GPU.

Put this directory's parent on PYTHONPATH (a subprocess then imports it as ``cupy``), or load
it under the name ``cupy`` in-process (tests/cuda_emu/emulation.py does both). Kernels are
the very sources of cuda/ compiled for the CPU (tests/cuda_emu/driver.cpp through shim.h):
``RawModule`` loads the shared library named by ``CUPY_STANDIN_LIB`` and runs a kernel
through its ``emu_run`` entry point, after checking the arguments against the kernel's
signature. Everything is synchronous; streams, events and pinned memory are real objects
with identities, so that tests can check which kernels ran on which stream and geometry
(:data:`launches`), when buffers are allocated (:data:`allocations`) and freed.
"""

from __future__ import annotations

import ctypes
import functools
import os
import types
from typing import Any, NamedTuple

import numpy as np


class Launch(NamedTuple):
    """One kernel launch: its name, the pointer of the stream current at the launch, and
    its geometry (blocks, threads per block)."""

    name: str
    stream: int
    grid: int
    block: int


#: Every kernel launch, in order.
launches: list[Launch] = []
#: Bytes of every device allocation (cupy.empty and friends), in order.
allocations: list[int] = []


class ndarray(np.ndarray):  # CuPy's name
    """Device array: host memory, with CuPy's transfer methods and ``data.ptr``."""

    @property
    def data(self) -> Any:  # type: ignore[override]
        return types.SimpleNamespace(ptr=self.ctypes.data)

    def get(self, stream: Any = None, order: str = "C", out: Any = None, blocking: bool = True) -> np.ndarray:
        if out is None:
            return np.array(self).view(np.ndarray)
        out[...] = np.asarray(self).view(np.ndarray)
        return out

    def set(self, arr: Any, stream: Any = None) -> None:
        self[...] = arr


def _dev(a: Any) -> ndarray:
    return np.asarray(a).view(ndarray)


def _alloc(a: np.ndarray) -> ndarray:
    allocations.append(int(a.nbytes))
    return a.view(ndarray)


def asarray(a: Any, dtype: Any = None) -> ndarray:
    if isinstance(a, ndarray) and (dtype is None or a.dtype == dtype):
        return a
    return _alloc(np.array(a, dtype=dtype))


def ascontiguousarray(a: Any) -> ndarray:
    if isinstance(a, ndarray) and a.flags.c_contiguous:
        return a
    return _alloc(np.ascontiguousarray(a))


def asnumpy(
    a: Any, stream: Any = None, order: str = "C", out: Any = None, blocking: bool = True
) -> np.ndarray:
    if out is not None:
        out[...] = np.asarray(a).view(np.ndarray)
        return out
    return np.array(a).view(np.ndarray)


def empty(shape: Any, dtype: Any = float) -> ndarray:
    return _alloc(np.empty(shape, dtype))


def zeros(shape: Any, dtype: Any = float) -> ndarray:
    return _alloc(np.zeros(shape, dtype))


def empty_like(a: Any, dtype: Any = None) -> ndarray:
    return _alloc(np.empty_like(np.asarray(a), dtype=dtype))


def zeros_like(a: Any, dtype: Any = None) -> ndarray:
    return _alloc(np.zeros_like(np.asarray(a), dtype=dtype))


def concatenate(xs: Any) -> ndarray:
    return _alloc(np.concatenate([np.asarray(x) for x in xs]))


def array_equal(a: Any, b: Any) -> bool:
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def from_dlpack(x: Any) -> ndarray:
    return _dev(np.from_dlpack(x))


dtype = np.dtype
uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64
int32, int64, float16, float32, float64 = np.int32, np.int64, np.float16, np.float32, np.float64


# -- cupy.cuda --------------------------------------------------------------------------------
class _Stream:
    """A stream: an identity (``ptr``) that can be made current with ``with`` or ``use()``."""

    _next = 0x1000

    def __init__(self, non_blocking: bool = False, ptr: int | None = None) -> None:
        if ptr is None:
            _Stream._next += 0x10
            ptr = _Stream._next
        self.ptr = ptr
        self._saved: list[_Stream] = []
        #: How many times synchronize() was called (for tests of who waits on a stream).
        self.synchronized = 0

    def use(self) -> _Stream:
        _current[0] = self
        return self

    def synchronize(self) -> None:
        """Everything here runs synchronously: only counted."""
        self.synchronized += 1

    def __enter__(self) -> _Stream:
        self._saved.append(_current[0])
        _current[0] = self
        return self

    def __exit__(self, *exc: object) -> None:
        _current[0] = self._saved.pop()


class _ExternalStream(_Stream):
    def __init__(self, ptr: int, device_id: int = -1) -> None:
        super().__init__(ptr=ptr)


class _Device:
    """A device: the only one, 0; usable as a context manager as CuPy's."""

    def __init__(self, device: int | None = None) -> None:
        if device not in (None, 0):
            raise RuntimeError(f"cudaErrorInvalidDevice: the emulation has device 0 only, not {device}")
        self.id = 0

    def __enter__(self) -> _Device:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


_null = _Stream(ptr=0)
_current: list[_Stream] = [_null]


def _get_current_stream() -> _Stream:
    return _current[0]


class _Event:
    """An event: records the host clock (every operation is done when it is issued)."""

    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False) -> None:
        self.time: float | None = None
        self.stream: _Stream | None = None
        self.waits = 0

    def record(self, stream: _Stream | None = None) -> None:
        import time

        self.stream = stream or _current[0]
        self.time = time.perf_counter()

    def synchronize(self) -> None:
        """Recorded work is complete (synchronous emulation); counted in ``waits``."""
        self.waits += 1

    @property
    def done(self) -> bool:
        return True


def _get_elapsed_time(start: _Event, end: _Event) -> float:
    if start.time is None or end.time is None:
        raise RuntimeError("cudaErrorInvalidResourceHandle: an event was not recorded")
    return (end.time - start.time) * 1e3


class _PinnedMemory:
    """Page-locked host memory (plain memory here); counts the bytes alive."""

    live_bytes = 0

    def __init__(self, size: int, flags: int = 0) -> None:
        self.size = int(size)
        _PinnedMemory.live_bytes += self.size

    def __del__(self) -> None:
        _PinnedMemory.live_bytes -= self.size


class _PinnedMemoryPointer(bytearray):
    """The bytes of a pinned allocation from `offset` on (a bytearray, so that NumPy can
    view it as CuPy's pointer allows); holds its allocation alive."""

    def __init__(self, mem: _PinnedMemory, offset: int) -> None:
        super().__init__(max(mem.size - offset, 0))
        self.mem = mem
        self.ptr = ctypes.addressof((ctypes.c_char * max(len(self), 1)).from_buffer(self)) if len(self) else 0

    def size(self) -> int:  # type: ignore[override]
        return len(self)


def _alloc_pinned_memory(size: int) -> _PinnedMemoryPointer:
    return _PinnedMemoryPointer(_PinnedMemory(size), 0)


class _MemoryPool:
    def used_bytes(self) -> int:
        return 0

    def free_all_blocks(self) -> None:
        """Nothing is cached."""


_pool = _MemoryPool()


def get_default_memory_pool() -> _MemoryPool:
    return _pool


# -- kernels ------------------------------------------------------------------------------------
@functools.cache
def _library() -> ctypes.CDLL:
    """The CPU build of the kernels (tests/cuda_emu/driver.cpp)."""
    path = os.environ.get("CUPY_STANDIN_LIB")
    if not path:
        raise RuntimeError("the CuPy stand-in needs CUPY_STANDIN_LIB (the emulated kernels' library)")
    lib = ctypes.CDLL(path)
    lib.emu_kernels.restype = ctypes.c_char_p
    lib.emu_signature.restype = ctypes.c_char_p
    lib.emu_signature.argtypes = [ctypes.c_char_p]
    lib.emu_run.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p]
    return lib


def kernel_names() -> frozenset[str]:
    """The kernels the emulation runs."""
    return frozenset(_library().emu_kernels().decode().split())


#: Kernel argument types as the driver's signatures name them ("p8" a pointer, "u8" an
#: unsigned 64-bit integer, ...), with the ctypes value that carries each.
_SCALARS: dict[type, tuple[str, Any]] = {
    np.uint64: ("u8", ctypes.c_uint64),
    np.uint32: ("u4", ctypes.c_uint32),
    np.int64: ("i8", ctypes.c_int64),
    np.int32: ("i4", ctypes.c_int32),
    np.float32: ("f4", ctypes.c_float),
    np.float64: ("f8", ctypes.c_double),
}


def _pack(a: Any) -> tuple[str, Any]:
    """A kernel argument's kind and its value as ctypes holds it (CuPy's rules: device
    arrays by pointer, NumPy scalars by value)."""
    if isinstance(a, np.ndarray):
        return "p8", ctypes.c_void_p(a.ctypes.data)
    if type(a) in _SCALARS:
        kind, ctype = _SCALARS[type(a)]
        return kind, ctype(a.item())
    raise TypeError(f"kernel argument of type {type(a).__name__}")


class RawModule:
    """cupy.RawModule over the emulation: the source is ignored (the library holds the
    same sources compiled for the CPU); a kernel it lacks fails at get_function, as a
    missing symbol fails on a device."""

    def __init__(self, code: str = "", options: tuple[str, ...] = (), backend: str = "nvrtc") -> None:
        self.options = options

    def compile(self) -> None:
        _library()

    def get_function(self, name: str) -> Any:
        lib = _library()
        sig = lib.emu_signature(name.encode())
        if sig is None:
            raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: {name} (not in the emulation)")
        want = sig.decode().split()

        def launch(grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...], **_: Any) -> None:
            packed = [_pack(a) for a in args]
            kinds = [k for k, _ in packed]
            if kinds != want:
                raise TypeError(f"{name} takes ({' '.join(want)}), was given ({' '.join(kinds)})")
            launches.append(Launch(name, _current[0].ptr, grid[0], block[0]))
            ptrs = (ctypes.c_void_p * max(len(packed), 1))(*[ctypes.addressof(v) for _, v in packed])
            if lib.emu_run(name.encode(), grid[0], block[0], ptrs) != 0:
                raise RuntimeError(f"the emulation has no kernel {name}")

        return launch


cuda = types.ModuleType("cupy.cuda")
cuda.runtime = types.SimpleNamespace(  # type: ignore[attr-defined]
    getDeviceCount=lambda: 1,
    getDevice=lambda: 0,
    getDeviceProperties=lambda _device: {"name": b"CPU emulation of the CUDA kernels"},
)
cuda.Stream = _Stream  # type: ignore[attr-defined]
cuda.Device = _Device  # type: ignore[attr-defined]
cuda.ExternalStream = _ExternalStream  # type: ignore[attr-defined]
cuda.get_current_stream = _get_current_stream  # type: ignore[attr-defined]
cuda.Event = _Event  # type: ignore[attr-defined]
cuda.get_elapsed_time = _get_elapsed_time  # type: ignore[attr-defined]
cuda.PinnedMemory = _PinnedMemory  # type: ignore[attr-defined]
cuda.PinnedMemoryPointer = _PinnedMemoryPointer  # type: ignore[attr-defined]
cuda.alloc_pinned_memory = _alloc_pinned_memory  # type: ignore[attr-defined]
