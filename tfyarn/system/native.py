"""Native code tfyarn ships as source and builds on first use: one shared library per
source and key, kept in tfyarn's cache dir so one build serves every process on a host.

Why build at use, not at install: the same wheel serves gateways, executors and YARN
containers, and what a library must match (TF's ABI for the hdfs:// plugin) is known only
where it loads. Owns where a built library lives and the race-free build (compile to a
temp name, rename: concurrent tasks on one host either find it or rename the same bytes).
Must not know what it builds: callers give the command.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from tfyarn.core.errors import EnvironmentMissing
from tfyarn.core.settings import Settings


def roots(kind: str) -> list[Path]:
    """Where libraries of `kind` are kept, first usable wins (Settings.cache_dirs says
    why)."""
    return [Path(d) / kind for d in Settings.from_environ().cache_dirs()]


def built(kind: str, rel: str, command: Callable[[str], Sequence[str]], what: str) -> Path:
    """`kind/rel` under the first usable cache root, built by `command(output path)` if it
    is not there yet. `what` names it in errors ("tfyarn's hdfs:// plugin")."""
    target = None
    for root in roots(kind):
        target = root / rel
        if target.exists():
            return target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            break
        except OSError:
            continue
    if target is None:
        raise EnvironmentMissing(f"building {what}: no writable cache dir (set TFYARN_CACHE)")
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    cmd = list(command(tmp))
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        os.unlink(tmp)
        raise EnvironmentMissing(f"building {what} needs a compiler ({cmd[0]} not found; set "
                                 f"{'CXX' if cmd[0].endswith('++') else 'CC'} or apt-get "
                                 "install g++)") from None
    if r.returncode != 0:
        os.unlink(tmp)
        raise EnvironmentMissing(f"building {what} failed:\n{r.stderr[-2000:]}")
    os.replace(tmp, target)
    return target
