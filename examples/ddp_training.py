"""Data-parallel training with torch DDP on CPU (gloo), the gradients averaged by shmcoll's
compressed Allreduce under the ``hybrid`` policy (int8 block quantization with error
feedback for data-parallel gradients), against the same training with DDP's own
uncompressed allreduce: the loss curves side by side and the time per step.

    shmcoll run -n 2 examples/ddp_training.py [--steps 200] [--json out.json] [--device cuda]

Each rank trains a small MLP on its own shard of a synthetic classification task (labels
from a fixed random "teacher" network, so there is something to learn). Both runs start
from the same weights and see the same batches; the compressed run must end within
``--tolerance`` (relative) of the uncompressed run's final loss, or the script exits 1.
shmcoll launches the ranks; its object broadcast hands rank 0's free TCP port to the
others for torch's gloo rendezvous. With ``--device cuda`` the model, the batches and so
the gradient buckets live on the GPU (every rank on device 0, gloo still DDP's process
group): the hook then compresses on the GPU through CuPy, on torch's current stream.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import shmcoll
from shmcoll import compress
from shmcoll.torch_hooks import CompressionState, compressed_allreduce_hook

IN, HIDDEN, CLASSES = 32, 512, 10


def mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES)
    )


def shard(rank: int, steps: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's batches: inputs from its own seed, labels from one teacher for all."""
    teacher = mlp(seed=1234)
    g = torch.Generator().manual_seed(100 + rank)
    out = []
    with torch.no_grad():
        for _ in range(steps):
            x = torch.randn(batch, IN, generator=g)
            out.append((x, teacher(x).argmax(dim=1)))
    return out


def train(
    comm: shmcoll.Comm,
    data: list[tuple[torch.Tensor, torch.Tensor]],
    lr: float,
    compressed: bool,
    device: torch.device,
) -> dict[str, Any]:
    ids = [device.index or 0] if device.type == "cuda" else None
    model = DistributedDataParallel(mlp(seed=0).to(device), device_ids=ids)
    state = None
    if compressed:
        state = CompressionState(comm, traffic="dp")
        model.register_comm_hook(state, compressed_allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    losses, times = [], []
    for x, y in data:
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()  # DDP averages the gradients here (through the hook when compressed)
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # a step's time includes its kernels
        times.append(time.perf_counter() - t0)
        losses.append(comm.allreduce(float(loss.detach())) / comm.size)
    return {
        "losses": losses,
        "step_ms_median": 1e3 * statistics.median(times),
        "compressed_calls": state.compressed_calls if state else 0,
        "plain_calls": state.plain_calls if state else 0,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=64, help="samples per rank and step")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--tolerance", type=float, default=0.10, help="relative, on the final loss")
    ap.add_argument("--json", help="rank 0 writes the curves and timings here")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (every rank on the first GPU)")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device.index or 0)

    torch.set_num_threads(1)  # one core per rank: the ranks share the machine
    comm = shmcoll.Comm()
    port = comm.bcast(free_port() if comm.rank == 0 else None)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank, world_size=comm.size
    )
    data = [(x.to(device), y.to(device)) for x, y in shard(comm.rank, args.steps, args.batch)]
    plain = train(comm, data, args.lr, compressed=False, device=device)
    with compress.use_policy("hybrid"):
        hybrid = train(comm, data, args.lr, compressed=True, device=device)
    dist.destroy_process_group()

    # The final loss: the mean over the last tenth of the steps (one step's loss is noisy).
    tail = max(args.steps // 10, 1)
    final_plain = statistics.fmean(plain["losses"][-tail:])
    final_hybrid = statistics.fmean(hybrid["losses"][-tail:])
    rel = abs(final_hybrid - final_plain) / final_plain
    ok = rel <= args.tolerance and hybrid["compressed_calls"] > 0
    if comm.rank == 0:
        print(
            f"{comm.size} ranks on {device}, {args.steps} steps of {args.batch} samples per rank, "
            f"lr {args.lr}"
        )
        print(f"{'step':>6} {'uncompressed':>13} {'hybrid (bq int8)':>17}")
        every = max(args.steps // 10, 1)
        for i in [*range(0, args.steps, every), args.steps - 1]:
            print(f"{i:>6} {plain['losses'][i]:>13.4f} {hybrid['losses'][i]:>17.4f}")
        print(
            f"final loss (mean of the last {tail} steps): uncompressed {final_plain:.4f}, "
            f"hybrid {final_hybrid:.4f}, relative difference {rel:.3f} (tolerance {args.tolerance})"
        )
        print(
            f"time per step (median): uncompressed {plain['step_ms_median']:.2f} ms, "
            f"hybrid {hybrid['step_ms_median']:.2f} ms; compressed Allreduce calls "
            f"{hybrid['compressed_calls']}, uncompressed {hybrid['plain_calls']}"
        )
        print("within tolerance" if ok else "NOT within tolerance")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"uncompressed": plain, "hybrid": hybrid, "relative_difference": rel}, f)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
