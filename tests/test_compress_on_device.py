"""The compressed collectives on device arrays give the host path's bytes.

On the emulated device everywhere (the kernels of cuda/ run on the CPU behind a CuPy
stand-in, tests/cuda_emu/emulation.py) and on a real GPU where one is present (the
``device`` fixture of conftest.py), the real shmcoll code (gpu.available(), the codecs' GPU
path, the staging of compressed bytes between device and host) runs unmodified. Every
compressed collective, the DDP hook's averaging with and without error feedback, every
codec with a kernel, at 2 and 3 ranks, with ragged sizes and buffers at odd element offsets,
must give bitwise what the same call gives on NumPy arrays, and no call may fall back to the
host codecs. On a GPU the hook also takes torch CUDA tensors, as DDP hands it its buckets.
tests/test_gpu_codecs.py and test_gpu_zfp.py check the kernels themselves on a device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import shmcoll
from conftest import Device, check_all, run_ranks
from shmcoll import compress as cz
from shmcoll.codecs import fallback_calls, get_codec
from shmcoll.torch_hooks import CompressionState

pytestmark = pytest.mark.timeout(900)

#: Elements per rank: one, a handful, and sizes that split into ragged chunks and pieces
#: that start off 16-byte boundaries.
SIZES = (1, 10, 2002, 4099)

CODECS = [
    pytest.param({"id": "shmcoll.bq", "bits": 8, "block": 256}, np.float32, id="bq8"),
    pytest.param({"id": "shmcoll.bq", "bits": 4, "block": 64}, np.float32, id="bq4"),
    pytest.param({"id": "shmcoll.cast", "dtype": "bfloat16"}, np.float32, id="bf16"),
    pytest.param({"id": "shmcoll.cast", "dtype": "float16"}, np.float64, id="fp16-f64"),
    pytest.param({"id": "shmcoll.mpc", "dim": 1}, np.float32, id="mpc"),
    pytest.param({"id": "shmcoll.mpc", "dim": 2}, np.float64, id="mpc-f64"),
    pytest.param({"id": "shmcoll.zfp", "rate": 16}, np.float32, id="zfp16"),
]


# -- what each rank runs ------------------------------------------------------------------------
def _data(rank: int, n: int, dtype: Any, salt: int) -> np.ndarray:
    """Smooth values with a few large and tiny ones (a gradient's shape), per rank and call."""
    rng = np.random.default_rng([rank, n, salt])
    x = np.cumsum(rng.standard_normal(n)) * 0.1 + rng.standard_normal(n) * 1e-3
    x[:: max(n // 7, 1)] *= 1e3
    return x.astype(dtype)


def _placed(xp: Any, a: np.ndarray, offset: int) -> Any:
    """`a` as a slice at element `offset` of a larger array of `xp` (so its start is not
    16-byte aligned for odd offsets)."""
    whole = xp.zeros(a.size + offset + 3, a.dtype)
    view = whole[offset : offset + a.size]
    view[...] = xp.asarray(a)
    return view


Run = Callable[[Any, Any, Any, int, Any], list[np.ndarray]]


def _alltoall(comm: Any, xp: Any, codec: Any, n: int, dt: Any) -> list[np.ndarray]:
    s = _placed(xp, _data(comm.rank, comm.size * n, dt, 1), 1)
    r = _placed(xp, np.zeros(comm.size * n, dt), 3)
    cz.alltoall(comm, s, r, codec)
    return [r]


def _allgather(comm: Any, xp: Any, codec: Any, n: int, dt: Any) -> list[np.ndarray]:
    s = _placed(xp, _data(comm.rank, n, dt, 2), 3)
    r = _placed(xp, np.zeros(comm.size * n, dt), 1)
    cz.allgather(comm, s, r, codec)
    return [r]


def _bcast(comm: Any, xp: Any, codec: Any, n: int, dt: Any) -> list[np.ndarray]:
    b = _placed(xp, _data(comm.rank, n, dt, 3), 1)
    cz.bcast(comm, b, comm.size - 1, codec)
    return [b]


def _allreduce(comm: Any, xp: Any, codec: Any, n: int, dt: Any) -> list[np.ndarray]:
    s = _placed(xp, _data(comm.rank, n, dt, 4), 1)
    r = _placed(xp, np.zeros(n, dt), 0)
    cz.allreduce(comm, s, r, codec)
    return [r]


def _comm_allreduce(comm: Any, xp: Any, codec: Any, n: int, dt: Any) -> list[np.ndarray]:
    """The communicator's own method with compress=, as applications call it."""
    r = xp.zeros(n, dt)
    comm.Allreduce(xp.asarray(_data(comm.rank, n, dt, 6)), r, compress=codec)
    return [r]


def _reduce_scatter(comm: Any, xp: Any, codec: Any, n: int, dt: Any) -> list[np.ndarray]:
    s = _placed(xp, _data(comm.rank, comm.size * n, dt, 7), 3)
    r = _placed(xp, np.zeros(n, dt), 1)
    cz.reduce_scatter_block(comm, s, r, codec)
    return [r]


def _hook(feedback: bool) -> Run:
    """The DDP hook's averaging (compressed Allreduce, then / size); with error feedback two
    steps, the second sending the first's residual, which must match too."""

    def run(comm: Any, xp: Any, codec: Any, n: int, dt: Any) -> list[np.ndarray]:
        state = CompressionState(comm, codec=codec, error_feedback=feedback)
        steps = 2 if feedback else 1
        outs = [state.average(xp.asarray(_data(comm.rank, n, dt, 8 + step)), 0) for step in range(steps)]
        assert state.compressed_calls == steps
        return outs + ([state.feedback[0].residual] if feedback else [])

    return run


class Foreign:
    """Another library's array as the collectives see torch tensors or JAX arrays: DLPack
    only (no buffer protocol, no CuPy type), on the host or, over a device array, on a
    CUDA device (`index`); it exports `a`'s own memory."""

    def __init__(self, a: Any, index: int = 0) -> None:
        self._a = a
        self._kind = 1 if type(a) is np.ndarray else 2
        self._index = index

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self._kind, self._index)


def _foreign_allreduce(comm: Any, xp: Any, codec: Any, n: int, dt: Any) -> list[np.ndarray]:
    """Allreduce between DLPack producers: the sum lands in the receiving tensor's memory,
    equal to the same call's on the arrays themselves."""
    s = _placed(xp, _data(comm.rank, n, dt, 10), 1)
    r = _placed(xp, np.zeros(n, dt), 3)
    cz.allreduce(comm, Foreign(s), Foreign(r), codec)
    plain = xp.zeros(n, dt)
    cz.allreduce(comm, s, plain, codec)
    assert _host(r) == _host(plain), "the DLPack call's result differs from the arrays' own"
    return [r]


def _foreign_alltoall(comm: Any, xp: Any, codec: Any, n: int, dt: Any) -> list[np.ndarray]:
    s = _placed(xp, _data(comm.rank, comm.size * n, dt, 11), 0)
    r = xp.zeros(comm.size * n, dt)
    cz.alltoall(comm, Foreign(s), Foreign(r), codec)
    plain = xp.zeros(comm.size * n, dt)
    cz.alltoall(comm, s, plain, codec)
    assert _host(r) == _host(plain), "the DLPack call's result differs from the arrays' own"
    return [r]


CASES: dict[str, Run] = {
    "Alltoall": _alltoall,
    "Allgather": _allgather,
    "Bcast": _bcast,
    "Allreduce": _allreduce,
    "comm.Allreduce(compress=)": _comm_allreduce,
    "Reduce_scatter_block": _reduce_scatter,
    "hook": _hook(False),
    "hook+feedback": _hook(True),
    "Allreduce(DLPack)": _foreign_allreduce,
    "Alltoall(DLPack)": _foreign_alltoall,
}


def _host(a: Any) -> bytes:
    return np.asarray(a).view(np.ndarray).tobytes()


def _rank_compares(cfg: dict[str, Any], dtype: Any, sizes: tuple[int, ...]) -> list[str]:
    # CuPy, or the stand-in inherited from the parent (its `launches` records each kernel).
    import cupy  # type: ignore[import-not-found]

    comm = shmcoll.Comm()
    codec = cz.as_raw_codec(get_codec(dict(cfg)))
    bad: list[str] = []
    from shmcoll.gpu import kernels

    before = dict(fallback_calls)
    launched = len(getattr(cupy, "launches", ()))
    looked_up = kernels.load_module.cache_info().hits
    for n in sizes:
        for name, run in CASES.items():
            host = run(comm, np, codec, n, dtype)
            dev = run(comm, cupy, codec, n, dtype)
            for k, (h, d) in enumerate(zip(host, dev, strict=True)):
                if type(d).__module__.split(".")[0] != "cupy":
                    bad.append(f"{name} n={n}: result {k} is a {type(d).__name__}, not a device array")
                elif _host(h) != _host(d):
                    bad.append(f"{name} n={n}: result {k} differs from the host path's")
    if fallback_calls != before:
        bad.append(f"device calls fell back to the host codecs: {fallback_calls}")
    if hasattr(cupy, "launches") and len(cupy.launches) == launched:
        bad.append("no kernel ran")
    if kernels.load_module.cache_info().hits == looked_up:  # on a GPU too: the wrappers ran
        bad.append("no kernel was looked up: the GPU codecs never ran")
    comm.Barrier()
    return bad


@pytest.mark.parametrize("cfg,dtype", CODECS)
@pytest.mark.parametrize("ranks", [2, 3])
def test_compressed_collectives_on_the_device_match_the_host(
    device: Device, cfg: dict[str, Any], dtype: Any, ranks: int
) -> None:
    # On the emulation, every size at 2 ranks; at 3 (where Allreduce's chunks of n = 1 are
    # empty on two ranks, and n = 4099 splits 1367/1366/1366) the smallest and the largest:
    # each kernel launch of the emulation starts hundreds of threads. mpc's kernels meet at
    # a barrier per warp step, which makes them ~20x slower to emulate than the others':
    # their sizes stop at two chunks of 1024 words (n = 2002) at 2 ranks and at 10 at 3
    # ranks. A GPU takes every size at every rank count.
    if device.kind == "gpu":
        sizes = SIZES
    elif cfg["id"] == "shmcoll.mpc":
        sizes = SIZES[:3] if ranks == 2 else SIZES[:2]
    else:
        sizes = SIZES if ranks == 2 else (SIZES[0], SIZES[-1])
    # A real GPU takes seconds: a stuck call there must not eat a short lease.
    timeout = 600 if device.kind == "emulated" else 120
    got = run_ranks(
        ranks, _rank_compares, cfg, dtype, sizes, timeout=timeout, start_method=device.start_method
    )
    check_all(got)


def _rank_mismatch(cfg: dict[str, Any]) -> str:
    """Rank 1 passes another codec of the same stream size than rank 0: both raise, on
    device arrays too."""
    import cupy  # type: ignore[import-not-found]

    comm = shmcoll.Comm()
    codec = get_codec(dict(cfg) if comm.rank == 0 else {"id": "shmcoll.cast", "dtype": "float16"})
    r = cupy.zeros(64, np.float32)
    try:
        cz.allreduce(comm, cupy.asarray(_data(comm.rank, 64, np.float32, 9)), r, codec)
    except shmcoll.ShmcollError as e:
        return type(e).__name__
    return "no error"


def test_ranks_that_disagree_on_the_codec_raise_on_device_arrays(device: Device) -> None:
    cfg = {"id": "shmcoll.cast", "dtype": "bfloat16"}
    got = run_ranks(2, _rank_mismatch, cfg, start_method=device.start_method)
    assert got == ["MismatchError", "MismatchError"]


# -- torch CUDA tensors through the DDP hook (a real GPU only) ----------------------------------
class _Bucket:
    """What compressed_allreduce_hook reads of DDP's GradBucket: the flat gradient tensor
    and the bucket's index."""

    def __init__(self, tensor: Any, index: int) -> None:
        self._tensor, self._index = tensor, index

    def buffer(self) -> Any:
        return self._tensor

    def index(self) -> int:
        return self._index


def _rank_torch_hook(cfg: dict[str, Any], dtype: Any, sizes: tuple[int, ...]) -> list[str]:
    """Two steps of the hook on a CUDA bucket, with and without error feedback, against the
    host path's averaging of the same gradients. The bucket is filled late, on a stream of
    torch's own made current (as a backward pass on a side stream fills it) and behind a
    GPU-side wait: a hook whose kernels did not follow torch's current stream would read
    the bucket before it is written."""
    import torch  # type: ignore[import-not-found,unused-ignore]

    from shmcoll.torch_hooks import compressed_allreduce_hook

    comm = shmcoll.Comm()
    codec = cz.as_raw_codec(get_codec(dict(cfg)))
    bad: list[str] = []
    before = dict(fallback_calls)
    side = torch.cuda.Stream()
    for n in sizes:
        for feedback in (False, True):
            host = CompressionState(comm, codec=codec, error_feedback=feedback)
            dev = CompressionState(comm, codec=codec, error_feedback=feedback)
            for step in range(2):
                x = _data(comm.rank, n, dtype, 20 + step)
                want = host.average(x.copy(), 3)
                with torch.cuda.stream(side):
                    bucket = torch.zeros(n, dtype=torch.from_numpy(x).dtype, device="cuda")
                    torch.cuda._sleep(20_000_000)  # about 10 ms of GPU time first
                    bucket.copy_(torch.from_numpy(x).pin_memory(), non_blocking=True)
                    got = compressed_allreduce_hook(dev, _Bucket(bucket, 3)).wait()
                torch.cuda.synchronize()
                if got.data_ptr() != bucket.data_ptr() or got.cpu().numpy().tobytes() != want.tobytes():
                    bad.append(f"n={n} feedback={feedback} step {step}: differs from the host path's")
            if dev.compressed_calls != 2:
                bad.append(f"n={n}: {dev.compressed_calls} compressed calls, not 2")
        # The collective itself on torch CUDA tensors (by DLPack), written late on the side
        # stream too: the call must wait for them, and its result must be there for torch.
        x = _data(comm.rank, n, dtype, 30)
        want = np.zeros(n, dtype)
        cz.allreduce(comm, x, want, codec)
        with torch.cuda.stream(side):
            send = torch.zeros(n, dtype=torch.from_numpy(x).dtype, device="cuda")
            torch.cuda._sleep(20_000_000)
            send.copy_(torch.from_numpy(x).pin_memory(), non_blocking=True)
            out = torch.zeros_like(send)
            cz.allreduce(comm, send, out, codec)
            got_host = out.cpu().numpy()  # on the side stream, right after the call
        if got_host.tobytes() != want.tobytes():
            bad.append(f"n={n}: Allreduce of torch CUDA tensors differs from the host path's")
    if fallback_calls != before:
        bad.append(f"device calls fell back to the host codecs: {fallback_calls}")
    return bad


@pytest.mark.gpu
@pytest.mark.parametrize("cfg,dtype", CODECS)
def test_torch_cuda_tensors_match_the_host(cfg: dict[str, Any], dtype: Any) -> None:
    from shmcoll import gpu

    torch = pytest.importorskip("torch")
    if not gpu.available() or not torch.cuda.is_available():
        pytest.skip(f"needs a GPU that CuPy and torch see: {gpu.unavailable() or 'torch sees none'}")
    check_all(run_ranks(2, _rank_torch_hook, cfg, dtype, SIZES, timeout=180, start_method="spawn"))


# -- other libraries' CUDA tensors: the device and the stream ----------------------------
def test_a_call_on_foreign_cuda_tensors_synchronises_the_stream(emulated: Any) -> None:
    """The tensor's library may go on on any stream of its own: the call waits for the
    work it queued on CuPy's, and only when a foreign CUDA tensor took part."""
    from shmcoll.compress.device import foreign_cuda

    stream = emulated.cuda.get_current_stream()
    before = stream.synchronized
    foreign_cuda(lambda *a: None)(Foreign(emulated.zeros(4, np.float32)))
    assert stream.synchronized == before + 1
    foreign_cuda(lambda *a: None)(emulated.zeros(4, np.float32), np.zeros(4, np.float32))
    assert stream.synchronized == before + 1


def _rank_other_device() -> str:
    """Rank 1's tensors are on CUDA device 1, which the emulation lacks: its call must fail
    inside the agreement, so that rank 0 fails too instead of waiting."""
    import cupy

    comm = shmcoll.Comm()
    index = 1 if comm.rank == 1 else 0
    x = Foreign(cupy.asarray(_data(comm.rank, 64, np.float32, 12)), index)
    r = Foreign(cupy.zeros(64, np.float32), index)
    try:
        cz.allreduce(comm, x, r, get_codec({"id": "shmcoll.cast", "dtype": "bfloat16"}))
    except shmcoll.ShmcollError as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


def test_a_tensor_on_a_device_the_call_cannot_use_fails_on_every_rank(emulated: Any) -> None:
    got = run_ranks(2, _rank_other_device)
    assert got[0].startswith("PeerRejectedError"), got
    assert got[1].startswith("ArgumentError") and "one CUDA device" in got[1], got
