"""Opening a segment by name refuses what a rank of this job cannot have made: a symlink,
another user's file, a file others may read, a name outside /dev/shm, and a header whose
sizes overflow or exceed the file. Each refusal is a SegmentError naming the file.

The files live in the real /dev/shm (Segment.open only looks there) under names with this
process's pid, so a concurrent ``shmcoll cleanup`` leaves them alone; each test removes them.
"""

from __future__ import annotations

import os
import secrets
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

import shmcoll
from conftest import SHM_DIR
from shmcoll import _core

pytestmark = pytest.mark.timeout(30)


def fresh() -> str:
    return f"{_core.SEGMENT_PREFIX}{os.getuid()}-{os.getpid()}-{secrets.token_hex(16)}"


@pytest.fixture
def seg() -> Iterator[_core.SegmentHandle]:
    """A real segment, unlinked at the end."""
    s = _core.SegmentHandle(2)
    try:
        yield s
    finally:
        s.unlink()


@pytest.fixture
def planted() -> Iterator[list[Path]]:
    """Paths the test creates in /dev/shm; all removed at the end."""
    paths: list[Path] = []
    yield paths
    for p in paths:
        p.unlink(missing_ok=True)


def path_of(seg: _core.SegmentHandle) -> Path:
    return SHM_DIR / seg.name.lstrip("/")


def refused(name: str, *needles: str) -> None:
    with pytest.raises(shmcoll.SegmentError) as e:
        _core.SegmentHandle.open(name)
    msg = str(e.value)
    for n in needles:
        assert n in msg, msg


def test_a_real_segment_opens(seg: _core.SegmentHandle) -> None:
    assert _core.SegmentHandle.open(seg.name).nbytes == seg.nbytes
    assert os.stat(path_of(seg)).st_mode & 0o777 == 0o600


def test_a_symlink_is_not_followed(seg: _core.SegmentHandle, planted: list[Path]) -> None:
    link = SHM_DIR / fresh()
    planted.append(link)
    link.symlink_to(path_of(seg))
    refused("/" + link.name, link.name, "symbolic link")


@pytest.mark.parametrize("mode", [0o644, 0o660, 0o606])
def test_a_file_others_may_access_is_refused(seg: _core.SegmentHandle, mode: int) -> None:
    os.chmod(path_of(seg), mode)
    refused(seg.name, seg.name, f"mode {mode:04o}")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another uid")
def test_another_users_file_is_refused(seg: _core.SegmentHandle) -> None:
    os.chown(path_of(seg), 54321, -1)
    refused(seg.name, seg.name, "owned by uid 54321")


def test_a_directory_is_refused(planted: list[Path]) -> None:
    d = SHM_DIR / fresh()
    d.mkdir(mode=0o700)
    try:
        refused("/" + d.name, d.name)
    finally:
        d.rmdir()


@pytest.mark.parametrize("name", ["/shmcoll-0/../../etc/passwd", "/etc/passwd", "/../shmcoll-x", "shm"])
def test_names_outside_dev_shm_are_refused(name: str) -> None:
    refused(name, "not a segment name")


# Header fields (segment.rs `Header`): magic u64, version u32, creator pid u32, then nranks,
# inline, staging, heap and total bytes as u64.
NRANKS_AT, HEAP_AT = 16, 40


@pytest.mark.parametrize(
    ("offset", "value"),
    [(NRANKS_AT, 2**62), (NRANKS_AT, 0), (HEAP_AT, 2**63 + 7), (HEAP_AT, 2**40)],
    ids=["nranks-overflows", "no-ranks", "heap-overflows", "heap-beyond-file"],
)
def test_a_header_that_does_not_fit_its_file_is_refused(
    seg: _core.SegmentHandle, offset: int, value: int
) -> None:
    fd = os.open(path_of(seg), os.O_RDWR)
    try:
        os.pwrite(fd, struct.pack("<Q", value), offset)
    finally:
        os.close(fd)
    refused(seg.name, seg.name)


def test_a_truncated_segment_is_refused(seg: _core.SegmentHandle) -> None:
    os.truncate(path_of(seg), seg.nbytes - 4096)
    refused(seg.name, seg.name, "file has")
