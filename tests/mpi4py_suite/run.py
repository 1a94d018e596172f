"""mpi4py's own collective tests, run on ``shmcoll.Comm(MPI.COMM_WORLD)`` instead of
``MPI.COMM_WORLD``: the bar for the claim that ``comm`` -> ``shmcoll.Comm(comm)`` is the
whole migration.

Run as ``mpiexec -n N python run.py TESTDIR [ID-SUBSTRING...]`` where TESTDIR is the
``test/`` folder of mpi4py's source distribution (tests/test_mpi4py_suite.py fetches it).
Each module's test classes over ``MPI.COMM_WORLD`` (``...World``) get a subclass whose
``COMM`` is one shmcoll communicator over COMM_WORLD, and those over a duplicate of it
(``...WorldDup``) one whose ``setUp`` duplicates that shmcoll communicator (``Comm.Dup``;
mpi4py's ``tearDown`` frees it). The classes over COMM_SELF and mpi4py's local tests
(``TestReduceLocal``) involve no communicator of several ranks and are left out.

Every rank prints its failures and errors (with tracebacks), then one line::

    rank R mpi4py-suite ran=N failures=F errors=E skipped=S unexpected-skips=U
        shmcoll-calls=C fallbacks={"kind": calls, ...}

A test may only be skipped for the reason written next to its id in `SKIPS`; any other
skip counts as unexpected. ``shmcoll-calls`` counts the calls shmcoll served itself and
``fallbacks`` those it handed to MPI, by kind (``shmcoll.ops.fallback_calls``).
"""

from __future__ import annotations

import importlib
import io
import json
import sys
import unittest
import warnings
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

#: The tests that may be skipped (by the end of their id, ``module.Class.method`` without
#: the runner's class suffix) and the reason each must give. None today: every test of
#: these modules runs.
SKIPS: dict[str, str] = {}

SUFFIX = "OnShmcoll"


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
        out.append(type(f"{name}{SUFFIX}", (cls,), body))
    return out


def allowed_skip(test_id: str, reason: str) -> bool:
    """Whether `SKIPS` names this test with this reason."""
    plain = test_id.replace(SUFFIX, "")
    return any(plain.endswith(key) and reason == why for key, why in SKIPS.items())


class _Result(unittest.TextTestResult):
    """A result that also lists the skips `SKIPS` does not allow."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unexpected: list[str] = []

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        if not allowed_skip(test.id(), reason):
            self.unexpected.append(f"{test.id()}: {reason}")


def main() -> int:
    testdir, only = sys.argv[1], sys.argv[2:]
    sys.path.insert(0, testdir)
    from mpi4py import MPI

    import shmcoll
    from shmcoll.ops import fallback_calls

    # Each fallback is announced once per kind (a RuntimeWarning); the counts are printed.
    warnings.simplefilter("ignore", RuntimeWarning)
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
    # Rank 0 shows unittest's progress; every rank reports its own failures below.
    stream = sys.stderr if rank == 0 else io.StringIO()
    result = unittest.TextTestRunner(stream=stream, verbosity=1, resultclass=_Result).run(suite)
    assert isinstance(result, _Result)
    for line in result.unexpected:
        print(f"rank {rank} unexpected skip {line}", flush=True)
    for test, tb in result.failures + result.errors:
        print(f"rank {rank} FAILED {test.id()}\n{tb}", flush=True)
    calls = world.stats()["calls"]
    print(
        f"rank {rank} mpi4py-suite ran={result.testsRun} failures={len(result.failures)} "
        f"errors={len(result.errors)} skipped={len(result.skipped)} "
        f"unexpected-skips={len(result.unexpected)} shmcoll-calls={calls} "
        f"fallbacks={json.dumps(fallback_calls, sort_keys=True)}",
        flush=True,
    )
    world.Free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
