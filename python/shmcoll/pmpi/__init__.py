"""The PMPI interposition library: ``LD_PRELOAD=$(shmcoll pmpi --path) mpiexec -n N ./app``
gives an unmodified C or Fortran MPI program shmcoll's MPI_Alltoall and MPI_Alltoallv
(and MPI_Allgather, MPI_Bcast, MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Barrier).

The library is built per MPI flavour, on demand: the C shim in ``csrc/`` is compiled with
that MPI's own ``mpicc`` (MPICH and Open MPI differ in ABI) and linked with the engine's C
ABI (``rust/shmcoll-capi``, built by cargo as a static library), into one self-contained
``libshmcoll_pmpi.so`` in a cache directory.
"""

from __future__ import annotations

from .build import MpiInfo, PmpiBuildError, build, ensure, find_mpicc, library_path, mpi_info

__all__ = ["MpiInfo", "PmpiBuildError", "build", "ensure", "find_mpicc", "library_path", "mpi_info"]
