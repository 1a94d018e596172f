"""Where the files that ship beside the Python code are found at run time: the CUDA kernel
sources (top-level ``cuda/``), the engine's C ABI for the PMPI library (the static archive
of ``rust/shmcoll-capi`` and its header) and the PMPI benchmark of ``shmcoll pmpi --tune``.

Two layouts, one rule: in a source checkout (an editable install) they are read from the
tree itself, so that edits take effect; an installed wheel has no tree, and its build put
copies into the package under ``_bundled/``. The wheel build (build_backend/shmcoll_build.py)
loads this file by path to write that layout, so it imports nothing but the standard library.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
#: The package's copy of what SHIPPED names, written by the wheel build.
BUNDLE_DIR = PACKAGE_DIR / "_bundled"
#: What a wheel carries beside the code: its path in the bundle -> its path in the source tree.
SHIPPED = {
    "cuda": "cuda",
    "capi/include": "rust/shmcoll-capi/include",
    "bench/alltoall_bench.c": "bench/pmpi/alltoall_bench.c",
}
#: The engine's static archive: built by cargo (a source checkout builds its own on demand,
#: shmcoll.pmpi.build), so in the bundle only.
CAPI_ARCHIVE = "libshmcoll_capi.a"
CAPI_ARCHIVE_IN_BUNDLE = f"capi/{CAPI_ARCHIVE}"


def source_tree() -> Path | None:
    """The checkout this package is imported from (python/shmcoll inside it), or None for
    an installed wheel."""
    root = PACKAGE_DIR.parents[1]
    if (root / "Cargo.toml").is_file() and all((root / p).exists() for p in SHIPPED.values()):
        return root
    return None


def shipped(name: str) -> Path:
    """Where the shipped file or directory `name` (a key of SHIPPED) is in this installation."""
    src = source_tree()
    return src / SHIPPED[name] if src is not None else BUNDLE_DIR / name


def bundled_capi_archive() -> Path | None:
    """The wheel's prebuilt engine archive; None where this installation has none."""
    archive = BUNDLE_DIR / CAPI_ARCHIVE_IN_BUNDLE
    return archive if archive.is_file() else None
