"""Building libshmcoll_pmpi.so: find the MPI's mpicc and what MPI it is, take the engine's
static library (the wheel's prebuilt one, or in a source checkout one cargo builds from the
tree), compile the C shim and link both with mpicc, and cache the result under a name keyed
by MPI flavour and version, shmcoll version and a hash of the inputs."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..bundle import CAPI_ARCHIVE, bundled_capi_archive, shipped, source_tree
from ..errors import ShmcollError

#: Where the built libraries go (else the user cache directory).
ENV_DIR = "SHMCOLL_PMPI_DIR"
LIB_NAME = "libshmcoll_pmpi.so"
CSRC = Path(__file__).parent / "csrc"
#: What the Rust standard library needs when linked statically (cargo's native-static-libs).
RUST_NATIVE_LIBS = ["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl"]


class PmpiBuildError(ShmcollError, RuntimeError):
    """The PMPI library cannot be built (no mpicc, no engine library, a failed step)."""


@dataclass(frozen=True)
class MpiInfo:
    """An MPI as its mpicc presents it."""

    mpicc: str
    flavour: str  # "mpich", "openmpi" or "unknown"
    version: str

    @property
    def key(self) -> str:
        return f"{self.flavour}-{self.version}"


def find_mpicc(explicit: str | None = None) -> str:
    """The mpicc to build with: `explicit`, $MPICC, the one beside this Python (the MPI
    wheel's), else the one on PATH."""
    candidates: list[str | None] = [explicit] if explicit else []
    candidates += [os.environ.get("MPICC"), os.path.join(os.path.dirname(sys.executable), "mpicc"), "mpicc"]
    for c in candidates:
        if c and (found := shutil.which(c)):
            return found
        if explicit:
            raise PmpiBuildError(f"mpicc {explicit!r} not found or not executable")
    raise PmpiBuildError(
        "no mpicc found (looked at $MPICC, beside this Python and on PATH); install an MPI "
        "with its compiler wrapper (pip install mpich) or pass --mpicc"
    )


def _run(cmd: list[str], what: str, log: TextIO | None = None, **kw: object) -> str:
    try:
        p = subprocess.run(cmd, check=False, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    except OSError as e:
        raise PmpiBuildError(f"{what}: cannot run {cmd[0]}: {e}") from e
    except subprocess.TimeoutExpired as e:
        raise PmpiBuildError(f"{what}: {e}") from e
    if log is not None and p.stderr:
        log.write(p.stderr)
    if p.returncode != 0:
        raise PmpiBuildError(f"{what} failed ({' '.join(cmd)}):\n{p.stdout}{p.stderr}")
    return str(p.stdout)


def mpi_info(mpicc: str) -> MpiInfo:
    """Flavour and version from the macros of the MPI's own mpi.h (nothing is run)."""
    macros = _run([mpicc, "-E", "-dM", "-x", "c", "-"], "reading mpi.h", input="#include <mpi.h>\n")
    defs = dict(re.findall(r"^#define (\w+) (.*)$", macros, flags=re.M))
    if "OMPI_MAJOR_VERSION" in defs:
        v = ".".join(defs.get(f"OMPI_{k}_VERSION", "0") for k in ("MAJOR", "MINOR", "RELEASE"))
        return MpiInfo(mpicc, "openmpi", v)
    if "MPICH_VERSION" in defs:
        return MpiInfo(mpicc, "mpich", defs["MPICH_VERSION"].strip('"'))
    if "MPI_VERSION" in defs:
        return MpiInfo(mpicc, "unknown", f"mpi{defs['MPI_VERSION']}.{defs.get('MPI_SUBVERSION', '0')}")
    raise PmpiBuildError(f"{mpicc}'s mpi.h defines no MPI_VERSION: is it an MPI compiler wrapper?")


@dataclass(frozen=True)
class Engine:
    """The engine's C ABI to link: the directory of its header, and its static archive,
    prebuilt (a wheel's) or built by cargo from a source checkout."""

    include: Path
    #: The prebuilt archive, or the checkout cargo builds it from.
    origin: Path
    prebuilt: bool

    def inputs(self) -> list[Path]:
        """The files whose contents make the library (with csrc/)."""
        if self.prebuilt:
            return [self.origin, *sorted(self.include.iterdir())]
        rust = self.origin / "rust"
        manifests = [self.origin / "Cargo.toml", self.origin / "Cargo.lock"]
        return [*sorted(rust.rglob("*.rs")), *sorted(rust.rglob("*.h")), *manifests]

    def archive(self, log: TextIO | None) -> Path:
        """The static archive, built first from a checkout."""
        return self.origin if self.prebuilt else _static_engine(self.origin, log)


def find_engine() -> Engine:
    """A source checkout builds the engine from its tree (edits take effect); an installed
    wheel carries it prebuilt (shmcoll.bundle)."""
    include = shipped("capi/include")
    if (src := source_tree()) is not None:
        return Engine(include, src, prebuilt=False)
    if (archive := bundled_capi_archive()) is not None:
        return Engine(include, archive, prebuilt=True)
    raise PmpiBuildError(
        f"this shmcoll installation carries no prebuilt engine library ({CAPI_ARCHIVE}) and is not a "
        "source checkout: reinstall from a wheel built with pip wheel or scripts/build_wheel.sh (a bare "
        "`maturin build` leaves it out), or install from a source checkout (pip install -e .)"
    )


def _fingerprint(engine: Engine) -> str:
    """A hash of what goes into the library, so that edited sources make a new one."""
    h = hashlib.sha256()
    for f in [*sorted(CSRC.iterdir()), *engine.inputs()]:
        if f.is_file():
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


def cache_dir(directory: str | os.PathLike[str] | None = None) -> Path:
    if directory is not None:
        return Path(directory)
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    import platformdirs

    return Path(platformdirs.user_cache_dir("shmcoll")) / "pmpi"


def library_path(mpi: MpiInfo, directory: str | os.PathLike[str] | None = None) -> Path:
    """Where the library for `mpi` is (or will be) in the cache."""
    from .. import __version__

    tag = f"{mpi.key}-shmcoll{__version__}-{_fingerprint(find_engine())}"
    return cache_dir(directory) / tag / LIB_NAME


@contextmanager
def _locked(d: Path) -> Iterator[None]:
    """Serialise builds into one directory (several ranks or test workers may ask at once)."""
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _cargo() -> str:
    for c in ("cargo", os.path.expanduser("~/.cargo/bin/cargo")):
        if found := shutil.which(c):
            return found
    raise PmpiBuildError(
        "cargo not found (PATH, ~/.cargo/bin): the PMPI library links shmcoll's engine, which "
        "cargo builds; install a Rust toolchain (https://rustup.rs)"
    )


def _static_engine(src: Path, log: TextIO | None) -> Path:
    """Build rust/shmcoll-capi of the checkout `src` as a static library; its path.
    Incremental, in the release profile the checkout's other builds share."""
    cargo = _cargo()
    _run(
        [cargo, "build", "--release", "-p", "shmcoll-capi", "--manifest-path", str(src / "Cargo.toml")],
        "cargo build of shmcoll-capi",
        log,
    )
    target = Path(os.environ.get("CARGO_TARGET_DIR") or src / "target")
    lib = (target if target.is_absolute() else src / target) / "release" / CAPI_ARCHIVE
    if not lib.is_file():
        raise PmpiBuildError(f"cargo reported success but {lib} is missing")
    return lib


def build(
    mpicc: str | None = None,
    directory: str | os.PathLike[str] | None = None,
    log: TextIO | None = None,
) -> Path:
    """Build the library for the MPI of `mpicc` (see find_mpicc) now; its path."""
    return _library(mpicc, directory, log, reuse=False)


def ensure(
    mpicc: str | None = None,
    directory: str | os.PathLike[str] | None = None,
    log: TextIO | None = None,
) -> Path:
    """The library for the MPI of `mpicc`, built first if the cache lacks it."""
    return _library(mpicc, directory, log, reuse=True)


def _library(
    mpicc: str | None, directory: str | os.PathLike[str] | None, log: TextIO | None, reuse: bool
) -> Path:
    mpi = mpi_info(find_mpicc(mpicc))
    out = library_path(mpi, directory)
    if reuse and out.is_file():
        return out
    with _locked(out.parent):
        if not (reuse and out.is_file()):  # another process may have built it while we waited
            _build_into(mpi, out, log)
    return out


def _build_into(mpi: MpiInfo, out: Path, log: TextIO | None) -> None:
    engine = find_engine()
    if log is not None:
        log.write(f"building {LIB_NAME} for {mpi.flavour} {mpi.version} ({mpi.mpicc})\n")
    archive = engine.archive(log)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    cmd = [
        mpi.mpicc,
        "-O2",
        "-fPIC",
        "-shared",
        "-Wall",
        "-Wextra",
        f'-DSHMCOLL_MPI_KEY="{mpi.key}"',  # names its windows file (csrc/window.c)
        f"-I{engine.include}",
        *sorted(str(c) for c in CSRC.glob("*.c")),
        str(archive),
        f"-Wl,--version-script={CSRC / 'exports.map'}",
        # The engine's (and Rust std's) symbols stay inside the library.
        "-Wl,--exclude-libs,ALL",
        *RUST_NATIVE_LIBS,
        "-o",
        str(tmp),
    ]
    try:
        _run(cmd, f"linking {LIB_NAME} with {mpi.mpicc}", log)
        os.replace(tmp, out)  # atomic: a reader never sees half a library
    finally:
        tmp.unlink(missing_ok=True)
