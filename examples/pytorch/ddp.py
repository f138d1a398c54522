"""PyTorch DistributedDataParallel under tfyarn, unchanged from what torchrun would run.

    el_submit -t pytorch -wn 2 -ppn 2 -f ./ -c python ddp.py        # 2 containers x 2 ranks

tfyarn gives every rank RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
MASTER_PORT (rank 0's reserved port), so `init_process_group(init_method="env://")` works
as is; CUDA_VISIBLE_DEVICES holds the rank's own GPU when the container has one per rank.
It checks an allreduce, then trains a small regression with DDP on synthetic data and
prints the loss and a parameter checksum, equal on every rank.
"""

from __future__ import annotations

import argparse
import gc
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo", init_method="env://")
    rank, size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")

    value = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(value)  # 1 + 2 + ... + size on every rank
    print(f"rank={rank} size={size} local_rank={os.environ['LOCAL_RANK']} "
          f"allreduced={value.item():g}", flush=True)

    loss, checksum = train(rank, device, args.steps)
    print(f"rank={rank} loss={loss:.4f} checksum={checksum:.6f}", flush=True)
    # Free the process group, and with it gloo's worker threads, while Python is still
    # alive: a gloo thread that drops its last finished work during interpreter shutdown
    # aborts the process ("terminate called without an active exception"; torch 2.13,
    # seen about once in ten runs on a loaded machine). DDP's reducer holds the group, so
    # the model is gone by now (train returned) and a collection reclaims any cycle.
    dist.destroy_process_group()
    gc.collect()


def train(rank: int, device: torch.device, steps: int) -> tuple[float, float]:
    """A small regression under DDP: each rank its own data, one model."""
    torch.manual_seed(0)  # the same model everywhere; DDP also broadcasts rank 0's
    model = DistributedDataParallel(torch.nn.Linear(8, 1).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)  # each rank its own shard of data
    true_w = torch.arange(8, dtype=torch.float32)
    for _ in range(steps):
        x = torch.randn(64, 8, generator=gen)
        y = x @ true_w + 0.01 * torch.randn(64, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x.to(device)).squeeze(1), y.to(device))
        opt.zero_grad()
        loss.backward()  # DDP averages the gradients across ranks here
        opt.step()
    return loss.item(), sum(float(p.detach().sum()) for p in model.parameters())


if __name__ == "__main__":
    main()
