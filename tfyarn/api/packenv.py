"""The caller's own virtual env, packed for `-m virtual-env` (`tfyarn.run(...,
environment="current")`): what a notebook imported is what the tasks import.

Owns packing `sys.prefix` once per set of installed distributions into a .tar.gz in
tfyarn's cache (byte-identical each time, so the HDFS cache, keyed by content, uploads
it once), symlinks kept as links (a venv's python names its base interpreter, which the
nodes must have at the same path, as with venv-pack). Must not change the env it packs.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.metadata
import os
import sys
import tarfile
import tempfile

from tfyarn.core.errors import EnvironmentMissing, SpecError
from tfyarn.core.say import say
from tfyarn.core.settings import Settings

SKIP = ("__pycache__",)


def current(settings: Settings) -> str:
    """The running venv as an archive for -m virtual-env: made once, then reused."""
    if sys.prefix == sys.base_prefix:
        raise SpecError("environment='current': this Python is not a virtual env; run from "
                        "one, or pass mode='virtual-env', mode_arg=ARCHIVE (venv-pack, "
                        "conda-pack), or use the nodes' python (environment='cluster')")
    folder = settings.own_dir("envs")
    if folder is None:
        raise EnvironmentMissing("environment='current': no writable cache dir for the packed "
                                 "env (set TFYARN_CACHE)")
    path = os.path.join(folder, f"{fingerprint()}.tar.gz")
    if not os.path.exists(path):
        say(f"packing this env ({sys.prefix}) once for the tasks: {path}")
        _pack(sys.prefix, path)
    return path


def fingerprint() -> str:
    """What the packed env depends on: its place and every installed distribution."""
    dists = sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions())
    return hashlib.sha256("\n".join([sys.prefix, sys.version, *dists]).encode()).hexdigest()[:32]


def _pack(prefix: str, path: str) -> None:
    """A reproducible tar.gz of `prefix`'s contents: sorted, fixed times and owners."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".part")
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w") as tar:
            for full in _walk(prefix):
                info = tar.gettarinfo(full, os.path.relpath(full, prefix))
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                if info.isfile():
                    with open(full, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _walk(prefix: str) -> list[str]:
    out = []
    for root, dirs, files in os.walk(prefix):
        dirs[:] = sorted(d for d in dirs if d not in SKIP)
        out += [os.path.join(root, n) for n in (*dirs, *sorted(files))]
    return sorted(out)
