"""mpi4py's own collective tests, run on ``shmcoll.Comm(MPI.COMM_WORLD)`` instead of
``MPI.COMM_WORLD``: the bar for the claim that ``comm`` -> ``shmcoll.Comm(comm)`` is the
whole migration.

Run under ``mpiexec -n N python run.py TESTDIR`` where TESTDIR is the ``test/`` folder of
mpi4py's source distribution (tests/test_mpi4py_suite.py fetches it). Each module's test
classes over ``MPI.COMM_WORLD`` (``...World``) get a subclass whose ``COMM`` is one
shmcoll communicator over COMM_WORLD, and those over a duplicate of it (``...WorldDup``)
one whose ``setUp`` duplicates that shmcoll communicator (``Comm.Dup``). The classes over
COMM_SELF and mpi4py's local tests (``TestReduceLocal``) do not involve a communicator of
several ranks and are left out.

Every rank prints one line, ``rank R mpi4py-suite ran=N failures=F errors=E skipped=S
unexpected-skips=U``, and the tracebacks of its failures and errors before it; a test that
is skipped must have its reason in `SKIPS` (mpi4py's own version and feature checks
included), else it counts as an unexpected skip.
"""

from __future__ import annotations

import importlib
import os
import sys
import unittest
from typing import Any

#: mpi4py's collective test modules (the buffer, vector, object, persistent and
#: nonblocking forms).
MODULES = (
    "test_cco_buf",
    "test_cco_vec",
    "test_cco_obj",
    "test_cco_pr_buf",
    "test_cco_pr_vec",
    "test_cco_pr_ngh_buf",
    "test_cco_nb_buf",
    "test_cco_nb_vec",
)

#: Tests that may be skipped, by id suffix (``module.Class.method``), each with the reason
#: it is skipped: the reason mpi4py's own skip gives, which the run checks.
SKIPS: dict[str, str] = {}


def shmcoll_classes(module: Any, world: Any) -> list[type[unittest.TestCase]]:
    """The module's COMM_WORLD test classes, re-based on the shmcoll communicator."""
    from mpi4py import MPI

    out: list[type[unittest.TestCase]] = []
    for name, cls in sorted(vars(module).items()):
        if not (isinstance(cls, type) and issubclass(cls, unittest.TestCase)):
            continue
        if name.endswith("WorldDup"):

            def set_up(self: Any) -> None:
                self.COMM = world.Dup()

            body: dict[str, Any] = {"setUp": set_up, "__module__": module.__name__}
        elif name.endswith("World") and getattr(cls, "COMM", None) == MPI.COMM_WORLD:
            body = {"COMM": world, "__module__": module.__name__}
        else:
            continue
        out.append(type(f"{name}OnShmcoll", (cls,), body))
    return out


class _Result(unittest.TextTestResult):
    """Counts skips without a reason in SKIPS as unexpected."""

    unexpected: list[str]

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:  # noqa: N802 - unittest's name
        super().addSkip(test, reason)
        key = test.id().split("OnShmcoll")[0]
        allowed = [r for suffix, r in SKIPS.items() if test.id().endswith(suffix) or key.endswith(suffix)]
        if not allowed or reason not in allowed:
            self.unexpected = [*getattr(self, "unexpected", []), f"{test.id()}: {reason}"]


def main() -> int:
    testdir = sys.argv[1]
    only = sys.argv[2:]
    sys.path.insert(0, testdir)
    from mpi4py import MPI

    import shmcoll

    world = shmcoll.Comm(MPI.COMM_WORLD)
    rank = world.rank
    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for name in MODULES:
        module = importlib.import_module(name)
        for cls in shmcoll_classes(module, world):
            for test in loader.loadTestsFromTestCase(cls):
                if not only or any(o in test.id() for o in only):
                    suite.addTest(test)
    stream = sys.stderr if rank == 0 or os.environ.get("MPI4PY_SUITE_ALL_RANKS") else open(os.devnull, "w")
    runner = unittest.TextTestRunner(stream=stream, verbosity=1, resultclass=_Result)
    result = runner.run(suite)
    unexpected = getattr(result, "unexpected", [])
    for line in unexpected:
        print(f"rank {rank} unexpected skip {line}", flush=True)
    for test, tb in result.failures + result.errors:
        print(f"rank {rank} FAILED {test.id()}\n{tb}", flush=True)
    print(
        f"rank {rank} mpi4py-suite ran={result.testsRun} failures={len(result.failures)} "
        f"errors={len(result.errors)} skipped={len(result.skipped)} unexpected-skips={len(unexpected)}",
        flush=True,
    )
    world.Free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
