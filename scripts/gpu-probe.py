"""What one task of scripts/gpu-check sees of its GPUs (run as the task's command, before
or instead of the real work): its CUDA_VISIBLE_DEVICES and tfyarn's caps, nvidia-smi's
view, TensorFlow's and PyTorch's device lists and memory limits; with --nccl a 2-rank
NCCL allreduce (-t pytorch), with --alloc MB an allocation of that size (-wnpg's caps).
Prints one `GPUPROBE <task>` block; never fails the task for a missing framework.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--nccl", action="store_true")
    p.add_argument("--alloc", type=int, default=0, help="MB to allocate on the first device")
    a = p.parse_args()
    task = f"{os.environ.get('TFYARN_TASK_TYPE')}:{os.environ.get('TFYARN_TASK_INDEX')}"
    seen: dict[str, object] = {k: os.environ.get(k) for k in (
        "CUDA_VISIBLE_DEVICES", "TFYARN_GPU_MEMORY_FRACTION", "TFYARN_GPU_MEMORY_MB",
        "TF_FORCE_GPU_ALLOW_GROWTH", "RANK", "LOCAL_RANK", "WORLD_SIZE")}
    smi = shutil.which("nvidia-smi")
    if smi:
        seen["nvidia-smi"] = subprocess.run(
            [smi, "--query-gpu=index,name,memory.total,memory.used", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    try:
        import torch

        seen["torch"] = torch.__version__
        seen["torch.cuda.device_count"] = torch.cuda.device_count()
        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info(0)
            seen["torch.cuda.mem_get_info(0) MB"] = [free >> 20, total >> 20]
            if a.alloc:
                try:
                    x = torch.empty(a.alloc << 20, dtype=torch.uint8, device="cuda:0")
                    seen[f"torch alloc {a.alloc} MB"] = f"ok ({x.numel() >> 20} MB)"
                except RuntimeError as exc:  # the cap refusing it is the point
                    seen[f"torch alloc {a.alloc} MB"] = f"refused: {str(exc).splitlines()[0]}"
            if a.nccl:
                import torch.distributed as dist

                dist.init_process_group("nccl")
                t = torch.ones(1, device="cuda:0") * (int(os.environ["RANK"]) + 1)
                dist.all_reduce(t)
                seen["nccl allreduce of rank+1"] = t.item()
                dist.destroy_process_group()
    except ImportError as exc:
        seen["torch"] = f"not importable: {exc}"
    if not a.nccl:
        try:
            import tensorflow as tf

            seen["tf"] = tf.__version__
            gpus = tf.config.list_physical_devices("GPU")
            seen["tf physical GPUs"] = [g.name for g in gpus]
            seen["tf logical config"] = [str(tf.config.get_logical_device_configuration(g))
                                         for g in gpus]
            if gpus:
                seen["tf memory_info GPU:0"] = tf.config.experimental.get_memory_info("GPU:0")
        except ImportError as exc:
            seen["tf"] = f"not importable: {exc}"
    print(f"GPUPROBE {task} " + json.dumps(seen, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
