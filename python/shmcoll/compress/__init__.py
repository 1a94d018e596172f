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

from collections.abc import Mapping
from typing import Any

from ..errors import ArgumentError
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


def resolve_codec(compress: Any, traffic: str | None, nbytes: int) -> Any:
    """The codec serving a call: `compress` itself (a codec or a configuration), else what
    the active policy gives `traffic` for a message of `nbytes`; None: uncompressed."""
    if compress is not None:
        if hasattr(compress, "encode_raw") and hasattr(compress, "decode_raw"):
            return compress
        if isinstance(compress, Mapping):
            from ..codecs import get_codec

            return get_codec(dict(compress))
        raise ArgumentError(
            f"compress= takes a shmcoll codec or its configuration, not {type(compress).__name__}"
        )
    if traffic is None:
        return None
    cfg = get_policy().config_for(traffic, nbytes)
    if cfg is None:
        return None
    from ..codecs import get_codec

    return get_codec(dict(cfg))


__all__ = [
    "DEFAULT_MIN_BYTES",
    "PRESETS",
    "TRAFFIC_CLASSES",
    "ErrorFeedback",
    "Policy",
    "allgather",
    "allreduce",
    "alltoall",
    "bcast",
    "codec_key",
    "get_policy",
    "hybrid",
    "none",
    "preset",
    "reduce_scatter_block",
    "resolve_codec",
    "set_policy",
    "stats",
    "uniform",
    "use_policy",
]
