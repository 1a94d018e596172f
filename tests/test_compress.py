"""Compressed collectives (shmcoll.compress) at 1-4 ranks: the protocol against a NumPy model
of it, bitwise identity of the replicas, errors on every rank, policies and error feedback.

Two codecs defined here keep these tests independent of any one real codec: `Half`
(fixed size, lossy: float32 rounded to float16 by NumPy) and `Deflate` (variable size,
lossless: zlib). With them the expected result of every call is computable exactly, so
each check is a bitwise comparison. The real codecs (shmcoll.codecs) run through the same
collectives in test_codecs_collectives below, against the uncompressed collective
within each codec's error bound."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shmcoll
from conftest import check_all, run_ranks
from shmcoll import compress as cz
from shmcoll.tuning import table

pytestmark = pytest.mark.timeout(120)


class _Half:
    """float32 -> float16 (round to nearest even) -> float32: fixed size, lossy."""

    def __init__(self, tag: int = 0) -> None:
        self.tag = tag

    def get_config(self) -> dict[str, Any]:
        return {"id": "test.half", "tag": self.tag}

    def compressed_size(self, n: int, dtype: Any) -> int:
        return 2 * n

    def encode_raw(self, x: np.ndarray) -> bytes:
        return np.asarray(x, np.float32).astype(np.float16).tobytes()

    def decode_raw(self, buf: Any, dtype: Any, n: int, out: np.ndarray | None = None) -> np.ndarray:
        v = np.frombuffer(buf, np.float16, n).astype(dtype)
        if out is None:
            return v
        out[...] = v
        return out


Half = _Half


class Deflate:
    """zlib of the raw bytes: variable size, lossless."""

    def get_config(self) -> dict[str, Any]:
        return {"id": "test.deflate"}

    def compressed_size(self, n: int, dtype: Any) -> None:
        return None

    def encode_raw(self, x: np.ndarray) -> bytes:
        return zlib.compress(np.ascontiguousarray(x).tobytes(), 1)

    def decode_raw(self, buf: Any, dtype: Any, n: int, out: np.ndarray | None = None) -> np.ndarray:
        v = np.frombuffer(zlib.decompress(bytes(buf)), dtype, n)
        if out is None:
            return v.copy()
        out[...] = v
        return out


CODECS = {"half": Half, "deflate": Deflate}


def q(codec: Any, x: np.ndarray) -> np.ndarray:
    """What one encode/decode round trip of `x` gives."""
    return codec.decode_raw(codec.encode_raw(x), x.dtype, x.size)


def data(rank: int, n: int, salt: int = 0) -> np.ndarray:
    """Gradient-like float32 contribution of `rank` (deterministic, sign-mixed, scaled)."""
    k = np.arange(n, dtype=np.float64)
    v = np.sin(0.37 * k + 1.3 * rank + salt) * (1 + (k % 7)) * 10.0 ** ((rank % 3) - 1)
    return v.astype(np.float32)


def chunks(n: int, p: int) -> list[slice]:
    counts = [n // p + (1 if i < n % p else 0) for i in range(p)]
    out, o = [], 0
    for c in counts:
        out.append(slice(o, o + c))
        o += c
    return out


def model_allreduce(codec: Any, p: int, n: int, salt: int = 0) -> np.ndarray:
    """The compressed Allreduce's result: chunks quantized once per rank, summed in rank
    order, the sum quantized once."""
    out = np.empty(n, np.float32)
    for sl in chunks(n, p):
        acc = q(codec, data(0, n, salt)[sl])
        for r in range(1, p):
            acc = acc + q(codec, data(r, n, salt)[sl])
        out[sl] = q(codec, acc)
    return out


def same(label: str, got: np.ndarray, want: np.ndarray, failures: list[str]) -> None:
    if got.shape != want.shape or got.tobytes() != want.tobytes():
        failures.append(f"{label}: got {got[:4]} want {want[:4]}")


def protocol(name: str, heap: bool) -> tuple[list[str], bytes]:
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    codec = CODECS[name]()
    f: list[str] = []
    digest = b""

    def arr(n: int) -> np.ndarray:
        return comm.zeros(n, np.float32) if heap else np.zeros(n, np.float32)

    for n in (0, 1, 5, 1000, 4099):
        # Alltoall: block j of rank i is data(i)[j-th block]; every block is round-tripped.
        s = arr(p * n)
        s[...] = data(me, p * n)
        r = arr(p * n)
        comm.Alltoall(s, r, compress=codec)
        want = np.concatenate([q(codec, data(j, p * n)[me * n : (me + 1) * n]) for j in range(p)])
        same(f"alltoall n={n}", r, want, f)

        # Allgather: every block decoded on every rank, the own one too.
        g = arr(p * n)
        comm.Allgather(data(me, n), g, compress=codec)
        same(f"allgather n={n}", g, np.concatenate([q(codec, data(j, n)) for j in range(p)]), f)

        # Bcast from the last rank: the root ends with the decoded values as well.
        b = arr(n)
        b[...] = data(7, n) if me == p - 1 else 0
        comm.Bcast(b, root=p - 1, compress=codec)
        same(f"bcast n={n}", b, q(codec, data(7, n)), f)

        # Allreduce (also in place) against the model of the protocol.
        m = n * p + (me == 0) * 0  # vectors of equal length on every rank
        out = arr(m)
        comm.Allreduce(data(me, m), out, compress=codec)
        same(f"allreduce n={m}", out, model_allreduce(codec, p, m), f)
        digest += out.tobytes()
        inplace = arr(m)
        inplace[...] = data(me, m)
        comm.Allreduce(shmcoll.IN_PLACE, inplace, compress=codec)
        same(f"allreduce in place n={m}", inplace, model_allreduce(codec, p, m), f)

        # Reduce_scatter_block: rank i gets the rank-order sum of the decoded blocks i.
        rs = arr(n)
        comm.Reduce_scatter_block(data(me, p * n), rs, compress=codec)
        acc = q(codec, data(0, p * n)[me * n : (me + 1) * n])
        for j in range(1, p):
            acc = acc + q(codec, data(j, p * n)[me * n : (me + 1) * n])
        same(f"reduce_scatter_block n={n}", rs, acc, f)
    return f, digest


@pytest.mark.parametrize("heap", [False, True], ids=["numpy", "heap"])
@pytest.mark.parametrize("name", sorted(CODECS))
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_protocol_matches_model(nranks: int, name: str, heap: bool) -> None:
    results = run_ranks(nranks, protocol, name, heap)
    check_all([r[0] for r in results])
    # Replicas bitwise identical after every Allreduce.
    assert len({r[1] for r in results}) == 1


def lossless_equals_uncompressed() -> list[str]:
    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    f: list[str] = []
    x = np.arange(p * 333, dtype=np.float64) * (me + 1)
    want, got = np.empty_like(x), np.empty_like(x)
    comm.Allreduce(x, want)
    comm.Allreduce(x, got, compress=Deflate())
    same("allreduce float64", got, want, f)
    comm.Alltoall(x, want)
    comm.Alltoall(x, got, compress=Deflate())
    same("alltoall float64", got, want, f)
    return f


def test_lossless_codec_equals_uncompressed() -> None:
    check_all(run_ranks(3, lossless_equals_uncompressed))


def disagreements(case: str, variable: bool = False) -> str:
    comm = shmcoll.Comm()
    me = comm.rank
    Half = Deflate if variable else _Half
    x = np.ones(64, np.float32)
    out = np.empty(64, np.float32)
    try:
        if case == "codec":
            comm.Allreduce(x, out, compress=_Half(tag=me) if not variable else (Deflate() if me else _Half()))
        elif case == "size":
            mine = np.ones(8 + (me == 1), np.float32)
            comm.Allgather(mine, np.empty(8 * comm.size, np.float32), compress=Half())
        elif case == "op":
            comm.Allreduce(x, out, op=shmcoll.MAX if me == 0 else None, compress=Half())
        elif case == "buffer":
            comm.Alltoall(x, np.empty(3 if me == 0 else 64, np.float32), compress=Half())
    except shmcoll.ShmcollError as e:
        comm.Barrier()  # still usable afterwards: every rank left the call
        return type(e).__name__
    return "no error"


@pytest.mark.parametrize(
    ("case", "want"),
    [
        ("codec", {"MismatchError"}),
        ("size", {"ArgumentError", "PeerRejectedError"}),
        ("op", {"UnsupportedError", "PeerRejectedError"}),
        ("buffer", {"ArgumentError", "PeerRejectedError"}),
    ],
)
@pytest.mark.parametrize("variable", [False, True], ids=["fixed", "variable"])
def test_errors_raise_on_every_rank(case: str, want: set[str], variable: bool) -> None:
    got = run_ranks(3, disagreements, case, variable)
    assert "no error" not in got, got
    assert set(got) <= want, got


def dtype_disagreements(case: str) -> str:
    """Rank 0 passes float32, the others float64, with the same counts: zfp's streams of
    the two types have the same size at one rate, so only the dtype tells them apart."""
    from shmcoll.codecs import Bq, Zfp

    comm = shmcoll.Comm()
    p = comm.size
    dt = np.float32 if comm.rank == 0 else np.float64
    zfp = Zfp(16)
    try:
        if case == "alltoall":
            comm.Alltoall(np.ones(8 * p, dt), np.empty(8 * p, dt), compress=zfp)
        elif case == "allgather":
            comm.Allgather(np.ones(8, dt), np.empty(8 * p, dt), compress=zfp)
        elif case == "allreduce":
            comm.Allreduce(np.ones(64, dt), np.empty(64, dt), compress=zfp)
        elif case == "reduce_scatter":
            comm.Reduce_scatter_block(np.ones(8 * p, dt), np.empty(8, dt), compress=zfp)
        elif case == "bcast":
            comm.Bcast(np.ones(64, dt), root=0, compress=zfp)
        elif case == "bcast-bq":  # float64 is no Bq input: the other ranks' buffers are bad
            comm.Bcast(np.ones(64, dt), root=0, compress=Bq(bits=8))
    except shmcoll.ShmcollError as e:
        comm.Barrier()  # still usable afterwards: every rank left the call
        return type(e).__name__
    return "no error"


@pytest.mark.parametrize(
    ("case", "want"),
    [
        ("alltoall", {"MismatchError"}),
        ("allgather", {"MismatchError"}),
        ("allreduce", {"MismatchError"}),
        ("reduce_scatter", {"MismatchError"}),
        ("bcast", {"MismatchError"}),
        ("bcast-bq", {"CodecError", "PeerRejectedError"}),
    ],
)
def test_ranks_disagreeing_on_the_dtype_raise_on_every_rank(case: str, want: set[str]) -> None:
    got = run_ranks(3, dtype_disagreements, case)
    assert "no error" not in got, got
    assert set(got) <= want, got
    if case == "bcast-bq":
        assert got[0] == "PeerRejectedError", got  # the root too: its peers refused


def engine_calls(variable: bool) -> list[int]:
    """Collective calls each compressed operation makes."""
    comm = shmcoll.Comm()
    codec: Any = Deflate() if variable else Half()
    p = comm.size
    x = data(comm.rank, 64 * p)
    out = np.empty_like(x)
    calls = []
    for op in (
        lambda: comm.Alltoall(x, out, compress=codec),
        lambda: comm.Allgather(x[:64], out, compress=codec),
        lambda: comm.Allreduce(x, out, compress=codec),
        lambda: comm.Reduce_scatter_block(x, out[:64], compress=codec),
    ):
        before = comm.stats()["calls"]
        op()
        calls.append(comm.stats()["calls"] - before)
    return calls


def test_fixed_size_codecs_need_no_size_exchange() -> None:
    # Alltoall, Allgather, Allreduce (two stages), Reduce_scatter_block
    assert run_ranks(2, engine_calls, False)[0] == [1, 1, 2, 1]
    assert run_ranks(2, engine_calls, True)[0] == [2, 2, 4, 2]


def policies() -> list[str]:
    comm = shmcoll.Comm()
    f: list[str] = []
    big = np.linspace(-1, 1, 40_000, dtype=np.float32)
    out = np.empty_like(big)
    # No policy for the class: uncompressed (the exact sum).
    with cz.use_policy("none"):
        comm.Allreduce(big, out, traffic="dp")
        same("policy none", out, big * comm.size if comm.size > 1 else big, f)
    before = cz.stats().get("allreduce", {}).get("calls", 0)
    half = cz.Policy("half", {"dp": Half()}, min_bytes=1024)
    with cz.use_policy(half):
        # Below min_bytes: uncompressed, and no codec is even looked up.
        small = np.ones(16, np.float32)
        s_out = np.empty_like(small)
        comm.Allreduce(small, s_out, traffic="dp")
        same("below min_bytes", s_out, small * comm.size, f)
        # Another class without a codec: uncompressed.
        comm.Allreduce(big, out, traffic="tp")
        if cz.stats().get("allreduce", {}).get("calls", 0) != before:
            f.append("tp traffic was compressed by a policy that names only dp")
        # The named class above the threshold: compressed with the policy's codec.
        comm.Allreduce(big, out, traffic="dp")
        if cz.stats().get("allreduce", {}).get("calls", 0) != before + 1:
            f.append("dp traffic above min_bytes was not compressed")
        want = np.empty_like(big)
        for sl in chunks(big.size, comm.size):
            acc = q(Half(), big[sl])
            for _ in range(1, comm.size):
                acc = acc + q(Half(), big[sl])
            want[sl] = q(Half(), acc)
        same("policy half", out, want, f)
    return f


def test_policies_route_by_class_and_size() -> None:
    check_all(run_ranks(2, policies))


def test_policy_presets_and_validation() -> None:
    assert cz.get_policy().name in cz.PRESETS
    assert cz.preset("hybrid").config_for("dp", 1 << 20) == {"id": "shmcoll.bq", "bits": 8, "block": 256}
    assert cz.preset("hybrid").config_for("zero", 1 << 20) == {"id": "shmcoll.mpc"}
    assert cz.preset("hybrid").config_for("dp", 16) is None  # below min_bytes
    assert all(cfg == {"id": "shmcoll.zfp", "rate": 16} for cfg in cz.uniform().codecs.values())
    assert cz.none().config_for("dp", 1 << 30) is None
    with pytest.raises(shmcoll.ArgumentError, match="unknown traffic class"):
        cz.Policy("bad", {"xx": None})
    with pytest.raises(shmcoll.ArgumentError, match="unknown compression policy"):
        cz.set_policy("fastest")
    with pytest.raises(shmcoll.ArgumentError, match="unknown traffic class"):
        cz.get_policy().config_for("dq", 10)
    old = cz.set_policy("hybrid")
    try:
        with cz.use_policy("uniform") as p:
            assert p.name == "uniform" and cz.get_policy() is p
        assert cz.get_policy().name == "hybrid"
    finally:
        cz.set_policy(old)
    assert [t for t, _ in cz.hybrid().describe()] == list(cz.TRAFFIC_CLASSES)


def feedback_steps(steps: int) -> tuple[float, float]:
    """Relative error of the sum over steps of compressed Allreduce results against the
    exact sums, without and with error feedback."""
    comm = shmcoll.Comm()
    codec = Half()
    ef = cz.ErrorFeedback()
    n = 4096
    exact = np.zeros(n, np.float64)
    plain = np.zeros(n, np.float64)
    fed = np.zeros(n, np.float64)
    out = np.empty(n, np.float32)
    for t in range(steps):
        # Small gradient-like values whose float16 rounding error is systematic.
        x = (data(comm.rank, n, salt=t) * 1e-3 + 1e-4).astype(np.float32)
        total = np.empty(n, np.float32)
        comm.Allreduce(x, total)
        exact += total
        cz.allreduce(comm, x, out, codec)
        plain += out
        cz.allreduce(comm, x, out, codec, feedback=ef)
        fed += out
    norm = float(np.linalg.norm(exact))
    return float(np.linalg.norm(plain - exact)) / norm, float(np.linalg.norm(fed - exact)) / norm


def test_error_feedback_reduces_accumulated_error() -> None:
    plain, fed = run_ranks(2, feedback_steps, 40)[0]
    assert fed < plain / 2, (plain, fed)


def test_resolve_codec_arguments() -> None:
    h = Half()
    assert cz.resolve_codec(h, None, 10) is h
    assert cz.resolve_codec(None, None, 10) is None
    with pytest.raises(shmcoll.ArgumentError, match="compress= takes"):
        cz.resolve_codec(42, None, 10)
    assert cz.codec_key(Half(1)) != cz.codec_key(Half(2))
    assert cz.codec_key(Half(1)) == cz.codec_key(Half(1))


def hook_average() -> list[str]:
    from shmcoll.torch_hooks import CompressionState

    comm = shmcoll.Comm()
    p = comm.size
    f: list[str] = []
    n = 3001
    g = data(comm.rank, n)
    state = CompressionState(comm, codec=Half(), error_feedback=False)
    same("hook compressed", state.average(g), model_allreduce(Half(), p, n) / np.float32(p), f)
    with cz.use_policy("none"):
        plain = CompressionState(comm, traffic="dp").average(g)
    total = np.empty_like(g)
    comm.Allreduce(g, total)
    same("hook uncompressed", plain, total / np.float32(p), f)
    fed = CompressionState(comm, codec=Half())
    fed.average(g, bucket_index=3)
    if set(fed.feedback) != {3} or fed.feedback[3].norm() == 0.0:
        f.append("error feedback state is not kept per bucket")
    return f


def test_ddp_hook_state_averages_with_compression() -> None:
    check_all(run_ranks(2, hook_average))


def torch_hook() -> list[str]:
    import torch

    from shmcoll.torch_hooks import CompressionState, compressed_allreduce_hook

    class Bucket:  # the two methods of torch.distributed.GradBucket the hook uses
        def __init__(self, t: Any) -> None:
            self.t = t

        def buffer(self) -> Any:
            return self.t

        def index(self) -> int:
            return 0

    comm = shmcoll.Comm()
    t = torch.from_numpy(data(comm.rank, 1000))
    fut = compressed_allreduce_hook(CompressionState(comm, codec=Half(), error_feedback=False), Bucket(t))
    got = fut.wait().numpy()
    f: list[str] = []
    same("torch hook", got, model_allreduce(Half(), comm.size, 1000) / np.float32(comm.size), f)
    return f


def test_torch_hook_signature_is_one_ddp_accepts() -> None:
    """DistributedDataParallel.register_comm_hook refuses a hook whose `bucket` or return
    is annotated with anything but GradBucket and Future[Tensor]: ours leaves both bare."""
    from shmcoll.torch_hooks import compressed_allreduce_hook

    sig = inspect.signature(compressed_allreduce_hook)
    assert list(sig.parameters) == ["state", "bucket"]
    assert sig.parameters["bucket"].annotation is inspect.Parameter.empty
    assert sig.return_annotation is inspect.Signature.empty


def test_torch_hook_on_cpu_tensors() -> None:
    pytest.importorskip("torch")
    check_all(run_ranks(2, torch_hook))


def torch_collectives() -> list[str]:
    """The compressed collectives on torch CPU tensors (read by DLPack, as mpi4py reads
    them): the results land in the receiving tensors, equal to the NumPy path's."""
    import torch

    comm = shmcoll.Comm()
    p, n = comm.size, 1000
    f: list[str] = []
    out = torch.zeros(n)
    cz.allreduce(comm, torch.from_numpy(data(comm.rank, n)), out, Half())
    same("torch Allreduce", out.numpy(), model_allreduce(Half(), p, n), f)
    got = torch.zeros(p * n)
    cz.alltoall(comm, torch.from_numpy(data(comm.rank, p * n)), got, Half())
    want = np.zeros(p * n, np.float32)
    cz.alltoall(comm, data(comm.rank, p * n), want, Half())
    same("torch Alltoall", got.numpy(), want, f)
    return f


