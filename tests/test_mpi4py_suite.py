"""mpi4py's own collective tests (``test_cco_buf``, ``test_cco_vec``, ``test_cco_obj``,
``test_cco_pr_*``, ``test_cco_nb_*`` of the source distribution of the mpi4py version
installed) pass on ``shmcoll.Comm(MPI.COMM_WORLD)`` at 2 and 3 ranks: no failure, no error,
no skip but those ``mpi4py_suite/run.py`` lists with their reasons, most calls served by
shmcoll, and only the documented kinds of call handed to MPI.

The source distribution comes from PyPI (``pip download``) once, into pytest's cache
(``.pytest_cache``); without network access and without a cached copy the tests skip.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import TESTS_DIR, run_mpiexec

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(600)]

RUNNER = TESTS_DIR / "mpi4py_suite" / "run.py"

#: What may run on MPI instead of shmcoll, each with why (``shmcoll.ops.fallback_calls``
#: kinds, matched from their start).
ALLOWED_FALLBACKS = {
    # Collectives shmcoll.Comm has no implementation of: nonblocking (I...), persistent
    # other than its own five, Scan/Exscan, Alltoallw (passthrough.py).
    r".* \(mpi4py's\)$": "methods shmcoll does not implement",
    # The suite's FakeGPUArray: only the CUDA array interface, so device memory to shmcoll.
    r"buffers with the CUDA array interface": "device memory is MPI's to move",
    # The suite's DLPack arrays of long double and complex long double.
    r"DLPack buffers of element types NumPy does not read": "mpi4py maps them itself",
    # testBcastTypeIndexed: an indexed datatype with gaps.
    r"derived datatypes with gaps": "shmcoll moves contiguous bytes",
    # Reductions of long double and complex long double (no kernels for them).
    r"(SUM|PROD|MIN|MAX) on (float128|complex256)$": "no reduction kernels for long doubles",
}

#: Each rank's world communicator serves about 15 000 calls at 2 ranks; far fewer would
#: mean that calls shmcoll serves went to MPI.
MIN_SHMCOLL_CALLS = 5000

SUMMARY = re.compile(
    r"rank (\d+) mpi4py-suite ran=(\d+) failures=(\d+) errors=(\d+) skipped=(\d+) "
    r"unexpected-skips=(\d+) shmcoll-calls=(\d+) fallbacks=(\{[^{}]*\})"
)


@pytest.fixture(scope="module")
def mpi4py_tests(request: pytest.FixtureRequest) -> Path:
    """The ``test/`` folder of the installed mpi4py's source distribution."""
    pytest.importorskip("mpi4py")
    version = importlib.metadata.version("mpi4py")
    cache = request.config.cache
    assert cache is not None
    root = cache.mkdir("mpi4py-sdist")
    testdir = root / f"mpi4py-{version}" / "test"
    if not (testdir / "test_cco_buf.py").is_file():
        sdist = root / f"mpi4py-{version}.tar.gz"
        if not sdist.is_file():
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps"]
            cmd += [f"mpi4py=={version}", "-d", str(root)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
            if proc.returncode != 0 or not sdist.is_file():
                pytest.skip(f"mpi4py {version}'s source distribution is not available: {proc.stderr[-500:]}")
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(f"mpi4py-{version}/test/")]
            tar.extractall(root, members=members, filter="data")
    return testdir


@pytest.mark.parametrize("nranks", [2, 3])
def test_mpi4py_collective_tests_pass_on_shmcoll(mpi4py_tests: Path, nranks: int) -> None:
    proc = run_mpiexec(nranks, RUNNER, str(mpi4py_tests), timeout=540, check=False)
    out = proc.stdout + "\n--- stderr (tail)\n" + proc.stderr[-3000:]
    found = {int(m.group(1)): m for m in SUMMARY.finditer(proc.stdout)}
    assert sorted(found) == list(range(nranks)), out
    ran = {int(m.group(2)) for m in found.values()}
    assert len(ran) == 1 and ran.pop() > 200, out  # every rank ran the whole suite
    for m in found.values():
        assert (m.group(3), m.group(4), m.group(6)) == ("0", "0", "0"), out
        assert int(m.group(7)) >= MIN_SHMCOLL_CALLS, out
        kinds = json.loads(m.group(8))
        unexpected = [k for k in kinds if not any(re.match(p, k) for p in ALLOWED_FALLBACKS)]
        assert not unexpected, f"calls handed to MPI that shmcoll should serve: {unexpected}\n{out}"
    assert proc.returncode == 0, out
