"""The standalone launcher: several processes on this node sharing one communicator,
without MPI. Used by ``shmcoll run -n N script.py``, by :func:`spawn`, by the tests and by
the benchmarks' standalone mode.

The launcher creates the segment, hands its name to the ranks in their environment, and
keeps it until the ranks are done (rank 0 unlinks it as soon as every rank mapped it; the
launcher unlinks it anyway on the way out, so that a failed start leaves nothing behind).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from . import _core
from .binding import children_bound_to, launch_cpus
from .comm import ENV_RANK, ENV_SEGMENT, ENV_SIZE
from .errors import ArgumentError, SpawnError


def rank_env(name: str, rank: int, size: int) -> dict[str, str]:
    return {ENV_SEGMENT: name, ENV_RANK: str(rank), ENV_SIZE: str(size)}


def _child(
    rank: int,
    size: int,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    conn: Connection,
) -> None:
    os.environ.update(rank_env(name, rank, size))
    try:
        result = fn(*args, **kwargs)
        conn.send(("ok", result))
    except BaseException as e:  # report everything, including SystemExit
        conn.send(("error", f"{type(e).__name__}: {e}", traceback.format_exc()))
    finally:
        conn.close()


def spawn(
    n: int,
    fn: Callable[..., Any],
    *args: Any,
    timeout: float | None = None,
    start_method: str | None = None,
    **kwargs: Any,
) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on `n` new processes that share a communicator
    (``shmcoll.Comm()`` inside `fn` returns it) and return each rank's result, in rank
    order. If any rank raises or dies, raises :class:`SpawnError` with every failure.

    `fn` must be picklable (a module-level function) unless `start_method` is "fork".
    `timeout` (seconds) bounds the whole run; the ranks are killed when it passes.
    """
    if n < 1:
        raise ArgumentError("spawn needs at least one rank")
    method = start_method or os.environ.get("SHMCOLL_START_METHOD", "spawn")
    ctx: Any = mp.get_context(method)  # a context of any method has .Process and .Pipe
    cpus = launch_cpus(n)
    seg = _core.SegmentHandle(n)
    procs: list[Any] = []
    conns: list[Connection] = []
    timed_out = False
    try:
        for r in range(n):
            parent, child = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_child, args=(r, n, seg.name, fn, args, kwargs, child), daemon=True)
            with children_bound_to(None if cpus is None else cpus[r]):
                p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
        results: list[Any] = [None] * n
        failures: dict[int, str] = {}
        pending = dict(enumerate(conns))
        deadline = None if timeout is None else time.monotonic() + timeout
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait(list(pending.values()), timeout=left)
            if not ready:
                timed_out = True
                for r in pending:
                    failures[r] = f"rank {r}: still running after {timeout} s; killed"
                break
            for c in ready:
                r = next(k for k, v in pending.items() if v is c)
                del pending[r]
                try:
                    msg = conns[r].recv()  # == c, typed as a Connection
                except EOFError:
                    procs[r].join(5)
                    failures[r] = f"rank {r}: process exited with code {procs[r].exitcode} before reporting"
                    continue
                if msg[0] == "ok":
                    results[r] = msg[1]
                else:
                    failures[r] = f"rank {r}: {msg[1]}\n{msg[2]}"
        if failures:
            raise SpawnError("\n".join(failures[r] for r in sorted(failures)))
        return results
    finally:
        # Ranks that reported have returned from `fn`: give them a moment to exit. Ranks
        # still running past the timeout (or after a failure elsewhere) are killed now.
        grace = time.monotonic() + 5
        for p in procs:
            p.join(timeout=max(0.0, grace - time.monotonic()) if not timed_out else 0)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        for c in conns:
            c.close()
        seg.unlink()


#: Signals the launcher passes on to its ranks (and then ends with, as 128 + the number).
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: After a signal, how long the launcher lets the ranks end by themselves before it passes
#: the signal on: a terminal's Ctrl-C reaches every process of the foreground job at once,
#: and a second SIGINT could interrupt a rank's own clean-up.
FORWARD_AFTER_S = 0.2

#: How long ranks get to end after a forwarded signal before they are killed.
KILL_AFTER_S = 2.0


def run(n: int, argv: Sequence[str], *, timeout: float | None = None) -> int:
    """Start `n` copies of ``python argv...`` sharing a communicator; return the worst
    exit code. A rank that fails makes the others raise (dead peer) rather than hang.

    SIGINT and SIGTERM sent to the launcher (alone, or with its ranks as a terminal's
    Ctrl-C does) reach every rank; ranks still running ``KILL_AFTER_S`` later are killed,
    and the launcher returns 128 + the signal's number."""
    if n < 1:
        raise ArgumentError("run needs at least one rank")
    received: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)

    # Python installs handlers from the main thread only; elsewhere signals keep their
    # default action and this launcher is the caller's to stop.
    main = threading.current_thread() is threading.main_thread()
    old = {s: signal.signal(s, on_signal) for s in FORWARDED_SIGNALS} if main else {}
    cpus = launch_cpus(n)
    seg = _core.SegmentHandle(n)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for r in range(n):
            env = dict(os.environ)
            env.update(rank_env(seg.name, r, n))
            with children_bound_to(None if cpus is None else cpus[r]):
                procs.append(subprocess.Popen([sys.executable, *argv], env=env))
        deadline = None if timeout is None else time.monotonic() + timeout
        codes: list[int | None] = [None] * n
        signalled_at: float | None = None
        forwarded = False
        while any(c is None for c in codes):
            for r, p in enumerate(procs):
                if codes[r] is None:
                    codes[r] = p.poll()
            now = time.monotonic()
            if received and signalled_at is None:
                signalled_at = now
            if signalled_at is not None:
                # A second signal is a user who insists: pass it on at once.
                if not forwarded and (len(received) > 1 or now - signalled_at >= FORWARD_AFTER_S):
                    forwarded = True
                    signalled_at = now
                    _signal_running(procs, received[-1])
                elif forwarded and now - signalled_at >= KILL_AFTER_S:
                    _signal_running(procs, signal.SIGKILL)
            if deadline is not None and now > deadline:
                _signal_running(procs, signal.SIGKILL)
                return 124
            time.sleep(0.01)
        if received:
            return 128 + received[0]
        return max(abs(c or 0) for c in codes)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        seg.unlink()
        for s, h in old.items():
            signal.signal(s, h)


def _signal_running(procs: Sequence[subprocess.Popen[bytes]], signum: int) -> None:
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # ended since the poll
                p.send_signal(signum)
