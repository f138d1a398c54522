"""Native code tfyarn ships as source and builds on first use: one shared library per
source and key, kept in tfyarn's cache dir so one build serves every process on a host.

Why build at use, not at install: the same wheel serves gateways, executors and YARN
containers, and what a library must match (TF's ABI for the hdfs:// plugin) is known only
where it loads. Owns where a built library lives and the race-free build (compile to a
temp name, rename: concurrent tasks on one host either find it or rename the same bytes).
A library is loaded only from dirs and a file this user (or root) owns and nobody else
may write (a cache that falls back to /tmp could hold another user's library otherwise).
Must not know what it builds: callers give the command.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from tfyarn.core.errors import EnvironmentMissing
from tfyarn.core.settings import Settings
from tfyarn.system import private


def roots(kind: str) -> list[Path]:
    """Where libraries of `kind` are kept, first usable wins (Settings.cache_dirs says
    why)."""
    return [Path(d) / kind for d in Settings.from_environ().cache_dirs()]


def _trusted(root: Path, target: Path) -> bool:
    """Whether every dir from the cache root down to `target` (and it, if there) is this
    user's or root's and writable by nobody else: a library loaded from there runs as
    this user, so one another user could place or swap must not be loaded."""
    chain = [root.parent, root, *(root / p for p in
                                  reversed(target.parent.relative_to(root).parents))]
    chain.append(target.parent)
    if target.exists() or target.is_symlink():
        chain.append(target)
    try:
        stats = [os.lstat(p) for p in chain]
    except OSError:
        return False
    return all(private.trusted(st) and not stat.S_ISLNK(st.st_mode) for st in stats)


def built(kind: str, rel: str, command: Callable[[str], Sequence[str]], what: str) -> Path:
    """`kind/rel` under the first usable cache root, built by `command(output path)` if it
    is not there yet. `what` names it in errors ("tfyarn's hdfs:// plugin")."""
    target = None
    for root in roots(kind):
        target = root / rel
        try:
            os.makedirs(root.parent, mode=0o700, exist_ok=True)  # parents: the umask's mode
            root.mkdir(mode=0o700, exist_ok=True)
            for d in (*reversed(target.parent.relative_to(root).parents), target.parent):
                (root / d).mkdir(mode=0o700, exist_ok=True)
        except OSError:
            target = None
            continue
        if not _trusted(root, target):
            target = None  # another user's, or writable by others: never loaded
            continue
        if target.exists():
            return target
        break
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
    os.chmod(tmp, 0o755)  # not the umask's: a group-writable library is never loaded
    os.replace(tmp, target)
    return target