class OnAnotherDevice:
    """A DLPack producer on a device that is neither the host nor CUDA (OpenCL)."""

    def __dlpack__(self, **_: Any) -> Any:
        raise AssertionError("a buffer on another device must not be exported")

    def __dlpack_device__(self) -> tuple[int, int]:
        return (4, 0)


def allreduce_error(comm: Any, recv: Any) -> str:
    """The error of a compressed Allreduce of 64 values into `recv` on this rank, as
    "Type: message", or "no error"."""
    try:
        cz.allreduce(comm, data(comm.rank, 64), recv, Half())
    except shmcoll.ShmcollError as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


def foreign_device_rejected() -> str:
    comm = shmcoll.Comm()
    return allreduce_error(comm, np.zeros(64, np.float32) if comm.rank == 0 else OnAnotherDevice())


def test_a_tensor_one_rank_cannot_read_is_an_error_on_every_rank() -> None:
    got = run_ranks(2, foreign_device_rejected)
    assert got[0].startswith("PeerRejectedError"), got
    assert got[1].startswith("ArgumentError") and "DLPack device type 4" in got[1], got


def read_only_receive_buffer() -> str:
    """Rank 1's receive buffer is read-only: the write would fail after the exchange, on
    that rank alone, so the call must refuse it before, on every rank."""
    comm = shmcoll.Comm()
    recv = np.zeros(64, np.float32)
    recv.flags.writeable = comm.rank != 1
    return allreduce_error(comm, recv)


