"""The shared-array arena behaves like NumPy's own allocator where memory is concerned: freed
memory leaves the process, a churn of random sizes peaks near NumPy's, and limited address
space (``ulimit -v``, ``ulimit -f``) shrinks the arena or sets it aside with one warning,
never a crash. Each case runs in a fresh interpreter, where the import decides."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30


def python(code: str, env: dict[str, str] | None = None, limits: Callable[[], None] | None = None) -> str:
    """Run `code` in a fresh interpreter; its stdout (stderr shown on failure)."""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(
        [sys.executable, "-W", "always", "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=e,
        preexec_fn=limits,
        timeout=240,
    )
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout + p.stderr


def test_freed_memory_leaves_the_process() -> None:
    out = python(
        """
import numpy as np, shmcoll
def rss(): return int(open('/proc/self/statm').read().split()[1]) * 4096
base = rss()
with shmcoll.shared_arrays(max_bytes=1 << 40):
    a = np.ones(256 << 17)            # 256 MiB, in the arena
    assert shmcoll.in_shared_arena(a)
    held = rss()
    del a
print(base, held, rss())
"""
    )
    base, held, after = map(int, out.split()[:3])
    assert held - base > 200 << 20, out
    assert after - base < 32 << 20, f"256 MiB freed, {after - base} bytes still resident"


def churn(shared: bool) -> dict[str, int]:
    env = {"SHMCOLL_SHARED_ARRAYS": "1" if shared else "0"}
    script = str(ROOT / "bench" / "memory_churn.py")
    code = "import runpy, sys; sys.argv = ['x', '--total-gib', '10']; "
    code += f"runpy.run_path({script!r}, run_name='__main__')"
    out = python(code, env)
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_a_churn_of_random_sizes_peaks_within_ten_percent_of_numpy() -> None:
    numpy, arena = churn(False), churn(True)
    assert arena["in_arena"] > arena["arrays"] // 2, arena
    assert numpy["in_arena"] == 0, numpy
    assert arena["peak_rss"] <= 1.10 * numpy["peak_rss"], (numpy, arena)


def info_after_arrays(extra: str = "") -> str:
    return f"""
import json, warnings, numpy as np
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    import shmcoll
{extra}
arrays = [np.full(3 << 17, float(k)) for k in range(40)]   # 40 x 3 MiB
ok = all(float(a[-1]) == k for k, a in enumerate(arrays))
info = shmcoll.shared_arrays_info()
print(json.dumps({{"ok": ok, "warnings": [str(x.message) for x in w], "capacity": info["capacity"],
    "installed": info["installed"], "refused": info["refused"],
    "in_arena": sum(shmcoll.in_shared_arena(a) for a in arrays)}}))
"""


def limit(kind: int, value: int) -> Callable[[], None]:
    return lambda: resource.setrlimit(kind, (value, value))


def last_json(out: str) -> dict[str, object]:
    return dict(json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1]))


def test_limited_address_space_shrinks_the_arena_with_one_warning() -> None:
    out = python(info_after_arrays(), limits=limit(resource.RLIMIT_AS, 8 * GIB))
    r = last_json(out)
    assert r["ok"] and r["installed"], r
    assert r["capacity"] == 2 * GIB, r
    assert len(r["warnings"]) == 1 and "ulimit -v" in str(r["warnings"][0]), r


def test_a_full_arena_leaves_arrays_to_numpy() -> None:
    out = python(info_after_arrays(), env={"SHMCOLL_ARENA_BYTES": "64M"})
    r = last_json(out)
    assert r["ok"] and r["refused"] > 0 and 0 < int(r["in_arena"]) < 40, r  # type: ignore[call-overload]


def test_a_file_size_limit_sets_the_arena_aside_with_one_warning() -> None:
    out = python(info_after_arrays(), limits=limit(resource.RLIMIT_FSIZE, 16 << 20))
    r = last_json(out)
    assert r["ok"] and not r["installed"] and r["in_arena"] == 0, r
    assert len(r["warnings"]) == 1 and "private" in str(r["warnings"][0]), r


@pytest.mark.parametrize(("value", "warned"), [("0", False), ("off", False), ("maybe", True)])
def test_the_environment_turns_shared_arrays_off(value: str, warned: bool) -> None:
    r = last_json(python(info_after_arrays(), env={"SHMCOLL_SHARED_ARRAYS": value}))
    assert r["ok"] and not r["installed"] and r["in_arena"] == 0, r
    assert bool(r["warnings"]) == warned, r


def test_the_environment_sets_the_bounds() -> None:
    env = {"SHMCOLL_SHARED_ARRAYS_MIN": "1M", "SHMCOLL_SHARED_ARRAYS_MAX": "1G"}
    r = last_json(python(info_after_arrays("assert not shmcoll.in_shared_arena(np.ones(1000))"), env=env))
    assert r["ok"] and r["in_arena"] == 40, r
