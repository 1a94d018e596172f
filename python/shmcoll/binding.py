"""Binding ranks to CPUs from process start, when shmcoll launches them.

``shmcoll.Comm`` binds each rank round-robin to one CPU when ranks outnumber CPUs
(``SHMCOLL_BIND``, see ``shmcoll info``), because a waiting rank must then hand its CPU
to the rank it waits for. Bound that late, at Comm creation, the scheduler needs a few
tens of milliseconds to settle the migrated ranks: measured with 4 ranks on 2 CPUs, small
Allreduce calls take ~6.7 µs in the first 20-80 ms against ~4.5 µs after, and sleeping
does not shorten it. A launcher that binds before the rank starts (as ``mpiexec
-bind-to core`` does) has no such transient. So the launchers shmcoll drives (``shmcoll
run``, ``spawn``, and mpiexec under ``shmcoll bench``) bind from the start, to the same
CPUs the Comm would choose, and the Comm then sees ranks already bound and leaves them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from .errors import ArgumentError

_AUTO = ("", "auto")
_CORE = ("core", "cpu", "yes", "1")
_NONE = ("none", "no", "0")


def bind_policy() -> str:
    """``SHMCOLL_BIND`` as one of ``auto``, ``core``, ``none`` (the Rust side's spellings)."""
    value = os.environ.get("SHMCOLL_BIND", "").strip().lower()
    if value in _AUTO:
        return "auto"
    if value in _CORE:
        return "core"
    if value in _NONE:
        return "none"
    raise ArgumentError(f"SHMCOLL_BIND={value!r}: expected auto, core or none")


def launch_cpus(n: int) -> list[int] | None:
    """The CPU for each of `n` ranks about to be launched from this process, or None when
    they should start unbound: the policy is ``none``, or ``auto`` with no more ranks
    than CPUs, or this process is already confined to some CPUs (the user or a batch
    system chose; the ranks inherit that)."""
    policy = bind_policy()
    if policy == "none":
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if not allowed:
        return None
    if policy == "auto" and (n <= len(allowed) or len(allowed) < (os.cpu_count() or 1)):
        return None
    return [allowed[r % len(allowed)] for r in range(n)]


@contextlib.contextmanager
def children_bound_to(cpu: int | None) -> Iterator[None]:
    """Processes this thread starts inside the block are bound to `cpu` (None: left as
    they are) from their first instruction: the thread's own mask is narrowed for the
    duration, and a fork (or fork and exec) inherits it. Binding the child after it
    started would race with it; children of a fork server inherit the server's mask, not
    this one, and are bound by their Comm instead."""
    if cpu is None:
        yield
        return
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, saved)


def mpiexec_bind_flags(flavour: str, n: int) -> list[str]:
    """The flags that make mpiexec bind each rank to one hardware thread (a CPU, the unit
    :func:`launch_cpus` and the Comm bind to), round-robin, or none when the ranks should
    start unbound. `flavour` is ``mpich`` (Hydra, which deals ranks to CPUs round-robin)
    or ``openmpi`` (PRRTE, which would fill CPU 0 with ranks 0, 1, ... unless told to
    span, and refuses to bind more ranks than CPUs unless told that overloading is
    allowed)."""
    if launch_cpus(n) is None:
        return []
    if flavour == "openmpi":
        return ["--map-by", "hwthread:span", "--bind-to", "hwthread:overload-allowed"]
    return ["-bind-to", "hwthread"]
