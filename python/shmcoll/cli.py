"""The ``shmcoll`` command line."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from .bench.sizes import parse_range
from .mpiexec import default_mpiexec, mpi_available, mpiexec_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="shmcoll")
def main() -> None:
    """shmcoll: fast collectives between the processes of one node."""


def _not_nan(v: float | None) -> float | None:
    """A float option's value, NaN refused (click's ranges let it through: every
    comparison with NaN is false)."""
    if v is not None and math.isnan(v):
        raise click.BadParameter("nan is not a number of seconds")
    return v


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-n", "nprocs", type=click.IntRange(1, 4096), required=True, help="number of ranks")
@click.option("-m", "--module", "module", default=None, help="run a module (as python -m MODULE)")
@click.option(
    "--timeout",
    type=click.FloatRange(0, None, min_open=True),
    default=None,
    callback=lambda _ctx, _param, v: _not_nan(v),
    help="kill the ranks after this many seconds (more than 0)",
)
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


def _bench_options(size_help: str) -> Any:
    """The options every `shmcoll bench <collective>` shares (OSU's vocabulary, launcher)."""
    options = [
        click.option(
            "-n", "nprocs", type=click.IntRange(1, 4096), default=2, show_default=True, help="ranks"
        ),
        click.option(
            "-m",
            "sizes",
            default="8:16M",
            show_default=True,
            help=f"{size_help}: MIN:MAX (powers of 2) or one size",
        ),
        click.option(
            "-i",
            "iters",
            type=click.IntRange(1),
            default=1000,
            show_default=True,
            help="iterations (a tenth above 64 KiB)",
        ),
        click.option(
            "-x", "warmup", type=click.IntRange(0), default=100, show_default=True, help="warm-up iterations"
        ),
        click.option("-c", "validate", is_flag=True, help="check every result"),
        click.option(
            "--rounds",
            type=click.IntRange(1),
            default=5,
            show_default=True,
            help="interleaved rounds per size",
        ),
        click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="write the results as CSV"),
        click.option(
            "--launcher",
            type=click.Choice(["auto", "mpiexec", "standalone"]),
            default="auto",
            show_default=True,
        ),
        click.option(
            "--mpiexec",
            "mpiexec",
            default=None,
            help="the MPI launcher (default: the one beside this Python, else PATH)",
        ),
        click.option("--no-mpi", is_flag=True, help="do not run MPI's collective"),
        click.option("--no-heap", is_flag=True, help="skip heap buffers (--algorithms then on ordinary)"),
        click.option("--no-ordinary", is_flag=True, help="skip ordinary NumPy buffers"),
        click.option(
            "--no-floors",
            is_flag=True,
            help="skip measuring the machine's floors (`shmcoll bench machine`) before the launch",
        ),
        click.option(
            "--private",
            "private",
            is_flag=True,
            help="also time NumPy arrays private to each rank (outside the shared-array arena)",
        ),
        click.option(
            "--before",
            "before",
            is_flag=True,
            help="also time NumPy arrays allocated before the communicator was created",
        ),
    ]

    def apply(f: Any) -> Any:
        for opt in reversed(options):
            f = opt(f)
        return f

    return apply


@bench.command("alltoall")
@_bench_options("bytes per rank")
@click.option("-z", "percentiles", is_flag=True, help="also show P90/P99")
@click.option("--variants", default="", help="forced variants ALGO/ORDER/STORE, comma-separated, or 'all'")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write the results as JSON")
@click.option("--no-ceiling", is_flag=True, help="skip measuring the NT copy ceiling")
@click.option("--persistent", is_flag=True, help="also time a persistent request (Alltoall_init + Start)")
@click.option(
    "--plot", "plot_path", type=click.Path(dir_okay=False), help="draw latency and bandwidth as PNG"
)
@click.option(
    "--profile", default=None, help="take the sizes from a workload profile (see `shmcoll profiles`)"
)
@click.option(
    "--table",
    "table_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="also run this tuned table against the model in the same launch (interleaved) and print "
    "tuned/model per size",
)
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
    persistent: bool,
    private: bool,
    before: bool,
    no_floors: bool,
    plot_path: str | None,
    profile: str | None,
    table_path: str | None,
) -> None:
    """Alltoall latency: shmcoll (automatic and forced choices) against MPI's Alltoall."""
    from .bench.alltoall import Options, options_json

    if table_path is not None:
        from .bench.against_model import tuned_rows
        from .errors import ShmcollError

        try:
            tuned_rows(table_path, nprocs)
        except ShmcollError as e:
            raise click.BadParameter(str(e), param_hint="--table") from e
        if no_heap or no_ordinary:
            raise click.UsageError("--table compares heap and ordinary buffers: drop --no-heap/--no-ordinary")

    if profile is not None:
        from .errors import ShmcollError
        from .profiles import sizes_for

        try:
            size_list = sizes_for(profile, nprocs, "alltoall")
        except ShmcollError as e:
            raise click.BadParameter(str(e), param_hint="--profile") from e
    else:
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
        persistent=persistent,
        private=private,
        before=before,
        variants=forced,
        percentiles=percentiles,
        csv=csv_path,
        json_out=json_path,
        ceiling=not no_ceiling,
        plot=plot_path,
        machine=_machine_floors(no_floors),
        table=table_path,
    )
    _launch_bench("shmcoll.bench.alltoall", options_json(opts), nprocs, launcher, mpiexec, no_mpi)


