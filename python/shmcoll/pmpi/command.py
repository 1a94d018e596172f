"""``shmcoll pmpi``: build and locate the PMPI interposition library."""

from __future__ import annotations

import sys

import click


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
def pmpi(want_path: bool, want_build: bool, force: bool, mpicc: str | None, directory: str | None) -> None:
    """The PMPI library that gives C/Fortran MPI programs shmcoll's MPI_Alltoall(v) and
    other collectives:

    LD_PRELOAD=$(shmcoll pmpi --path) mpiexec -n 4 ./app

    Build output goes to stderr, so that --path prints nothing but the path."""
    from .build import PmpiBuildError, build, ensure, find_mpicc, library_path, mpi_info

    try:
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
            return
    except PmpiBuildError as e:
        raise click.ClickException(str(e)) from e
    if want_path:
        click.echo(str(lib))
    else:
        click.echo(f"built {lib}", err=True)
