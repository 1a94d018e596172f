"""``shmcoll selftest``: the GPU checks skip cleanly without a GPU, run end to end on the CPU
emulation of the kernels (so that a first run on a real device is not their first run),
fail on a kernel that gives other bytes than the Rust reference; the tables run at a rank
count this machine has and skip one it has not."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from conftest import subprocess_env
from cuda_emu.emulation import installed
from cuda_emu.emulation import subprocess_env as emulated_env
from shmcoll import gpu

pytestmark = pytest.mark.timeout(600)


def selftest(
    *args: str, env: dict[str, str] | None = None, timeout: float = 540
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shmcoll.cli", "selftest", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=subprocess_env(env),
        check=False,
    )


def test_without_a_gpu_the_gpu_checks_are_skipped_with_the_reason(tmp_path: pathlib.Path) -> None:
    if gpu.available():
        pytest.skip("a GPU is usable here: tests/test_gpu_codecs.py and a real selftest apply")
    res = selftest("--gpu", "--json", str(tmp_path / "selftest.json"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "GPU checks skipped: " in res.stdout
    assert gpu.unavailable() in res.stdout  # type: ignore[operator]
    record = json.loads((tmp_path / "selftest.json").read_text())
    assert record == {"gpu": {"skipped": gpu.unavailable()}, "ranks": [], "exit": 0}


def test_the_command_needs_something_to_check() -> None:
    res = selftest()
    assert res.returncode == 2 and "--gpu" in res.stderr
    res = selftest("--gpu", "--codecs", "bq,lz4")
    assert res.returncode == 2 and "lz4" in res.stderr


def test_the_gpu_checks_run_end_to_end_on_the_emulated_device(
    emu_lib: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    out_json = tmp_path / "selftest.json"
    res = selftest(
        "--gpu", "--quick", "--codecs", "bq,cast,mpc,zfp", "--json", str(out_json), env=emulated_env(emu_lib)
    )
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "GPU: CPU emulation of the CUDA kernels" in out
    rows = [("bq int8 /256", "float32"), ("bq int4 /64", "float32"), ("cast bf16", "float32"),
            ("cast fp16", "float32"), ("mpc", "float32"), ("mpc", "float64")]  # fmt: skip
    rows += [(f"zfp rate {r}", dt) for r in (8, 16) for dt in ("float32", "float64")]
    rows += [("zfp rate 16 2-D", "float32"), ("zfp rate 16 3-D", "float32")]
    for name, dt in rows:
        row = re.search(rf"^{re.escape(name)}\s+{dt}\s+(\S+)\s+(\S+)\s+(.*)$", out, re.M)
        assert row is not None, (name, dt, out)
        enc, dec, status = row.groups()
        assert status == "ok" and float(enc) > 0 and float(dec) > 0, row.group(0)
    assert "skipped" not in out, out  # every family selected: no row may skip
    assert "bitwise the host path's result: yes" in out
    assert "the same on every rank: yes" in out
    assert "GPU path taken: yes" in out
    # --json: the same rows and the device Allreduce's measurements, for machines.
    record = json.loads(out_json.read_text())
    assert record["exit"] == 0 and record["gpu"]["device"] == "CPU emulation of the CUDA kernels"
    codecs = {(r["name"], r["dtype"]): r for r in record["gpu"]["codecs"]}
    assert set(codecs) == set(rows) and record["gpu"]["failed"] == []
    assert all(r["status"] == "ok" and r["encode_gbs"] > 0 and not r["failed"] for r in codecs.values())
    allreduce = record["gpu"]["allreduce"]
    assert allreduce["equals_host_path"] and allreduce["same_on_every_rank"] and not allreduce["fell_back"]
    assert allreduce["compressed_s"] > 0 and allreduce["uncompressed_s"] > 0


def test_a_kernel_that_gives_other_bytes_fails_its_row(
    emu_lib: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shmcoll.gpu import bq
    from shmcoll.selftest import gpu_checks

    with installed(emu_lib):
        real = bq.encode

        def off_by_one_bit(x: Any, bits: int, block: int, out: Any = None) -> Any:
            s = real(x, bits, block, out)
            s[-1] ^= 1
            return s

        monkeypatch.setattr(bq, "encode", off_by_one_bit)
        rows = gpu_checks.run({"bq"}, 1000, 4096, 1, 0)
    bad = [r for r in rows if r.failed]
    assert [r.name for r in bad] == ["bq int8 /256", "bq int4 /64"]
    assert all(r.status.startswith("MISMATCH encoding random: byte") for r in bad), bad
    assert all(r.status.startswith("skipped") for r in rows if not r.name.startswith("bq"))


def test_a_gpu_call_that_falls_back_to_the_host_fails_its_row(
    emu_lib: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shmcoll.codecs import base
    from shmcoll.selftest import gpu_checks

    with installed(emu_lib):
        monkeypatch.setattr(
            base.Codec, "_use_gpu", lambda self: base.note_fallback(self.codec_id, "test") or False
        )
        with pytest.warns(base.GpuFallbackWarning):
            rows = gpu_checks.run({"cast"}, 100, 1024, 1, 0)
    assert [r.status for r in rows if r.name.startswith("cast")] == [
        "FELL BACK to the host codec (the GPU path did not run)"
    ] * 2


def test_the_tables_run_at_a_count_this_machine_has_and_skip_one_it_has_not() -> None:
    cpus = len(os.sched_getaffinity(0))
    res = selftest("--ranks", f"2,{cpus + 1}", "--quick")
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "the machine's floors (shmcoll bench machine):" in out
    assert "alltoall at 2 ranks" in out and "allreduce at 2 ranks" in out
    assert f"{cpus + 1} ranks: skipped, this process may use {cpus} CPUs" in out
    assert re.search(r"│\s+4K\s+│", out + res.stderr), out + res.stderr  # the tables themselves


def test_the_corpus_holds_every_special_value() -> None:
    from shmcoll.selftest.gpu_checks import corpus

    for dt in (np.float32, np.float64):
        c = corpus(2051, dt)
        assert set(c) == {"random", "bits", "smooth", "gradient", "special"}
        s = c["special"]
        assert np.isnan(s).any() and np.isposinf(s).any() and np.isneginf(s).any()
        assert (np.signbit(s) & (s == 0)).any(), "-0"
        tiny = np.finfo(dt).tiny
        assert ((s != 0) & (np.abs(s) < tiny)).any(), "subnormals"
        assert np.array_equal(corpus(2051, dt)["bits"].view(np.uint8), c["bits"].view(np.uint8)), "fixed"
