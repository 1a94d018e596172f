"""Type stub of the native module ``shmcoll._core`` (rust/shmcoll-py). Private: the public
API is the ``shmcoll`` package, which wraps what is here."""

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, NoReturn, Self, final, overload

from numpy.typing import NDArray
from typing_extensions import Buffer, disjoint_base

__all__ = [
    "OBJECT_ROOM",
    "SEGMENT_PREFIX",
    "CommBase",
    "HeapBuffer",
    "PeerView",
    "PooledSegment",
    "Prequest",
    "SegmentHandle",
    "SegmentOffer",
    "TuningFile",
    "__version__",
    "_in_shared_arena",
    "_install_shared_arrays",
    "_numpy_handler",
    "_shared_arrays_bounds",
    "_shared_arrays_default_bounds",
    "_shared_arrays_env_bounds",
    "algorithms",
    "bq_compressed_size",
    "bq_decode",
    "bq_encode",
    "cast_decode",
    "cast_encode",
    "check_table",
    "cma_from",
    "copy",
    "find_tuning_file",
    "machine",
    "model_table",
    "mpc_decode",
    "mpc_encode",
    "mpc_header",
    "mpc_max_compressed_size",
    "parse_bytes",
    "per_rank_spec",
    "ping_pong",
    "pool_record_bytes",
    "pooled_segments",
    "reduce_local",
    "reduction_supported",
    "register_mpi",
    "resolve",
    "settings",
    "shared_arrays_info",
    "tables_digest",
    "tuning_file_places",
    "vector_spec",
    "whole_spec",
    "zfp_compressed_size",
    "zfp_decode",
    "zfp_encode",
]

__version__: Final[str]
#: Prefix of segment names in /dev/shm ("shmcoll-").
SEGMENT_PREFIX: Final[str]
#: Bytes of pickle that travel in the first exchange of an object collective (objects.rs).
OBJECT_ROOM: Final[int]

@final
class SegmentOffer:
    """This rank's part of a new communicator's creation exchange: its settings, the
    pooled segments it offers, its record. Settle it once; dropped unsettled, its segments
    go back to the pool."""

    def __new__(cls, nranks: int) -> Self: ...
    @property
    def areas(self) -> tuple[int, int] | None:
        """(inline bytes, staging bytes) of a segment made for this rank's settings, or None
        when they are not valid."""

    def record(self, token: int) -> bytes:
        """The bytes to send to every rank of the new communicator, carrying `token`."""

    def settle(self, records: bytes, rank: int) -> tuple[bool, PooledSegment | None, bool]:
        """(one node, the pooled segment to join or None, whether every rank sent the same
        nonzero token for the same areas), from every rank's record in rank order."""

@final
class PooledSegment:
    """A pooled segment every rank agreed to take again: join it at once."""

