"""bench/tables_md.py: the Markdown tables of the closing notes, and the medians over
several launches it takes from `LAUNCHES=k bench/mpi_tables.sh`."""

from __future__ import annotations

import importlib.util
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
