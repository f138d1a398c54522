"""tfyarn's task-side hook (first on PYTHONPATH in every task, put there by the launcher).

When the task imports tensorflow, register tfyarn's hdfs:// plugin (tfyarn.hdfs.plugin), so user
code reads hdfs:// paths unchanged. Then hand over to the environment's own sitecustomize,
which this module would otherwise shadow. Costs nothing in processes that never import TF.
Must not fail the user's program: a hook that cannot load says so and steps aside.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    """Wraps the loading of `tensorflow` to register the plugin once it is loaded."""

    def find_spec(self, name, path, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)  # once; and never see our own lookup below
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            _register(module)

        spec.loader.exec_module = exec_module
        return spec


def _register(tf):
    try:
        from tfyarn.hdfs.plugin import PLUGIN_ENV, register

        register(tf, os.environ.get(PLUGIN_ENV, "auto"))
    except Exception as exc:  # a task that never reads hdfs:// must still run
        print(f"tfyarn: hdfs:// is not available in this task: {exc}", file=sys.stderr)


def _chain():
    """Run the environment's own sitecustomize, if any (ours shadows it)."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get("TFYARN_HDFS_PLUGIN", "off") != "off":
    sys.meta_path.insert(0, _RegisterOnImport())
_chain()