@final
class SegmentHandle:
    """A segment created by this process (the launcher or rank 0); keeps it alive and, once
    dropped, unlinks it if the handshake has not already."""

    def __new__(cls, nranks: int) -> Self: ...
    @staticmethod
    def open(name: str) -> SegmentHandle:
        """Map a segment another process created (by name)."""

    @property
    def name(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    def unlink(self) -> None:
        """Remove the name from /dev/shm now (idempotent)."""

@final
class HeapBuffer:
    """A block of the shared heap, exported through the buffer protocol (writable bytes)."""

    def __len__(self) -> int: ...
    @property
    def address(self) -> int:
        """Address of the first byte (for tests and diagnostics)."""
    # The buffer protocol (bf_getbuffer); Python shows it as methods from 3.12 on.
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...
        def __release_buffer__(self, buffer: memoryview, /) -> None: ...

@final
class PeerView:
    """A read-only view of part of a peer's shared heap (buffer protocol)."""

    def __len__(self) -> int: ...
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...
        def __release_buffer__(self, buffer: memoryview, /) -> None: ...

@final
class Prequest:
    """A persistent collective request (``Comm.*_init``); Start runs it to completion."""

    def Start(self) -> None: ...
    def Wait(self, status: Any = None) -> None: ...
    def Test(self, status: Any = None) -> bool: ...
    def Free(self) -> None: ...
    @staticmethod
    def _alltoall_init(
        comm: CommBase,
        sendbuf: Any | None,
        recvbuf: Any,
        bpp: tuple[int, int] | None = None,
        arrays: Sequence[Sequence[int]] | None = None,
        algorithm: str | None = None,
        order: str | None = None,
        store: str | None = None,
    ) -> Prequest:
        """A persistent Alltoall(v) of `comm` on resolved buffers (sizes in bytes)."""
    @staticmethod
    def _coll_init(
        comm: CommBase,
        op: str,
        sendbuf: Any | None,
        recvbuf: Any | None,
        root: int = 0,
        block: int | None = None,
        counts: Sequence[int] | None = None,
        displs: Sequence[int] | None = None,
        dtype: str | None = None,
        reduce_op: str | None = None,
        algorithm: str | None = None,
    ) -> Prequest: ...
    @staticmethod
    def Startall(requests: list[Prequest]) -> None: ...
    @staticmethod
    def Waitall(requests: list[Prequest], statuses: Any = None) -> None: ...
    @property
    def freed(self) -> bool: ...

@disjoint_base
class CommBase:
    """One rank of a node communicator; ``shmcoll.Comm`` derives from it."""

    def __new__(cls, *_args: Any, **_kwargs: Any) -> Self:
        """An unjoined communicator; ``Comm.__init__`` joins it with ``_join``."""

    def _join(self, segment: SegmentHandle | str, rank: int) -> None:
        """Join the communicator of `segment` (a SegmentHandle or a segment name) as `rank`."""

    # -- mpi4py's names ---------------------------------------------------------------
    def Alltoall(
        self,
        sendbuf: Any,
        recvbuf: Any,
        *,
        algorithm: str | None = None,
        order: str | None = None,
        store: str | None = None,
        compress: Any = None,
        traffic: str | None = None,
    ) -> None: ...
    def Alltoallv(
        self,
        sendbuf: Any,
        recvbuf: Any,
        *,
        algorithm: str | None = None,
        order: str | None = None,
        store: str | None = None,
    ) -> None:
        """Alltoall with per-rank counts and displacements (mpi4py's vector specifications;
        `sendbuf` may be IN_PLACE)."""
    def Allreduce(
        self,
        sendbuf: Any,
        recvbuf: Any,
        op: Any = None,
        *,
        algorithm: str | None = None,
        compress: Any = None,
        traffic: str | None = None,
    ) -> None:
        """Element-wise combination of every rank's `sendbuf` with `op` (default SUM) into
        every `recvbuf`."""
    def Reduce(
        self, sendbuf: Any, recvbuf: Any, op: Any = None, root: int = 0, *, algorithm: str | None = None
    ) -> None:
        """As Allreduce, into the root's `recvbuf` only."""
    def Bcast(
        self,
        buf: Any,
        root: int = 0,
        *,
        algorithm: str | None = None,
        compress: Any = None,
        traffic: str | None = None,
    ) -> None:
        """The root's `buf` into every rank's `buf`."""
    def Allgather(
        self,
        sendbuf: Any,
        recvbuf: Any,
        *,
        algorithm: str | None = None,
        compress: Any = None,
        traffic: str | None = None,
    ) -> None:
        """Every rank's `sendbuf` into every `recvbuf`, in rank order."""
    def Reduce_scatter_block(
        self,
        sendbuf: Any,
        recvbuf: Any,
        op: Any = None,
        *,
        algorithm: str | None = None,
        compress: Any = None,
        traffic: str | None = None,
    ) -> None:
        """Element-wise combination of p equal blocks; rank i gets block i."""
    def Reduce_scatter(
        self,
        sendbuf: Any,
        recvbuf: Any,
        recvcounts: Any = None,
        op: Any = None,
        *,
        algorithm: str | None = None,
    ) -> None:
        """Element-wise combination; rank i gets the `recvcounts[i]` elements after those of
        ranks 0..i-1."""
    def Allgatherv(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None) -> None:
        """Allgather with per-rank counts and displacements in `recvbuf`'s specification."""
    def Gatherv(self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None) -> None:
        """Gather with per-rank counts and displacements (the root's `recvbuf`)."""
    def Scatterv(self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None) -> None:
        """Scatter with per-rank counts and displacements (the root's `sendbuf`)."""
    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None) -> None:
        """Every rank's `sendbuf` into the root's `recvbuf`, in rank order."""
    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0, *, algorithm: str | None = None) -> None:
        """Block j of the root's `sendbuf` into rank j's `recvbuf`."""
    def Barrier(self) -> None: ...
    def barrier(self) -> None: ...
    def Get_rank(self) -> int: ...
    def Get_size(self) -> int: ...
    def Free(self) -> None: ...
    def _abandon_after_fork(self) -> None:
        """In a child of fork: forget the parent's communicator; every call raises."""
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def cma_ok(self) -> bool:
        """Whether process_vm_readv/writev works between all ranks."""

    @property
    def freed(self) -> bool: ...

    # -- the engine, for the Python subclass ------------------------------------------
    def _reject_with(self, op: str, e: BaseException) -> NoReturn:
        """Take part in collective `op` as this rank's rejection for `e` (the peers raise
        PeerRejectedError), and raise `e` as a shmcoll error."""

    def _abort(self, why: str) -> None:
        """Break the communicator and tell the peers (they fail at once)."""
    def _fallback_agree(self, op: str, why: str) -> None:
        """Agree with every rank that collective `op` goes to MPI (raises unless all do)."""
    def _on_mpi(self, name: str, why: BaseException, args: tuple[Any, ...]) -> Any:
        """Run call `name` on the wrapped MPI communicator once every rank agreed to (`why`:
        what shmcoll does not serve); without MPI, every rank raises UnsupportedError."""
    def _heap_offset(self, buf: Any) -> int | None:
        """The segment offset of `buf` when it lies in the shared heap."""
    def _peer_view(self, offset: int, nbytes: int) -> PeerView:
        """A read-only view of the shared heap at a segment offset (any rank's part)."""
    def _barrier(self) -> None: ...
    def _objects_gather(
        self,
        data: bytes,
        kind: str,
        root: int | None = None,
        long_root: int | None = None,
        keep_own: bool = False,
    ) -> tuple[list[bytes | memoryview | None], bool]:
        """The exchange under `kind` (allgather, gather, allreduce, reduce, scan or exscan,
        which every rank must make alike, with the same root): every rank's pickle (at the
        root for gather and reduce), and whether some pickle was long (then only
        `long_root` gets them, if given, and with `keep_own` not its own: None)."""
    def _objects_bcast(self, data: bytes | None, root: int, aux: int = 0) -> tuple[bytes | None, int]:
        """The exchange under bcast of an object: the root's pickle (None on the root) and
        the root's `aux` (1 when out-of-band buffers follow, their sizes leading the pickle)."""
    def _objects_scatter(self, items: list[bytes] | None, root: int) -> bytes:
        """The exchange under scatter of objects: this rank's pickle of the root's items."""
    def _objects_alltoall(self, items: list[bytes]) -> list[bytes | memoryview]:
        """The exchange under alltoall of objects: this rank's pickles from every rank."""
    def _heap_alloc(self, nbytes: int) -> HeapBuffer: ...
    def _heap_usage(self) -> tuple[int, int]: ...
    def _in_heap(self, buf: Any) -> bool: ...
    def _last_choice(self) -> tuple[str, str, str, bool] | None: ...
    def _cma_from(self) -> int:
        """Block size from which this communicator's model sends private buffers through
        CMA (what the segment's creator published; the same on every rank)."""

    def _table(self, op: str) -> tuple[str, list[_RangeRow]]:
        """The table in force for operation `op` (its family's): (source, rows)."""

    def _set_table(self, op: str, rows: list[_RangeRow], source: str) -> None:
        """Bind a table for `op`'s family (every rank must bind the same one)."""

    def _pids(self) -> list[int]: ...
    def _stats(self) -> dict[str, int]:
        """Counters: "calls", "rejected", and calls per algorithm name."""

    def _config(self) -> dict[str, Any]:
        """Settings as this communicator resolved them."""

