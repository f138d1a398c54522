#!/usr/bin/env python3
"""The allreduce workload scripts/bench.py times: N sums of a 16 MB float tensor.

    python allreduce_workload.py torch|horovod

Started by tfyarn (-t pytorch / -t tensorflow-mpi) or by torchrun / horovodrun; rank 0
prints `ALLREDUCE_GBPS <algorithm bandwidth>` (bytes reduced per second, after warm-up).
"""

from __future__ import annotations

import sys
import time

import torch

ELEMENTS = 4 * 1024 * 1024
WARMUP, ITERS = 3, 20


def main() -> None:
    mode = sys.argv[1]
    t = torch.ones(ELEMENTS)
    if mode == "torch":
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method="env://")
        rank, reduce, barrier = dist.get_rank(), dist.all_reduce, dist.barrier
        shutdown = dist.destroy_process_group  # gloo threads left running abort at exit
    else:
        import horovod.torch as hvd

        hvd.init()
        rank = hvd.rank()

        def reduce(x: torch.Tensor) -> None:
            hvd.allreduce_(x, op=hvd.Sum, name="bench")

        def barrier() -> None:
            hvd.allreduce(torch.zeros(1), name="barrier")

        shutdown = hvd.shutdown

    for _ in range(WARMUP):
        reduce(t)
    barrier()
    start = time.perf_counter()
    for _ in range(ITERS):
        reduce(t)
    barrier()
    took = time.perf_counter() - start
    if rank == 0:
        print(f"ALLREDUCE_GBPS {ELEMENTS * 4 * ITERS / took / 1e9:.4f}", flush=True)
    shutdown()


if __name__ == "__main__":
    main()
