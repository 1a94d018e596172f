"""The benchmark harness's loop (python/shmcoll/bench/harness.py), in one process: how many
untimed and timed calls a variant gets, and the longer warm-up of a launch's first
measurement, which every rank must count alike (their barriers pair up call for call)."""

from __future__ import annotations

from typing import Any

import pytest

from shmcoll.bench import harness
from shmcoll.bench.harness import LAUNCH_WARMUP_FACTOR, Variant, measure


def counting_variant(label: str, calls: list[str]) -> Variant:
    def bind(state: Any) -> Any:
        return lambda: calls.append(label)

    return Variant(
        label=label,
        peer=False,
        setup=lambda size: None,
        refill=lambda state, it, final: None,
        bind=bind,
        check=lambda state, it: True,
    )


@pytest.mark.parametrize("interleave", [True, False])
def test_the_first_measurement_of_a_process_warms_up_longer(
    monkeypatch: pytest.MonkeyPatch, interleave: bool
) -> None:
    monkeypatch.setattr(harness, "_launch_warmed", False)
    calls: list[str] = []
    variants = [counting_variant("a", calls), counting_variant("b", calls)]
    barriers: list[int] = []
    iters, warmup, rounds = 20, 3, 4
    measure(lambda: barriers.append(1), variants, 8, iters, warmup, rounds, True, interleave)
    first = warmup * LAUNCH_WARMUP_FACTOR + iters
    for v in variants:
        assert calls.count(v.label) == first, v.label
        assert len(v.times) == iters and v.valid is True
    assert len(barriers) == 2 * len(calls)  # one before and one after every call
    # from the second measurement on, the warm-up is the one asked for
    calls.clear()
    measure(lambda: None, variants, 16, iters, warmup, rounds, True, interleave)
    for v in variants:
        assert calls.count(v.label) == warmup + iters, v.label
        assert len(v.times) == iters
