"""The rule by which `shmcoll tune` lets a measured candidate replace the model's own
choice: tuning never makes things worse.

A cell is (operation, process count, block size, buffer kind). In every cell the tuner
measures each candidate together with the model's own choice ("model": nothing forced,
the untuned selection), in interleaved rounds, so that drifts of a shared machine hit
them alike. From each candidate it keeps the median over iterations and the median of
each round.

* **Cells.** A candidate beats the model when it wins every interleaved round (its
  round's median below the model's in the same round) and its median is below the
  model's by more than the spread::

      model.median - cand.median > max(MIN_MARGIN * model.median,
                                        iqr(model.rounds), iqr(cand.rounds))

  where ``iqr`` is the interquartile range of the per-round medians. Of the candidates
  that beat the model, the one with the lowest ratio to the model measured beside it
  wins; when none does (or the model's own measurement failed), the cell keeps the model.
* **Sizes between measured points.** A winner covers the sizes between two neighbouring
  measured points only where it won at both; between points whose winners differ, below
  the smallest and above the largest measured size, the model serves.

Which winners a table can express for each buffer kind at once (a candidate list serves
every kind) is the builder's part (build.py); it keeps the model for a kind whose winner
it cannot express.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

#: The smallest gain that counts, as a share of the model's median.
MIN_MARGIN = 0.05

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Timing:
    """A candidate's measurement in one cell: the median over iterations and the median
    of each interleaved round (µs)."""

    median_us: float
    rounds_us: tuple[float, ...]

    @property
    def spread_us(self) -> float:
        """The interquartile range of the per-round medians (0 with one round)."""
        if len(self.rounds_us) < 2:
            return 0.0
        q1, q3 = np.percentile(self.rounds_us, [25, 75])
        return float(q3 - q1)


@dataclass(frozen=True)
class Paired:
    """A candidate and the model as measured beside it (the same interleaved rounds)."""

    cand: Timing
    model: Timing

    @property
    def ratio(self) -> float:
        return self.cand.median_us / self.model.median_us

    @property
    def margin_us(self) -> float:
        """How much faster than the model the candidate must be to count."""
        return max(MIN_MARGIN * self.model.median_us, self.model.spread_us, self.cand.spread_us)

    @property
    def wins_every_round(self) -> bool:
        """The candidate's median below the model's in each round (paired, the rounds
        being interleaved; against the model's median where the rounds do not pair)."""
        c, m = self.cand.rounds_us, self.model.rounds_us
        if len(c) != len(m):
            m = (self.model.median_us,) * len(c)
        return all(x < y for x, y in zip(c, m, strict=True))

    @property
    def beats_model(self) -> bool:
        return self.wins_every_round and self.model.median_us - self.cand.median_us > self.margin_us


def winner(cands: Mapping[K, Paired]) -> K | None:
    """The candidate that replaces the model in a cell, or None (the cell keeps the model)."""
    ok = [(p.ratio, k) for k, p in cands.items() if p.model.median_us > 0 and p.beats_model]
    if not ok:
        return None
    return min(ok, key=lambda t: t[0])[1]


def spans(points: Sequence[tuple[int, K | None]]) -> list[tuple[int, int, K]]:
    """Inclusive size ranges a winner covers, from (measured size, winner or None) points:
    each point itself, and the sizes up to the next point where the same winner won."""
    out: list[tuple[int, int, K]] = []
    pts = sorted(points, key=lambda t: t[0])
    for i, (size, w) in enumerate(pts):
        if w is None:
            continue
        if out and i > 0 and pts[i - 1][1] == w and out[-1][1] == pts[i - 1][0]:
            out[-1] = (out[-1][0], size, w)  # the same winner at both neighbours
        else:
            out.append((size, size, w))
    return out
