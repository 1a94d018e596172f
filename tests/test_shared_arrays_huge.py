"""Large arrays on huge pages in the shared-array arena, where the kernel gives shared memory
transparent huge pages (``shmem_enabled`` set to ``advise``): the default bound rises to
64 MiB, an array of 8 MiB lands on PMD-mapped huge pages, and so does a receive buffer whose
pages a peer touched first (the peer asks for huge pages on its mapping of the arena too).

The kernel setting is the machine's: these tests set it to ``advise`` for fresh processes
and put it back, so they run only as root (CI is); the parsing of every setting is unit-
tested in rust/shmcoll-shm/src/huge_pages.rs. A forked child's arena asks for huge pages
again.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import subprocess_env

pytestmark = pytest.mark.timeout(120)

SETTING = Path("/sys/kernel/mm/transparent_hugepage/shmem_enabled")


def _selected(text: str) -> str:
    m = re.search(r"\[(\w+)\]", text)
    assert m, text
    return m.group(1)


@pytest.fixture
def shmem_advise() -> Iterator[None]:
    """shmem_enabled=advise for the test's duration (root only)."""
    if os.geteuid() != 0 or not SETTING.exists():
        pytest.skip("needs root and /sys/kernel/mm/transparent_hugepage/shmem_enabled")
    before = _selected(SETTING.read_text())
    try:
        SETTING.write_text("advise")
    except OSError as e:
        pytest.skip(f"cannot change shmem_enabled here: {e}")
    try:
        yield
    finally:
        SETTING.write_text(before)


# The bytes on PMD-mapped huge pages of the mapping that holds [addr, addr+len): the
# arena's upper part, which holds only large blocks.
SMAPS = textwrap.dedent(
    """
    def pmd_mapped(addr, length):
        import re
        vma, out = None, 0
        for line in open("/proc/self/smaps"):
            m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
            if m:
                lo, hi = int(m.group(1), 16), int(m.group(2), 16)
                vma = (lo, hi) if lo <= addr and addr + length <= hi else None
            elif vma and line.startswith("ShmemPmdMapped:"):
                out += int(line.split()[1]) * 1024
        return out
    """
)


def _run(tmp_path: Path, body: str, ranks: int = 0) -> str:
    script = tmp_path / "huge.py"
    script.write_text(SMAPS + textwrap.dedent(body))
    cmd = [sys.executable, str(script)]
    if ranks:
        cmd = [sys.executable, "-m", "shmcoll.cli", "run", "-n", str(ranks), str(script)]
    env = subprocess_env()
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=90, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_large_arrays_get_huge_pages_and_the_bound_rises(shmem_advise: None, tmp_path: Path) -> None:
    out = _run(
        tmp_path,
        """
        import numpy as np
        import shmcoll
        from shmcoll.shared_arrays import default_bounds
        info = shmcoll.shared_arrays_info()
        assert info["huge_pages"], info
        assert info["huge_pages_setting"].endswith("=advise"), info
        assert default_bounds() == (8 << 10, 64 << 20), default_bounds()
        assert info["max_bytes"] == 64 << 20, info
        a = np.ones(1 << 20)  # 8 MiB
        assert shmcoll.in_shared_arena(a)
        assert a.ctypes.data % (2 << 20) == 0, hex(a.ctypes.data)
        got = pmd_mapped(a.ctypes.data, a.nbytes)
        assert got == a.nbytes, got  # a is the only large block yet
        assert shmcoll.in_shared_arena(np.ones(8 << 20))  # 64 MiB: the bound, included
        assert not shmcoll.in_shared_arena(np.ones((8 << 20) + 1))
        small = np.ones(1 << 10)  # 8 KiB: 4 KiB pages in the lower part
        assert pmd_mapped(small.ctypes.data, small.nbytes) == 0
        # A forked child's own arena (a copy, fork.rs) asks for huge pages again: its new
        # large array is on them (the copy of `a` is written through the file, on 4 KiB
        # pages), and it sees the parent's values.
        import os
        pid = os.fork()
        if pid == 0:
            b = np.full(1 << 20, 2.0)
            ok = pmd_mapped(b.ctypes.data, b.nbytes) == b.nbytes and a.min() == a.max() == 1.0
            os._exit(0 if ok else 1)
        assert os.waitpid(pid, 0)[1] == 0, "the forked child's large array is not on huge pages"
        print("ok")
        """,
    )
    assert "ok" in out


def test_a_receive_buffer_a_peer_touched_first_is_on_huge_pages(shmem_advise: None, tmp_path: Path) -> None:
    out = _run(
        tmp_path,
        """
        import numpy as np
        import shmcoll
        comm = shmcoll.Comm()
        n = 1 << 20  # 8 MiB of float64
        if comm.rank == 0:
            buf = np.arange(n, dtype=np.float64)
        else:
            buf = np.empty(n)  # untouched: rank 0 writes its pages first
        assert shmcoll.in_shared_arena(buf)
        comm.Bcast(buf, root=0, algorithm="direct")
        # Checked in pieces below the arena's huge-page size, so that buf stays the only
        # large block and its mapping's huge pages are buf's.
        piece = 1 << 16
        for i in range(0, n, piece):
            assert np.array_equal(buf[i : i + piece], np.arange(i, i + piece, dtype=np.float64))
        got = pmd_mapped(buf.ctypes.data, buf.nbytes)
        assert got == buf.nbytes, (comm.rank, got)
        print("ok", comm.rank)
        """,
        ranks=2,
    )
    assert out.count("ok") == 2, out