def _machine_floors(skip: bool) -> dict[str, Any] | None:
    """The machine's state for the table's floors: the file SHMCOLL_BENCH_MACHINE names (as
    `shmcoll bench machine --json` writes it), else measured now, before the ranks start
    (not inside a launch, where the probes would compete with the ranks)."""
    from dataclasses import asdict

    from .bench.machine_state import load, measure
    from .comm import under_mpi_launcher

    if skip:
        return None
    path = os.environ.get("SHMCOLL_BENCH_MACHINE")
    if path:
        return asdict(load(path))
    if under_mpi_launcher():
        return None
    click.echo("measuring the machine's floors (shmcoll bench machine; --no-floors skips)", err=True)
    return asdict(measure())


def _launch_bench(
    module: str, payload: str, nprocs: int, launcher: str, mpiexec: str | None, no_mpi: bool
) -> None:
    """Run `python -m module payload` on every rank: in this process when already under an
    MPI launcher, else under mpiexec (MPI found) or the standalone launcher."""
    from .comm import under_mpi_launcher

    worker = [sys.executable, "-m", module, payload]
    if under_mpi_launcher():
        import importlib

        sys.exit(importlib.import_module(module).main([payload]))
    mpiexec = mpiexec or default_mpiexec()
    use_mpi = launcher == "mpiexec" or (launcher == "auto" and not no_mpi and mpi_available(mpiexec))
    if launcher == "mpiexec" and not mpi_available(mpiexec):
        raise click.UsageError("--launcher mpiexec: mpi4py or mpiexec not found (pip install 'shmcoll[mpi]')")
    if use_mpi:
        cmd, env = mpiexec_command(nprocs, mpiexec)
        sys.exit(subprocess.call([*cmd, *worker], env=env))
    if not no_mpi and launcher == "auto":
        click.echo("note: MPI not found (pip install mpich mpi4py); measuring shmcoll alone", err=True)
    elif not no_mpi:
        click.echo("note: the standalone launcher runs shmcoll alone (no MPI column)", err=True)
    from .launch import run as launch_run

    sys.exit(launch_run(nprocs, worker[1:]))


def _codec_json(text: str | None) -> str | None:
    """A --compress argument (a codec configuration as JSON), checked to name a codec."""
    if text is None:
        return None
    import json

    try:
        cfg = json.loads(text)
        from .codecs import get_codec

        get_codec(cfg)
    except (ValueError, TypeError, ImportError) as e:
        raise click.BadParameter(f"{text!r}: not a codec configuration ({e})", param_hint="--compress") from e
    return json.dumps(cfg, sort_keys=True)


