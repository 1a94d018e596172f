"""Benchmarks that run shmcoll and its peers (MPI through mpi4py) in the same launch."""
