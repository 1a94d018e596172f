"""Named workload profiles for `shmcoll bench` and `shmcoll tune`: realistic message sizes
of the applications shmcoll is for, each with its source, so that tuning and benchmarks
weigh the sizes that matter.

Each profile maps a process count to bytes per rank (per peer) of its exchanges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    op: str
    available: bool
    summary: str
    source: str
    sizes: Callable[[int], list[int]]
    note: str = ""


def _fft3d(p: int) -> list[int]:
    # A transpose of an N^3 complex128 grid over p ranks sends each peer 16 N^3 / p^2 bytes
    # (slab; a pencil transpose within a row of P1 ranks sends 16 N^3 / (p P1)).
    return sorted({16 * n**3 // (p * p) for n in (128, 192, 256, 384, 512)})


def _moe(p: int) -> list[int]:
    # Token dispatch: T tokens per rank, top-2 routing, hidden 4096 in bf16 (8 KiB per
    # token), experts spread evenly over p ranks: on average 2 T / p tokens to each peer.
    return sorted({2 * t // p * 4096 * 2 for t in (256, 1024, 4096, 16384)})


def _dp(p: int) -> list[int]:
    # PyTorch DDP gradient buckets (25 MiB default, first bucket 1 MiB), fp32.
    return [1 << 20, 25 << 20]


def _tp(p: int) -> list[int]:
    # Megatron-style tensor-parallel activation all-reduce of hidden 8192 in bf16: decode
    # (1 token) to prefill (2048 tokens) of one sequence.
    return [8192 * 2 * t for t in (1, 16, 256, 2048)]


def _lora(p: int) -> list[int]:
    # LoRA rank-16 adapters on the q and v projections of a 32-layer, 4096-wide model,
    # fp32 gradients: 2 * 32 * 2 * (4096 * 16) * 4 bytes, in one bucket or per layer.
    total = 2 * 32 * 2 * 4096 * 16 * 4
    return [total // 64, total]


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "fft3d",
            "alltoall",
            True,
            "3-D FFT transposes, complex128 grids 128^3 to 512^3 (P3DFFT-like slab/pencil)",
            "P3DFFT (Pekurovsky, SIAM J. Sci. Comput. 2012); mpi4py-fft's transposes",
            _fft3d,
        ),
        Profile(
            "moe",
            "alltoallv",
            True,
            "MoE token dispatch, top-2 routing, hidden 4096 bf16, 256-16384 tokens per rank",
            "Mixtral 8x7B (Jiang et al. 2024); DeepSpeed-MoE / Tutel all-to-all dispatch",
            _moe,
            "measured as Alltoall with the mean per-peer size (ragged counts average out over a step)",
        ),
        Profile(
            "dp-allreduce",
            "allreduce",
            False,
            "data-parallel gradient Allreduce of a GPT-style model (DDP 25 MiB buckets)",
            "PyTorch DDP bucketing (Li et al., VLDB 2020)",
            _dp,
            "Allreduce is not built yet (collectives issue)",
        ),
        Profile(
            "tp-allreduce",
            "allreduce",
            False,
            "tensor-parallel activation Allreduce for LLM serving, hidden 8192 bf16",
            "Megatron-LM tensor parallelism (Shoeybi et al. 2019)",
            _tp,
            "Allreduce is not built yet (collectives issue)",
        ),
        Profile(
            "lora",
            "allreduce",
            False,
            "LoRA gradient Allreduce, rank 16 on q/v of a 32-layer 4096-wide model",
            "LoRA (Hu et al., ICLR 2022)",
            _lora,
            "Allreduce is not built yet (collectives issue)",
        ),
    )
}


def sizes_for(name: str, nprocs: int, op: str = "alltoall") -> list[int]:
    """Bytes per rank of profile `name` at `nprocs` ranks, for an `op` benchmark."""
    from .errors import ArgumentError, UnsupportedError

    prof = PROFILES.get(name)
    if prof is None:
        raise ArgumentError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}")
    if not prof.available:
        raise UnsupportedError(f"profile {name!r} needs {prof.op}: {prof.note}")
    if op == "alltoall" and prof.op not in ("alltoall", "alltoallv"):
        raise UnsupportedError(f"profile {name!r} is for {prof.op}, not {op}")
    return prof.sizes(nprocs)