def _collective_bench(op: str) -> None:
    """Register `shmcoll bench <op>`."""

    @bench.command(
        op, help=f"{op} latency: shmcoll (automatic and forced algorithms) against MPI's, in one launch."
    )
    @_bench_options("bytes (the vector; a rank's block for allgather, gather, scatter)")
    @click.option(
        "--algorithms", default="", help="forced algorithms to add (inline,direct,cma,staging or 'all')"
    )
    @click.option(
        "--compress",
        "compress",
        default=None,
        help='add shmcoll\'s compressed collective with this codec, e.g. \'{"id": "shmcoll.bq", "bits": 8}\' '
        "(all variants then move float32)",
    )
    @click.option(
        "--persistent",
        is_flag=True,
        help="also time the persistent request (<Op>_init + Start) on heap buffers",
    )
    def command(
        nprocs: int,
        sizes: str,
        iters: int,
        warmup: int,
        validate: bool,
        rounds: int,
        algorithms: str,
        compress: str | None,
        persistent: bool,
        private: bool,
        before: bool,
        csv_path: str | None,
        launcher: str,
        mpiexec: str | None,
        no_mpi: bool,
        no_heap: bool,
        no_ordinary: bool,
        no_floors: bool,
    ) -> None:
        from .bench.collective import Options, options_json

        try:
            size_list = parse_range(sizes)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="-m") from e
        algos = [a.strip() for a in algorithms.split(",") if a.strip()]
        if op == "barrier" and (algos or compress or persistent):
            raise click.UsageError(
                "barrier moves no data: --algorithms, --compress and --persistent do not apply"
            )
        if algos == ["all"]:
            algos = ["inline", "direct", "cma", "staging"]
        opts = Options(
            op=op,
            sizes=size_list,
            iters=iters,
            warmup=warmup,
            rounds=rounds,
            validate=validate,
            mpi=not no_mpi,
            ordinary=not no_ordinary,
            heap=not no_heap,
            algorithms=tuple(algos),
            csv=csv_path,
            compress=_codec_json(compress),
            persistent=persistent,
            private=private,
            before=before,
            machine=_machine_floors(no_floors),
        )
        _launch_bench("shmcoll.bench.collective", options_json(opts), nprocs, launcher, mpiexec, no_mpi)


for _op in ("allreduce", "allgather", "bcast", "reduce_scatter", "reduce", "gather", "scatter", "barrier"):
    _collective_bench(_op)


@main.command()
@click.option("--no-probe", is_flag=True, help="skip the CMA probe (which starts two processes)")
def info(no_probe: bool) -> None:
    """Hardware as shmcoll sees it, kernel settings, CMA, versions, MPI, every setting."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from . import _core
    from .info import cma_from_summary, gather

    console = Console(highlight=False)
    facts = gather(probe_cma=not no_probe)
    t = Table(title="machine", show_header=False)
    for k, v in facts["machine"].items():
        t.add_row(k, ", ".join(v) if isinstance(v, list) else str(v))
    for k, v in facts["kernel"].items():
        t.add_row(k, escape(v))
    t.add_row("CMA (process_vm_readv) between ranks", facts["cma"])
    t.add_row("private buffers take CMA from", escape(cma_from_summary(facts["cma_from"])))
    for k, v in facts["versions"].items():
        t.add_row(k, v)
    t.add_row("tuning table", facts["tuning"])
    console.print(t)
    _print_probe(console, facts["cma_from"])
    s = Table(title="settings")
    s.add_column("variable")
    s.add_column("value")
    s.add_column("meaning")
    for name, value, desc in facts["settings"]:
        s.add_row(name, value, desc)
    s.add_row(
        "SHMCOLL_TUNING_FILE",
        os.environ.get("SHMCOLL_TUNING_FILE", "(default)"),
        "tuning table to use ('none': the model); else the user, then the system file",
    )
    s.add_row(
        "SHMCOLL_START_METHOD",
        os.environ.get("SHMCOLL_START_METHOD", "(default)"),
        "multiprocessing start method of shmcoll.spawn (spawn, fork, forkserver)",
    )
    console.print(s)
    algos, orders, stores = _core.algorithms()
    a = Table(title="Alltoall(v) algorithms")
    a.add_column("name")
    a.add_column("what it does")
    for name, desc in algos:
        a.add_row(name, desc)
    console.print(a)
    console.print(f"copy orders: {', '.join(orders)}; store policies: {', '.join(stores)}")
    c = Table(title="algorithms of the other collectives (Bcast, Allgather, Allreduce, ...)")
    c.add_column("name")
    c.add_column("what it does")
    for name, desc in _core.algorithms("Allreduce")[0]:
        c.add_row(name, desc)
    console.print(c)


def _print_probe(console: Any, c: dict[str, Any]) -> None:
    """The private-buffer probe's figures, if this process has them."""
    from rich.table import Table

    from .info import probe_note, probe_rows

    rows = probe_rows(c)
    if not rows:
        return
    t = Table(title="private-buffer probe, µs per transfer (medians)")
    for col in ("block", "CMA read", "CMA write", "staged", "inline"):
        t.add_column(col, justify="right")
    for row in rows:
        t.add_row(*row)
    console.print(t)
    console.print(probe_note(c))