def test_a_read_only_receive_buffer_is_an_error_on_every_rank() -> None:
    got = run_ranks(2, read_only_receive_buffer)
    assert got[0].startswith("PeerRejectedError"), got
    assert got[1].startswith("ArgumentError") and "read-only" in got[1], got


def test_compressed_collectives_on_torch_cpu_tensors() -> None:
    pytest.importorskip("torch")
    check_all(run_ranks(2, torch_collectives))


def table_decides(sizes: list[int]) -> list[int]:
    """Compressed calls made for dp Allreduces of these sizes (bytes), under a policy
    whose own threshold would never compress."""
    comm = shmcoll.Comm()
    made = []
    with cz.use_policy(cz.Policy("dp-half", {"dp": Half()}, min_bytes=1 << 40)):
        for nbytes in sizes:
            x = np.ones(nbytes // 4, np.float32)
            before = cz.stats().get("allreduce", {}).get("calls", 0)
            comm.Allreduce(x, np.empty_like(x), traffic="dp")
            made.append(cz.stats().get("allreduce", {}).get("calls", 0) - before)
    comm.Free()
    return made


def test_compressed_is_a_candidate_of_the_tuning_table(tmp_path: Path) -> None:
    rows = [
        {"bytes": [0, 4096], "choices": [{"algorithm": "compressed"}, {"algorithm": "staging"}]},
        {"bytes": [4097, "inf"], "choices": [{"algorithm": "staging"}]},
    ]
    doc = table.new_document("measured", "quick")
    doc["operations"] = {"allreduce": [{"nprocs": [2, 2], "sizes": rows}]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    table.load(path)  # valid
    got = run_ranks(2, table_decides, [1024, 65536], env={"SHMCOLL_TUNING_FILE": str(path)})
    assert got == [[1, 0], [1, 0]]
    # Not covered (3 ranks): the policy's threshold decides (never, here).
    assert run_ranks(3, table_decides, [1024], env={"SHMCOLL_TUNING_FILE": str(path)}) == [[0]] * 3
    env = {**os.environ, "SHMCOLL_TUNING_FILE": str(path), "COLUMNS": "300"}
    out = subprocess.run(
        [sys.executable, "-m", "shmcoll.cli", "explain", "-n", "2"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "allreduce: the table compresses at 0..4K" in out.stdout
    assert "alltoall, allgather, bcast, reduce_scatter: from 64K on" in out.stdout


def test_a_range_with_only_compressed_is_rejected(tmp_path: Path) -> None:
    doc = table.new_document("measured", "quick")
    doc["operations"] = {
        "bcast": [
            {"nprocs": [1, "inf"], "sizes": [{"bytes": [0, "inf"], "choices": [{"algorithm": "compressed"}]}]}
        ]
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(shmcoll.TuningTableError, match="needs an uncompressed candidate"):
        table.load(path)
    doc["operations"] = {
        "gather": [
            {
                "nprocs": [1, "inf"],
                "sizes": [
                    {"bytes": [0, "inf"], "choices": [{"algorithm": "compressed"}, {"algorithm": "staging"}]}
                ],
            }
        ]
    }
    path.write_text(json.dumps(doc))
    with pytest.raises(shmcoll.TuningTableError, match="unknown algorithm 'compressed'"):
        table.load(path)


def test_tuner_lists_compressed_first_only_where_it_wins() -> None:
    from shmcoll.tuning.build import MODEL, build_document
    from shmcoll.tuning.tuner import op_candidates

    size = 1 << 20

    def cell(algo: str, kind: str, us: float) -> dict[str, Any]:
        return {"op": "allreduce", "nprocs": 2, "bytes": size, "buffers": kind, "algorithm": algo,
                "order": "-", "store": "-", "median_us": us}  # fmt: skip

    cells = [cell(MODEL, "heap", 10.0), cell("direct", "heap", 10.0), cell(MODEL, "ordinary", 12.0)]
    cells += [cell("cma", "ordinary", 12.0), cell("staging", "ordinary", 20.0)]

    def listed(compressed_us: float) -> list[str]:
        doc = build_document([*cells, cell("compressed", "ordinary", compressed_us)], "quick")
        table.validate(doc, "synthetic")
        entry = doc["operations"]["allreduce"][0]
        assert (table.rows_for(doc, "allreduce", 2) or [])[-1][1] is None  # every size has a row
        lo_hi = [(s["bytes"][0], s["bytes"][1]) for s in entry["sizes"]]
        k = next(i for i, (lo, hi) in enumerate(lo_hi) if lo <= size and (hi == "inf" or size <= hi))
        row = entry["sizes"][k]
        return [c["algorithm"] for c in row["choices"]]

    assert listed(9.0)[0] == "compressed"  # 25% faster than the model
    slow = listed(11.5)  # within the 5% margin
    assert "compressed" not in slow and "staging" in slow
    assert ("compressed", "-", "-") in op_candidates("allreduce", "quick", '{"id": "x"}')
    assert ("compressed", "-", "-") not in op_candidates("reduce", "quick", '{"id": "x"}')
    assert ("compressed", "-", "-") not in op_candidates("allreduce", "quick", None)


def numcodecs_codec() -> list[str]:
    import numcodecs

    comm = shmcoll.Comm()
    f: list[str] = []
    x = np.arange(comm.size * 1000, dtype=np.float64) + comm.rank
    want, got = np.empty_like(x), np.empty_like(x)
    comm.Alltoall(x, want)
    comm.Alltoall(x, got, compress=numcodecs.Zlib(level=1))
    same("alltoall through numcodecs.Zlib", got, want, f)
    comm.Allreduce(x, want)
    comm.Allreduce(x, got, compress={"id": "zlib", "level": 1})
    same("allreduce through a numcodecs configuration", got, want, f)
    return f


def test_any_numcodecs_codec_compresses_collectives() -> None:
    pytest.importorskip("numcodecs")
    check_all(run_ranks(2, numcodecs_codec))


#: Real codecs and the relative L2 error their compressed Allreduce may show against the
#: exact sum (two quantizations: each contribution once, the sum once).
REAL = [
    ({"id": "shmcoll.zfp", "rate": 16}, "float32", 1e-3),
    ({"id": "shmcoll.zfp", "rate": 32}, "float64", 1e-6),
    ({"id": "shmcoll.bq", "bits": 8, "block": 256}, "float32", 2e-2),
    ({"id": "shmcoll.bq", "bits": 4, "block": 64}, "float32", 3e-1),
    ({"id": "shmcoll.cast", "dtype": "bfloat16"}, "float32", 1e-2),
    ({"id": "shmcoll.cast", "dtype": "float16"}, "float32", 2e-3),
    ({"id": "shmcoll.mpc"}, "float32", 0.0),
    ({"id": "shmcoll.mpc"}, "float64", 0.0),
]


def real_codec(cfg: dict[str, Any], dtype: str, tol: float) -> tuple[list[str], bytes]:
    from shmcoll.codecs import get_codec

    comm = shmcoll.Comm()
    p, me = comm.size, comm.rank
    codec = get_codec(cfg)
    f: list[str] = []
    n = 10_007  # not a multiple of any block size
    x = data(me, n).astype(dtype)
    exact = np.empty_like(x)
    comm.Allreduce(x, exact)
    out = np.empty_like(x)
    comm.Allreduce(x, out, compress=cfg)
    # The protocol, exactly: chunks quantized once per rank, rank-order sums, once more.
    want = np.empty_like(x)
    for sl in chunks(n, p):
        acc = q(codec, data(0, n).astype(dtype)[sl])
        for r in range(1, p):
            acc = acc + q(codec, data(r, n).astype(dtype)[sl])
        want[sl] = q(codec, acc)
    same(f"allreduce {cfg} model", out, want, f)
    err = float(np.linalg.norm(out.astype(np.float64) - exact) / np.linalg.norm(exact))
    if err > tol or (tol == 0.0 and out.tobytes() != exact.tobytes()):
        f.append(f"allreduce {cfg}: relative error {err:.2e} above {tol:.0e}")
    # Allgather and Alltoall: every block is one round trip of the codec.
    g = np.empty(p * n, dtype)
    comm.Allgather(x, g, compress=cfg)
    same(f"allgather {cfg}", g, np.concatenate([q(codec, data(j, n).astype(dtype)) for j in range(p)]), f)
    s = data(me, p * 301).astype(dtype)
    r_ = np.empty_like(s)
    comm.Alltoall(s, r_, compress=cfg)
    blocks = [q(codec, data(j, p * 301).astype(dtype)[me * 301 : (me + 1) * 301]) for j in range(p)]
    same(f"alltoall {cfg}", r_, np.concatenate(blocks), f)
    return f, out.tobytes() + g.tobytes()


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize(("cfg", "dtype", "tol"), REAL, ids=[f"{c['id'][8:]}-{d}" for c, d, _ in REAL])
def test_real_codecs_agree_with_uncompressed_and_replicas_are_identical(
    nranks: int, cfg: dict[str, Any], dtype: str, tol: float
) -> None:
    pytest.importorskip("shmcoll.codecs")
    results = run_ranks(nranks, real_codec, cfg, dtype, tol)
    check_all([r[0] for r in results])
    assert len({r[1] for r in results}) == 1, "replicas differ"
