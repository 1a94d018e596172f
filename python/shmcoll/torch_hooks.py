"""A PyTorch DDP communication hook that averages gradient buckets with shmcoll's
compressed Allreduce.

    from shmcoll.torch_hooks import CompressionState, compressed_allreduce_hook
    state = CompressionState(shmcoll.Comm(), traffic="dp")      # or codec=Bq(bits=8)
    ddp_model.register_comm_hook(state, compressed_allreduce_hook)

torch is imported only when the hook runs, and is never a dependency of shmcoll. CUDA
gradients are compressed on the GPU (through CuPy, sharing the tensor's memory by DLPack)
and only compressed bytes reach the host; CPU gradients go through the Rust codecs. The
kernels and copies of a CUDA bucket run on torch's current stream (made CuPy's for the
duration of the hook), so they are ordered after the backward pass that wrote the bucket
and before whatever torch issues next.
Each bucket keeps its own error-feedback state (``CompressionState(error_feedback=True)``,
the default), so what quantization drops from one step's gradients is added to the next.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import compress as cz
from .compress.device import array_module


class CompressionState:
    """What the hook needs across steps: the communicator, the codec (or the traffic
    class whose policy picks it), and per-bucket error feedback."""

    def __init__(
        self,
        comm: Any,
        codec: Any = None,
        traffic: str = "dp",
        error_feedback: bool = True,
    ) -> None:
        self.comm = comm
        self.codec = codec
        self.traffic = traffic
        self.error_feedback = error_feedback
        self.feedback: dict[int, cz.ErrorFeedback] = {}
        self.compressed_calls = 0
        self.plain_calls = 0

    def average(self, grad: Any, bucket_index: int = 0) -> Any:
        """The average over ranks of the 1-D array `grad` (NumPy or CuPy), compressed when
        the codec or policy says so; a new array of grad's kind."""
        xp = array_module(grad)
        out = xp.empty_like(grad)
        codec = cz.resolve_codec(self.codec, self.traffic, int(grad.nbytes))
        if codec is None:
            self.plain_calls += 1
            host = grad.get() if xp is not np else grad
            res = np.empty_like(host)
            self.comm.Allreduce(np.ascontiguousarray(host), res)
            out[...] = xp.asarray(res)
        else:
            self.compressed_calls += 1
            fb = self.feedback.setdefault(bucket_index, cz.ErrorFeedback()) if self.error_feedback else None
            cz.allreduce(self.comm, grad, out, codec, feedback=fb)
        out /= self.comm.size
        return out


def _as_array(tensor: Any) -> Any:
    """A NumPy (CPU) or CuPy (CUDA) view of a contiguous 1-D tensor, sharing its memory."""
    if tensor.is_cuda:
        import cupy  # type: ignore[import-not-found]

        return cupy.from_dlpack(tensor.detach())
    return tensor.detach().numpy()


@contextlib.contextmanager
def torch_stream(tensor: Any) -> Iterator[None]:
    """For a CUDA `tensor`: its device as CuPy's current device, and torch's current stream
    on it as CuPy's current stream (an ExternalStream over the same CUDA stream), so that
    CuPy's kernels and copies follow the work torch issued. Nothing for a CPU tensor."""
    if not tensor.is_cuda:
        yield
        return
    import cupy
    import torch  # type: ignore[import-not-found,unused-ignore]

    device = tensor.device.index
    stream = torch.cuda.current_stream(tensor.device).cuda_stream
    with cupy.cuda.Device(device), cupy.cuda.ExternalStream(stream, device):
        yield


# `bucket` and the return stay unannotated: DDP's register_comm_hook rejects any annotation
# of them but torch.distributed.GradBucket and torch.futures.Future[torch.Tensor], and
# torch is no dependency of this module.
def compressed_allreduce_hook(state: CompressionState, bucket):
    """DDP communication hook: average `bucket`'s gradients over the ranks of
    ``state.comm`` with the compressed Allreduce; returns a completed future."""
    import torch  # type: ignore[import-not-found,unused-ignore]

    tensor = bucket.buffer()
    with torch_stream(tensor):
        averaged = state.average(_as_array(tensor), int(bucket.index()))
        if tensor.is_cuda:
            tensor.copy_(torch.from_dlpack(averaged))
        else:
            tensor.copy_(torch.from_numpy(averaged))
    fut: Any = torch.futures.Future()
    fut.set_result(tensor)
    return fut


__all__ = ["CompressionState", "compressed_allreduce_hook", "torch_stream"]