@bench.command("create")
@click.option("-n", "nprocs", type=click.IntRange(1, 4096), default=2, show_default=True, help="ranks")
@click.option("-i", "iters", type=click.IntRange(1), default=200, show_default=True, help="iterations")
@click.option(
    "-x", "warmup", type=click.IntRange(0), default=20, show_default=True, help="warm-up iterations"
)
@click.option("--rounds", type=click.IntRange(1), default=5, show_default=True, help="interleaved rounds")
@click.option("--phases", is_flag=True, help="also time the steps of Comm+Free, pooled and not")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="write the results as CSV")
@click.option(
    "--mpiexec",
    "mpiexec",
    default=None,
    help="the MPI launcher (default: the one beside this Python, else PATH)",
)
def bench_create(
    nprocs: int, iters: int, warmup: int, rounds: int, phases: bool, csv_path: str | None, mpiexec: str | None
) -> None:
    """Creating and freeing a communicator: shmcoll.Comm(w) and Comm.Dup against MPI's
    Dup (needs MPI: the communicators wrap MPI's)."""
    from .bench.create import Options, options_json

    if not mpi_available(mpiexec or default_mpiexec()):
        raise click.UsageError("bench create needs mpi4py and mpiexec (pip install 'shmcoll[mpi]')")
    opts = Options(iters=iters, warmup=warmup, rounds=rounds, phases=phases, csv=csv_path)
    _launch_bench("shmcoll.bench.create", options_json(opts), nprocs, "mpiexec", mpiexec, False)


@bench.command("copy")
@click.option("-m", "sizes", default="4K:256M", show_default=True, help="bytes: MIN:MAX (powers of 2)")
@click.option(
    "-i", "reps", type=click.IntRange(1), default=11, show_default=True, help="repetitions per size"
)
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="write the results as CSV")
@click.option("--no-node", is_flag=True, help="skip the node's write ceiling (every CPU at once)")
def bench_copy(sizes: str, reps: int, csv_path: str | None, no_node: bool) -> None:
    """Copy kernels (temporal, nt, hybrid) against numpy.copyto, as a share of the ceiling,
    and the node's write ceiling: what memory takes when every CPU streams at once."""
    from .bench.copy import node_write_ceilings, report
    from .bench.copy import run as run_copy

    try:
        size_list = [s for s in parse_range(sizes) if s > 0]
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="-m") from e
    rows, ceiling = run_copy(size_list, reps)
    report(rows, ceiling, csv_path)
    if not no_node:
        cpus, one, every = node_write_ceilings()
        click.echo(
            f"write ceiling (streaming a hot source): 1 CPU {one:.1f} GB/s, "
            f"{cpus} CPUs at once {every:.1f} GB/s; a collective writing B bytes in all "
            f"takes at least B / {every:.1f} GB/s"
        )


@bench.command("machine")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="also write the results as JSON")
def bench_machine(json_path: str | None) -> None:
    """What this machine allows a collective now: the handoff between two processes on one
    CPU, a cache line's trip between CPUs, and the node's write ceiling (the floors of the
    bench tables; run it alone, not inside a launch)."""
    from .bench.machine_state import measure

    st = measure()
    line = "one CPU only" if st.line_ns is None else f"{st.line_ns:.0f} ns one way"
    click.echo(
        f"handoff between two processes on one CPU: {st.handoff_us:.2f} µs; "
        f"cache line between CPUs: {line}; write ceiling: 1 CPU {st.write_1cpu_gbs:.1f} GB/s, "
        f"{st.cpus} CPUs at once {st.write_all_gbs:.1f} GB/s"
    )
    if json_path:
        with open(json_path, "w") as f:
            f.write(st.to_json() + "\n")


