"""``shmcoll pmpi``: build and locate the PMPI interposition library."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from .build import MpiInfo


@click.command("pmpi")
@click.option("--path", "want_path", is_flag=True, help="print the library to preload (build it if missing)")
@click.option("--build", "want_build", is_flag=True, help="build the library if it is missing")
@click.option("--force", is_flag=True, help="rebuild even if the cache has it")
@click.option("--mpicc", default=None, help="the MPI compiler wrapper (default: $MPICC, beside Python, PATH)")
@click.option(
    "--dir",
    "directory",
    default=None,
    help="where libraries are cached (default: $SHMCOLL_PMPI_DIR, user cache)",
)
@click.option("--tune", is_flag=True, help="measure where MPI beats the library here; write the windows file")
@click.option("--np", "nranks", default=2, show_default=True, help="ranks for --tune")
@click.option(
    "--iters", default=1000, show_default=True, help="iterations per size for --tune (a tenth above 64K)"
)
@click.option("--max-bytes", default="256K", show_default=True, help="the largest size --tune measures")
@click.option(
    "--rounds",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="launches of each buffer kind for --tune (alternating)",
)
def pmpi(
    want_path: bool,
    want_build: bool,
    force: bool,
    mpicc: str | None,
    directory: str | None,
    tune: bool,
    nranks: int,
    iters: int,
    max_bytes: str,
    rounds: int,
) -> None:
    """The PMPI library that gives C/Fortran MPI programs shmcoll's MPI_Alltoall(v) and
    other collectives:

    LD_PRELOAD=$(shmcoll pmpi --path) mpiexec -n 4 ./app

    Build output goes to stderr, so that --path prints nothing but the path. With --tune,
    the library and MPI's own collectives are timed side by side on this machine, and the
    sizes where MPI wins are written to the windows file the library reads (calls of those
    sizes then go to MPI)."""
    from .build import PmpiBuildError, build, ensure, find_mpicc, library_path, mpi_info

    try:
        if tune:
            _tune(
                ensure(mpicc, directory, log=sys.stderr),
                mpi_info(find_mpicc(mpicc)),
                directory,
                nranks,
                iters,
                max_bytes,
                rounds,
            )
            return
        if force:
            lib = build(mpicc, directory, log=sys.stderr)
        elif want_path or want_build:
            lib = ensure(mpicc, directory, log=sys.stderr)
        else:
            mpi = mpi_info(find_mpicc(mpicc))
            lib = library_path(mpi, directory)
            click.echo(f"MPI: {mpi.flavour} {mpi.version} ({mpi.mpicc})")
            state = "built" if lib.is_file() else "not built yet: shmcoll pmpi --build"
            click.echo(f"library: {lib} ({state})")
            from .tune import windows_path

            w = windows_path(mpi, directory)
            tuned = (
                "measured here"
                if w.is_file()
                else "not measured yet: built-in windows used; shmcoll pmpi --tune"
            )
            click.echo(f"windows: {w} ({tuned})")
            return
    except PmpiBuildError as e:
        raise click.ClickException(str(e)) from e
    if want_path:
        click.echo(str(lib))
    else:
        click.echo(f"built {lib}", err=True)


def _tune(
    library: Path,
    mpi: MpiInfo,
    directory: str | None,
    nranks: int,
    iters: int,
    max_bytes: str,
    rounds: int,
) -> None:
    from ..bench.sizes import parse_size
    from .tune import measure, windows_path, write

    windows = measure(mpi, library, nranks, parse_size(max_bytes), iters, log=sys.stderr, rounds=rounds)
    path = windows_path(mpi, directory)
    write(path, windows, mpi, nranks)
    for w in windows:
        # MPI's speedup over the library at the largest size passed (geometric mean of the
        # launches, as decided), to show the margin.
        last = [lib / m for n, lib, m in w.times if n < w.hi and 2 * n >= w.hi]
        gm = math.prod(last) ** (1 / len(last)) if last else 0.0
        verdict = f"to MPI below {w.hi} bytes (MPI {gm:.2f}x faster at the top)" if w.hi else "served"
        click.echo(f"{w.op}: {verdict}")
    click.echo(f"wrote {path}")