# One row format for every operation's table: (min bytes, max bytes or None for inf,
# candidates), each candidate (algorithm, order, store, nt_threshold, chunk_bytes) with
# None where the operation takes no such parameter (all but Alltoall) or leaves it to the
# communicator.
_CandidateRow = tuple[str, str | None, str | None, int | None, int | None]
_RangeRow = tuple[int, int | None, list[_CandidateRow]]

def model_table(
    op: str,
    nranks: int,
    inline_bytes: int | None = None,
    staging_bytes: int | None = None,
    cma_from: int | None = None,
) -> list[_RangeRow]:
    """The model table of operation `op` ("Alltoall", "Allreduce", ...; a member of a
    family names its family's) for `nranks` ranks on this machine (the embedded default):
    the inline and staging sizes a communicator of `nranks` gets here where not given,
    private buffers taking CMA from `cma_from` bytes (None: the value in force here)."""

def pool_record_bytes() -> int:
    """Bytes of one rank's creation record."""

def pooled_segments() -> int:
    """Segments of freed communicators this process keeps now."""

def vector_spec(spec: Any, size: int) -> tuple[Any, list[int], list[int]] | None:
    """(buffer, counts in bytes, displacements in bytes) of an mpi4py vector buffer
    specification with counts as lists, tuples or NumPy integer arrays and a predefined
    mpi4py or NumPy datatype (or none, for a NumPy array or memoryview); None for any other
    form (the Python parser resolves those)."""