@bench.command("codec")
@click.option("-m", "size", default="64M", show_default=True, help="input bytes per codec")
@click.option(
    "-i", "reps", type=click.IntRange(1), default=7, show_default=True, help="timed calls per codec (median)"
)
@click.option("--codecs", default="zfp,bq,cast,mpc", show_default=True, help="which codecs (comma-separated)")
def bench_codec(size: str, reps: int, codecs: str) -> None:
    """Codec encode/decode throughput on one thread and on every CPU (zfp against zfpy)."""
    from .bench.codec import report
    from .bench.codec import run as run_codecs
    from .bench.sizes import parse_size

    try:
        nbytes = parse_size(size)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="-m") from e
    which = {c.strip() for c in codecs.split(",") if c.strip()}
    if unknown := which - {"zfp", "bq", "cast", "mpc"}:
        raise click.BadParameter(f"unknown codecs: {', '.join(sorted(unknown))}", param_hint="--codecs")
    report(run_codecs(nbytes, reps, which), nbytes)


@main.command()
def profiles() -> None:
    """Named workload profiles for `bench --profile` and `tune --profile`."""
    from rich.console import Console
    from rich.table import Table

    from .bench.sizes import fmt_size
    from .profiles import PROFILES

    t = Table(title="workload profiles")
    for col in ("name", "operation", "what", "sizes at 2 / 4 ranks", "source"):
        t.add_column(col)
    for p in PROFILES.values():
        sizes = " ".join(fmt_size(x) for x in p.sizes(2)) + " / " + " ".join(fmt_size(x) for x in p.sizes(4))
        what = p.summary + (f" [{p.note}]" if p.note else "")
        t.add_row(p.name, p.op + ("" if p.available else " (not built yet)"), what, sizes, p.source)
    Console(highlight=False).print(t)


def _parse_nprocs(text: str) -> list[int]:
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError as e:
        raise click.BadParameter(f"{text!r}: expected process counts like 2,3,4", param_hint="-n") from e
    if not out or out[0] < 1:
        raise click.BadParameter(f"{text!r}: process counts must be >= 1", param_hint="-n")
    return out


def _parse_duration(text: str | None) -> float:
    if not text:
        return 0.0
    t = text.strip().lower()
    mult = {"s": 1, "m": 60, "h": 3600}.get(t[-1:])
    try:
        v = float(t[:-1]) * mult if mult else float(t)
        if not v > 0:
            raise ValueError(text)
        return v
    except ValueError as e:
        raise click.BadParameter(
            f"{text!r}: expected a duration like 90s, 10m, 1h", param_hint="--time-limit"
        ) from e


@main.command()
@click.option("-n", "nprocs", required=True, help="process counts, comma-separated (e.g. 2,3,4)")
@click.option("--ops", default="alltoall", show_default=True, help="operations to tune (comma-separated)")
@click.option(
    "--effort", type=click.Choice(["quick", "measure", "exhaustive"]), default="measure", show_default=True
)
@click.option(
    "--time-limit", default=None, help="stop measuring after this long (e.g. 10m); the model fills in"
)
@click.option("--out", type=click.Path(dir_okay=False), help="table to write (default: the user table file)")
@click.option("--resume", is_flag=True, help="continue an interrupted run from its checkpoint")
@click.option(
    "--plot", "plot_path", type=click.Path(dir_okay=False), help="plot every candidate and the winners"
)
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="write the measurements as CSV")
@click.option("--sizes", default=None, help="bytes per rank to measure (MIN:MAX or a comma list)")
@click.option("--profile", default=None, help="measure the sizes of a workload profile")
@click.option("-i", "iters", type=click.IntRange(10), default=None, help="iterations per small cell")
@click.option(
    "--launcher", type=click.Choice(["standalone", "mpiexec"]), default="standalone", show_default=True
)
@click.option(
    "--compress",
    default=None,
    help="also measure compressed calls with this codec (JSON configuration); the table lists "
    "'compressed' where they win",
)
def tune(
    nprocs: str,
    ops: str,
    effort: str,
    time_limit: str | None,
    out: str | None,
    resume: bool,
    plot_path: str | None,
    csv_path: str | None,
    sizes: str | None,
    profile: str | None,
    iters: int | None,
    launcher: str,
    compress: str | None,
) -> None:
    """Measure this machine and write the tuning table (like FFTW's wisdom)."""
    from .errors import ShmcollError
    from .tuning.tuner import TuneOptions
    from .tuning.tuner import run as run_tune

    counts = _parse_nprocs(nprocs)
    from .tuning.table import OPERATIONS

    op_list = [o.strip() for o in ops.split(",") if o.strip()]
    unknown = [o for o in op_list if o not in OPERATIONS]
    if unknown or not op_list:
        raise click.BadParameter(
            f"cannot tune {unknown or ops!r}; known: {', '.join(OPERATIONS)}", param_hint="--ops"
        )
    size_list: list[int] | None = None
    if sizes and profile:
        raise click.UsageError("give --sizes or --profile, not both")
    if sizes:
        try:
            size_list = sorted({s for part in sizes.split(",") for s in parse_range(part)})
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--sizes") from e
    if profile:
        from .profiles import sizes_for

        try:
            size_list = sorted({s for p in counts for s in sizes_for(profile, p)})
        except ShmcollError as e:
            raise click.BadParameter(str(e), param_hint="--profile") from e
    opts = TuneOptions(
        nprocs=counts,
        effort=effort,
        sizes=size_list,
        out=out,
        resume=resume,
        time_limit=_parse_duration(time_limit),
        plot=plot_path,
        launcher=launcher,
        iters=iters,
        ops=op_list,
        compress=_codec_json(compress),
    )
    try:
        doc = run_tune(opts)
    except (ShmcollError, RuntimeError) as e:
        raise click.ClickException(str(e)) from e
    if csv_path:
        import csv

        keys = [
            "op",
            "nprocs",
            "bytes",
            "buffers",
            "algorithm",
            "order",
            "store",
            "median_us",
            "p90_us",
            "p99_us",
            "iterations",
            "outliers",
            "valid",
            "error",
        ]
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
            w.writeheader()
            w.writerows(doc.get("measurements", []))
    click.echo(f"wrote {doc['_path']} ({len(doc.get('measurements', []))} cells measured)")
    if doc.get("comment"):
        click.echo(doc["comment"])
    from .tuning.build import decisions_of
    from .tuning.report import lines

    for line in lines(decisions_of(doc)):
        click.echo(line)


