"""tfyarn's task-side hook (first on PYTHONPATH in every task, put there by the launcher).

When the task imports tensorflow, register tfyarn's hdfs:// plugin (tfyarn.hdfs.plugin), so user
code reads hdfs:// paths unchanged; and where the launcher set a GPU memory cap (workers
sharing a card, --gpu-memory-fraction), apply it as the framework loads, before any of the
user's code runs: TensorFlow's logical device limit (TFYARN_GPU_MEMORY_MB), PyTorch's
per-process memory fraction (TFYARN_GPU_MEMORY_FRACTION, at CUDA's lazy init). Then hand
over to the environment's own sitecustomize, which this module would otherwise shadow.
Costs nothing in processes that never import TF or torch.
Must not fail the user's program: a hook that cannot load says so and steps aside.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Wraps the loading of a top-level module to run `then(module)` once it is loaded."""

    def __init__(self, name, then):
        self.name, self.then = name, then

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)  # once; and never see our own lookup below
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            self.then(module)

        spec.loader.exec_module = exec_module
        return spec


def _register(tf):
    try:
        from tfyarn.hdfs.plugin import PLUGIN_ENV, register

        register(tf, os.environ.get(PLUGIN_ENV, "auto"))
    except Exception as exc:  # a task that never reads hdfs:// must still run
        print(f"tfyarn: hdfs:// is not available in this task: {exc}", file=sys.stderr)


def _tensorflow(tf):
    if os.environ.get("TFYARN_HDFS_PLUGIN", "off") != "off":
        _register(tf)
    mb = os.environ.get("TFYARN_GPU_MEMORY_MB", "")
    if not mb.isdigit():
        return
    try:
        limit = [tf.config.LogicalDeviceConfiguration(memory_limit=int(mb))]
        for gpu in tf.config.list_physical_devices("GPU"):
            tf.config.set_logical_device_configuration(gpu, limit)
    except Exception as exc:  # TF initialized its GPUs already: said, and the task runs
        print(f"tfyarn: TensorFlow's GPU memory cap ({mb} MB) is not set: {exc}",
              file=sys.stderr)


def _torch(torch):
    fraction = os.environ.get("TFYARN_GPU_MEMORY_FRACTION", "")
    if not fraction:
        return

    def cap():
        for i in range(torch.cuda.device_count()):
            torch.cuda.set_per_process_memory_fraction(float(fraction), i)

    try:  # at CUDA's lazy init: importing torch must not initialize CUDA (forks)
        lazy = getattr(torch.cuda, "_lazy_call", None)
        lazy(cap) if lazy is not None else cap()
    except Exception as exc:
        print(f"tfyarn: PyTorch's GPU memory cap ({fraction} of the card) is not set: {exc}",
              file=sys.stderr)


def _chain():
    """Run the environment's own sitecustomize, if any (ours shadows it)."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get("TFYARN_HDFS_PLUGIN", "off") != "off" or os.environ.get("TFYARN_GPU_MEMORY_MB"):
    sys.meta_path.insert(0, _AfterImport("tensorflow", _tensorflow))
if os.environ.get("TFYARN_GPU_MEMORY_FRACTION"):
    sys.meta_path.insert(0, _AfterImport("torch", _torch))
_chain()
