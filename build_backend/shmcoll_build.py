"""shmcoll's PEP 517 build backend: maturin's, plus what a wheel carries beside the native
module (python/shmcoll/bundle.py names it): the engine's static archive, the C ABI that a
user's mpicc links into the PMPI library with the C shim, and copies of the CUDA sources,
the archive's header and the PMPI benchmark.

Why a wrapper around maturin: maturin builds one crate, the extension module, and a Python
extension cannot be linked into a plain C MPI program; the archive is another crate
(rust/shmcoll-capi) that cargo must build on its own. Doing that here, rather than in a
script run before `maturin build`, makes every wheel built through PEP 517 carry it: pip
install ., pip wheel ., python -m build, and wheels built from the sdist. (A bare `maturin
build` skips this backend; `shmcoll pmpi` then says the archive is missing.) Editable
installs take maturin's path unchanged: they read everything from the tree. (maturin warns
that pyproject's build-backend is not maturin: this wrapper is why, and pip uses it.)

The copies are staged into python/shmcoll/_bundled (ignored by git, listed for the wheel by
pyproject's include) and removed once the wheel is written. Every non-editable wheel is
stripped, and built with the checkout's and cargo's directories remapped, so that no path
of the build machine is left in the binaries.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import maturin
from maturin import (
    build_editable,
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

ROOT = Path(__file__).resolve().parents[1]


def build_wheel(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    args = maturin.get_maturin_pep517_args(config_settings)
    if "--strip" not in args:
        args = [*args, "--strip"]
    settings = {**(config_settings or {}), "maturin.build-args": args}
    with _remapped_paths(), _bundle():
        return str(maturin.build_wheel(wheel_directory, settings, metadata_directory))


def _layout() -> ModuleType:
    """python/shmcoll/bundle.py, loaded by path: the package cannot be imported before its
    native module exists."""
    path = ROOT / "python" / "shmcoll" / "bundle.py"
    spec = importlib.util.spec_from_file_location("_shmcoll_bundle", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def _remapped_paths() -> Iterator[None]:
    """rustc writes source paths into panic messages and debug info: the checkout's become
    shmcoll/..., the registry's cargo/... (the standard library's are /rustc/<hash>/...
    already). Appended to the flags cargo would use, in its encoding (paths may hold spaces);
    maturin extends the same variable."""
    cargo_home = Path(os.environ.get("CARGO_HOME") or Path.home() / ".cargo").resolve()
    remap = [f"--remap-path-prefix={ROOT}=shmcoll", f"--remap-path-prefix={cargo_home}=cargo"]
    saved = {k: os.environ.get(k) for k in ("CARGO_ENCODED_RUSTFLAGS", "RUSTFLAGS")}
    if saved["CARGO_ENCODED_RUSTFLAGS"]:
        flags = saved["CARGO_ENCODED_RUSTFLAGS"].split("\x1f")
    else:
        flags = (saved["RUSTFLAGS"] or "").split()
    os.environ["CARGO_ENCODED_RUSTFLAGS"] = "\x1f".join([*flags, *remap])
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def _bundle() -> Iterator[None]:
    """python/shmcoll/_bundled for the duration of the wheel's build."""
    layout = _layout()
    bundle = Path(layout.BUNDLE_DIR)
    shutil.rmtree(bundle, ignore_errors=True)
    try:
        for name, source in layout.SHIPPED.items():
            src, dest = ROOT / source, bundle / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dest)
            else:
                shutil.copy2(src, dest)
        _strip_debug(_engine_archive(), bundle / layout.CAPI_ARCHIVE_IN_BUNDLE)
        yield
    finally:
        shutil.rmtree(bundle, ignore_errors=True)


def _engine_archive() -> Path:
    """Build rust/shmcoll-capi as a static library alone: with no rlib beside it, the
    link-time optimisation of the profile runs over the engine and the standard library and
    keeps only what the C ABI reaches (else the archive carries all of std's objects,
    several times the size). Its path, from cargo's report."""
    cargo = shutil.which("cargo") or shutil.which(str(Path.home() / ".cargo" / "bin" / "cargo"))
    if cargo is None:
        raise RuntimeError("building shmcoll needs cargo (a Rust toolchain: https://rustup.rs)")
    cmd = [
        cargo, "rustc", "--lib", "-p", "shmcoll-capi", "--profile", _wheel_profile(),
        "--crate-type", "staticlib", "--manifest-path", str(ROOT / "Cargo.toml"),
        "--message-format", "json-render-diagnostics",
    ]  # fmt: skip
    print(f"Running `{' '.join(cmd)}`", flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
    for line in p.stdout.splitlines():
        msg = json.loads(line) if line.startswith("{") else {}
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "shmcoll_capi":
            for f in msg["filenames"]:
                if f.endswith(".a"):
                    return Path(f)
    raise RuntimeError(f"cargo built shmcoll-capi but reported no static library:\n{p.stdout}")


def _wheel_profile() -> str:
    """The Cargo profile maturin builds the wheel's extension module with (pyproject's)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["tool"]["maturin"]["profile"])


def _strip_debug(archive: Path, dest: Path) -> None:
    """The archive without debug info (most of its size: the standard library's, which the
    profile cannot drop, since rustc links nothing for a static library)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    strip = shutil.which("strip")
    if strip is None:
        print(f"warning: no strip (binutils) found: {dest.name} keeps its debug info", file=sys.stderr)
        shutil.copy2(archive, dest)
        return
    subprocess.run([strip, "--strip-debug", "-o", str(dest), str(archive)], check=True)