@main.command()
@click.option(
    "-n", "nprocs", type=click.IntRange(1, 4096), default=None, help="process count (default: CPUs)"
)
def explain(nprocs: int | None) -> None:
    """The resolved selection for each operation and size range, and where it came from."""
    from rich.console import Console
    from rich.table import Table

    from . import _core
    from .bench.sizes import fmt_size
    from .errors import ShmcollError
    from .tuning.lookup import ENV_FILE, resolve

    p = nprocs or _core.machine()["logical_cpus"]
    try:
        r = resolve("alltoall", p)
    except ShmcollError as e:
        raise click.ClickException(str(e)) from e
    console = Console(highlight=False)
    if r.source == "model" and not r.covered:
        where = f"model (the {r.origin} table has no entry for {p} ranks)"
    elif r.source == "model":
        where = "model embedded in shmcoll (no table file found)"
    else:
        where = f"{r.source} ({r.origin} table)"
    forced = {
        k: os.environ[k]
        for k in ("SHMCOLL_ALLTOALL_ALGORITHM", "SHMCOLL_ALLTOALL_ORDER", "SHMCOLL_ALLTOALL_STORE")
        if os.environ.get(k)
    }
    t = Table(title=f"Alltoall(v), {p} ranks: {where}")
    for col in (
        "bytes per rank",
        "candidates (first that can serve wins)",
        "heap buffers",
        "private buffers",
        "in place",
    ):
        t.add_column(col)
    for lo, hi, cands in r.rows:
        probe = lo if hi is None else hi

        def pick(hs: bool, hr: bool, ip: bool, probe: int = probe) -> str:
            a, o, s, *_ = _core.resolve("alltoall", r.rows, p, probe, hs, hr, ip)
            return f"{a}/{o}/{s}"

        span = f"{fmt_size(lo)}..{'inf' if hi is None else fmt_size(hi)}"
        names = ", ".join(f"{a}/{o}/{s}" for a, o, s, _, _ in cands)
        t.add_row(span, names, pick(True, True, False), pick(False, False, False), pick(False, False, True))
    console.print(t)
    if forced:
        console.print(
            "[bold]forced by the environment (wins over the table):[/bold] "
            + ", ".join(f"{k}={v}" for k, v in forced.items())
        )
    from rich.markup import escape

    from .info import cma_from, cma_from_summary

    private = cma_from()
    console.print(
        f"[bold]private buffers take CMA from[/bold] {escape(cma_from_summary(private))}; below "
        "it the model serves them with staging or inline (heap buffers keep push, pull, direct)"
    )
    _print_probe(console, private)
    from .tuning.table import COLL_OPERATIONS, COMPRESSIBLE, FAMILY

    c = Table(title=f"other collectives, {p} ranks (size: the largest contribution of a rank)")
    c.add_column("operation")
    c.add_column("bytes")
    c.add_column("candidates (first that can serve wins; direct needs heap buffers)")
    c.add_column("source")
    for op in COLL_OPERATIONS:
        cr = resolve(op, p)
        env = os.environ.get(f"SHMCOLL_{FAMILY[op].replace('_block', '').upper()}_ALGORITHM")
        for i, (lo, hi, cands) in enumerate(cr.rows):
            span = f"{fmt_size(lo)}..{'inf' if hi is None else fmt_size(hi)}"
            names = ", ".join(cand[0] for cand in cands) + (f" [forced: {env}]" if env else "")
            c.add_row("" if i else FAMILY[op], span, names, "" if i else cr.source)
    console.print(c)
    from .compress import get_policy
    from .tuning.lookup import compression_table

    pol = get_policy()
    console.print(
        f"[bold]compression[/bold] (calls with traffic=): policy {pol.name!r} "
        + ", ".join(f"{t}={codec}" for t, codec in pol.describe())
    )
    spans = compression_table(p)
    for op, rows in spans.items():
        listed = [f"{fmt_size(lo)}..{'inf' if hi is None else fmt_size(hi)}" for lo, hi, on in rows if on]
        console.print(f"  {op}: the table compresses at {', '.join(listed) or 'no size'}")
    uncovered = [op for op in COMPRESSIBLE if op not in spans]
    if uncovered:
        console.print(f"  {', '.join(uncovered)}: from {fmt_size(pol.min_bytes)} on (the policy's min_bytes)")
    console.print(
        f"lookup order: {ENV_FILE}, user file, system file, model; per-call keywords and the "
        "environment win over the table"
    )


