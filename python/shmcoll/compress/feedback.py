"""Error feedback for lossy compressed collectives.

A lossy codec drops part of every contribution. Error feedback keeps what was dropped
(the residual ``x - decode(encode(x))`` of this rank's own contribution) and adds it to
the next call's input, so that the error does not accumulate over training steps: the
sum over steps of what was sent tracks the sum of the true inputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class ErrorFeedback:
    """Residual state of one tensor's compressed collective (one per gradient bucket)."""

    def __init__(self) -> None:
        self.residual: Any = None

    def corrected(self, x: Any) -> Any:
        """`x` plus the carried residual (a new array; `x` is not modified)."""
        if self.residual is None or self.residual.shape != x.shape or self.residual.dtype != x.dtype:
            self.residual = None
            return x
        return x + self.residual

    def update(self, sent: Any, decoded: Any) -> None:
        """Keep what compression dropped of `sent` for the next call."""
        self.residual = sent - decoded

    def reset(self) -> None:
        self.residual = None

    def norm(self) -> float:
        """L2 norm of the carried residual (0 when none)."""
        if self.residual is None:
            return 0.0
        return float(np.sqrt(np.sum(np.square(_host(self.residual), dtype=np.float64))))


def _host(a: Any) -> np.ndarray:
    get = getattr(a, "get", None)
    return np.asarray(get() if callable(get) else a)
