"""``shmcoll selftest``: the command (registered by shmcoll.cli). It exits non-zero when a
check fails: a kernel's bytes differ from the Rust reference, a GPU call fell back to the
host, the device Allreduce differs from the host path or between ranks, or a table's
launch failed. Without a usable GPU the GPU checks are skipped with the reason, which is
not a failure."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass
from typing import Any

import click

from ..bench.sizes import parse_size
from . import gpu_checks, ranks


@dataclass(frozen=True)
class Sizes:
    """Values per corpus array, input bytes of the timed runs, timed and warm-up calls."""

    corpus: int
    nbytes: str
    reps: int
    warmup: int
    allreduce_reps: int


#: Full runs: a corpus of a ragged length, and 256 MiB for throughput and the Allreduce.
FULL = Sizes(corpus=100_003, nbytes="256M", reps=7, warmup=2, allreduce_reps=5)
#: --quick: small enough for the CPU emulation of the kernels in the tests.
QUICK = Sizes(corpus=515, nbytes="16K", reps=1, warmup=1, allreduce_reps=1)
#: Seconds the two-process Allreduce may take before its ranks are stopped.
ALLREDUCE_TIMEOUT_S = 240


def _device_name() -> str:
    import cupy  # type: ignore[import-not-found]

    try:
        name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())["name"]
    except Exception as e:
        return f"device 0 ({type(e).__name__})"
    return name.decode() if isinstance(name, bytes) else str(name)


def _allreduce(nbytes: int, reps: int) -> tuple[list[str], bool, dict[str, Any] | None]:
    """The two-process compressed Allreduce on the device: report lines, whether it passed,
    and its measurements (None when the launch failed)."""
    from ..launch import run as launch_run

    with tempfile.TemporaryDirectory(prefix="shmcoll-selftest-") as tmp:
        out = os.path.join(tmp, "allreduce.json")
        payload = json.dumps({"bytes": nbytes, "reps": reps, "out": out})
        argv = ["-m", "shmcoll.selftest.device_allreduce", payload]
        rc = launch_run(2, argv, timeout=ALLREDUCE_TIMEOUT_S)
        if rc != 0 or not os.path.exists(out):
            return [f"compressed Allreduce on the device: the launch failed (exit {rc})"], False, None
        with open(out) as f:
            r: dict[str, Any] = json.load(f)
    ok = r["equals_host_path"] and r["same_on_every_rank"] and not r["fell_back"]
    mib = r["bytes"] / 2**20
    lines = [
        f"Allreduce (SUM) of {mib:g} MiB float32 CuPy arrays, {r['ranks']} processes on the device:",
        f"  compressed ({r['codec']['id']} bits {r['codec']['bits']}): {r['compressed_s'] * 1e3:.2f} ms; "
        f"uncompressed (to the host and back): {r['uncompressed_s'] * 1e3:.2f} ms",
        f"  bitwise the host path's result: {'yes' if r['equals_host_path'] else 'NO'}; "
        f"the same on every rank: {'yes' if r['same_on_every_rank'] else 'NO'}; "
        f"GPU path taken: {'NO (fell back)' if r['fell_back'] else 'yes'}; "
        f"largest error against the uncompressed sum: {r['max_error_relative']:.2e} of its largest value",
    ]
    return lines, ok, r


def run_gpu(families: set[str], quick: bool, size: str | None, record: dict[str, Any]) -> int:
    """The GPU checks; the exit status (0 when skipped for want of a GPU). What they found
    goes into `record` too (``--json``)."""
    from .. import gpu

    why = gpu.unavailable()
    if why is not None:
        click.echo(f"GPU checks skipped: {why}")
        record["skipped"] = why
        return 0
    cfg = QUICK if quick else FULL
    nbytes = parse_size(size or cfg.nbytes)
    record.update(device=_device_name(), nbytes=nbytes)
    click.echo(f"GPU: {record['device']}")
    rows = gpu_checks.run(families, cfg.corpus, nbytes, cfg.reps, cfg.warmup)
    record["codecs"] = [{**asdict(r), "failed": r.failed} for r in rows]
    for line in gpu_checks.table(rows, nbytes):
        click.echo(line)
    sys.stdout.flush()
    import cupy

    # The checks' arrays are garbage; their cached blocks go back to the device before
    # the two ranks of the Allreduce allocate theirs.
    cupy.get_default_memory_pool().free_all_blocks()
    lines, ok, measured = _allreduce(nbytes, cfg.allreduce_reps)
    record["allreduce"] = measured
    for line in lines:
        click.echo(line)
    failed = [r.name for r in rows if r.failed] + ([] if ok else ["device Allreduce"])
    record["failed"] = failed
    if failed:
        click.echo(f"FAILED: {', '.join(failed)}")
        return 1
    return 0


def _counts(text: str) -> list[int]:
    try:
        counts = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        counts = []
    if not counts or any(c < 1 for c in counts):
        raise click.BadParameter(f"{text!r}: give rank counts such as 8,16", param_hint="--ranks")
    return counts


@click.command("selftest")
@click.option(
    "--gpu", "gpu_flag", is_flag=True, help="check and time the codecs' CUDA kernels and a device Allreduce"
)
@click.option(
    "--ranks", "ranks_text", default=None, help="rank counts (e.g. 8,16): Alltoall and Allreduce tables"
)
@click.option("--quick", is_flag=True, help="small sizes and few repetitions (a first look; the tests)")
@click.option(
    "--size", default=None, help="input bytes of the throughput and Allreduce runs [256M; --quick 16K]"
)
@click.option(
    "--codecs",
    default=",".join(gpu_checks.FAMILIES),
    show_default=True,
    help="codec families the GPU checks run",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="also write the GPU checks' rows, the device Allreduce's measurements and the exit status here",
)
def selftest(
    gpu_flag: bool, ranks_text: str | None, quick: bool, size: str | None, codecs: str, json_path: str | None
) -> None:
    """Check this machine for shmcoll: the codecs' GPU kernels against the Rust reference
    byte for byte, their throughput and a compressed Allreduce on the device (--gpu), and
    the Alltoall and Allreduce tables against MPI at given rank counts (--ranks)."""
    if not gpu_flag and ranks_text is None:
        raise click.UsageError("give --gpu, --ranks COUNTS, or both")
    families = {c.strip() for c in codecs.split(",") if c.strip()}
    if unknown := families - set(gpu_checks.FAMILIES):
        raise click.BadParameter(f"unknown codecs: {', '.join(sorted(unknown))}", param_hint="--codecs")
    if size is not None:
        try:
            parse_size(size)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--size") from e
    counts = _counts(ranks_text) if ranks_text is not None else []
    record: dict[str, Any] = {}

    def write(rc: int) -> None:
        if json_path is not None:
            with open(json_path, "w") as f:
                json.dump({"gpu": record if gpu_flag else None, "ranks": counts, "exit": rc}, f, indent=1)

    rc = run_gpu(families, quick, size, record) if gpu_flag else 0
    # Written as soon as the GPU checks end, and again after the tables: a run stopped
    # during the tables keeps the GPU's findings.
    write(rc)
    if counts:
        rc |= ranks.run(counts, ranks.QUICK if quick else ranks.FULL, click.echo)
        write(rc)
    sys.exit(rc)
