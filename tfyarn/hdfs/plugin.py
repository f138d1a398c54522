"""hdfs:// and viewfs:// for TensorFlow >= 2.18: build, cache and register tfyarn's plugin.

TF dropped HDFS, and tensorflow-io loads only up to TF 2.17; tfyarn's plugin
(native/hdfs_plugin.cc, TF's stable modular-filesystem C API) fills the gap. Owns: where
the built plugin lives (a cache keyed by TF version), building it with the compiler flags
of the installed TF, and registering it in a process that imported TF. Every task gets it
without a change to user code: the launcher puts `hook/` (a sitecustomize) first on
PYTHONPATH, which registers the plugin the moment the task imports tensorflow.
Must not import tensorflow at module level: the CLI and the launcher import this.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfyarn.core.settings import krb5_java_options
from tfyarn.system import native

SOURCE = Path(__file__).parent / "native" / "hdfs_plugin.cc"
HOOK_DIR = str(Path(__file__).parent / "hook")
PLUGIN_ENV = "TFYARN_HDFS_PLUGIN"  # "auto" (build or find in the cache), a path, or "off"
SCHEMES = ("hdfs", "viewfs")


def cache_roots() -> list[Path]:
    """Where built plugins are kept, first usable wins (Settings.cache_dirs says why)."""
    return native.roots("hdfs-plugin")


def plugin_file(tf_version: str, root: Path) -> Path:
    """Where the plugin for this TF version is (one build serves every task on a host)."""
    return root / f"tf-{tf_version}" / "libtfyarn_hdfs.so"


def build(tf: Any) -> Path:
    """The plugin for the imported `tf`, built with its own compile and link flags if it
    is not cached yet."""
    cxx = os.environ.get("CXX", "g++")
    return native.built(
        "hdfs-plugin", str(plugin_file(tf.__version__, Path())),
        lambda out: [cxx, "-shared", "-fPIC", "-O2", *tf.sysconfig.get_compile_flags(),
                     str(SOURCE), "-o", out, *tf.sysconfig.get_link_flags(), "-ldl"],
        "tfyarn's hdfs:// plugin")


def register(tf: Any, setting: str = "auto") -> str | None:
    """Make `tf` read hdfs:// and viewfs:// unless it already can (TF <= 2.5, or
    tensorflow-io loaded). Returns the plugin registered, or None."""
    if setting == "off" or "hdfs" in tf.io.gfile.get_registered_schemes():
        return None
    path = setting if setting != "auto" else str(build(tf))
    tf.experimental.register_filesystem_plugin(path)
    return path


def plugin_env(env: dict[str, str]) -> dict[str, str]:
    """What the launcher adds to a task's env so that `import tensorflow` registers the
    plugin (PYTHONPATH first entry: the hook; the plugin setting, "auto" by default);
    with the plugin off, the hook alone where a GPU memory cap is to be applied."""
    path = env.get("PYTHONPATH")
    hooked = {"PYTHONPATH": HOOK_DIR + (os.pathsep + path if path else "")}
    if env.get(PLUGIN_ENV) == "off":  # the hook still applies a GPU memory cap
        return hooked if env.get("TFYARN_GPU_MEMORY_FRACTION") else {}
    return {**hooked, PLUGIN_ENV: env.get(PLUGIN_ENV) or "auto", **jvm_env(env)}


def jvm_env(env: Mapping[str, str]) -> dict[str, str]:
    """LIBHDFS_OPTS for the JVM libhdfs starts in a task: the node's KRB5_CONFIG, where it
    sets one (a Kerberos login by ticket cache needs the realm's KDCs)."""
    extra = [o for o in krb5_java_options(env.get("KRB5_CONFIG"))
             if o not in env.get("LIBHDFS_OPTS", "")]
    return {"LIBHDFS_OPTS": " ".join([env.get("LIBHDFS_OPTS", ""), *extra]).strip()} \
        if extra else {}


def main() -> int:
    """`tfyarn build-hdfs-plugin`: build (or find) the plugin for this env's TF."""
    import tensorflow as tf

    print(build(tf))
    return 0


if __name__ == "__main__":
    sys.exit(main())