def whole_spec(spec: Any, blocks: int = 1) -> tuple[Any, int, int, str | None] | None:
    """(buffer, byte offset, bytes, element type name or None) of a single-buffer
    specification (``[buf, datatype]``, ``[buf, count, datatype]``, ...) as
    ``shmcoll.buffers.parse_whole`` reads it; None where the Python parser must decide."""

def per_rank_spec(spec: Any, ranks: int) -> tuple[Any, int] | None:
    """(buffer, bytes per rank) of an Alltoall specification without a displacement, as
    ``shmcoll.buffers.parse_simple`` reads it; None where the Python parser must decide."""

def tuning_file_places() -> list[tuple[Path, str]]:
    """Where a tuning table file is looked for after SHMCOLL_TUNING_FILE, in order:
    (path, "user" or "system")."""

def find_tuning_file() -> tuple[Path | None, str]:
    """The tuning table file in force and its origin ("environment", "user", "system"),
    or (None, "model")."""

@final
class TuningFile:
    """A tuning table file, read and checked whole by the engine's one reader (the schema,
    names, ranges, ``compressed``); errors (ArgumentError) name the file and the entry."""

    @staticmethod
    def load(path: Path) -> TuningFile: ...
    @staticmethod
    def parse(text: str, origin: str) -> TuningFile:
        """Check a table given as JSON text; errors name `origin`."""

    @property
    def path(self) -> Path: ...
    def covers(self, op: str, nprocs: int) -> bool: ...
    def rows(self, op: str, nprocs: int) -> list[_RangeRow] | None:
        """The rows of operation `op` ("alltoall", "allreduce", ...) for `nprocs` ranks
        (``compressed`` left out), or None where no entry covers them."""

    def compression_rows(self, op: str, nprocs: int) -> list[tuple[int, int | None, bool]] | None:
        """`op`'s size ranges for `nprocs` ranks, each with whether it lists ``compressed``."""

    def fingerprint_differences(self) -> list[str]:
        """Where the file's hardware differs from this machine ("key: theirs != ours")."""

def tables_digest(comm: CommBase, compression: list[tuple[str, list[tuple[int, int | None, bool]]]]) -> int:
    """The digest ranks compare when they bind: `comm`'s selection tables (as the PMPI
    library compares them) with the ranges where Python compresses."""

def check_table(op: str, rows: list[_RangeRow]) -> None:
    """Check a table of `op` (names, parameters, overlaps) without binding it; raises
    ArgumentError."""

def resolve(
    op: str,
    rows: list[_RangeRow],
    nranks: int,
    bytes: int,
    heap_send: bool,
    heap_recv: bool,
    in_place: bool,
    cma_ok: bool = True,
    inline_fits: bool | None = None,
) -> tuple[str, str | None, str | None, int | None, int | None, bool]:
    """What `rows` of `op` select for such a call (`bytes`: Alltoall's largest block, the
    others' largest contribution; `inline_fits` None: where `bytes` times `nranks` fits
    the inline area): the candidate (algorithm, order, store, nt_threshold, chunk_bytes;
    parameters resolved, None where `op` takes none) and whether ranks write their inline
    payload before arriving. Alltoall's gaps fall back to the model."""

def reduction_supported(op: str, dtype: str) -> bool:
    """Whether the reduction kernels combine `dtype` (a NumPy name) with `op`."""

def register_mpi(in_place: Any, ops: list[tuple[Any, str]], bottom: Any = None) -> None:
    """Tell the native fast path mpi4py's IN_PLACE, predefined operators and BOTTOM."""

def _install_shared_arrays(arena_bytes: int | None = None) -> str | None:
    """Create the shared-array arena and install the NumPy allocator for the whole process
    (serving nothing until bounds are set); the arena's sizing if limits made it smaller."""

def _numpy_handler() -> Any:
    """NumPy's current handler capsule (PyDataMem_GetHandler)."""

def _shared_arrays_bounds(min_bytes: int, max_bytes: int) -> tuple[int, int]:
    """Serve NumPy arrays of min_bytes <= nbytes < max_bytes from the arena; returns the
    previous bounds."""

def _shared_arrays_env_bounds() -> tuple[int, int]:
    """SHMCOLL_SHARED_ARRAYS_MIN/MAX, or the defaults."""

def _shared_arrays_default_bounds() -> tuple[int, int]:
    """The default bounds in this process (the upper one rises where the arena's large
    blocks get huge pages)."""

def _in_shared_arena(addr: int) -> bool:
    """Whether the address lies in this process's shared-array arena."""

def shared_arrays_info() -> dict[str, Any]:
    """The shared-array arena's counters."""

