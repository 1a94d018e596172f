"""bench/tables_md.py: the Markdown tables of the closing notes, and the medians over
several launches it takes from `LAUNCHES=k bench/mpi_tables.sh`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "tables_md", Path(__file__).resolve().parents[1] / "bench" / "tables_md.py"
)
assert _spec and _spec.loader
tables_md = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tables_md)

HEADER = "op,nranks,bytes,variant,median_us,p90_us,valid,error\n"


def _csv(path: Path, rows: list[tuple[int, str, float | None]], nranks: int = 4) -> Path:
    lines = [f"allreduce,{nranks},{b},{v},{'' if t is None else t},,True," for b, v, t in rows]
    path.write_text(HEADER + "\n".join(lines) + "\n")
    return path


def _table_rows(md: str) -> dict[str, list[str]]:
    rows = [
        line.strip("|").split("|") for line in md.splitlines() if line.startswith("| ") and "µs" not in line
    ]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows}


def test_one_launch_gives_its_medians_and_ratios(tmp_path: Path) -> None:
    f = _csv(tmp_path / "a.csv", [(8, "MPICH", 20.0), (8, "shmcoll heap", 5.0), (1024, "MPICH", 30.0),
                                  (1024, "shmcoll heap", None)])  # fmt: skip
    md = tables_md.render([f])
    assert md.startswith("### allreduce, MPICH, 4 ranks\n")
    assert _table_rows(md) == {"8": ["20.00", "5.00", "4.00x"], "1K": ["30.00", "error", ""]}


def test_launches_are_combined_by_medians_of_same_launch_ratios(tmp_path: Path) -> None:
    # Three launches; the second ran in a slow minute for both MPI and shmcoll.
    launches = [(20.0, 5.0), (40.0, 8.0), (18.0, 6.0)]
    paths = [
        _csv(tmp_path / f"l{i}.csv", [(8, "MPICH", m), (8, "shmcoll heap", s)])
        for i, (m, s) in enumerate(launches)
    ]
    paths.append(_csv(tmp_path / "np2.csv", [(8, "MPICH", 10.0), (8, "shmcoll heap", 2.0)], nranks=2))
    md = tables_md.render(paths)
    four, two = md.split("\n### ")
    assert four.startswith("### allreduce, MPICH, 4 ranks (medians of 3 launches)")
    # times: medians of 20/40/18 and 5/8/6; ratio: median of 4.0, 5.0, 3.0 (not 20/6)
    assert _table_rows(four) == {"8": ["20.00", "6.00", "4.00x", "3.00-5.00x"]}
    assert two.startswith("allreduce, MPICH, 2 ranks\n")
    assert _table_rows(two) == {"8": ["10.00", "2.00", "5.00x"]}


def test_machine_records_add_each_launchs_floor_and_mpi_over_floor(tmp_path: Path) -> None:
    # Two launches at 4 ranks on 2 CPUs, handoff 2 and 3 µs: floors 4 and 6 µs at 8 B (two
    # handoffs per CPU); at 16 MiB the writes (64 MiB, 16 of which the caches hold, at 32
    # and 16 GB/s) are the floor.
    big = 16 << 20
    for i, (handoff, gbs, mpi) in enumerate([(2.0, 32.0, 20.0), (3.0, 16.0, 30.0)]):
        _csv(tmp_path / f"l{i}.csv", [(8, "MPICH", mpi), (8, "shmcoll heap", 5.0),
                                      (big, "MPICH", 8000.0), (big, "shmcoll heap", 5000.0)])  # fmt: skip
        state = {"cpus": 2, "handoff_us": handoff, "line_ns": 50.0, "write_1cpu_gbs": gbs,
                 "write_all_gbs": gbs, "when": "t", "cache_bytes": 16 << 20}  # fmt: skip
        (tmp_path / f"l{i}.machine.json").write_text(json.dumps(state))
    md = tables_md.render(sorted(tmp_path.glob("l*.csv")))
    assert "Machine before each launch: handoff 2.00-3.00 µs, cache line 50 ns one way" in md
    assert "| floor µs | MPI/floor | launches |" in md
    rows = _table_rows(md)
    # 8 B: floors 4 and 6 (median 5); MPI/floor 20/4 = 5 and 30/6 = 5
    assert rows["8"][:4] == ["25.00", "5.00", "5.00x", "5.00-5.00x"]
    w1, w2 = (48 << 20) / 32e9 * 1e6, (48 << 20) / 16e9 * 1e6
    assert rows["16M"][1] == f"{(w1 + w2) / 2:.2f}"
    assert rows["16M"][3] == f"{8000 / w2:.2f}-{8000 / w1:.2f}x"
    # Without a record for every launch the table has no floor columns.
    (tmp_path / "l1.machine.json").unlink()
    assert "floor" not in tables_md.render(sorted(tmp_path.glob("l*.csv")))
