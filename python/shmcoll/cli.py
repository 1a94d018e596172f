"""The ``shmcoll`` command line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import click

from .bench.sizes import parse_range


def default_mpiexec() -> str:
    """The mpiexec installed beside this Python (the MPI wheel's), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.access(here, os.X_OK) else "mpiexec"


def _mpi_available(mpiexec: str | None = None) -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return shutil.which(mpiexec or default_mpiexec()) is not None


def _mpiexec_command(n: int, mpiexec: str = "mpiexec") -> tuple[list[str], dict[str, str]]:
    """mpiexec and its flags for `n` ranks, and the environment it needs."""
    env = dict(os.environ)
    cmd = [mpiexec]
    try:
        version = subprocess.run(
            [mpiexec, "--version"], check=False, capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        version = ""
    if "Open MPI" in version or "OpenRTE" in version or "PRRTE" in version:
        cmd.append("--oversubscribe")
        if os.geteuid() == 0:
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
            env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    cmd += ["-n", str(n)]
    return cmd, env


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="shmcoll")
def main() -> None:
    """shmcoll: fast collectives between the processes of one node."""


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-n", "nprocs", type=click.IntRange(1, 4096), required=True, help="number of ranks")
@click.option("-m", "--module", "module", default=None, help="run a module (as python -m MODULE)")
@click.option("--timeout", type=float, default=None, help="kill the ranks after this many seconds")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(nprocs: int, module: str | None, timeout: float | None, args: tuple[str, ...]) -> None:
    """Run SCRIPT [ARGS] (or -m MODULE [ARGS]) on N processes that share a communicator
    (shmcoll.Comm() in each), without MPI. Exits with the worst rank's exit code."""
    from .launch import run as launch_run

    if module is None and not args:
        raise click.UsageError("give a SCRIPT or -m MODULE")
    argv = ["-m", module, *args] if module is not None else list(args)
    sys.exit(launch_run(nprocs, argv, timeout=timeout))


@main.group()
def bench() -> None:
    """Benchmarks against MPI (through mpi4py), run in the same launch."""


@bench.command("alltoall")
@click.option("-n", "nprocs", type=click.IntRange(1, 4096), default=2, show_default=True, help="ranks")
@click.option(
    "-m",
    "sizes",
    default="8:16M",
    show_default=True,
    help="bytes per rank: MIN:MAX (powers of 2) or one size",
)
@click.option(
    "-i",
    "iters",
    type=click.IntRange(1),
    default=1000,
    show_default=True,
    help="iterations (a tenth above 64 KiB)",
)
@click.option(
    "-x", "warmup", type=click.IntRange(0), default=100, show_default=True, help="warm-up iterations"
)
@click.option("-c", "validate", is_flag=True, help="check every result")
@click.option("-z", "percentiles", is_flag=True, help="also show P90/P99")
@click.option(
    "--rounds", type=click.IntRange(1), default=5, show_default=True, help="interleaved rounds per size"
)
@click.option("--variants", default="", help="forced variants ALGO/ORDER/STORE, comma-separated, or 'all'")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="write the results as CSV")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write the results as JSON")
@click.option(
    "--launcher", type=click.Choice(["auto", "mpiexec", "standalone"]), default="auto", show_default=True
)
@click.option(
    "--mpiexec",
    "mpiexec",
    default=None,
    help="the MPI launcher (default: the one beside this Python, else PATH)",
)
@click.option("--no-mpi", is_flag=True, help="do not run MPI's Alltoall")
@click.option("--no-heap", is_flag=True, help="skip shared-heap buffers")
@click.option("--no-ordinary", is_flag=True, help="skip ordinary NumPy buffers")
@click.option("--no-ceiling", is_flag=True, help="skip measuring the NT copy ceiling")
def bench_alltoall(
    nprocs: int,
    sizes: str,
    iters: int,
    warmup: int,
    validate: bool,
    percentiles: bool,
    rounds: int,
    variants: str,
    csv_path: str | None,
    json_path: str | None,
    launcher: str,
    mpiexec: str | None,
    no_mpi: bool,
    no_heap: bool,
    no_ordinary: bool,
    no_ceiling: bool,
) -> None:
    """Alltoall latency: shmcoll (automatic and forced choices) against MPI's Alltoall."""
    from .bench.alltoall import Options, options_json
    from .comm import under_mpi_launcher

    try:
        size_list = parse_range(sizes)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="-m") from e
    forced = [v.strip() for v in variants.split(",") if v.strip()]
    if forced == ["all"]:
        from . import _core

        algos, orders, stores = _core.algorithms()
        forced = [f"{a}/{o}/{s}" for a, _ in algos for o in orders for s in stores]
    opts = Options(
        sizes=size_list,
        iters=iters,
        warmup=warmup,
        rounds=rounds,
        validate=validate,
        mpi=not no_mpi,
        ordinary=not no_ordinary,
        heap=not no_heap,
        variants=forced,
        percentiles=percentiles,
        csv=csv_path,
        json_out=json_path,
        ceiling=not no_ceiling,
    )
    payload = options_json(opts)
    worker = [sys.executable, "-m", "shmcoll.bench.alltoall", payload]
    if under_mpi_launcher():
        from .bench.alltoall import main as worker_main

        sys.exit(worker_main([payload]))
    mpiexec = mpiexec or default_mpiexec()
    use_mpi = launcher == "mpiexec" or (launcher == "auto" and not no_mpi and _mpi_available(mpiexec))
    if launcher == "mpiexec" and not _mpi_available(mpiexec):
        raise click.UsageError("--launcher mpiexec: mpi4py or mpiexec not found (pip install 'shmcoll[mpi]')")
    if use_mpi:
        cmd, env = _mpiexec_command(nprocs, mpiexec)
        sys.exit(subprocess.call([*cmd, *worker], env=env))
    if not no_mpi and launcher == "auto":
        click.echo("note: MPI not found (pip install mpich mpi4py); measuring shmcoll alone", err=True)
    elif not no_mpi:
        click.echo("note: the standalone launcher runs shmcoll alone (no MPI column)", err=True)
    from .launch import run as launch_run

    sys.exit(launch_run(nprocs, worker[1:]))


