"""scripts/gpu_check.sh, the one command of a GPU machine's first run, works before it meets
a GPU: every step runs under its limit and leaves its file, the selftest's JSON says why the
GPU checks were skipped, the GPU tests are collected (and skip), and the summary names the
step that failed (the environment: no GPU here) with a non-zero exit."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import subprocess_env
from shmcoll import gpu

ROOT = pathlib.Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(600)


def test_the_gpu_check_runs_every_step_and_fails_without_a_gpu(tmp_path: pathlib.Path) -> None:
    if gpu.available():
        pytest.skip("a GPU is usable here: the script's real run applies")
    # A stand-in for compute-sanitizer: it runs the program it is given, after its options.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "compute-sanitizer"
    fake.write_text(
        "#!/bin/sh\n"
        'while [ "${1#--}" != "$1" ]; do\n'
        '  case "$1" in --tool|--error-exitcode|--target-processes) shift 2 ;; *) shift ;; esac\n'
        "done\n"
        'echo "sanitizer stand-in runs: $*"\n'
        'exec "$@"\n'
    )
    fake.chmod(0o755)
    out_dir = tmp_path / "out"
    env = subprocess_env(
        {"PYTHON": sys.executable, "SHMCOLL_CHECK_OUT": str(out_dir), "SHMCOLL_CHECK_QUICK": "1"}
    )
    env["PATH"] = f"{bindir}:{env['PATH']}"
    res = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh")],
        capture_output=True, text=True, timeout=540, env=env, check=False, cwd=tmp_path,
    )  # fmt: skip
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "gpu_check: FAILED: env (exit 1)" in out
    files = {p.name for p in out_dir.iterdir()}
    want = {
        "env.txt",
        "selftest.txt",
        "selftest.json",
        "pytest.txt",
        "pytest.xml",
        "ranks.txt",
        "ddp.txt",
        "sanitizer.txt",
    }
    assert want <= files, files
    env_txt = (out_dir / "env.txt").read_text()
    assert f"GPU path       NOT ready: {gpu.unavailable()}" in env_txt
    assert "same as checkout yes" in env_txt, env_txt  # the checkout's own package runs
    record = json.loads((out_dir / "selftest.json").read_text())
    assert record == {"gpu": {"skipped": gpu.unavailable()}, "ranks": [], "exit": 0}
    assert "== selftest: exit 0" in (out_dir / "selftest.txt").read_text()
    ranks_txt = (out_dir / "ranks.txt").read_text()
    assert "== ranks: exit 0" in ranks_txt and "shmcoll bench machine" in ranks_txt, ranks_txt
    pytest_txt = (out_dir / "pytest.txt").read_text()
    assert "== pytest: exit 0" in pytest_txt and re.search(r"\d+ skipped", pytest_txt), pytest_txt
    assert not re.search(r"\d+ (failed|errors?)\b", pytest_txt), pytest_txt
    # The three files of GPU tests were found and collected (each skips here).
    junit = (out_dir / "pytest.xml").read_text()
    for name in ("test_gpu_codecs", "test_gpu_zfp", "test_compress_on_device"):
        assert name in junit, name
    assert "skipped" in (out_dir / "ddp.txt").read_text()
    sanitized = (out_dir / "sanitizer.txt").read_text()
    assert "sanitizer stand-in runs: " in sanitized and "selftest --gpu --quick" in sanitized, sanitized
    assert "== sanitizer: exit 0" in sanitized, sanitized


def test_steps_past_the_runs_limit_are_not_started_and_fail(tmp_path: pathlib.Path) -> None:
    env = subprocess_env(
        {"PYTHON": sys.executable, "SHMCOLL_CHECK_OUT": str(tmp_path), "SHMCOLL_CHECK_SECONDS": "5"}
    )
    res = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh")],
        capture_output=True, text=True, timeout=120, env=env, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    for name in ("env", "selftest", "pytest", "ranks"):
        assert f"{name} (no time left)" in res.stdout, res.stdout
        assert "not started" in (tmp_path / f"{name}.txt").read_text()
