"""Distributed N-D FFTs (slab and pencil) whose transposes run on shmcoll's Alltoallv.

The interface and conventions are mpi4py-fft's, so code can switch with an import change::

    from shmcoll.fft import PFFT, newDistArray
    fft = PFFT(comm, (128, 128, 128), dtype=np.float64, grid=(-1,))
    u = newDistArray(fft, forward_output=False)      # this rank's block, in the shared heap
    u[...] = ...
    u_hat = fft.forward(u)                           # == np.fft.rfftn(U)[fft.local_slice()] / N
    v = fft.backward(u_hat)                          # == u

The differences that remain are listed, with their reasons, in the FFT guide
(docs/fft.md). Conventions:

* Splitting an axis of length n over p ranks: rank r gets n // p entries, the first n % p
  ranks one more; the global array's blocks are contiguous and in rank order.
* Grid: one size per leading array axis (``grid=(P, Q)`` cuts axes 0 and 1; missing
  trailing entries are 1); entries <= 0 are wildcards filled like ``MPI.Compute_dims``.
  ``grid=(-1,)`` or ``slab=True`` is a slab decomposition (``slab=k``: on axis k); the
  default is all axes but the one transformed first (e.g. (2, 2, 1) at 4 ranks, (3, 1, 1)
  at 3). The process grid is Cartesian in rank order, last grid dimension fastest
  (``MPI.Create_cart``).
* Input layout (``shape(False)``, ``local_slice(False)``): axis a cut by ``grid[a]``.
* Order: the last axis of `axes` is transformed first (r2c for real input: length
  ``n // 2 + 1``, like ``numpy.fft.rfftn``), then the others in reverse order; before each
  one, the grid dimension that cuts it moves, by one transpose, onto the axis transformed
  just before (mpi4py-fft's ``Pencil.pencil``). Arrays always keep the global axis order
  (no axis permutation in memory).
* Output layout, ``transposed_out=True`` (default): the layout of the last transform,
  i.e. mpi4py-fft's output layout (3-D, axes (0, 1, 2): slab -> axis 1 cut; pencil (P, Q)
  -> axis 1 cut by P, axis 2 by Q; axis 0 whole), reached with no transposes back
  (FFTW-MPI calls this TRANSPOSED_OUT).
* Output layout, ``transposed_out=False``: the forward output is transposed back to the
  input's distribution (axis a cut by ``grid[a]``; only the r2c axis is shorter), so the
  input and output blocks of a rank cover the same indices, at twice the exchanges.
  ``shape(True)`` and ``local_slice(True)`` always describe the layout in force, and
  :meth:`PFFT.backward` expects it.
* Normalisation, mpi4py-fft's: ``forward(..., normalize=True)`` divides by N, the product
  of the transformed lengths (``numpy.fft.fftn(U) / N``); ``backward(..., normalize=False)``
  is the unscaled inverse (``N * numpy.fft.ifftn``), so the round trip is the identity.
  The factor is applied inside the serial transforms where the library can (numpy, scipy),
  else as one in-place multiply of the result (pyFFTW).
* ``dtype()`` and ``global_shape()`` default to the input side (``forward_output=False``),
  ``shape()``, ``local_slice()`` and ``newDistArray()`` to the output side, as in
  mpi4py-fft; ``newDistArray`` zero-fills by default (``val=0``).
* Backends: "numpy" (always), "scipy" (``workers=`` threads), "pyfftw" (cached plans;
  FFTW wisdom kept between runs in the user cache, or ``SHMCOLL_FFTW_WISDOM``);
  threads per rank from ``SHMCOLL_FFT_THREADS`` (default 1: the ranks fill the cores).
  Naming a missing library raises :class:`BackendUnavailableError` (an ImportError).
"""

from __future__ import annotations

from .backends import BACKENDS, BackendUnavailableError, available_backends
from .decomposition import block, compute_dims
from .distarray import DistArray, newDistArray
from .pfft import PFFT

__all__ = [
    "BACKENDS",
    "PFFT",
    "BackendUnavailableError",
    "DistArray",
    "available_backends",
    "block",
    "compute_dims",
    "newDistArray",
]