@main.command()
def info() -> None:
    """Hardware as shmcoll sees it, versions, and every setting."""
    from rich.console import Console
    from rich.table import Table

    from . import _core, machine

    console = Console()
    m = machine()
    t = Table(title="machine", show_header=False)
    for k, v in m.items():
        t.add_row(k, str(v))
    console.print(t)
    s = Table(title="settings")
    s.add_column("variable")
    s.add_column("value")
    s.add_column("meaning")
    for name, desc in _core.settings():
        s.add_row(name, os.environ.get(name, "(default)"), desc)
    console.print(s)
    algos, orders, stores = _core.algorithms()
    a = Table(title="Alltoall algorithms")
    a.add_column("name")
    a.add_column("what it does")
    for name, desc in algos:
        a.add_row(name, desc)
    console.print(a)
    console.print(f"copy orders: {', '.join(orders)}; store policies: {', '.join(stores)}")
    console.print(f"shmcoll {_core.__version__}; MPI available: {_mpi_available()}")


@main.command()
@click.option("--dry-run", is_flag=True, help="only list what would be removed")
def cleanup(dry_run: bool) -> None:
    """Remove shmcoll segments left in /dev/shm by processes that no longer exist."""
    from .cleanup import find, remove_stale

    removed = remove_stale(dry_run=dry_run)
    for s in removed:
        click.echo(
            f"{'would remove' if dry_run else 'removed'} {s.path} ({s.nbytes} bytes, pid {s.pid} gone)"
        )
    live = [s for s in find() if s.alive]
    for s in live:
        click.echo(f"kept {s.path} (pid {s.pid} is running)")
    if not removed:
        click.echo("nothing to remove")


if __name__ == "__main__":
    main()
