"""Compression policies: which codec serves which traffic class.

In LLM training with 3-D parallelism the collectives carry different data: data-parallel
gradients (``dp``) tolerate aggressive lossy compression, above all with error feedback;
tensor- and pipeline-parallel activations (``tp``, ``pp``) and ZeRO's parameter and
optimizer-state traffic (``zero``) need mild or lossless compression to keep the loss
of the uncompressed run. A :class:`Policy` maps each class to a codec configuration and
leaves messages below ``min_bytes`` alone (codec set-up and the extra passes over the
data cost more than they save on small messages).

Presets: ``none`` (nothing compressed), ``uniform`` (one codec for every class) and
``hybrid`` (int8 block quantization for dp gradients, zfp at rate 16 for tp/pp
activations, lossless MPC for ZeRO traffic). The active policy is process-wide:
:func:`set_policy`, the :func:`use_policy` context manager, or ``SHMCOLL_COMPRESS_POLICY``
(a preset name) at import.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ArgumentError

#: The traffic classes collectives can be tagged with (``traffic="dp"``).
TRAFFIC_CLASSES: tuple[str, ...] = ("dp", "tp", "pp", "zero")

#: Messages smaller than this are sent uncompressed unless a policy says otherwise.
DEFAULT_MIN_BYTES = 64 * 1024

ENV_POLICY = "SHMCOLL_COMPRESS_POLICY"


@dataclass(frozen=True)
class Policy:
    """Codec per traffic class (a configuration dict such as ``{"id": "shmcoll.bq",
    "bits": 8}``, a codec object, or None: uncompressed), and the message size in bytes
    below which nothing is compressed (where no tuning table decides)."""

    name: str
    codecs: Mapping[str, Any] = field(default_factory=dict)
    min_bytes: int = DEFAULT_MIN_BYTES

    def __post_init__(self) -> None:
        unknown = set(self.codecs) - set(TRAFFIC_CLASSES)
        if unknown:
            raise ArgumentError(
                f"unknown traffic classes {sorted(unknown)}; known: {', '.join(TRAFFIC_CLASSES)}"
            )
        if self.min_bytes < 0:
            raise ArgumentError(f"min_bytes must not be negative, got {self.min_bytes}")

    def codec_config(self, traffic: str) -> Any:
        """The codec configuration of class `traffic` whatever the size, or None."""
        if traffic not in TRAFFIC_CLASSES:
            raise ArgumentError(f"unknown traffic class {traffic!r}; known: {', '.join(TRAFFIC_CLASSES)}")
        return self.codecs.get(traffic)

    def config_for(self, traffic: str, nbytes: int) -> Any:
        """The codec configuration for a message of `nbytes` of class `traffic`, or None."""
        cfg = self.codec_config(traffic)
        return None if nbytes < self.min_bytes else cfg

    def describe(self) -> list[tuple[str, str]]:
        """(traffic class, codec configuration or "none") for printing."""
        return [(t, _fmt(self.codecs.get(t))) for t in TRAFFIC_CLASSES]


def _fmt(cfg: Any) -> str:
    if cfg is None:
        return "none"
    if not isinstance(cfg, Mapping):
        cfg = cfg.get_config() if hasattr(cfg, "get_config") else {"id": type(cfg).__name__}
    args = ", ".join(f"{k}={v!r}" for k, v in cfg.items() if k != "id")
    return f"{cfg['id']}({args})"


def none() -> Policy:
    """Nothing is compressed."""
    return Policy("none", {})


def uniform(codec: Mapping[str, Any] | None = None, min_bytes: int = DEFAULT_MIN_BYTES) -> Policy:
    """One codec for every traffic class (default: zfp at rate 16)."""
    cfg = dict(codec) if codec is not None else {"id": "shmcoll.zfp", "rate": 16}
    return Policy("uniform", dict.fromkeys(TRAFFIC_CLASSES, cfg), min_bytes)


def hybrid(min_bytes: int = DEFAULT_MIN_BYTES) -> Policy:
    """Aggressive for data-parallel gradients, mild or lossless elsewhere."""
    return Policy(
        "hybrid",
        {
            "dp": {"id": "shmcoll.bq", "bits": 8, "block": 256},
            "tp": {"id": "shmcoll.zfp", "rate": 16},
            "pp": {"id": "shmcoll.zfp", "rate": 16},
            "zero": {"id": "shmcoll.mpc"},
        },
        min_bytes,
    )


PRESETS = {"none": none, "uniform": uniform, "hybrid": hybrid}


def preset(name: str) -> Policy:
    """The preset policy called `name` (none, uniform, hybrid)."""
    try:
        return PRESETS[name]()
    except KeyError:
        raise ArgumentError(f"unknown compression policy {name!r}; presets: {', '.join(PRESETS)}") from None


_lock = threading.Lock()
_active: Policy = preset(os.environ.get(ENV_POLICY, "none").strip() or "none")


def get_policy() -> Policy:
    """The active policy."""
    return _active


def set_policy(policy: Policy | str) -> Policy:
    """Make `policy` (a Policy or a preset name) active; returns the previous one."""
    global _active
    new = preset(policy) if isinstance(policy, str) else policy
    if not isinstance(new, Policy):
        raise ArgumentError(f"expected a Policy or a preset name, got {type(policy).__name__}")
    with _lock:
        old, _active = _active, new
    return old


@contextlib.contextmanager
def use_policy(policy: Policy | str) -> Iterator[Policy]:
    """Activate `policy` for the duration of a ``with`` block."""
    old = set_policy(policy)
    try:
        yield get_policy()
    finally:
        set_policy(old)
