"""The emulated GPU for tests: every kernel of cuda/ built for the CPU (driver.cpp through
shim.h) behind the CuPy stand-in of standin/cupy, installed in this process or handed to
subprocesses through their environment. The real shmcoll.gpu code then runs unmodified:
gpu.available() finds a device and compiles every kernel, the codecs take their GPU path.
This is the only CPU build of the kernels the tests use; tests/conftest.py builds it once
per session (the ``emu_lib`` fixture) and installs it per test (``emulated``)."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
STANDIN = HERE / "standin"


#: UBSan in its reporting mode: a kernel's undefined behaviour prints "runtime error:" on
#: stderr and the run goes on, so that a test reads the report instead of losing its process.
UBSAN = ["-fsanitize=undefined"]


def build(directory: pathlib.Path, sanitize: bool = False) -> pathlib.Path:
    """Compile the emulation into `directory`; the shared library's path. With `sanitize`,
    instrumented by UBSan where the compiler has it (the plain build otherwise)."""
    for flags in ([UBSAN] if sanitize else []) + [[]]:
        lib = directory / ("libemu-ubsan.so" if flags else "libemu.so")
        cmd = [
            "g++", "-std=c++20", "-O1", "-ffp-contract=off", "-pthread", "-shared", "-fPIC",
            "-Wall", "-Wno-unknown-pragmas", *flags,
            "-I", str(HERE), "-I", str(ROOT / "cuda"), str(HERE / "driver.cpp"), "-o", str(lib),
        ]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode == 0 and "warning" not in res.stderr:
            return lib
        if not flags:
            break
    raise RuntimeError(f"the kernels' CPU build failed or warned:\n{res.stderr}")


def subprocess_env(lib: pathlib.Path) -> dict[str, str]:
    """Environment entries that make a subprocess import the stand-in as cupy."""
    path = os.environ.get("PYTHONPATH", "")
    return {
        "PYTHONPATH": str(STANDIN) + (os.pathsep + path if path else ""),
        "CUPY_STANDIN_LIB": str(lib),
    }


def _load_standin() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("cupy", STANDIN / "cupy" / "__init__.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cuda_kernels() -> frozenset[str]:
    """Every kernel the sources of cuda/ define (``extern "C" __global__`` functions, a
    launch-bounds macro allowed before the name)."""
    pattern = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:[A-Z_]+\s+)?(\w+)\s*\(')
    return frozenset(
        name for src in (ROOT / "cuda").glob("*.cu") for name in pattern.findall(src.read_text())
    )


@contextmanager
def installed(lib: pathlib.Path | None) -> Iterator[types.ModuleType]:
    """The stand-in as this process's cupy for the duration (forked ranks inherit it), with
    shmcoll's once-per-process GPU probes and caches reset on entry and exit. Over `lib`,
    the kernels' CPU build; with None, a device whose kernels do not compile."""
    from shmcoll.codecs import base
    from shmcoll.gpu import kernels, staging

    saved = {k: sys.modules.get(k) for k in ("cupy",)}
    saved_env = os.environ.get("CUPY_STANDIN_LIB")
    if lib is None:
        os.environ.pop("CUPY_STANDIN_LIB", None)
    else:
        os.environ["CUPY_STANDIN_LIB"] = str(lib)
    mod = _load_standin()
    sys.modules["cupy"] = mod

    def reset() -> None:
        kernels.unavailable.cache_clear()
        kernels.load_module.cache_clear()
        staging.scratch = staging.DeviceScratch()
        staging.pinned = staging.PinnedPool()
        base._warned.clear()

    reset()
    try:
        yield mod
    finally:
        reset()
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
        if saved_env is None:
            os.environ.pop("CUPY_STANDIN_LIB", None)
        else:
            os.environ["CUPY_STANDIN_LIB"] = saved_env