def reduce_local(dst: Any, src: Any, op: str = "sum") -> None:
    """``dst = dst op src`` element by element with the collectives' reduction kernels."""

def copy(dst: Any, src: Any, store: str = "auto") -> None:
    """Copy `src` into `dst` (contiguous buffers of equal size) with the chosen store
    policy: "temporal", "nt", "hybrid" or "auto"."""

def parse_bytes(text: str) -> int:
    """A byte count as every part of shmcoll reads one (4096, 64K, 16M, 1.5M, 64KiB)."""

def machine() -> dict[str, Any]:
    """Hardware as shmcoll sees it."""

def ping_pong(word: Any, me: int, first: int, rounds: int, yield_cpu: bool, timeout_s: float = 10.0) -> float:
    """One side of the machine probe's ping-pong on a shared 8-byte word, rounds
    `first..first + rounds`; this side's seconds."""

def cma_from() -> dict[str, Any]:
    """The private-buffer crossover in force in this process: ``bytes``, ``origin``
    ("forced", "measured", "cache", "failed", "agreed"), ``describe`` and ``figures`` (the
    probe's: sizes, cma_read_ns, cma_write_ns, staged_ns, inline_ns, chunk_bytes, reps,
    took_us; None when this process has none)."""

def settings() -> list[tuple[str, str]]:
    """(environment variable, meaning) of every setting."""

def algorithms(op: str = "Alltoall") -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """The registry for operation `op`: the algorithms serving it (name, description), and
    the copy orders and store policies its candidates take (empty where they take none)."""

# --- codecs: zfp (rust/shmcoll-py/src/codec_zfp.rs) ---

def zfp_compressed_size(n: int | Sequence[int], dtype: str, rate: int) -> int:
    """Bytes of the zfp fixed-rate stream of `n` values (a 1-D array) or of an array of
    shape `n` (1 to 4 axes, C order) of `dtype` ("float32" or "float64") at `rate` bits per
    value (1-D: 3..32 for float32, 4..64 for float64; N-D: from 1): whole 64-bit words."""

@overload
def zfp_encode(arr: Buffer, rate: int, out: None = None, shape: Sequence[int] | None = None) -> bytes:
    """Compress a C-contiguous float32/float64 buffer (zfp fixed rate) as a 1-D array, or as
    an array of `shape` (2 to 4 axes: zfp's N-D blocks): the stream of zfpy's
    ``compress_numpy(arr.reshape(shape), rate=rate, write_header=False)``; returns the
    stream, or writes it into the writable buffer `out` and returns its length. Releases the
    GIL for arrays of 64 KiB and more."""

@overload
def zfp_encode(arr: Buffer, rate: int, out: Buffer, shape: Sequence[int] | None = None) -> int: ...
def zfp_decode(
    buf: Buffer, dtype: str, n: int | Sequence[int], rate: int, out: NDArray[Any] | None = None
) -> NDArray[Any]:
    """Decompress `n` values (a 1-D array) or an array of shape `n` of `dtype` from the zfp
    stream `buf` written at `rate`; returns a new array of that shape, or fills `out`
    (C-contiguous, exactly as many values of `dtype`) and returns it."""

# --- codecs: bq, cast, mpc (rust/shmcoll-py/src/codec_misc.rs) ---

def bq_compressed_size(n: int, bits: int, block: int) -> int:
    """Bytes of the bq stream of `n` float32 elements."""

def bq_encode(src: Any, bits: int, block: int, out: Any | None = None) -> Any:
    """Encode a contiguous float32 buffer: bytes, or the byte count written into `out`."""

def bq_decode(src: Any, out: Any, bits: int, block: int) -> None:
    """Decode a bq stream into the float32 buffer `out` (its length gives n)."""

def cast_encode(src: Any, dtype: str, out: Any | None = None) -> Any:
    """Narrow float32/float64 to "bfloat16"/"float16": bytes, or the count written to `out`."""

def cast_decode(src: Any, out: Any, dtype: str) -> None:
    """Widen a cast stream into the float32 or float64 buffer `out`."""

def mpc_max_compressed_size(n: int, word: int) -> int:
    """The largest mpc stream of `n` words of `word` bytes."""

def mpc_encode(src: Any, word: int, dim: int = 1, out: Any | None = None) -> Any:
    """Encode `word`-byte words: bytes, or the byte count written into `out`."""

def mpc_header(src: Any) -> tuple[int, int, int]:
    """(word, dim, n) from an mpc stream's header."""

def mpc_decode(src: Any, out: Any) -> None:
    """Decode an mpc stream into `out` (exactly n * word bytes)."""
