"""Compressed collectives and per-traffic-class compression policies.

    comm.Allreduce(grad, out, compress=shmcoll.codecs.Bq(bits=8))    # one call
    comm.Allreduce(grad, out, traffic="dp")                          # the active policy decides
    with shmcoll.compress.use_policy("hybrid"):
        ...

``compress=`` takes a codec (``shmcoll.codecs``) or its configuration dict; ``traffic=``
names a traffic class (dp, tp, pp, zero) of the active :class:`Policy`, which maps it to
a codec (or to none) by message size. Alltoall, Allgather, Bcast, Allreduce and
Reduce_scatter_block accept both. The functions of this module do the same with more
control (error feedback for Allreduce).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from ..buffers import is_in_place
from ..errors import ArgumentError, UnsupportedError
from .collectives import allgather, allreduce, alltoall, bcast, codec_key, reduce_scatter_block, stats
from .feedback import ErrorFeedback
from .policy import (
    DEFAULT_MIN_BYTES,
    PRESETS,
    TRAFFIC_CLASSES,
    Policy,
    get_policy,
    hybrid,
    none,
    preset,
    set_policy,
    uniform,
    use_policy,
)

F = TypeVar("F", bound=Callable[..., Any])


def resolve_codec(
    compress: Any,
    traffic: str | None,
    nbytes: int,
    table_rows: list[tuple[int, int | None, bool]] | None = None,
) -> Any:
    """The codec serving a call: `compress` itself (a codec or a configuration: forced),
    else the active policy's codec for `traffic`, if compressing a message of `nbytes`
    pays: where the tuning table (`table_rows`, the operation's size ranges) covers the
    size, when its range lists the `compressed` candidate; elsewhere from the policy's
    ``min_bytes`` on. None: uncompressed."""
    if compress is not None:
        if hasattr(compress, "encode_raw") and hasattr(compress, "decode_raw"):
            return compress
        if isinstance(compress, Mapping):
            from ..codecs import get_codec

            return as_raw_codec(get_codec(dict(compress)))
        if callable(getattr(compress, "encode", None)) and callable(getattr(compress, "decode", None)):
            return as_raw_codec(compress)
        raise ArgumentError(
            f"compress= takes a shmcoll codec or its configuration, not {type(compress).__name__}"
        )
    if traffic is None:
        return None
    policy = get_policy()
    cfg = policy.codec_config(traffic)
    if cfg is None:
        return None
    pays = None if table_rows is None else _listed(table_rows, nbytes)
    if not (pays if pays is not None else nbytes >= policy.min_bytes):
        return None
    if not isinstance(cfg, Mapping):
        return as_raw_codec(cfg)  # a codec object
    from ..codecs import get_codec

    return as_raw_codec(get_codec(dict(cfg)))


class NumcodecsAdapter:
    """Any numcodecs codec (Blosc, Zstd, ...) as a variable-size raw codec: its `encode`
    output is the stream, its `decode` restores the array."""

    def __init__(self, codec: Any) -> None:
        self.codec = codec

    def get_config(self) -> dict[str, Any]:
        return dict(self.codec.get_config())

    def compressed_size(self, n: int, dtype: Any) -> None:
        return None

    def encode_raw(self, x: Any) -> bytes:
        return bytes(self.codec.encode(x))

    def decode_raw(self, buf: Any, dtype: Any, n: int, out: Any = None) -> Any:
        import numpy as np

        v = np.frombuffer(self.codec.decode(bytes(buf)), dtype, n)
        if out is None:
            return v.copy()
        out[...] = v
        return out


def as_raw_codec(codec: Any) -> Any:
    """`codec` itself when it has the raw stream methods, else a NumcodecsAdapter."""
    if hasattr(codec, "encode_raw") and hasattr(codec, "decode_raw"):
        return codec
    return NumcodecsAdapter(codec)


def _listed(rows: list[tuple[int, int | None, bool]], size: int) -> bool | None:
    """Whether the table range holding `size` lists `compressed` (None: in no range)."""
    for lo, hi, compressed in rows:
        if lo <= size and (hi is None or size <= hi):
            return compressed
    return None


#: The tuning table's name of each compressible collective.
TABLE_OPS = {
    "Alltoall": "alltoall",
    "Allreduce": "allreduce",
    "Allgather": "allgather",
    "Bcast": "bcast",
    "Reduce_scatter_block": "reduce_scatter",
}


def run_compressed(comm: Any, name: str, args: tuple[Any, ...], compress: Any, traffic: str | None) -> None:
    """Run collective `name` of `comm` compressed when `compress`, or the active policy for
    `traffic`, gives a codec for this message; else uncompressed (`comm.<name>(*args)`)."""
    data = args[0] if name == "Bcast" or not is_in_place(args[0]) else args[1]
    nbytes = int(getattr(data, "nbytes", 0))
    rows = getattr(comm, "_compression", {}).get(TABLE_OPS.get(name, ""))
    # Table sizes of Alltoall are bytes per peer; the others' the rank's contribution.
    size = nbytes // max(comm.size, 1) if name == "Alltoall" and rows is not None else nbytes
    codec = resolve_codec(compress, traffic, size if rows is not None else nbytes, rows)
    if codec is None:
        getattr(comm, name)(*args)
    elif name == "Alltoall":
        alltoall(comm, args[0], args[1], codec)
    elif name == "Allgather":
        allgather(comm, args[0], args[1], codec)
    elif name == "Bcast":
        bcast(comm, args[0], args[1], codec)
    elif name == "Allreduce":
        allreduce(comm, args[0], args[1], codec, op=args[2])
    elif name == "Reduce_scatter_block":
        reduce_scatter_block(comm, args[0], args[1], codec, op=args[2])
    else:
        raise UnsupportedError(f"{name} has no compressed form")


def compressible(name: str) -> Callable[[F], F]:
    """Give a collective method `compress=` and `traffic=` keywords (for communicators
    implemented in Python, such as HierComm; shmcoll.Comm's native methods have them)."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def method(self: Any, *args: Any, compress: Any = None, traffic: str | None = None, **kw: Any) -> Any:
            if compress is None and traffic is None:
                return fn(self, *args, **kw)
            full = inspect.signature(fn).bind(self, *args, **kw)
            full.apply_defaults()
            run_compressed(self, name, tuple(full.arguments.values())[1:], compress, traffic)
            return None

        return cast(F, method)

    return wrap


__all__ = [
    "DEFAULT_MIN_BYTES",
    "PRESETS",
    "TRAFFIC_CLASSES",
    "ErrorFeedback",
    "NumcodecsAdapter",
    "Policy",
    "allgather",
    "allreduce",
    "alltoall",
    "as_raw_codec",
    "bcast",
    "codec_key",
    "compressible",
    "get_policy",
    "hybrid",
    "none",
    "preset",
    "reduce_scatter_block",
    "resolve_codec",
    "run_compressed",
    "set_policy",
    "stats",
    "uniform",
    "use_policy",
]
