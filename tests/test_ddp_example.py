"""examples/ddp_training.py end to end: two ranks launched by ``shmcoll run`` train an MLP
with torch DDP on gloo, once with DDP's allreduce and once through shmcoll's compressed
hook under the hybrid policy; the compressed run must learn (its loss falls) and end
within the example's tolerance of the uncompressed one, with every gradient bucket going
through the compressed Allreduce.

Opt-in (marker ``torch``, ``SHMCOLL_TEST_TORCH=1``): PyPI's only Linux x86-64 torch is
the CUDA build, which does not import without its several GB of nvidia-* packages
(docs/compression.md has the measured install); ``pip install torch`` first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import subprocess_env

ROOT = Path(__file__).resolve().parents[1]
OPT_IN = "SHMCOLL_TEST_TORCH"

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(os.environ.get(OPT_IN) != "1", reason=f"opt-in: {OPT_IN}=1 (and pip install torch)"),
]


def test_compressed_ddp_tracks_uncompressed_training(tmp_path: Path) -> None:
    try:
        import torch  # noqa: F401
    except ImportError as e:
        pytest.fail(f"{OPT_IN}=1 but torch does not import ({e}): pip install torch")
    out = tmp_path / "ddp.json"
    cmd = [sys.executable, "-m", "shmcoll.cli", "run", "-n", "2", str(ROOT / "examples" / "ddp_training.py")]
    cmd += ["--steps", "60", "--json", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=280, env=subprocess_env(), check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "within tolerance" in p.stdout
    res = json.loads(out.read_text())
    plain, hybrid = res["uncompressed"], res["hybrid"]
    assert len(plain["losses"]) == len(hybrid["losses"]) == 60
    assert plain["losses"][0] == pytest.approx(hybrid["losses"][0], rel=1e-6)  # same start
    assert hybrid["losses"][-1] < 0.8 * hybrid["losses"][0]  # it learns
    assert res["relative_difference"] <= 0.10
    assert hybrid["compressed_calls"] >= 60 and hybrid["plain_calls"] == 0
