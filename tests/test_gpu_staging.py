"""Streams and memory of the GPU path (shmcoll/gpu/staging.py, compress/device.py, the DDP
hook), as far as the CuPy stand-in over the CPU-built kernels can show them: which stream
each kernel launch was given, that a repeated collective allocates nothing new, and the
page-locked pool's bound, shrink and idle release."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

import shmcoll
from conftest import run_ranks
from shmcoll import compress as cz
from shmcoll.codecs import Bq, Mpc
from shmcoll.errors import ArgumentError


@pytest.fixture
def cupy(emulated: Any) -> Any:
    """The CuPy stand-in (conftest's ``emulated``), by the name these tests use it under."""
    return emulated


# -- streams ---------------------------------------------------------------------------------
def test_codec_kernels_run_on_the_callers_current_stream(cupy: Any) -> None:
    x = cupy.asarray(np.cumsum(np.ones(3000, np.float32)))
    for codec in (Bq(bits=8), Mpc()):
        s = cupy.cuda.Stream(non_blocking=True)
        first = len(cupy.launches)
        with s:
            out = codec.decode_raw(codec.encode_raw(x), np.float32, x.size)
        streams = {launch.stream for launch in cupy.launches[first:]}
        assert streams == {s.ptr}, codec
        assert isinstance(out, cupy.ndarray)


def _rank_streams() -> tuple[set[int], int, bool]:
    import cupy  # type: ignore[import-not-found]

    comm = shmcoll.Comm()
    x = cupy.asarray(np.arange(5000, dtype=np.float32) * (comm.rank + 1))
    out = cupy.zeros(5000, np.float32)
    s = cupy.cuda.Stream(non_blocking=True)
    first = len(cupy.launches)
    with s:
        cz.allreduce(comm, x, out, Bq(bits=8))
    host = np.zeros(5000, np.float32)
    cz.allreduce(comm, np.asarray(x).view(np.ndarray), host, Bq(bits=8))
    return (
        {launch.stream for launch in cupy.launches[first:]},
        s.ptr,
        host.tobytes() == np.asarray(out).tobytes(),
    )


def test_a_collective_issues_every_kernel_on_the_callers_stream(cupy: Any) -> None:
    for streams, mine, same in run_ranks(2, _rank_streams):
        assert streams == {mine}
        assert same


class _FakeTensor:
    """What the hook uses of a CUDA torch tensor, over a NumPy array."""

    is_cuda = True
    device = types.SimpleNamespace(type="cuda", index=0)

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def detach(self) -> np.ndarray:
        return self.a  # cupy.from_dlpack of the stand-in reads it through DLPack

    def copy_(self, src: Any) -> None:
        self.a[...] = np.asarray(src)


def _fake_torch(stream_ptr: int) -> types.ModuleType:
    torch = types.ModuleType("torch")
    current = types.SimpleNamespace(cuda_stream=stream_ptr)
    torch.cuda = types.SimpleNamespace(current_stream=lambda device=None: current)  # type: ignore[attr-defined]
    torch.from_dlpack = lambda x: x  # type: ignore[attr-defined]

    class Future:
        def set_result(self, v: Any) -> None:
            self.v = v

    torch.futures = types.SimpleNamespace(Future=Future)  # type: ignore[attr-defined]
    return torch


def _rank_hook() -> tuple[set[int], bool]:
    import cupy

    from shmcoll.torch_hooks import CompressionState, compressed_allreduce_hook

    sys.modules["torch"] = _fake_torch(0xBEEF0)
    comm = shmcoll.Comm()
    grad = np.linspace(-1, 1, 3001, dtype=np.float32) * (comm.rank + 1)
    bucket = types.SimpleNamespace(buffer=lambda: tensor, index=lambda: 0)
    tensor = _FakeTensor(grad.copy())
    first = len(cupy.launches)
    compressed_allreduce_hook(CompressionState(comm, codec=Bq(bits=8), error_feedback=False), bucket)
    streams = {launch.stream for launch in cupy.launches[first:]}
    want = CompressionState(comm, codec=Bq(bits=8), error_feedback=False).average(grad)
    return streams, tensor.a.tobytes() == want.tobytes()


def test_the_ddp_hook_runs_cupy_on_torchs_current_stream(cupy: Any) -> None:
    for streams, same in run_ranks(2, _rank_hook):
        assert streams == {0xBEEF0}
        assert same


# -- memory ----------------------------------------------------------------------------------
def _rank_reuse() -> list[tuple[int, int, int]]:
    import cupy

    from shmcoll.gpu import staging

    comm = shmcoll.Comm()
    seen = []
    for _ in range(3):
        x = cupy.asarray(np.cumsum(np.full(4099, 1 + comm.rank, np.float32)))
        out = cupy.empty(4099, np.float32)
        cz.allreduce(comm, x, out, Bq(bits=4))
        seen.append((staging.scratch.allocations, staging.scratch.reused, staging.pinned.allocations))
    return seen


def test_a_repeated_collective_reuses_its_device_and_pinned_buffers(cupy: Any) -> None:
    for seen in run_ranks(2, _rank_reuse):
        (a1, r1, p1), (a2, r2, p2), (a3, r3, p3) = seen
        assert a1 > 0 and p1 > 0
        assert (a2, p2) == (a1, p1) and (a3, p3) == (a1, p1), seen
        assert r3 - r2 == r2 - r1 > 0, seen


def test_pinned_buffers_are_reused_then_shrink_after_smaller_calls(cupy: Any) -> None:
    from shmcoll.gpu.staging import WINDOW, PinnedPool

    pool = PinnedPool()
    pool.get("a", 1 << 20)
    pool.get("a", 1 << 20)
    assert pool.allocations == 1 and pool.kept_bytes() == 1 << 20
    for _ in range(WINDOW - 1):
        pool.get("a", 1000)
    assert pool.kept_bytes() == 1 << 20, "the large call is still among the recent ones"
    live = cupy.cuda.PinnedMemory.live_bytes
    pool.get("a", 1000)
    assert pool.kept_bytes() == 1000
    assert cupy.cuda.PinnedMemory.live_bytes == live - (1 << 20) + 1000, "the large buffer was freed"


def test_a_growing_pinned_buffer_gets_headroom(cupy: Any) -> None:
    from shmcoll.gpu.staging import PinnedPool

    pool = PinnedPool()
    pool.get("a", 1000)
    pool.get("a", 1600)
    assert pool.allocations == 2 and pool.kept_bytes() == 1800
    pool.get("a", 1700)
    assert pool.allocations == 2


def test_an_idle_tags_pinned_buffer_is_freed(cupy: Any) -> None:
    from shmcoll.gpu.staging import WINDOW, PinnedPool

    pool = PinnedPool()
    pool.get("idle", 5000)
    for _ in range(WINDOW):
        pool.get("busy", 10)
    assert pool.kept_bytes() == 5010
    pool.get("busy", 10)
    assert pool.kept_bytes() == 10


def test_the_pinned_bound_keeps_nothing_above_it(cupy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from shmcoll.gpu.staging import ENV_PINNED_MAX, PinnedPool

    monkeypatch.setenv(ENV_PINNED_MAX, "3000")
    pool = PinnedPool()
    assert pool.max_bytes() == 3000
    pool.get("a", 2000)
    big = pool.get("b", 2000)
    assert big.size == 2000 and pool.kept_bytes() == 2000, "b served, not kept: 4000 > 3000"
    pool.get("b", 2000)
    assert pool.allocations == 3
    monkeypatch.setenv(ENV_PINNED_MAX, "lots")
    with pytest.raises(ArgumentError, match=ENV_PINNED_MAX):
        PinnedPool().max_bytes()


def test_a_pinned_buffer_is_rewritten_only_after_its_copy_completed(cupy: Any) -> None:
    from shmcoll.gpu.staging import PinnedPool

    pool = PinnedPool()
    pool.get("h2d", 100)
    done = cupy.cuda.Event()
    done.record()
    pool.copied_out("h2d", done)
    assert done.waits == 0
    pool.get("h2d", 100)
    assert done.waits == 1
    over = PinnedPool(max_bytes=10)
    over.get("big", 100)
    late = cupy.cuda.Event()
    late.record()
    over.copied_out("big", late)
    assert late.waits == 1, "a buffer the pool does not keep is waited for at once"