@main.command()
@click.argument("csv_file", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--out", type=click.Path(dir_okay=False), help="PNG to write (default: beside the CSV)")
def plot(csv_file: str, out: str | None) -> None:
    """Redraw a bench or tune CSV as PNG."""
    from .errors import ShmcollError
    from .plotting import plot_csv

    dst = out or os.path.splitext(csv_file)[0] + ".png"
    try:
        plot_csv(csv_file, dst)
    except (ShmcollError, ValueError, KeyError, UnicodeDecodeError) as e:
        what = f"missing column {e}" if isinstance(e, KeyError) else str(e)
        raise click.ClickException(f"{csv_file}: cannot plot it: {what}") from e
    click.echo(f"wrote {dst}")


@main.command()
@click.option("--dry-run", is_flag=True, help="only list what would be removed")
@click.option(
    "--shm-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default="/dev/shm",
    show_default=True,
    help="directory holding the segments",
)
def cleanup(dry_run: bool, shm_dir: Path) -> None:
    """Remove shmcoll segments left in /dev/shm by processes that no longer exist.

    Only your own regular files are removed; anything else named like a segment
    (directories, symlinks, other users' files) is skipped with a reason. Exits 1 if a
    segment that should have been removed could not be.
    """
    from .cleanup import clean

    out = clean(shm_dir, dry_run=dry_run)
    for s in out.removed:
        click.echo(
            f"{'would remove' if dry_run else 'removed'} {s.path} ({s.nbytes} bytes, pid {s.pid} gone)"
        )
    for s in out.kept:
        click.echo(f"kept {s.path} (pid {s.pid} is running)")
    for k in out.skipped:
        click.echo(f"skipped {k.path}: {k.reason}")
    for k in out.failed:
        click.echo(f"failed on {k.path}: {k.reason}", err=True)
    if not out.removed and not out.failed:
        click.echo("nothing to remove")
    if out.failed:
        raise SystemExit(1)


# The PMPI library's command lives with the library (python/shmcoll/pmpi), the selftest's
# with its checks (python/shmcoll/selftest).
from .pmpi.command import pmpi as _pmpi  # noqa: E402
from .selftest.command import selftest as _selftest  # noqa: E402

main.add_command(_pmpi)
main.add_command(_selftest)

if __name__ == "__main__":
    main()
