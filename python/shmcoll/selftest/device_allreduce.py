"""The selftest's Allreduce between processes on one GPU: run on every rank by the launcher
(``python -m shmcoll.selftest.device_allreduce PAYLOAD``), it times a compressed Allreduce
(SUM) of a float32 CuPy array against the uncompressed path a CuPy user has (to the host,
shmcoll's Allreduce, back), and checks that the compressed result is bitwise the host path's
(the same call on NumPy arrays) and the same on every rank. Rank 0 writes the outcome as
JSON to the payload's ``out`` path.

Times are wall-clock per call, the median of the timed calls after one warm-up call, each
call started together on every rank (a barrier) and ended when its stream has drained.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

#: The codec of the compressed Allreduce: the data-parallel codec of the hybrid policy.
CODEC = {"id": "shmcoll.bq", "bits": 8, "block": 256}


def _timed(comm: Any, call: Callable[[], None], reps: int) -> float:
    import cupy  # type: ignore[import-not-found]

    call()
    times = []
    for _ in range(reps):
        comm.Barrier()
        t = time.perf_counter()
        call()
        cupy.cuda.get_current_stream().synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def run(comm: Any, nbytes: int, reps: int) -> dict[str, Any]:
    """This rank's part; the outcome (the same on every rank)."""
    import cupy

    from shmcoll import compress as cz
    from shmcoll.codecs import fallback_calls, get_codec

    codec = get_codec(dict(CODEC))
    n = max(nbytes // 4, 1)
    rng = np.random.default_rng([comm.rank, n])
    host_x = (rng.standard_normal(n) * 1e-3).astype(np.float32)
    x = cupy.asarray(host_x)
    out = cupy.empty(n, np.float32)
    before = dict(fallback_calls)

    compressed_s = _timed(comm, lambda: cz.allreduce(comm, x, out, codec), reps)

    plain = cupy.empty(n, np.float32)
    summed = np.empty(n, np.float32)

    def uncompressed() -> None:
        comm.Allreduce(cupy.asnumpy(x), summed)
        plain.set(summed)

    plain_s = _timed(comm, uncompressed, reps)

    got = cupy.asnumpy(out)
    reference = np.empty(n, np.float32)
    cz.allreduce(comm, host_x, reference, codec)
    digests = np.empty(comm.size, np.int64)
    comm.Allgather(np.array([zlib.crc32(got.tobytes())], np.int64), digests)
    scale = float(np.max(np.abs(summed))) or 1.0
    return {
        "ranks": comm.size,
        "bytes": n * 4,
        "codec": CODEC,
        "compressed_s": compressed_s,
        "uncompressed_s": plain_s,
        "equals_host_path": bool(got.tobytes() == reference.tobytes()),
        "same_on_every_rank": bool(np.all(digests == digests[0])),
        "fell_back": fallback_calls != before,
        "max_error_relative": float(np.max(np.abs(got - summed))) / scale,
    }


def main(argv: list[str] | None = None) -> int:
    import shmcoll

    args = json.loads((argv if argv is not None else sys.argv[1:])[0])
    comm = shmcoll.Comm()
    outcome = run(comm, int(args["bytes"]), int(args["reps"]))
    if comm.rank == 0:
        with open(args["out"], "w") as f:
            json.dump(outcome, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
