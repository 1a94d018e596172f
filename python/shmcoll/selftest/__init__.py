"""``shmcoll selftest``: what a machine gives shmcoll, checked and measured in one short run.

``--gpu`` checks every codec's CUDA kernels against the Rust reference byte for byte on a
fixed corpus, measures their throughput and runs a compressed Allreduce between two
processes on the device (gpu_checks.py, device_allreduce.py); ``--ranks`` prints the
Alltoall and Allreduce tables against MPI at the given rank counts (ranks.py). The command
itself is command.py.
"""
