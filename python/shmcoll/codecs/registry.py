"""Codec lookup by configuration: shmcoll's own ids first (no numcodecs needed), then
numcodecs' registry for everything else."""

from __future__ import annotations

from typing import Any

from ..errors import CodecError
from .base import Codec
from .bq import Bq
from .cast import Cast
from .mpc import Mpc
from .zfp import Zfp

#: shmcoll's codec classes by codec id ("shmcoll.bq"; the short name "bq" works too).
CODECS: dict[str, type[Codec]] = {c.codec_id: c for c in (Zfp, Bq, Cast, Mpc)}


def get_codec(config: Any) -> Any:
    """A codec from a codec (returned as is), a config dict (``{"id": "shmcoll.bq", "bits":
    4}``; ids outside shmcoll go to numcodecs.get_codec) or a bare id string."""
    if isinstance(config, str):
        config = {"id": config}
    if not isinstance(config, dict):
        if callable(getattr(config, "encode", None)) and callable(getattr(config, "decode", None)):
            return config
        raise CodecError(f"not a codec or a codec configuration: {config!r}")
    params = dict(config)
    cid = params.pop("id", None)
    if not isinstance(cid, str):
        raise CodecError(f"a codec configuration needs an 'id' string: {config!r}")
    cls = CODECS.get(cid) or CODECS.get(f"shmcoll.{cid}")
    if cls is not None:
        try:
            return cls.from_config(params)
        except TypeError as e:
            raise CodecError(f"bad parameters for {cls.codec_id}: {e}") from None
    try:
        import numcodecs  # type: ignore[import-untyped]
    except ImportError:
        raise CodecError(f"unknown codec id {cid!r} (and numcodecs is not installed)") from None
    try:
        return numcodecs.get_codec(config)
    except Exception as e:
        raise CodecError(f"unknown codec id {cid!r}: {e}") from e
