"""Instructions one call of a shmcoll collective costs on a 1-rank communicator (no
waiting, no copying to speak of): the binding's and the engine's own work, which a noisy
shared machine cannot time to better than tens of percent but callgrind counts exactly.

    bench/call_instructions.sh [op ...]     # ops: barrier bcast allgather allreduce
                                            #      reduce_scatter alltoall, and the
                                            #      persistent alltoall_init allreduce_init
                                            #      (default: all)

The script runs this file twice per op under ``valgrind --tool=callgrind``, with N calls
and with none, and prints (difference) / N. The loop and the lambda around each call are
included (the ``noop`` row is their cost alone); a persistent request's ``Start`` is called
as a bound method, without the lambda.
"""

from __future__ import annotations

import sys

import numpy as np

import shmcoll


def main() -> None:
    op, n = sys.argv[1], int(sys.argv[2])
    comm = shmcoll.Comm()
    a = comm.empty(16, dtype=np.float64)  # 128 bytes
    b = comm.empty(16, dtype=np.float64)
    calls = {
        "noop": lambda: None,
        "barrier": lambda: comm.Barrier(),  # noqa: PLW0108 (a lambda like the others)
        "bcast": lambda: comm.Bcast(a),
        "allgather": lambda: comm.Allgather(a, b),
        "allreduce": lambda: comm.Allreduce(a, b),
        "reduce_scatter": lambda: comm.Reduce_scatter_block(a, b),
        "alltoall": lambda: comm.Alltoall(a, b),
    }
    if op.endswith("_init"):  # a persistent request: Start per call
        if op == "alltoall_init":
            req = comm.Alltoall_init(a, b)
        else:
            req = comm.Allreduce_init(a, b)
        calls[op] = req.Start
    call = calls[op]
    for _ in range(n):
        call()
    comm.Free()


if __name__ == "__main__":
    main()
